// Rank-0 logger: one place that writes to the screen and tees into log.gridtrain.
#pragma once
#include <fstream>
#include <string>

namespace gridtrain {

/// One number as printf would format it ("%.4g", "%.3f", ...), for report lines.
std::string fmt(const char* printf_format, double value);

class Log {
 public:
  /// active: whether this rank prints (rank 0 of the world) and writes the run's records
  /// (metrics.jsonl); screen: whether its text reaches stdout, or only the log file (tests).
  explicit Log(bool active = true, bool screen = true) : active_(active), screen_(screen) {}
  /// Starts teeing into path (truncated, or appended to when append). Throws std::runtime_error
  /// naming path if it cannot open.
  void open_file(const std::string& path, bool append = false);
  /// Prints text as is (add the newline yourself) on screen and into the log file.
  void print(const std::string& text);
  /// Prints a warning box that is hard to miss.
  void warn(const std::string& text);
  bool active() const { return active_; }

 private:
  bool active_, screen_;
  std::ofstream file_;
};

}  // namespace gridtrain
