#include "weft/util/machine.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace weft {

namespace {
// Seconds of processor time all processes used (the "cpu" line of /proc/stat: user, nice,
// system, irq, softirq, steal); negative when it cannot be read.
double machine_busy_seconds() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  const int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle, &iowait, &irq,
                              &softirq, &steal);
  std::fclose(f);
  if (got < 4) return -1;
  const long hz = ::sysconf(_SC_CLK_TCK);
  return static_cast<double>(user + nice + system + irq + softirq + steal) / static_cast<double>(hz > 0 ? hz : 100);
}

double own_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}
}  // namespace

OtherCpuLoad::OtherCpuLoad()
    : machine_busy_(machine_busy_seconds()), own_(own_seconds()), at_(std::chrono::steady_clock::now()),
      cores_(static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)))) {}

double OtherCpuLoad::sample() {
  const double busy = machine_busy_seconds(), own = own_seconds();
  const auto now = std::chrono::steady_clock::now();
  const double wall = std::chrono::duration<double>(now - at_).count();
  double share = 0;
  if (busy >= 0 && machine_busy_ >= 0 && wall > 0)
    share = std::clamp(((busy - machine_busy_) - (own - own_)) / (wall * cores_), 0.0, 1.0);
  machine_busy_ = busy;
  own_ = own;
  at_ = now;
  return share;
}

std::optional<std::int64_t> available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return std::nullopt;
  char line[256];
  std::optional<std::int64_t> kib;
  while (std::fgets(line, sizeof line, f)) {
    long long v = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &v) == 1) kib = v;
  }
  std::fclose(f);
  if (!kib) return std::nullopt;
  return *kib * 1024;
}

std::size_t memory_share(int sharers) {
  const auto available = available_memory_bytes();
  if (!available || *available <= 0) return 0;
  return static_cast<std::size_t>(*available / 10 * 9 / std::max(sharers, 1));
}

std::optional<int> runnable_threads() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return std::nullopt;
  double a = 0, b = 0, c = 0;
  int running = 0, total = 0;
  const bool ok = std::fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) == 5;
  std::fclose(f);
  if (!ok || running < 1) return std::nullopt;
  return running;
}

std::int64_t peak_resident_bytes() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<std::int64_t>(u.ru_maxrss) * 1024;
}

}  // namespace weft
