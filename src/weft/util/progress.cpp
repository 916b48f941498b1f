#include "weft/util/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

namespace weft {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

Progress::Progress(std::string label, long total, std::FILE* out, double interval_s)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      interval_s_(interval_s),
      terminal_(::isatty(::fileno(out)) != 0) {}

void Progress::update(long done, double eta_seconds, const std::string& detail) {
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_print_).count();
  double min_gap = terminal_ ? 0.1 : interval_s_;
  bool last = done >= total_;
  if (printed_once_ && since < min_gap && !last) return;
  if (!terminal_ && last) return;  // the caller prints a summary line at the end
  last_print_ = now;
  printed_once_ = true;
  const double percent = total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0;
  std::string line = fmt::format("{} {}/{} ({:.0f}%)  {}  ETA {}", label_, done, total_, percent, detail,
                                 format_duration(eta_seconds));
  if (terminal_) {
    fmt::print(out_, "\r\033[K{}", line);
    line_open_ = true;
  } else {
    fmt::print(out_, "{}\n", line);
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (line_open_) {
    fmt::print(out_, "\r\033[K");
    std::fflush(out_);
    line_open_ = false;
  }
}

}  // namespace weft
