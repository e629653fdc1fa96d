#include "gridtrain/util/memory.hpp"

#include <fstream>
#include <string>

namespace gridtrain {

double peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;  // "VmHWM:  123 kB"
  return 0.0;
}

}  // namespace gridtrain
