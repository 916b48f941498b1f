// A load generator for an HTTP inference server (weft serve, or any server of OpenAI's
// completions API): closed-loop (a fixed number of concurrent clients) or open-loop
// (Poisson arrivals at a given rate; latency counts from the scheduled arrival, so a
// server that falls behind shows it). Completions are streamed, which gives the time to
// the first token and the gaps between tokens; image requests (/v1/classify) send one
// image each. Warm-up requests run first and are not counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft::serve {

struct LoadOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string token;
  std::string endpoint = "completions";  // completions | classify
  std::int64_t pixels = 784;             // classify: values per image (the model's H x W x C)
  std::vector<std::string> prompts = {"The "};
  std::int64_t max_tokens = 64;
  double temperature = 0;
  std::vector<std::string> stop;  // stop sequences sent with every completion (none: each runs to max_tokens)
  std::int64_t concurrency = 1;   // closed loop: clients, each sending its next request on an answer
  double rate = 0;                // > 0: open loop, requests per second (Poisson)
  std::int64_t requests = 64;     // measured requests
  std::int64_t warmup = 4;        // requests before the measurement
  std::uint64_t seed = 0;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct LoadReport {
  std::int64_t requests = 0, errors = 0, tokens = 0;
  double seconds = 0;
  Percentiles latency, ttft, itl;  // seconds
  std::vector<std::string> error_samples;
  double requests_per_second() const { return seconds > 0 ? static_cast<double>(requests) / seconds : 0; }
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0; }
  nlohmann::json to_json() const;
  std::string table() const;  // a few lines for people
};

LoadReport run_load(const LoadOptions& options);

}  // namespace weft::serve
