#include "weft/serve/serve_flags.h"

#include <fmt/format.h>

#include <algorithm>

#include "weft/util/error.h"
#include "weft/util/parse.h"
#include "weft/util/size.h"
#include "weft/util/units.h"

namespace weft::serve {

namespace {

using F = Flag<ServeOptions>;
#define AT(member) [](ServeOptions& o) -> FieldRef { return &o.member; }

// "N" or "MIN:MAX" replicas.
void parse_replicas(ServeOptions& o, const std::string& text) {
  const auto range = split_pair(text);
  const auto lo = parse_integer(range ? range->first : std::string_view(text));
  const auto hi = range ? parse_integer(range->second) : lo;
  if (!lo || !hi) throw ConfigError("--replicas '" + text + "' is not N or MIN:MAX");
  if (*lo < 1 || *hi < *lo || *hi > 64) throw ConfigError("--replicas " + text + ": need 1 <= MIN <= MAX <= 64");
  o.replicas_min = static_cast<int>(*lo);
  o.replicas_max = static_cast<int>(*hi);
}

// The runs a flag shapes: before the model is loaded, every flag may apply to it.
bool for_language(const ServeOptions& o) { return o.model_kind.empty() || is_language_kind(o.model_kind); }
bool for_images(const ServeOptions& o) { return o.model_kind.empty() || !is_language_kind(o.model_kind); }
std::string kind_of(const ServeOptions& o) { return o.model_kind; }
bool elastic(const ServeOptions& o) { return o.replicas_min < o.replicas_max; }
std::string replicas_of(const ServeOptions& o) { return "--replicas " + std::to_string(o.replicas_max); }
F text(F f) { return std::move(f).only_for(for_language, "a language model", kind_of); }

FlagTable<ServeOptions> make_table() {
  FlagTable<ServeOptions> t;
  add_model_flags(t, "the model");
  for (F& f : t)  // how a GPT is held (--micro-batches: for --pp, itself for a language model)
    if (!f.applies) f.applies = for_language, f.needs = "a language model", f.run_has = kind_of;
  FlagGroup<ServeOptions> address{t, "the address"};
  address(F("--host", AT(host), "the address to listen on (0.0.0.0: every interface)"));
  address(F("--port", AT(port), "the port (0: any free port)").in(0, 65535));
  address(F("--port-file", AT(port_file), "write the port to this file once listening"));
  address(F("--token", AT(token), "require 'Authorization: Bearer TOKEN' (at least 16 characters)")
              .defaults("none").from_env("WEFT_SERVE_TOKEN"));
  FlagGroup<ServeOptions> limits{t, "batches and limits"};
  limits(F("--max-batch", AT(batch.max_batch), "sequences decoded together / images per forward").at_least(1));
  limits(F("--max-wait-ms", AT(max_wait_ms), "how long a new batch waits for more requests")
             .in(0, 10000)
             .defaults("0 for a language model, 2 for images"));
  limits(text(F("--max-prefill-tokens", AT(batch.max_prefill_tokens),
                "GPT: the prompt tokens one step feeds; a longer prompt goes in pieces between the other streams' tokens "
                "(the same tokens as whole; 0: every prompt whole)")
                  .at_least(0)));
  limits(text(F("--kv-cache-memory", AT(kv_cache_memory),
                "GPT: the key-value cache's memory (512MiB, 4G); a request waits until the caches the running ones may "
                "come to hold and its own fit (auto: no limit while --max-batch sequences of the longest a request may make "
                "fit in half the memory available, else that half)")
                  .parsed_by([](ServeOptions& o, const std::string& v) {
                    if (v == "auto")
                      o.kv_cache_memory.reset();
                    else
                      o.kv_cache_memory = parse_size(v, "--kv-cache-memory");
                  })
                  .defaults("auto")
                  .at_least(1)));
  limits(text(F("--preemption", nullptr,
                "GPT under a cache limit: none (a request waits until the cache of its whole length fits) or recompute "
                "(requests join on the cache they hold; when a step needs more, the last to come leave, and back in feed "
                "their window again: the same tokens, later)")
                  .parsed_by([](ServeOptions& o, const std::string& v) { o.batch.preempt = v == "recompute"; })
                  .defaults("none")
                  .one_of({"none", "recompute"})));
  limits(text(F("--block-size", AT(block_size),
                "GPT: positions in a key-value cache block, a multiple of 16, which a sequence takes whole (0: a multiple "
                "of 16 that fills most of 6 MiB, at most the context)")
                  .parsed_by([](ServeOptions& o, const std::string& v) {
                    const auto n = parse_integer(v);
                    if (!n || *n < 0 || *n > (1 << 20) || *n % 16 != 0)
                      throw ConfigError("--block-size '" + v + "' is not a multiple of 16 from 0 to 1048576");
                    o.block_size = *n;
                  })
                  .defaults("0")));
  limits(F("--max-body", AT(max_body), "the largest request body in bytes (64K, 1MiB, 2MB)")
             .parsed_by([](ServeOptions& o, const std::string& v) { o.max_body = parse_size(v, "--max-body"); })
             .defaults("1MiB")
             .at_least(1024));
  limits(text(F("--max-prompt-tokens", AT(max_prompt_tokens), "the longest prompt (0: the model's context)").at_least(0)));
  limits(text(F("--max-tokens", AT(max_tokens), "the most tokens one request may ask for").at_least(1)));
  limits(F("--max-concurrency", AT(max_concurrency), "requests in flight before 429").in(1, 4096));
  limits(F("--max-images", AT(max_images), "images in one classify request")
             .at_least(1)
             .only_for(for_images, "an image model", kind_of));
  limits(text(F("--request-timeout", AT(request_timeout_s),
                "seconds a completion may generate; then it ends with its text so far (finish_reason \"abort\"); 0: no limit")
                  .at_least(0)));
  FlagGroup<ServeOptions> door{t, "connections"};
  door(F("--header-timeout", AT(header_timeout_s),
         "seconds a request's headers may take from its first byte (then 408 and the connection closes)")
           .above(0));
  door(F("--idle-timeout", AT(idle_timeout_s), "seconds a connection may wait idle for its next request").above(0));
  door(F("--max-connections", AT(max_connections),
         "client connections open at once (at most what the process may open); more are closed as they come")
           .in(16, 1 << 20));
  door(F("--max-connections-per-address", AT(max_connections_per_address),
         "client connections from one address (0: no limit); more are closed as they come")
           .at_least(0));
  door(F("--drain-seconds", AT(drain_seconds),
         "at SIGTERM or SIGINT: how long requests in flight may go on before streams end (finish_reason \"abort\") and "
         "the server exits")
           .at_least(0));
  FlagGroup<ServeOptions> replicas{t, "replicas"};
  replicas(F("--replicas", AT(replicas_max), "N replica processes behind one front end, or MIN:MAX to scale with the load")
               .parsed_by(parse_replicas)
               .defaults("1")
               .in(1, 64));
  replicas(F("--scale-up-load", AT(scale_up_load), "--replicas MIN:MAX: outstanding requests per replica that add one")
               .above(0)
               .only_for(elastic, "--replicas MIN:MAX", replicas_of));
  replicas(F("--scale-down-after", AT(scale_down_after_s),
             "--replicas MIN:MAX: seconds the load must fit in one fewer replica before one is drained")
               .at_least(0)
               .only_for(elastic, "--replicas MIN:MAX", replicas_of));
  return t;
}

#undef AT

}  // namespace

const FlagTable<ServeOptions>& serve_flags() {
  static const FlagTable<ServeOptions> table = make_table();
  return table;
}

std::string model_kind(bool language_model, const std::string& model) {
  return (language_model ? "a language model (" : "an image model (") + model + ")";
}

bool is_language_kind(const std::string& kind) { return kind.rfind("a language model", 0) == 0; }

void check_serve_flags_apply(const ServeOptions& o) { check_flags_apply(serve_flags(), o.given_flags, o); }

std::int64_t serve_cache_limit(std::optional<std::int64_t> given, std::int64_t longest_bytes, std::int64_t longest_positions,
                               std::int64_t max_batch, std::optional<std::int64_t> available, int processes) {
  const auto mb = human_bytes;
  const std::string longest = fmt::format(
      "one sequence of the longest a request may make (--max-prompt-tokens and --max-tokens, at most the context) holds {} "
      "of key-value cache ({} positions, in whole blocks)",
      mb(longest_bytes), longest_positions);
  if (given) {
    if (*given < longest_bytes)
      throw ConfigError(fmt::format("--kv-cache-memory {}: {}; give more, or lower --max-prompt-tokens or --max-tokens",
                                    mb(*given), longest));
    return *given;
  }
  if (!available) return 0;
  const std::int64_t half = *available / 2 / std::max(processes, 1);
  if (longest_bytes <= half / std::max<std::int64_t>(max_batch, 1)) return 0;  // (max_batch of them fit)
  if (longest_bytes > half)
    throw ConfigError(fmt::format("{}, more than half the memory available ({}{}): lower --max-prompt-tokens or --max-tokens, "
                                  "or set --kv-cache-memory",
                                  longest, mb(half), processes > 1 ? fmt::format(", shared by {} processes", processes) : ""));
  return half;
}

void check_serve_flags_apply(const ServeOptions& o, bool language_model, const std::string& model) {
  ServeOptions loaded = o;
  loaded.model_kind = model_kind(language_model, model);
  check_serve_flags_apply(loaded);
}

}  // namespace weft::serve
