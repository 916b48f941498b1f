// Incremental decoding: a language model's next-token logits for many sequences at once,
// each sequence extended by its own tokens (a whole prompt when it starts, one token per
// step after).
//
//   GptDecoder     keeps a key-value cache per sequence and layer, so a step computes only
//                  the new positions: the prompt is prefilled once, then each token costs one
//                  row through every layer (seed 002 chapter 7's attention, with the keys and
//                  values of earlier positions kept). The rows of all sequences share each
//                  layer's matrix products; attention runs per sequence over its own cache.
//                  A sequence longer than the context slides by half (slide_window): its
//                  last context / 2 tokens are prefilled again, then it goes on from the cache.
//   WindowDecoder  any language model (the recurrent ones): the model's forward over the
//                  sequence's window (slide_window), at every step.
//
// GptDecoder runs nn/decoder_block.h's block and nn/decoder_ends.h's embedding and head, with
// packed products (quantize.h; the blocks' sliced by decoder_block.h's table under tensor
// parallelism) and attention against the cache.
//
// Both give the logits the model's own forward gives for the same window (within float
// rounding), with no autograd.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/nn/decoder_block.h"
#include "weft/nn/decoder_ends.h"
#include "weft/nn/language_model.h"
#include "weft/nn/transformer.h"
#include "weft/serve/quantize.h"
#include "weft/tensor/tensor.h"

namespace weft::serve {

// One sequence's state between steps (its tokens and, for a GPT, its cache).
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  std::vector<std::int32_t> tokens;  // every token fed so far
  std::int64_t window_start = 0;     // the first token of the window the model sees (slide_window)
};

// Past the context a sequence's window slides by half, as llama.cpp's context shift does:
// once its tokens from window_start on (the `fed` new ones appended) exceed `context`, the
// window restarts at the last max(context / 2, fed) tokens (at most `context`). True when it
// slid. So GptDecoder prefills the new window once and then goes on from its cache for up to
// context / 2 tokens (a token past the context costs about what one before it does, where
// recomputing the last `context` tokens at every token cost 10x more), and WindowDecoder
// computes the same windows, so the two give the same logits.
bool slide_window(SequenceState& state, std::int64_t fed, std::int64_t context);
// The rule alone: the tokens a window of `held` (the `fed` new ones included) keeps.
std::int64_t window_length(std::int64_t held, std::int64_t fed, std::int64_t context);

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::unique_ptr<SequenceState> start() const = 0;
  // Feeds tokens[i] (one or more) to sequences[i]; returns [S, vocab]: row i is the logits
  // of the token after sequences[i]'s last.
  virtual Tensor extend(const std::vector<SequenceState*>& sequences,
                        const std::vector<std::vector<std::int32_t>>& tokens) = 0;
  virtual std::int64_t vocab() const = 0;
  virtual std::int64_t context() const = 0;
  // Bytes of the weights as the decoder holds them (0: the model's own, float32).
  virtual std::int64_t weight_bytes() const { return 0; }
  // Bytes a sequence's key-value cache holds per position, in this process (0: no cache).
  virtual std::int64_t cache_bytes_per_token() const { return 0; }
  // The positions of one block of a sequence's cache, which it takes whole (0: no cache): a
  // sequence of P positions holds ceil(P / this) blocks (cache_blocks_for, batcher.h).
  virtual std::int64_t cache_block_positions() const { return 0; }
  // The logits after every token of `tokens` (at most the context): [T, vocab], row t the
  // prediction of token t + 1 (a prompt's scoring). ConfigError where a decoder has no such path.
  virtual Tensor prompt_logits(const std::vector<std::int32_t>& tokens);
  // The cache blocks `state` holds once `fed` more tokens are fed to it (0: no cache). Blocks
  // are never given back while a sequence lives, so this is at least what it holds now.
  virtual std::int64_t cache_blocks_after(const SequenceState&, std::int64_t) const { return 0; }
  // Preemption by recomputation (LmBatcher under a cache limit, as vLLM's): a fresh state,
  // holding no cache, that `replay`'s feeds, given to it one a step in order, bring to
  // `preempted`'s cache bit for bit, so that the sequence goes on with the tokens it would have
  // had; nullptr where a decoder cannot (replay untouched).
  virtual std::unique_ptr<SequenceState> restart(const SequenceState& preempted,
                                                 std::vector<std::vector<std::int32_t>>& replay) const {
    (void)preempted, (void)replay;
    return nullptr;
  }
};

