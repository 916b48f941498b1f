#include "weft/serve/load.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "weft/util/error.h"
#include "weft/util/stats.h"

namespace weft::serve {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Sample {
  bool ok = false;
  std::string error;
  std::int64_t tokens = 0;
  double latency = 0, ttft = -1;
  std::vector<double> gaps;
};

// An image of `count` pixel values that differs per request.
std::string classify_body(std::uint64_t n, std::int64_t count) {
  json pixels = json::array();
  for (std::int64_t i = 0; i < count; ++i) pixels.push_back((i * 7 + static_cast<std::int64_t>(n % 256)) % 256);
  return json{{"images", json::array({pixels})}}.dump();
}

// One request, timed from `start` (its scheduled arrival).
Sample one_request(httplib::Client& client, const LoadOptions& o, std::uint64_t n, Clock::time_point start) {
  Sample s;
  auto last = start;   // (outside the branch: the receiver runs in client.send below)
  std::string buffer;
  bool done = false;  // the stream's end ("data: [DONE]") seen
  httplib::Request req;
  req.method = "POST";
  req.headers = {{"Content-Type", "application/json"}};
  if (!o.token.empty()) req.headers.emplace("Authorization", "Bearer " + o.token);
  if (o.endpoint == "classify") {
    req.path = "/v1/classify";
    req.body = classify_body(n, o.pixels);
  } else {
    req.path = "/v1/completions";
    json body{{"prompt", o.prompts[n % o.prompts.size()]},
              {"max_tokens", o.max_tokens},
              {"temperature", o.temperature},
              {"seed", n},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}}};
    if (!o.stop.empty()) body["stop"] = o.stop;
    req.body = body.dump();
    req.content_receiver = [&](const char* data, size_t size, std::uint64_t, std::uint64_t) {
      buffer.append(data, size);
      std::size_t end;
      while ((end = buffer.find("\n\n")) != std::string::npos) {
        const std::string event = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (event == "data: [DONE]") done = true;
        if (event.rfind("data: ", 0) != 0 || done) continue;
        json chunk = json::parse(event.substr(6), nullptr, false);
        if (chunk.is_discarded() || !chunk.is_object()) {
          if (s.error.empty()) s.error = "an event that is not a JSON object: " + event.substr(0, 80);
          continue;
        }
        if (chunk.contains("usage") && chunk["usage"].is_object())
          s.tokens = chunk["usage"].value("completion_tokens", std::int64_t{0});
        if (chunk.contains("error")) s.error = chunk["error"].value("message", "error");
        if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
        if (chunk["choices"][0].value("text", std::string()).empty()) continue;
        const auto now = Clock::now();
        if (s.ttft < 0) s.ttft = std::chrono::duration<double>(now - start).count();
        else s.gaps.push_back(std::chrono::duration<double>(now - last).count());
        last = now;
      }
      return true;
    };
  }
  httplib::Result r = client.send(req);
  s.latency = std::chrono::duration<double>(Clock::now() - start).count();
  if (!r) {
    s.error = r.error() == httplib::Error::Connection ? "cannot connect to the server"
                                                      : "the request failed (" + httplib::to_string(r.error()) + ")";
  } else if (r->status != 200) {
    s.error = fmt::format("HTTP {}: {}", r->status, r->body.substr(0, 200));
  } else if (s.error.empty() && o.endpoint != "classify" && !done) {
    s.error = "the response ended without \"data: [DONE]\": not a whole completion stream";
  } else if (o.endpoint == "classify" && !json::parse(r->body, nullptr, false).contains("predictions")) {
    s.error = "the response holds no \"predictions\": " + r->body.substr(0, 80);
  } else if (s.error.empty()) {
    s.ok = true;
    if (o.endpoint == "classify") s.tokens = 0;
  }
  return s;
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.p50 = percentile_of_sorted(v, 0.5);
  p.p90 = percentile_of_sorted(v, 0.9);
  p.p99 = percentile_of_sorted(v, 0.99);
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  return p;
}

}  // namespace

