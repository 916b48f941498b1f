// Progress display for long commands. On a terminal: one line rewritten in place.
// Otherwise: a plain line at most every `interval_s` seconds, so logs stay readable.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace weft {

class Progress {
 public:
  // `total` units of work (steps); `label` starts each line.
  Progress(std::string label, long total, std::FILE* out = stderr, double interval_s = 5.0);
  // Reports that `done` units are complete; `detail` follows the count (e.g. "loss 0.41
  // 1830 samples/s"), then the estimated time left.
  void update(long done, double eta_seconds, const std::string& detail);
  // Ends the in-place line (if any) so following output starts on a fresh line.
  void finish();
  bool is_terminal() const { return terminal_; }

 private:
  std::string label_;
  long total_;
  std::FILE* out_;
  double interval_s_;
  bool terminal_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point last_print_;
  bool printed_once_ = false;
};

// "1:02:03" or "2:03".
std::string format_duration(double seconds);

}  // namespace weft
