// Progress display for long commands: a bar, the percentage, details and the time left. On a
// terminal: one line rewritten in place. Otherwise: a plain line at most every `interval_s`
// seconds, so logs stay readable. Under weft launch, the launcher sets
// WEFT_PROGRESS_TERMINAL=1 for rank 0 when its own stderr is a terminal: rank 0's line is
// then drawn in place through the launcher.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace weft {

class Progress {
 public:
  // `total` units of work (steps); `label` starts each line; `show_count`: "120/1000" after
  // the label (else the percentage alone).
  Progress(std::string label, long total, std::FILE* out = stderr, double interval_s = 5.0, bool show_count = true);
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
  bool show_count_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point last_print_;
};

// A bar of `width` characters, `fraction` (0..1) of it filled: "[#####-----]".
std::string progress_bar(double fraction, int width);

// "1:02:03" or "2:03".
std::string format_duration(double seconds);

}  // namespace weft
