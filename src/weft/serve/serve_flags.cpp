#include "weft/serve/serve_flags.h"

#include "weft/util/error.h"
#include "weft/util/parse.h"
#include "weft/util/size.h"

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

FlagTable<ServeOptions> make_table() {
  FlagTable<ServeOptions> t;
  add_model_flags(t, "the model");
  FlagGroup<ServeOptions> address{t, "the address"};
  address(F("--host", AT(host), "the address to listen on (0.0.0.0: every interface)"));
  address(F("--port", AT(port), "the port (0: any free port)").in(0, 65535));
  address(F("--port-file", AT(port_file), "write the port to this file once listening"));
  address(F("--token", AT(token), "require 'Authorization: Bearer TOKEN' (at least 16 characters)")
              .defaults("none").from_env("WEFT_SERVE_TOKEN"));
  FlagGroup<ServeOptions> limits{t, "batches and limits"};
  limits(F("--max-batch", AT(batch.max_batch), "sequences decoded together / images per forward").at_least(1));
  limits(F("--max-wait-ms", AT(batch.max_wait_ms), "how long a new batch waits for more requests").in(0, 10000));
  limits(F("--max-body", AT(max_body), "the largest request body in bytes (64K, 1MiB, 2MB)")
             .parsed_by([](ServeOptions& o, const std::string& v) { o.max_body = parse_size(v, "--max-body"); })
             .defaults("1MiB")
             .at_least(1024));
  limits(F("--max-prompt-tokens", AT(max_prompt_tokens), "the longest prompt (0: the model's context)").at_least(0));
  limits(F("--max-tokens", AT(max_tokens), "the most tokens one request may ask for").at_least(1));
  limits(F("--max-concurrency", AT(max_concurrency), "requests in flight before 429").in(1, 4096));
  limits(F("--max-images", AT(max_images), "images in one classify request").at_least(1));
  limits(F("--request-timeout", AT(request_timeout_s),
           "seconds a completion may generate; then it ends with its text so far (finish_reason \"abort\"); 0: no limit")
             .at_least(0));
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
               .above(0));
  replicas(F("--scale-down-after", AT(scale_down_after_s),
             "--replicas MIN:MAX: seconds the load must fit in one fewer replica before one is drained")
               .at_least(0));
  return t;
}

#undef AT

}  // namespace

const FlagTable<ServeOptions>& serve_flags() {
  static const FlagTable<ServeOptions> table = make_table();
  return table;
}

}  // namespace weft::serve
