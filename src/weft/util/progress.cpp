#include "weft/util/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "weft/util/env.h"

namespace weft {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string progress_bar(double fraction, int width) {
  const double f = std::isfinite(fraction) ? std::clamp(fraction, 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(std::lround(f * width));
  std::string bar(1, '[');
  bar.append(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '-');
  bar.push_back(']');
  return bar;
}

namespace {
bool drawn_in_place(std::FILE* out) {
  if (::isatty(::fileno(out)) != 0) return true;
  return out == stderr && env_string("WEFT_PROGRESS_TERMINAL") == std::optional<std::string>("1");
}
}  // namespace

Progress::Progress(std::string label, long total, std::FILE* out, double interval_s, bool show_count)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      interval_s_(interval_s),
      terminal_(drawn_in_place(out)),
      show_count_(show_count),
      last_print_(std::chrono::steady_clock::now()) {}

void Progress::update(long done, double eta_seconds, const std::string& detail) {
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_print_).count();
  double min_gap = terminal_ ? 0.1 : interval_s_;
  bool last = done >= total_;
  if (since < min_gap && !last) return;  // the first line after min_gap too: short runs print none
  if (!terminal_ && last) return;  // the caller prints a summary line at the end
  last_print_ = now;
  const double fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const std::string count = show_count_ ? fmt::format(" {}/{}", done, total_) : std::string();
  std::string line = fmt::format("{} {} {:.0f}%{}  {}  ETA {}", label_, progress_bar(fraction, 20), 100 * fraction, count,
                                 detail, format_duration(eta_seconds));
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
