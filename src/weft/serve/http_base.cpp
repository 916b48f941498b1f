#include "weft/serve/http_base.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <signal.h>

#include <cstring>
#include <thread>

#include "weft/comm/auth.h"
#include "weft/serve/api.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::serve {

void send_error(http::Response& res, int status, const std::string& message, const std::string& param) {
  res.status = status;
  if (status == 429) res.set_header("Retry-After", "1");
  if (status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error_body(status, message, param), "application/json");
}

namespace {
http::Limits limits_of(const ServeOptions& o) {
  http::Limits l;
  l.max_body = o.max_body;
  l.header_timeout_s = o.header_timeout_s;
  l.idle_timeout_s = o.idle_timeout_s;
  l.max_connections = o.max_connections;
  l.max_per_address = o.max_connections_per_address;
  l.workers = static_cast<int>(o.max_concurrency + 8);  // requests over the limit still need a thread to hear their 429
  return l;
}
}  // namespace

HttpBase::HttpBase(const ServeOptions& o, Metrics& metrics)
    : o_(o), metrics_(metrics), http_(limits_of(o)), random_([] {
        std::uint64_t seed = 0;
        const std::string bytes = comm::random_bytes(sizeof seed);
        std::memcpy(&seed, bytes.data(), sizeof seed);
        return seed;
      }()) {
  metrics_.counter("weft_requests_total", "HTTP requests by endpoint and status code");
  metrics_.histogram("weft_request_duration_seconds", "time from a request's arrival to its last byte",
                     {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  metrics_.gauge("weft_requests_in_flight", "requests being served");
  metrics_.gauge("weft_replicas", "model replicas serving");
  metrics_.gauge("weft_connections", "client connections open");
  http_.set_pre_routing_handler([this](const http::Request& req, http::Response& res) {
    if (o_.token.empty() || req.path == "/healthz" || req.path == "/health") return false;
    const std::string expected = "Bearer " + o_.token;
    const std::string got = req.get_header_value("Authorization");
    if (got.size() == expected.size() && CRYPTO_memcmp(got.data(), expected.data(), got.size()) == 0) return false;
    send_error(res, 401, "a valid bearer token is required (Authorization: Bearer <token>)");
    count(req.path, 401, Clock::now());
    return true;
  });
  http_.set_error_body([](int status, const std::string& reason) { return error_body(status, reason); });
  for (const char* path : {"/healthz", "/health"})
    http_.Get(path, [](const http::Request&, http::Response& res) { res.set_content("{\"status\":\"ok\"}", "application/json"); },
              true);
  http_.Get(
      "/metrics",
      [this](const http::Request&, http::Response& res) {
        metrics_.set("weft_requests_in_flight", static_cast<double>(in_flight_.load()));
        metrics_.set("weft_connections", static_cast<double>(http_.connections()));
        res.set_content(metrics_.text() + (more_metrics_ ? more_metrics_() : std::string()), "text/plain; version=0.0.4");
      },
      true);
}

void HttpBase::count(const std::string& endpoint, int status, Clock::time_point start) {
  metrics_.add("weft_requests_total", 1, fmt::format("endpoint=\"{}\",code=\"{}\"", endpoint, status));
  metrics_.observe("weft_request_duration_seconds", std::chrono::duration<double>(Clock::now() - start).count(),
                   fmt::format("endpoint=\"{}\"", endpoint));
}

AdmissionPtr HttpBase::admit(const char* endpoint, http::Response& res, Clock::time_point start) {
  auto admission = std::make_shared<Admission>(in_flight_);
  if (admission->place() <= o_.max_concurrency) return admission;
  send_error(res, 429, fmt::format("{} requests in flight: the limit; retry later", o_.max_concurrency));
  count(endpoint, 429, start);
  return nullptr;
}

std::uint64_t HttpBase::fresh_random() {
  std::lock_guard lock(random_mu_);
  return random_.next_u64();
}

int HttpBase::listen(std::FILE* log, const std::string& banner) {
  const int port = http_.bind(o_.host, o_.port);
  fmt::print(log, "weft serve: {} on http://{}:{}{}\n", banner, o_.host, port,
             o_.token.empty() ? "" : "; bearer token required");
  std::fflush(log);
  if (!o_.port_file.empty()) write_file_atomic(o_.port_file, std::to_string(port) + "\n");
  http_.run();
  fmt::print(log, "weft serve: stopped\n");
  std::fflush(log);
  return 0;
}

int run_until_signal(const std::function<int()>& run, const std::function<void()>& stop) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  std::atomic<bool> running{true};
  std::thread waiter([&] {
    const timespec tick{0, 200'000'000};
    while (running.load()) {
      if (sigtimedwait(&signals, nullptr, &tick) > 0) {
        stop();
        return;
      }
    }
  });
  int code = 1;
  try {
    code = run();
  } catch (...) {
    running = false;
    waiter.join();
    throw;
  }
  running = false;
  waiter.join();
  return code;
}

}  // namespace weft::serve