// A GPT decoder's key-value cache: float32, or bf16 (each key and value rounded to nearest
// even in its upper 16 bits as it is written, widened as attention reads it): half the
// memory of a sequence and half the bytes a decoding step reads from it, which past a few
// hundred positions are more than the weights' (bench/README.md, "A bf16 key-value cache").
// Every read goes through the cache, a prompt's own keys too (so a prompt's rows see the
// rounded keys its later tokens see), and a sequence's logits still do not depend on the
// sequences beside it.
//
// int8: each position's keys (and values) of each key-value head scaled by their largest
// magnitude / 127 and rounded to nearest, the scale kept beside them in float32 (as
// llama.cpp's q8_0 cache keeps one per block of 32): a quarter of float32's memory and reads
// and 4 bytes a head, at a small cost in the logits (docs/serving.md).
enum class CacheFormat { kF32, kBf16, kInt8 };
CacheFormat parse_cache_format(const std::string& name);  // fp32 | bf16 | int8; ConfigError otherwise
const char* cache_format_name(CacheFormat f);

// How a decoder holds a GPT: its weights (quantize.h) and its cache. (A WeightFormat alone
// converts to one: weights so, a float32 cache.) A sequence's cache grows a block of
// positions at a time, no row ever copied (as vLLM's paged cache), every block one size:
// `cache_block_rows` positions, or 0 for a multiple of 16 that fills most of 6 MiB (whole
// huge pages; at most the context).
struct DecoderFormat {
  WeightFormat weights = WeightFormat::kF32;
  CacheFormat cache = CacheFormat::kF32;
  std::int64_t cache_block_rows = 0;
  DecoderFormat(WeightFormat w = WeightFormat::kF32, CacheFormat c = CacheFormat::kF32, std::int64_t block_rows = 0)
      : weights(w), cache(c), cache_block_rows(block_rows) {}
};

// This rank's share of a tensor-parallel GPT (Megatron-style, seed 002 chapter 8): heads
// [rank·H/size, (rank+1)·H/size) of every attention and the matching slice of every MLP; the
// projections after them give partial sums that `all_reduce` adds over the ranks in place.
struct TensorSlice {
  int rank = 0, size = 1;
  std::function<void(Tensor&)> all_reduce;
};

// The blocks a pipeline stage holds: [begin, end) (end -1: to the last).
struct LayerRange {
  std::int64_t begin = 0, end = -1;
};

// ConfigError unless a GPT of config `c` splits over `ranks` tensor-parallel ranks: its heads,
// its key-value heads and every product's width (GptDecoder's slices of it).
void check_tensor_split(const GptConfig& c, int ranks);

// A step feeding a sequence this many rows or more (a prompt's prefill) runs its attention as
// panel products, which pay for copying the keys and values into panels when the rows are
// many; a single token (decoding) and short feeds go row by row. The panels' logits do not
// depend on where a prompt's pieces of this many rows or more begin.
inline constexpr std::int64_t kPanelRows = 16;

class CacheBlocks;  // a decoder's free cache blocks (decoder.cpp)

class GptDecoder : public Decoder {
 public:
  // Holds the model's matrices packed in `format.weights` (float32, bf16 or int8:
  // quantize.h), a copy of their own, and shares its layer norms and positions (float32) by
  // reference, so the model may go once the decoder is built; its sequences' caches hold
  // `format.cache`.
  explicit GptDecoder(const GPT& model, DecoderFormat format = {}, TensorSlice slice = {}, LayerRange layers = {});
  std::unique_ptr<SequenceState> start() const override;
  Tensor extend(const std::vector<SequenceState*>& sequences,
                const std::vector<std::vector<std::int32_t>>& tokens) override;
  std::int64_t vocab() const override { return c_.vocab; }
  std::int64_t context() const override { return c_.context; }
  std::int64_t weight_bytes() const override;
  Tensor prompt_logits(const std::vector<std::int32_t>& tokens) override;  // the head over every row

