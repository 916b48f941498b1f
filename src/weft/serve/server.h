// weft serve: one model replica behind an HTTP server (http_server.h: an event loop, so that
// no client, however slow, holds a thread).
//
//   POST /v1/completions   language models, OpenAI's completions API (stream: server-sent
//                          events), continuously batched (batcher.h)
//   POST /v1/classify      image models, dynamically batched
//   GET  /v1/models        the served model
//   GET  /healthz          200 while serving
//   GET  /metrics          Prometheus text: requests, tokens, queue depth, batch sizes,
//                          latencies, replicas
//
// Safe by default: it listens on 127.0.0.1 unless told otherwise, checks a bearer token when
// one is set (everything but /healthz), limits the body, the prompt, max_tokens and the
// requests in flight (429 with Retry-After past it), answers malformed HTTP and JSON with a
// 4xx and a one-line reason, and frees the sequence of a client that goes away mid-stream.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "weft/serve/batcher.h"

namespace weft::serve {

struct ServeOptions {
  std::string model;                 // a saved model, checkpoint folder or folder of checkpoints
  std::string host = "127.0.0.1";
  int port = 8000;                   // 0: any free port (see port_file)
  std::string port_file;             // written with the bound port once listening
  std::string token;                 // bearer token required when not empty
  // Prompts of more than 2,048 tokens go in pieces of 2,048 (chunked prefill: BatchOptions::
  // max_prefill_tokens), so that one long prompt holds the running streams a piece's time, not
  // its whole prefill's (a prompt of a model's whole context of 131,072 tokens would hold them
  // for its whole prefill); a model with a context of 2,048 or less prefills every prompt whole.
  BatchOptions batch{16, 2, 2048};
  // How long an idle server's first request waits for company (BatchOptions::max_wait_ms);
  // unset: 0 for a language model, whose continuous batching takes a request that comes
  // during a step at the next one (waiting 2 ms made a first token at one stream 2.2 ms later
  // and the tokens/s 5% fewer: bench/README.md, session 71), 2 for an image model, whose batch
  // runs one forward (or batch.max_wait_ms, where a library caller changed it).
  std::optional<double> max_wait_ms;
  std::int64_t max_body = 1 << 20;   // bytes
  std::int64_t max_prompt_tokens = 0;  // 0: the model's context
  std::int64_t max_tokens = 1024;    // the most a request may ask for
  std::int64_t max_concurrency = 64; // requests in flight
  std::int64_t max_images = 1024;    // images per classify request
  std::string quantize = "fp32";     // GPT weights: fp32 | bf16 | int8 (quantize.h)
  std::string kv_cache_dtype = "fp32";  // a GPT's key-value cache: fp32 | bf16 | int8 (decoder.h)
  // The key-value cache's memory in bytes (BatchOptions::cache_limit_bytes); unset: auto
  // (serve_cache_limit).
  std::optional<std::int64_t> kv_cache_memory;
  // A GPT's cache blocks, in positions (DecoderFormat::cache_block_rows; 0: auto).
  std::int64_t block_size = 0;
  int tp = 1;                        // tensor-parallel ranks under weft launch (model_parallel.h)
  int pp = 1;                        // pipeline stages under weft launch
  int micro_batches = 0;             // pipeline: micro-batches per decoding step (0: one per stage)
  // Data-parallel and elastic serving (replicas.h): replicas_max > 1 runs a front end that
  // routes to replica processes; replicas_min < replicas_max scales between them.
  int replicas_min = 1, replicas_max = 1;
  double scale_up_load = 8;          // outstanding requests per replica that add one
  double scale_down_after_s = 3;     // a quiet period before a replica is drained
  // The front door (http_server.h): a request's headers within header_timeout_s of its first
  // byte; a connection idle between requests closed after idle_timeout_s; connections in all
  // and from one address; at a stop, how long requests in flight may go on.
  double header_timeout_s = 10;
  double idle_timeout_s = 30;
  std::int64_t max_connections = 16384;
  std::int64_t max_connections_per_address = 1024;  // 0: no limit
  double drain_seconds = 10;
  // A completion still generating after this many seconds ends with its text so far
  // (finish_reason "abort"); 0: no limit.
  double request_timeout_s = 600;
  // The flags given on the command line: one for the other kind of model (--max-tokens for an
  // image model, --max-images for a language model) is refused once the model is loaded.
  std::vector<std::string> given_flags;
  std::string model_kind;  // set when the model is loaded: "a language model (gpt)", "an image model (mlp)"
};

// Checks the options (one-line ConfigError naming the flag).
void validate(const ServeOptions& options);
// The batcher's wait for company as given: --max-wait-ms, or a library caller's
// batch.max_wait_ms where it changed it; none when unset (the server then picks by model).
std::optional<double> given_max_wait_ms(const ServeOptions& options);
// Serves until SIGINT or SIGTERM; returns the exit code.
int serve(const ServeOptions& options, std::FILE* log);
// The front end of replicas_max > 1 (front_end.cpp); called by serve().
int serve_replicated(const ServeOptions& options, std::FILE* log);

}  // namespace weft::serve