LoadReport run_load(const LoadOptions& o) {
  if (o.concurrency < 1 || o.concurrency > 4096) throw ConfigError("--concurrency must be in [1, 4096]");
  if (o.requests < 1 || o.requests > 10'000'000) throw ConfigError("--requests must be in [1, 10^7]");
  if (o.warmup < 0 || o.warmup > 10'000) throw ConfigError("--warmup must be in [0, 10^4]");
  if (!(o.rate >= 0)) throw ConfigError("--rate must be zero (closed loop) or more");
  // An open loop's arrivals are drawn up front as clock times: at most a day of them (a rate
  // so low that they would take longer is a mistake, and past 292 years not a time at all).
  constexpr double kLongestLoad = 86400;
  if (o.rate > 0 && static_cast<double>(o.requests) / o.rate > kLongestLoad)
    throw ConfigError(fmt::format("--rate {} with {} requests: the arrivals would take {:.3g} s on average, more than a "
                                  "day (raise --rate or lower --requests)",
                                  o.rate, o.requests, static_cast<double>(o.requests) / o.rate));
  if (o.prompts.empty()) throw ConfigError("no prompts");
  // Warm-up, one client at a time.
  {
    httplib::Client client(o.host, o.port);
    client.set_read_timeout(300);
    for (std::int64_t i = 0; i < o.warmup; ++i) {
      Sample s = one_request(client, o, static_cast<std::uint64_t>(1'000'000 + i), Clock::now());
      if (!s.ok) throw ConfigError(fmt::format("the warm-up request to {}:{} failed: {}", o.host, o.port, s.error));
    }
  }
  std::vector<Sample> samples(static_cast<std::size_t>(o.requests));
  std::atomic<std::int64_t> next{0};
  const auto begin = Clock::now();
  // Open loop: the arrival times, drawn up front.
  std::vector<Clock::time_point> arrivals;
  if (o.rate > 0) {
    std::mt19937_64 gen(o.seed);
    std::exponential_distribution<double> gap(o.rate);
    double t = 0;
    for (std::int64_t i = 0; i < o.requests; ++i) {
      arrivals.push_back(begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t)));
      t = std::min(t + gap(gen), 2 * kLongestLoad);  // a draw far in the tail waits at most two days
    }
  }
  // Clients: closed loop `concurrency` of them; open loop enough that an arrival never waits
  // for a free client (up to 256).
  const std::int64_t clients = o.rate > 0 ? std::min<std::int64_t>(o.requests, 256) : o.concurrency;
  std::vector<std::thread> threads;
  for (std::int64_t c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      httplib::Client client(o.host, o.port);
      client.set_read_timeout(300);
      for (;;) {
        const std::int64_t i = next++;
        if (i >= o.requests) return;
        Clock::time_point start = Clock::now();
        if (o.rate > 0) {
          start = arrivals[static_cast<std::size_t>(i)];
          std::this_thread::sleep_until(start);
        }
        samples[static_cast<std::size_t>(i)] = one_request(client, o, static_cast<std::uint64_t>(i), start);
      }
    });
  }
  for (auto& t : threads) t.join();
  LoadReport r;
  r.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  std::vector<double> latency, ttft, itl;
  for (const Sample& s : samples) {
    if (!s.ok) {
      ++r.errors;
      if (r.error_samples.size() < 3) r.error_samples.push_back(s.error);
      continue;
    }
    ++r.requests;
    r.tokens += s.tokens;
    latency.push_back(s.latency);
    if (s.ttft >= 0) ttft.push_back(s.ttft);
    itl.insert(itl.end(), s.gaps.begin(), s.gaps.end());
  }
  r.latency = percentiles(latency);
  r.ttft = percentiles(ttft);
  r.itl = percentiles(itl);
  return r;
}

json LoadReport::to_json() const {
  auto pct = [](const Percentiles& p) { return json{{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}}; };
  return {{"requests", requests},
          {"errors", errors},
          {"seconds", seconds},
          {"requests_per_second", requests_per_second()},
          {"tokens", tokens},
          {"tokens_per_second", tokens_per_second()},
          {"latency_seconds", pct(latency)},
          {"time_to_first_token_seconds", pct(ttft)},
          {"inter_token_latency_seconds", pct(itl)}};
}

std::string LoadReport::table() const {
  std::string out = fmt::format("{} requests ({} errors) in {:.2f} s: {:.1f} requests/s, {:.0f} tokens/s\n", requests,
                                errors, seconds, requests_per_second(), tokens_per_second());
  out += fmt::format("{:<24}{:>10}{:>10}{:>10}{:>10}\n", "milliseconds", "p50", "p90", "p99", "mean");
  auto row = [&](const char* name, const Percentiles& p) {
    out += fmt::format("{:<24}{:>10.2f}{:>10.2f}{:>10.2f}{:>10.2f}\n", name, 1e3 * p.p50, 1e3 * p.p90, 1e3 * p.p99, 1e3 * p.mean);
  };
  row("end-to-end latency", latency);
  if (tokens > 0) {
    row("time to first token", ttft);
    row("inter-token latency", itl);
  }
  for (const auto& e : error_samples) out += "error: " + e + "\n";
  return out;
}

}  // namespace weft::serve
