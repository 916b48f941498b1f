// What weft's HTTP servers (one replica's, and the front end of several) share: the event-loop
// server (http_server.h) with the options' limits, the bearer-token check (all but /healthz),
// OpenAI-shaped JSON errors for what the server refuses, request counts and durations, and
// running until SIGINT or SIGTERM.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "weft/serve/http_server.h"
#include "weft/serve/metrics.h"
#include "weft/serve/server.h"
#include "weft/tensor/rng.h"

namespace weft::serve {

void send_error(http::Response& res, int status, const std::string& message, const std::string& param = "");

// One request in flight, counted while it lives (a stream's lives as long as the stream).
class Admission {
 public:
  explicit Admission(std::atomic<std::int64_t>& counter) : counter_(counter), place_(++counter_) {}
  ~Admission() { --counter_; }
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  std::int64_t place() const { return place_; }  // requests in flight with this one, when it came

 private:
  std::atomic<std::int64_t>& counter_;
  const std::int64_t place_;
};
using AdmissionPtr = std::shared_ptr<Admission>;

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
  // The request counted in flight, or null with a 429 (the response filled, counted) when it
  // would be one more than max_concurrency.
  AdmissionPtr admit(const char* endpoint, http::Response& res, Clock::time_point start);
  // A seed for a request that gave none, or an id: random, different in every run.
  std::uint64_t fresh_random();
  // Binds (port 0: any free one), writes the port file, prints `banner` + the address, serves
  // until stop() and its drain are over; returns the exit code.
  int listen(std::FILE* log, const std::string& banner);
  void stop() { http_.stop(o_.drain_seconds); }

 protected:
  const ServeOptions& o_;
  Metrics& metrics_;
  http::Server http_;
  std::atomic<std::int64_t> in_flight_{0};
  // More of /metrics after the server's own (the front end: its replicas'); must not block.
  std::function<std::string()> more_metrics_;

 private:
  std::mutex random_mu_;
  Rng random_;
};

// Runs `run` with SIGINT and SIGTERM taken by one thread that calls `stop`.
int run_until_signal(const std::function<int()>& run, const std::function<void()>& stop);

}  // namespace weft::serve
