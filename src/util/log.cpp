#include "gridtrain/util/log.hpp"

#include <cstdio>
#include <stdexcept>

namespace gridtrain {

std::string fmt(const char* printf_format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, value);
  return buf;
}

void Log::open_file(const std::string& path, bool append) {
  if (!active_) return;
  file_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!file_) throw std::runtime_error("cannot open log file '" + path + "' for writing");
}

void Log::print(const std::string& text) {
  if (!active_) return;
  if (screen_) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  if (file_.is_open()) file_ << text << std::flush;
}

void Log::warn(const std::string& text) {
  print("WARNING: " + text + "\n");
}

}  // namespace gridtrain
