// weft serve's flags, declared once (util/flag_table.h): the model and how it is held, the
// address, the front door's limits, replicas. The command line's parser, --help and the docs'
// option list are made from the table, and validate(ServeOptions) checks a library caller's
// options against its bounds and choices. add_model_flags is the part every command that loads
// a saved model shares (weft serve, predict, generate).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "weft/serve/decoder.h"
#include "weft/serve/server.h"
#include "weft/util/flag_table.h"

namespace weft::serve {

// Every flag of weft serve, in the order --help shows them.
const FlagTable<ServeOptions>& serve_flags();
// A loaded model's kind as the flags' checks name it ("a language model (gpt)", "an image model
// (mlp)"), and whether a kind so named is a language model's.
std::string model_kind(bool language_model, const std::string& model);
bool is_language_kind(const std::string& kind);
// Throws ConfigError for the first of o.given_flags that does not shape this run: the model
// loaded (`language_model`, `model` its kind's name: gpt, mlp) or, before it is, --replicas.
void check_serve_flags_apply(const ServeOptions& o, bool language_model, const std::string& model);
void check_serve_flags_apply(const ServeOptions& o);

// A server's key-value cache limit in bytes (BatchOptions::cache_limit_bytes; 0: none) from
// --kv-cache-memory (`given`; unset: auto) and `longest_bytes`, the cache of one sequence of
// the longest a request may make (`longest_positions`, whole blocks). Given, it must hold
// that sequence. Auto: no limit while max_batch such sequences fit in half the memory
// `available` (a share of it for each of `processes` on the machine: replicas, model-parallel
// ranks), else that half, which must hold one; no limit where the memory available cannot be
// read. Throws ConfigError naming the sizes and the flags that change them.
std::int64_t serve_cache_limit(std::optional<std::int64_t> given, std::int64_t longest_bytes, std::int64_t longest_positions,
                               std::int64_t max_batch, std::optional<std::int64_t> available, int processes);

// How a saved GPT is held: --quantize (and --precision bf16, the training flag's name for the
// same weights), --kv-cache-dtype, --tp, --pp and --micro-batches (under weft launch; rank 0
// does the work), for any options `O` with the fields quantize, kv_cache_dtype, tp, pp and
// micro_batches.
template <class O>
void add_model_flags(FlagTable<O>& t, const std::string& group) {
  const FlagGroup<O> add{t, group};
  add(Flag<O>("--quantize", [](O& o) -> FieldRef { return &o.quantize; }, "GPT weights").one_of({"fp32", "bf16", "int8"}));
  add(Flag<O>("--precision", nullptr, "GPT weights (bf16: as --quantize bf16)")
          .parsed_by([](O& o, const std::string& v) {
            if (v == "bf16") o.quantize = "bf16";
          })
          .defaults("fp32")
          .one_of({"fp32", "bf16"}));
  add(Flag<O>("--kv-cache-dtype", [](O& o) -> FieldRef { return &o.kv_cache_dtype; },
              "GPT: the key-value cache's elements (bf16: half its memory and reads, each key and value rounded; int8: a "
              "quarter, scaled per head and position)")
          .one_of({"fp32", "bf16", "int8"}));
  add(Flag<O>("--tp", [](O& o) -> FieldRef { return &o.tp; }, "GPT: tensor-parallel ranks (under weft launch; rank 0 does the work)")
          .in(1, 64));
  add(Flag<O>("--pp", [](O& o) -> FieldRef { return &o.pp; }, "GPT: pipeline stages (under weft launch; rank 0 does the work)")
          .in(1, 64));
  add(Flag<O>("--micro-batches", [](O& o) -> FieldRef { return &o.micro_batches; },
              "--pp: micro-batches per decoding step (0: one per stage)")
          .at_least(0)
          .only_for([](const O& o) { return o.pp > 1; }, "pipeline stages (--pp 2 or more)",
                    [](const O& o) { return "--pp " + std::to_string(o.pp); }));
}

// How those options hold a GPT: --quantize's weights and --kv-cache-dtype's cache.
template <class O>
DecoderFormat decoder_format(const O& o) {
  return {parse_weight_format(o.quantize), parse_cache_format(o.kv_cache_dtype)};
}

}  // namespace weft::serve