  // A step in pieces, for pipeline stages: extend = plan, embed, run_blocks, finish, head.
  // plan appends the tokens to each sequence's history and decides what it feeds (its new
  // tokens, or its last window again past the context): every stage plans alike.
  struct StepPlan {
    std::vector<std::vector<std::int32_t>> feed;
    std::vector<std::int64_t> first_row, rows;
    std::int64_t rows_total = 0;
  };
  StepPlan plan(const std::vector<SequenceState*>& sequences, const std::vector<std::vector<std::int32_t>>& tokens) const;
  Tensor embed(const std::vector<SequenceState*>& sequences, const StepPlan& plan) const;  // [rows, d]
  void run_blocks(const std::vector<SequenceState*>& sequences, const StepPlan& plan, Tensor& x) const;  // this range
  void finish(const std::vector<SequenceState*>& sequences, const StepPlan& plan) const;  // the caches hold the rows
  Tensor head(const StepPlan& plan, const Tensor& x) const;  // each sequence's last row: [S, vocab]
  std::int64_t dim() const { return c_.dim; }
  std::int64_t cache_bytes_per_token() const override;  // (of this decoder's layers and heads)
  std::int64_t cache_block_positions() const override { return cache_block_rows_; }
  std::int64_t cache_blocks_after(const SequenceState& state, std::int64_t fed) const override;
  // The replay feeds the rows of the window as they went: each feed of kPanelRows rows or more
  // (attention in panels) alone, the others (row by row, whatever the rows beside them) joined
  // in feeds of fewer than kPanelRows. (Products give a row the same bits whatever the batch.)
  std::unique_ptr<SequenceState> restart(const SequenceState& preempted,
                                         std::vector<std::vector<std::int32_t>>& replay) const override;

 private:
  GptConfig c_;
  CacheFormat cache_;
  std::int64_t cache_block_rows_;  // positions per cache block
  std::shared_ptr<CacheBlocks> cache_blocks_;  // its sequences' blocks, free ones kept
  BlockConfig block_;
  TensorSlice slice_;
  std::int64_t begin_, end_;         // the blocks held
  std::int64_t lheads_, lkv_heads_;  // this rank's query and key-value heads
  DecoderEnds ends_;                 // the token table and the head packed
  std::int64_t ends_bytes_ = 0;      // of the ends' weights as held
  std::vector<DecoderBlockParts> blocks_;
  std::int64_t block_bytes_ = 0;  // of the blocks' weights as held (layer norms and biases in float32)
};

class WindowDecoder : public Decoder {
 public:
  explicit WindowDecoder(LanguageModel& model) : model_(model) {}
  std::unique_ptr<SequenceState> start() const override { return std::make_unique<SequenceState>(); }
  Tensor extend(const std::vector<SequenceState*>& sequences,
                const std::vector<std::vector<std::int32_t>>& tokens) override;
  std::int64_t vocab() const override { return model_.vocab(); }
  std::int64_t context() const override { return model_.context(); }
  Tensor prompt_logits(const std::vector<std::int32_t>& tokens) override;  // the model's forward

 private:
  LanguageModel& model_;
};

// Lets `module` go when `decoder` holds its own copy of every weight (a GptDecoder), its
// freed blocks given back to the system (the tensor allocator would keep them): a server or
// weft generate then holds the weights once. True when it did; nothing may use the module
// after.
bool release_module_held_by(std::shared_ptr<Module>& module, const Decoder& decoder);

// The decoder for a model: a GptDecoder for a GPT, else a WindowDecoder (float32 weights
// and cache only: ConfigError for another format).
std::unique_ptr<Decoder> make_decoder(LanguageModel& model, DecoderFormat format = {});

}  // namespace weft::serve
