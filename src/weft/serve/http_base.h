// What weft's HTTP servers (one replica's, and the front end of several) share: the worker
// threads, the body limit, the bearer-token check (all but /healthz), OpenAI-shaped JSON
// errors for what the library refuses, request counts and durations, listening with a full
// backlog, and running until SIGINT or SIGTERM.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "weft/serve/metrics.h"
#include "weft/serve/server.h"

namespace weft::serve {

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "");

// One request in flight, counted while it lives (a stream's lives as long as the stream).
class Admission {
 public:
  explicit Admission(std::atomic<std::int64_t>& counter) : counter_(counter) { ++counter_; }
  ~Admission() { --counter_; }
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

 private:
  std::atomic<std::int64_t>& counter_;
};

// Holds a server's metrics ahead of its HttpBase (a base constructed first).
struct MetricsHolder {
  Metrics owned_metrics_;
};

class HttpBase {
 public:
  using Clock = std::chrono::steady_clock;
  HttpBase(const ServeOptions& options, Metrics& metrics);
  // Counts a finished request (weft_requests_total, weft_request_duration_seconds).
  void count(const std::string& endpoint, int status, Clock::time_point start);
  // 429 when max_concurrency requests are in flight (the response filled, counted).
  bool over_limit(const char* endpoint, httplib::Response& res, Clock::time_point start);
  // Binds (port 0: any free one), writes the port file, prints `banner` + the address, serves
  // until stop(); returns the exit code.
  int listen(std::FILE* log, const std::string& banner);
  void stop() { http_.stop(); }

 protected:
  const ServeOptions& o_;
  Metrics& metrics_;
  httplib::Server http_;
  std::atomic<std::int64_t> in_flight_{0};
};

// Runs `run` with SIGINT and SIGTERM taken by one thread that calls `stop`.
int run_until_signal(const std::function<int()>& run, const std::function<void()>& stop);

}  // namespace weft::serve
