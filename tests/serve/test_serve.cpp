// Inference: the recipe and tokenizer a saved model carries, the key-value cache against the
// model's own forward, sampling, stop sequences and UTF-8, continuous batching against
// requests served alone, the API's request checks, and the metrics text.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <thread>

#include "weft/autograd/variable.h"
#include "weft/data/text.h"
#include "weft/io/safetensors.h"
#include "weft/nn/model_recipe.h"
#include "weft/nn/transformer.h"
#include "weft/serve/api.h"
#include "weft/serve/batcher.h"
#include "weft/serve/classify.h"
#include "weft/serve/decoder.h"
#include "weft/serve/evaluate.h"
#include "weft/serve/generation.h"
#include "weft/serve/metrics.h"
#include "weft/serve/metrics_merge.h"
#include "weft/serve/model_file.h"
#include "weft/serve/panel_fetch.h"
#include "weft/serve/quantize.h"
#include "weft/serve/sampling.h"
#include "weft/serve/serve_flags.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/onednn.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/utf8.h"
#include "../scoped_kernels.h"
#include "../test_support.h"

namespace weft::serve {
namespace {
// A Fashion-MNIST image model's recipe (1x28x28, 10 classes, its normalization).
const ModelRecipe& fashion_recipe() {
  static const ModelRecipe r = [] {
    ModelRecipe m;
    m.model = "mlp";
    return m;
  }();
  return r;
}
}  // namespace

namespace {

const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyz .,!?'";

GptConfig small_gpt(Positional positional = Positional::kLearned, bool pre_ln = true) {
  return GptConfig{static_cast<std::int64_t>(kAlphabet.size()), 24, 32, 2, 4, positional, pre_ln, false};
}

// A rotary GPT made Llama-shaped: RMSNorm, SwiGLU, `kv_heads` key-value heads, no biases, a
// sliding window of `window` keys (0: none).
GptConfig llama_shaped(GptConfig c, std::int64_t kv_heads, std::int64_t window) {
  c.norm = Norm::kRms;
  c.mlp = Activation::kSwiGlu;
  c.kv_heads = kv_heads;
  c.bias = c.qkv_bias = false;
  c.window = window;
  return c;
}

// small_gpt with a context of 80; rotary, Llama-shaped with 2 of 4 key-value heads and a
// sliding window of `window` keys.
GptConfig context_80_gpt(Positional positional, std::int64_t window) {
  GptConfig c = small_gpt(positional);
  c.context = 80;
  return positional == Positional::kRotary ? llama_shaped(c, 2, window) : c;
}

// The model's own forward over `tokens`: the logits after the last one.
std::vector<float> forward_last(GPT& model, const std::vector<std::int32_t>& tokens) {
  const Tensor row = model.next_token_logits(tokens);
  return std::vector<float>(row.data<float>(), row.data<float>() + row.numel());
}

void expect_rows_near(const Tensor& logits, std::int64_t row, const std::vector<float>& want, double tol) {
  const std::int64_t V = logits.size(1);
  ASSERT_EQ(V, static_cast<std::int64_t>(want.size()));
  for (std::int64_t v = 0; v < V; ++v) EXPECT_NEAR(logits.data<float>()[row * V + v], want[static_cast<size_t>(v)], tol) << "token " << v;
}

TEST(Utf8, HoldsBackAnIncompleteCharacterAndReplacesInvalidBytes) {
  const std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(utf8_complete_prefix("ab" + euro.substr(0, 2)), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab" + euro), 5u);
  EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);  // invalid: not waited for
  EXPECT_EQ(valid_utf8("a\xFFz"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(valid_utf8("x" + euro.substr(0, 2)), "x\xEF\xBF\xBD");
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate is not UTF-8
  EXPECT_EQ(valid_utf8("h\xC3\xA9llo " + euro), "h\xC3\xA9llo " + euro);
  // One U+FFFD for each maximal subpart, as Python's errors="replace" (and so Hugging Face's
  // decoding) gives: a lead byte and the continuation bytes it could still take.
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(valid_utf8(euro.substr(0, 2) + "z"), fffd + "z");
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98" "A\x9F\x98"), fffd + "A" + fffd + fffd);
  EXPECT_EQ(valid_utf8("\xF4\x90\x80"), fffd + fffd + fffd);  // above U+10FFFF: the lead alone
  EXPECT_EQ(utf8_complete_prefix(euro.substr(0, 2) + "z"), 3u);
}

TEST(Utf8, TextIsValidUtf8WithoutControlBytes) {
  const std::string euro = "\xE2\x82\xAC";
  EXPECT_TRUE(is_text("line one\tx\r\nline two " + euro + "\n"));
  EXPECT_TRUE(is_text("cut inside a character: " + euro.substr(0, 2)));  // a head cut short
  EXPECT_TRUE(is_text(""));
  EXPECT_FALSE(is_text("a\xFFz"));
  EXPECT_FALSE(is_text(std::string("a\0b", 3)));
  EXPECT_FALSE(is_text("bell\a"));
  const float logits[] = {-3.5f, 0.25f, 1.0f, -0.0625f};  // as raw float32 bytes
  EXPECT_FALSE(is_text(std::string_view(reinterpret_cast<const char*>(logits), sizeof logits)));
}

TEST(SavedModel, TokenizersRoundTripThroughTheirVocabulary) {
  // (\xe9 alone is not UTF-8; \xc3\xa9 is; the vocabulary must be ASCII either way.)
  const std::string text = "Hello, world!\nA back\\slash and the world again, caf\xe9 caf\xc3\xa9.\n";
  CharTokenizer chars(text);
  auto chars2 = make_tokenizer("char", chars.vocabulary());
  EXPECT_EQ(chars2->encode(text), chars.encode(text));
  EXPECT_EQ(chars2->decode(chars.encode(text)), text);
  WordTokenizer words(text);
  for (char ch : words.vocabulary()) EXPECT_TRUE(ch == '\n' || (ch >= 0x20 && ch < 0x7F)) << static_cast<int>(ch);
  auto words2 = make_tokenizer("word", words.vocabulary());
  EXPECT_EQ(words2->vocab_size(), words.vocab_size());
  EXPECT_EQ(words2->encode(text), words.encode(text));
  EXPECT_EQ(words2->decode(words.encode(text)), words.decode(words.encode(text)));
  EXPECT_THROW(make_tokenizer("char", "4"), DataError);
  EXPECT_THROW(make_tokenizer("char", "zz"), DataError);
  EXPECT_THROW(make_tokenizer("char", "6261"), DataError);  // not increasing
  EXPECT_THROW(make_tokenizer("word", "<pad>\n<unk>\nx\nx"), DataError);
  EXPECT_THROW(make_tokenizer("word", "<pad>\n<unk>\nbad\\q"), DataError);
  EXPECT_THROW(make_tokenizer("word", "<pad>\n<unk>\nbad\\x4"), DataError);
  EXPECT_THROW(make_tokenizer("bpe", "x"), DataError);
}

TEST(SavedModel, RecipeRoundTripsAndRefusesBadMetadata) {
  ModelRecipe r;
  r.model = "gpt";
  r.gpt = small_gpt(Positional::kStandard, false);
  ModelRecipe back = ModelRecipe::from_metadata(r.to_metadata(), "m");
  EXPECT_EQ(back.gpt.vocab, r.gpt.vocab);
  EXPECT_EQ(back.gpt.heads, r.gpt.heads);
  EXPECT_EQ(back.gpt.positional, Positional::kStandard);
  EXPECT_FALSE(back.gpt.pre_ln);
  Metadata m = r.to_metadata();
  m["weft_heads"] = "5";  // 32 is not divisible by 5
  EXPECT_THROW(ModelRecipe::from_metadata(m, "m"), CheckpointError);
  m = r.to_metadata();
  m["weft_dim"] = "99999999999999999999";
  EXPECT_THROW(ModelRecipe::from_metadata(m, "m"), CheckpointError);
  m.erase("weft_dim");
  EXPECT_THROW(ModelRecipe::from_metadata(m, "m"), CheckpointError);
  EXPECT_THROW(ModelRecipe::from_metadata({{"weft_model", "resnet"}}, "m"), CheckpointError);
  EXPECT_EQ(ModelRecipe::from_metadata({{"weft_model", "cnn"}}, "m").model, "cnn");
  // A file saved before the block's kind was recorded holds a GPT-2-shaped model.
  m = r.to_metadata();
  for (const char* key : {"weft_norm", "weft_norm_eps", "weft_mlp", "weft_mlp_width", "weft_kv_heads", "weft_bias",
                          "weft_qkv_bias", "weft_tied_head", "weft_window"})
    m.erase(key);
  back = ModelRecipe::from_metadata(m, "m");
  EXPECT_EQ(back.gpt.norm, Norm::kLayer);
  EXPECT_TRUE(back.gpt.tied_head && back.gpt.bias);
  EXPECT_EQ(back.gpt.block().mlp_width(), 4 * r.gpt.dim);
}

// A Llama-shaped model's recipe keeps every block option, the rotary scaling included, and
// refuses values that are not options.
TEST(SavedModel, LlamaRecipeRoundTrips) {
  ModelRecipe r;
  r.model = "gpt";
  r.gpt = small_gpt(Positional::kRotary, true);
  r.gpt.norm = Norm::kRms;
  r.gpt.norm_eps = 1e-6;
  r.gpt.mlp = Activation::kSwiGlu;
  r.gpt.hidden = 40;
  r.gpt.kv_heads = 2;
  r.gpt.bias = false;
  r.gpt.tied_head = false;
  r.gpt.window = 6;
  r.gpt.rope_theta = 500000;
  r.gpt.rope_scaling = {RopeScaling::kLlama3, 8, 1, 4, 64};
  const ModelRecipe back = ModelRecipe::from_metadata(r.to_metadata(), "m");
  const GptConfig& g = back.gpt;
  EXPECT_EQ(g.positional, Positional::kRotary);
  EXPECT_EQ(g.norm, Norm::kRms);
  EXPECT_DOUBLE_EQ(g.norm_eps, 1e-6);
  EXPECT_EQ(g.mlp, Activation::kSwiGlu);
  EXPECT_EQ(g.hidden, 40);
  EXPECT_EQ(g.kv_heads, 2);
  EXPECT_FALSE(g.bias);
  EXPECT_TRUE(g.qkv_bias);
  EXPECT_FALSE(g.tied_head);
  EXPECT_EQ(g.window, 6);
  EXPECT_DOUBLE_EQ(g.rope_theta, 500000);
  EXPECT_EQ(g.rope_scaling.kind, RopeScaling::kLlama3);
  EXPECT_DOUBLE_EQ(g.rope_scaling.factor, 8);
  EXPECT_EQ(g.rope_scaling.original_context, 64);
  for (auto [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"weft_norm", "batch"}, {"weft_mlp", "relu"}, {"weft_kv_heads", "3"}, {"weft_bias", "yes"},
           {"weft_rope_theta", "-1"}, {"weft_rope_scaling", "dynamic"}, {"weft_window", "-2"}}) {
    Metadata m = r.to_metadata();
    m[key] = value;
    EXPECT_THROW(ModelRecipe::from_metadata(m, "m"), CheckpointError) << key << " = " << value;
  }
}

// The cache's logits equal the forward's, for the prompt and for every token after it,
// in every GPT variant (the Llama-shaped one with grouped-query heads and a sliding
// window of 7 keys too), and past the context (where the window slides).
TEST(GptDecoder, CachedLogitsEqualTheForwardsAtEveryStep) {
  for (auto positional : {Positional::kLearned, Positional::kStandard, Positional::kRotary}) {
    for (bool pre_ln : {true, false}) {
      Rng rng(7);
      GptConfig c = small_gpt(positional, pre_ln);
      if (positional == Positional::kRotary) {
        c = llama_shaped(c, 1, pre_ln ? 7 : 0);
        c.tied_head = false;
      }
      GPT model(c, rng);
      GptDecoder decoder(model);
      auto state = decoder.start();
      std::vector<std::int32_t> all = {3, 1, 4, 1, 5};
      Tensor logits = decoder.extend({state.get()}, {all});
      expect_rows_near(logits, 0, forward_last(model, all), 1e-5);
      // 45 tokens: past the context of 24, the window slides by half (the last 12 tokens
      // once 25 would not fit), at tokens 25 and 38.
      std::size_t start = 0;
      int slides = 0;
      for (int step = 0; step < 40; ++step) {
        const auto next = static_cast<std::int32_t>((step * 7 + 2) % model.vocab());
        all.push_back(next);
        logits = decoder.extend({state.get()}, {{next}});
        if (all.size() - start > 24) start = all.size() - 12, ++slides;
        EXPECT_EQ(state->window_start, static_cast<std::int64_t>(start));
        expect_rows_near(logits, 0, forward_last(model, {all.begin() + static_cast<std::ptrdiff_t>(start), all.end()}), 1e-5);
      }
      EXPECT_EQ(slides, 2);
    }
  }
}

// A prompt of 16 tokens or more runs its attention as panel products (blocks of 64 rows,
// 8 rows sharing the keys they all see): the logits after each of its tokens are the model's
// forward within rounding, in every GPT variant (grouped-query heads, sliding windows of 7
// and 12 keys, head width 8: panels with padding), for a first prompt of 70 tokens (two
// blocks), for 20 more fed onto 30 cached ones, and for the 40 prefilled again when the
// window slides past the context.
TEST(GptDecoder, APromptsAttentionInPanelsIsTheForwards) {
  for (auto positional : {Positional::kLearned, Positional::kRotary}) {
    for (std::int64_t window : {0, 7, 12}) {
      if (positional == Positional::kLearned && window > 0) continue;
      Rng rng(11);
      GptConfig c = small_gpt(positional);
      c.context = 80;
      if (positional == Positional::kRotary) c = llama_shaped(c, 2, window);
      GPT model(c, rng);
      GptDecoder decoder(model);
      std::vector<std::int32_t> prompt;
      for (int t = 0; t < 70; ++t) prompt.push_back(static_cast<std::int32_t>((t * 5 + 3) % model.vocab()));
      const Tensor all = decoder.prompt_logits(prompt);
      for (std::size_t t = 0; t < prompt.size(); ++t)
        expect_rows_near(all, static_cast<std::int64_t>(t),
                         forward_last(model, {prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(t) + 1}), 1e-5);
      auto state = decoder.start();
      decoder.extend({state.get()}, {{prompt.begin(), prompt.begin() + 30}});
      const Tensor more = decoder.extend({state.get()}, {{prompt.begin() + 30, prompt.begin() + 50}});
      expect_rows_near(more, 0, forward_last(model, {prompt.begin(), prompt.begin() + 50}), 1e-5);
      EXPECT_EQ(0, std::memcmp(more.data<float>(), all.data<float>() + 49 * all.size(1), 4 * all.size(1)))
          << "the 50th token's logits fed in two prompts and in one";
      // Past the context of 80 the window slides by half: its last 40 tokens prefilled again,
      // in panels.
      std::vector<std::int32_t> fed(prompt.begin(), prompt.begin() + 50);
      for (int t = 0; t < 35; ++t) {
        fed.push_back(static_cast<std::int32_t>((t * 3 + 1) % model.vocab()));
        const Tensor next = decoder.extend({state.get()}, {{fed.back()}});
        const auto start = static_cast<std::ptrdiff_t>(state->window_start);
        expect_rows_near(next, 0, forward_last(model, {fed.begin() + start, fed.end()}), 1e-5);
      }
      EXPECT_EQ(state->window_start, 41);  // slid at the 81st token to its last 40
    }
  }
}

// A bf16 key-value cache holds half the bytes and rounds each key and value once, as it is
// written, and an int8 cache a quarter and 4 bytes a head (each head's keys and values at a
// position scaled by their largest magnitude): their logits are the forward's within their
// rounding (and not the float32 cache's),
// a prompt's rows in panels and tokens fed one by one read the same rounded values (within
// float rounding of each other), and the 50th token's logits fed as 30 + 20 equal the
// 70-token prompt's bit for bit; for learned positions and for a Llama-shaped GPT (2 of 4
// key-value heads, a window of 7 keys), across a slide past the context.
TEST(GptDecoder, ABf16OrInt8CacheRoundsEachKeyAndValueOnce) {
  for (auto [format, tolerance] : {std::pair{CacheFormat::kBf16, 0.005}, std::pair{CacheFormat::kInt8, 0.02}})
  for (auto positional : {Positional::kLearned, Positional::kRotary}) {
    SCOPED_TRACE(cache_format_name(format));
    Rng rng(13);
    const GptConfig c = context_80_gpt(positional, 7);
    GPT model(c, rng);
    GptDecoder fp32(model), decoder(model, DecoderFormat(WeightFormat::kF32, format));
    const std::int64_t kv = c.kv_heads > 0 ? c.kv_heads : c.heads, hd = c.dim / c.heads;
    EXPECT_EQ(fp32.cache_bytes_per_token(), 2 * c.layers * kv * hd * 4);
    EXPECT_EQ(decoder.cache_bytes_per_token(), format == CacheFormat::kBf16 ? 2 * c.layers * kv * hd * 2 : 2 * c.layers * kv * (hd + 4));
    std::vector<std::int32_t> prompt;
    for (int t = 0; t < 70; ++t) prompt.push_back(static_cast<std::int32_t>((t * 5 + 3) % model.vocab()));
    const Tensor all = decoder.prompt_logits(prompt), exact = fp32.prompt_logits(prompt);
    EXPECT_NE(0, std::memcmp(all.data<float>(), exact.data<float>(), all.nbytes())) << "no key or value was rounded";
    for (std::size_t t = 0; t < prompt.size(); ++t)
      expect_rows_near(all, static_cast<std::int64_t>(t),
                       forward_last(model, {prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(t) + 1}), tolerance);
    // Token by token (row loops) against the prompt's rows (panels): the same rounded cache.
    auto one = decoder.start();
    for (std::size_t t = 0; t < prompt.size(); ++t) {
      const Tensor next = decoder.extend({one.get()}, {{prompt[t]}});
      expect_rows_near(next, 0, {all.data<float>() + t * all.size(1), all.data<float>() + (t + 1) * all.size(1)}, 1e-5);
    }
    auto state = decoder.start();
    decoder.extend({state.get()}, {{prompt.begin(), prompt.begin() + 30}});
    const Tensor more = decoder.extend({state.get()}, {{prompt.begin() + 30, prompt.begin() + 50}});
    EXPECT_EQ(0, std::memcmp(more.data<float>(), all.data<float>() + 49 * all.size(1), 4 * all.size(1)))
        << "the 50th token's logits fed in two prompts and in one";
    std::vector<std::int32_t> fed(prompt.begin(), prompt.begin() + 50);
    for (int t = 0; t < 35; ++t) {  // past the context of 80: its last 40 tokens prefilled again
      fed.push_back(static_cast<std::int32_t>((t * 3 + 1) % model.vocab()));
      const Tensor next = decoder.extend({state.get()}, {{fed.back()}});
      const auto start = static_cast<std::ptrdiff_t>(state->window_start);
      expect_rows_near(next, 0, forward_last(model, {fed.begin() + start, fed.end()}), tolerance);
    }
    EXPECT_EQ(state->window_start, 41);
  }
}

// A key that holds a NaN (here the first layer's first key element, through its bias) makes
// the logits NaN whatever the cache holds: float32 and bf16 keep the NaN, and an int8 cache
// gives the head that holds it a NaN scale, rather than storing a code of 0 and giving finite
// logits as if the key were sound; on 2 threads, at 1 stream (its 4 heads in ranges: the keys
// stored before the jobs) and at 6 (each job all of a stream's heads, storing its own rows).
TEST(GptDecoder, AKeyHoldingANanMakesTheLogitsNanInEveryCache) {
  set_num_threads(2);
  set_active_threads(2);
  Rng rng(13);
  const GptConfig c = small_gpt();
  GPT model(c, rng);
  const auto params = model.named_parameters();
  const auto qkv_bias = std::find_if(params.begin(), params.end(),
                                     [](const auto& p) { return p.first.find("attn.qkv.bias") != std::string::npos; });
  ASSERT_NE(qkv_bias, params.end()) << "no qkv bias to poison";
  qkv_bias->second.value().data<float>()[c.dim] = std::numeric_limits<float>::quiet_NaN();  // layer 0, key 0, head 0
  for (const CacheFormat cache : {CacheFormat::kF32, CacheFormat::kBf16, CacheFormat::kInt8}) {
    SCOPED_TRACE(cache_format_name(cache));
    GptDecoder decoder(model, DecoderFormat(WeightFormat::kF32, cache));
    for (const int streams : {1, 6}) {
      std::vector<std::unique_ptr<SequenceState>> states;
      std::vector<SequenceState*> sequences;
      for (int i = 0; i < streams; ++i) sequences.push_back((states.emplace_back(decoder.start())).get());
      (void)decoder.extend(sequences, std::vector<std::vector<std::int32_t>>(streams, {1, 2, 3}));
      const Tensor next = decoder.extend(sequences, std::vector<std::vector<std::int32_t>>(streams, {4}));
      for (std::int64_t k = 0; k < next.numel(); ++k) ASSERT_TRUE(std::isnan(next.data<float>()[k])) << streams << " streams, logit " << k;
    }
  }
}

// A sequence's cache in blocks of positions: any block size gives the logits of one block as
// large as the context, bit for bit, in float32 and bf16, through a prompt (panels), tokens
// one by one (row loops, a run of keys per block), a sliding window, a batch, and a slide past
// the context; a sequence holds its positions rounded up to a block, each added as reached,
// and a finished sequence's blocks serve the next.
TEST(GptDecoder, ACacheInBlocksGivesTheLogitsOfOneBlock) {
  for (auto positional : {Positional::kLearned, Positional::kRotary}) {
    Rng rng(17);
    GPT model(context_80_gpt(positional, 21), rng);
    for (CacheFormat cache : {CacheFormat::kF32, CacheFormat::kBf16, CacheFormat::kInt8}) {
      GptDecoder whole(model, DecoderFormat(WeightFormat::kF32, cache, 80));
      for (std::int64_t rows : {16, 48}) {
        GptDecoder blocks(model, DecoderFormat(WeightFormat::kF32, cache, rows));
        std::vector<std::int32_t> prompt;
        for (int t = 0; t < 37; ++t) prompt.push_back(static_cast<std::int32_t>((t * 7 + 2) % model.vocab()));
        auto a = whole.start(), b = blocks.start(), a2 = whole.start(), b2 = blocks.start();
        const auto same = [&](const Tensor& x, const Tensor& y, const std::string& what) {
          ASSERT_EQ(x.nbytes(), y.nbytes());
          EXPECT_EQ(0, std::memcmp(x.data<float>(), y.data<float>(), x.nbytes()))
              << what << ", blocks of " << rows << ", " << cache_format_name(cache);
        };
        same(whole.extend({a.get()}, {prompt}), blocks.extend({b.get()}, {prompt}), "a prompt");
        same(whole.prompt_logits(prompt), blocks.prompt_logits(prompt), "a prompt's every row");
        for (int t = 0; t < 60; ++t) {  // past the context (80) at the 44th
          const std::int32_t id = static_cast<std::int32_t>((t * 3 + 1) % model.vocab());
          same(whole.extend({a.get(), a2.get()}, {{id}, {id, 5}}), blocks.extend({b.get(), b2.get()}, {{id}, {id, 5}}),
               "token " + std::to_string(t) + " beside a second sequence");
        }
        EXPECT_GT(a->window_start, 0) << "the window slid";
        // A new sequence's memory: its positions rounded up to a block, blocks added as reached.
        const auto block = static_cast<std::size_t>(blocks.cache_bytes_per_token() * rows);
        auto fresh = blocks.start();
        const std::size_t before = allocator_live_bytes();
        const auto held_after = [&](std::vector<std::int32_t> ids) {
          blocks.extend({fresh.get()}, {ids});
          return allocator_live_bytes() - before;
        };
        EXPECT_EQ(held_after({1, 2, 3}), block);
        EXPECT_EQ(held_after(std::vector<std::int32_t>(static_cast<std::size_t>(rows) - 3, 4)), block);
        EXPECT_EQ(held_after({5}), 2 * block);
        // Its blocks go back to the decoder with it, and the next sequence takes them.
        fresh.reset();
        fresh = blocks.start();
        EXPECT_EQ(held_after(std::vector<std::int32_t>(static_cast<std::size_t>(rows) + 1, 6)), 2 * block);
      }
    }
  }
}

// Preemption by recomputation (LmBatcher): a fresh state fed restart()'s replay, one feed a
// step beside another sequence, then given the same token as the preempted one, gives its
// logits bit for bit, wherever the sequence was stopped: prefilled in pieces (attention in
// panels), decoded a token at a time and in short feeds (row by row), slid past its context
// (80), under a sliding window (the rotary model's 21 keys), in every cache format; and
// cache_blocks_after foretells the blocks each feed leaves it holding.
TEST(GptDecoder, ARestartedSequenceReplaysItsCacheBitForBit) {
  const std::vector<std::int64_t> sizes = {20, 18, 1, 1, 1, 1, 1, 1, 5, 1, 1, 1, 1, 17, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  for (auto positional : {Positional::kLearned, Positional::kRotary}) {
    Rng rng(23);
    GPT model(context_80_gpt(positional, 21), rng);
    for (CacheFormat cache : {CacheFormat::kF32, CacheFormat::kBf16, CacheFormat::kInt8}) {
      GptDecoder d(model, DecoderFormat(WeightFormat::kF32, cache, 16));
      auto a = d.start(), other = d.start();
      d.extend({other.get()}, {{1, 2, 3}});
      std::int32_t next = 0;
      const auto tokens = [&](std::int64_t n) {
        std::vector<std::int32_t> ids;
        for (std::int64_t i = 0; i < n; ++i) ids.push_back(static_cast<std::int32_t>((next++ * 5 + 3) % model.vocab()));
        return ids;
      };
      int restarts = 0;
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        const std::vector<std::int32_t> feed = tokens(sizes[k]);
        const std::int64_t blocks = d.cache_blocks_after(*a, sizes[k]);
        d.extend({a.get()}, {feed});
        EXPECT_EQ(d.cache_blocks_after(*a, 0), blocks) << "feed " << k;
        if (k % 4 != 1 && k + 1 != sizes.size()) continue;
        std::vector<std::vector<std::int32_t>> replay;
        auto b = d.restart(*a, replay);
        ASSERT_NE(b, nullptr);
        ASSERT_EQ(b->window_start, a->window_start);
        std::size_t replayed = 0;
        for (const auto& r : replay) {
          replayed += r.size();
          d.extend({other.get(), b.get()}, {{7}, r});
        }
        EXPECT_EQ(replayed, a->tokens.size() - static_cast<std::size_t>(a->window_start)) << "feed " << k;
        for (int t = 0; t < 2; ++t) {
          const std::vector<std::int32_t> id = tokens(1);
          const Tensor x = d.extend({a.get()}, {id}), y = d.extend({b.get()}, {id});
          ASSERT_EQ(x.nbytes(), y.nbytes());
          EXPECT_EQ(0, std::memcmp(x.data<float>(), y.data<float>(), x.nbytes()))
              << "restarted after feed " << k << ", token " << t << ", " << cache_format_name(cache)
              << (positional == Positional::kRotary ? ", rotary" : ", learned");
        }
        ++restarts;
      }
      EXPECT_GT(a->window_start, 0) << "the window slid";
      EXPECT_EQ(restarts, 7);
    }
  }
}

// A recurrent model has no key-value cache, and its decoder no packed weights: either asked
// for is a one-line error naming it.
TEST(GptDecoder, OnlyAGptHoldsPackedWeightsOrACache) {
  Rng rng(2);
  RecurrentLM lstm(RecurrentConfig{static_cast<std::int64_t>(kAlphabet.size()), 24, 16, 1, "lstm"}, rng);
  const auto error_of = [](const auto& run) -> std::string {
    try {
      run();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(make_decoder(lstm), nullptr);
  EXPECT_EQ(error_of([&] { make_decoder(lstm, DecoderFormat(WeightFormat::kInt8)); }),
            "weights in int8 are built for GPT models only");
  EXPECT_EQ(error_of([&] { make_decoder(lstm, DecoderFormat(WeightFormat::kF32, CacheFormat::kBf16)); }),
            "a key-value cache in bf16 is a GPT's: this model has no cache");
  EXPECT_EQ(error_of([] { parse_cache_format("fp16"); }), "unknown key-value cache type 'fp16' (known: fp32, bf16, int8)");
}

// A prompt's scoring (echo with logprobs): the logits after every token equal the model's own
// forward over that prefix, for the cache decoder (fp32 and int8) and the window decoder.
TEST(GptDecoder, PromptLogitsAreTheForwardsAfterEveryToken) {
  Rng rng(5);
  GPT model(small_gpt(), rng);
  const std::vector<std::int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  GptDecoder fp32(model), int8(model, WeightFormat::kInt8);
  WindowDecoder window(model);
  const Tensor a = fp32.prompt_logits(prompt), b = int8.prompt_logits(prompt), c = window.prompt_logits(prompt);
  ASSERT_EQ(a.size(0), static_cast<std::int64_t>(prompt.size()));
  for (std::size_t t = 0; t < prompt.size(); ++t) {
    const std::vector<float> want = forward_last(model, {prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(t) + 1});
    expect_rows_near(a, static_cast<std::int64_t>(t), want, 1e-5);
    expect_rows_near(c, static_cast<std::int64_t>(t), want, 1e-5);
    expect_rows_near(b, static_cast<std::int64_t>(t), want, 0.05);  // int8 weights
  }
}

// Sequences of different lengths in one step get what each gets alone: the model's logits
// within rounding, and the decoder's own for the sequence alone to the last bit, in every
// weight format and with a bf16 cache (a prefill among single tokens, a single token beside a
// prefill).
TEST(GptDecoder, ABatchOfSequencesEqualsEachAlone) {
  Rng rng(3);
  GPT model(small_gpt(), rng);
  for (DecoderFormat f : {DecoderFormat(WeightFormat::kF32), DecoderFormat(WeightFormat::kBf16),
                          DecoderFormat(WeightFormat::kInt8), DecoderFormat(WeightFormat::kF32, CacheFormat::kBf16),
                          DecoderFormat(WeightFormat::kF32, CacheFormat::kInt8)}) {
    GptDecoder decoder(model, f);
    auto a = decoder.start(), b = decoder.start(), c = decoder.start();
    decoder.extend({a.get()}, {{1, 2, 3}});
    Tensor logits = decoder.extend({a.get(), b.get(), c.get()}, {{4}, {5, 6, 7, 8, 9}, {10}});
    if (f.weights == WeightFormat::kF32 && f.cache == CacheFormat::kF32) {
      expect_rows_near(logits, 0, forward_last(model, {1, 2, 3, 4}), 1e-5);
      expect_rows_near(logits, 1, forward_last(model, {5, 6, 7, 8, 9}), 1e-5);
      expect_rows_near(logits, 2, forward_last(model, {10}), 1e-5);
    }
    auto a1 = decoder.start(), b1 = decoder.start(), c1 = decoder.start();
    decoder.extend({a1.get()}, {{1, 2, 3}});
    const Tensor alone[] = {decoder.extend({a1.get()}, {{4}}), decoder.extend({b1.get()}, {{5, 6, 7, 8, 9}}),
                            decoder.extend({c1.get()}, {{10}})};
    const std::int64_t V = logits.size(1);
    for (std::int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(0, std::memcmp(alone[i].data<float>(), logits.data<float>() + i * V, 4 * V))
          << weight_format_name(f.weights) << " weights, " << cache_format_name(f.cache) << " cache: sequence " << i
          << " alone and in the batch";
  }
}

// The cached attention splits a step's streams and heads by the threads active (all heads of
// a stream in one job once the streams fill the threads; ranges of heads before): the logits
// of a batch with a prefill and single tokens are bitwise the same on 1 and 2 threads, for
// 1 stream and for 3.
TEST(GptDecoder, LogitsDoNotDependOnTheThreadCount) {
  set_num_threads(2);
  Rng rng(3);
  GPT model(small_gpt(), rng);
  auto run = [&](int threads, bool three) {
    set_active_threads(threads);
    GptDecoder decoder(model);
    auto a = decoder.start(), b = decoder.start(), c = decoder.start();
    decoder.extend({a.get()}, {{1, 2, 3}});
    if (!three) return decoder.extend({a.get()}, {{4}});
    return decoder.extend({a.get(), b.get(), c.get()}, {{4}, {5, 6, 7, 8, 9}, {10}});
  };
  for (const bool three : {false, true}) {
    const Tensor two = run(2, three), one = run(1, three);
    EXPECT_TRUE(ops::equal(one, two)) << (three ? "3 streams" : "1 stream");
  }
  set_active_threads(2);
}

// Packed weights: bf16 within its 8 bits of mantissa, int8 within half a step of each
// channel's scale, for every row count (the dot kernel and the widened GEMM); int8 products
// on VNNI (any row count) also within half a step of the activations' scale.
TEST(Quantize, PackedProductsAreTheFloatProductWithinTheFormatsRounding) {
  Rng rng(1);
  Tensor w = randn({37, 70}, rng), b = randn({37}, rng);
  for (const bool vnni : {false, true}) {
    if (vnni && !onednn::has_int8_instructions()) continue;
    weft::testing::ScopedKernels use(vnni ? "int8=native" : "int8=emulated");
    for (std::int64_t rows : {1, 3, 8, 20}) {
      Tensor x = randn({rows, 70}, rng);
      Tensor want = ops::linear(x, w, &b);
      double amax = 0;
      for (std::int64_t i = 0; i < rows * 70; ++i) amax = std::max<double>(amax, std::abs(x.data<float>()[i]));
      for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kInt8}) {
        PackedLinear p(w, b, f);
        Tensor got = p.forward(x);
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t o = 0; o < 37; ++o) {
            double bound = 1e-4;  // fp32: the same product
            double abs_x = 0, top = 0, abs_w = 0;
            for (std::int64_t i = 0; i < 70; ++i) {
              abs_x += std::abs(x.data<float>()[r * 70 + i]);
              top = std::max<double>(top, std::abs(w.data<float>()[o * 70 + i]));
              abs_w += std::abs(w.data<float>()[o * 70 + i]);
            }
            if (f == WeightFormat::kBf16) bound += abs_x * top / 256;
            if (f == WeightFormat::kInt8) bound += abs_x * top / 127 / 2;
            if (f == WeightFormat::kInt8 && vnni) bound += (abs_w + 70 * top / 127) * amax / 127 / 2;
            EXPECT_NEAR(got.data<float>()[r * 37 + o], want.data<float>()[r * 37 + o], bound)
                << weight_format_name(f) << " rows " << rows << " vnni " << vnni;
          }
      }
    }
  }
  {
    weft::testing::ScopedKernels use("int8=emulated");
    EXPECT_EQ(PackedLinear(w, b, WeightFormat::kInt8).bytes(), 48 * 70 + 37 * 4);  // 3 panels and scales
  }
  if (onednn::has_int8_instructions()) {
    weft::testing::ScopedKernels use("int8=native");
    // Two panels of 16 channels x 72 inputs (70 padded to 4), 5 rows, scales.
    EXPECT_EQ(PackedLinear(w, b, WeightFormat::kInt8).bytes(), 32 * 72 + 5 * 70 + 37 * 4);
  }
  EXPECT_EQ(PackedLinear(w, b, WeightFormat::kBf16).bytes(), 48 * 70 * 2);
  EXPECT_EQ(PackedLinear(w, b, WeightFormat::kF32).bytes(), 48 * 70 * 4);
  EXPECT_THROW(parse_weight_format("int4"), ConfigError);
}

// Dynamic per-row quantization of the activations (int8 weights on a VNNI kernel): a row
// holding an infinity or a NaN gives NaN outputs, whichever of its elements it is (a NaN was
// once passed over by the row's maximum and cast to int8), and leaves its neighbours' outputs
// as they are alone; a row of zeros gives the bias, and so does a row too small to scale.
TEST(Quantize, Int8ActivationRowsWithInfinityOrNanGiveNanOutputs) {
  if (!onednn::has_int8_instructions()) GTEST_SKIP() << "no int8 instructions";
  weft::testing::ScopedKernels use("int8=native");
  Rng rng(3);
  Tensor w = randn({40, 75}, rng), b = randn({40}, rng), x = randn({6, 75}, rng);
  PackedLinear p(w, b, WeightFormat::kInt8);
  const Tensor clean = p.forward(x);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()})
    for (const std::int64_t at : {0, 37, 74}) {  // first, middle, last (past the 8-lane blocks)
      Tensor y = x.clone();
      y.data<float>()[2 * 75 + at] = bad;
      std::fill(y.data<float>() + 4 * 75, y.data<float>() + 5 * 75, 0.0f);
      const Tensor got = p.forward(y);
      for (std::int64_t o = 0; o < 40; ++o) {
        EXPECT_TRUE(std::isnan(got.data<float>()[2 * 40 + o])) << bad << " at " << at << ", output " << o;
        EXPECT_EQ(got.data<float>()[4 * 40 + o], b.data<float>()[o]) << "a row of zeros";
        for (const std::int64_t r : {0, 1, 3, 5})
          EXPECT_EQ(got.data<float>()[r * 40 + o], clean.data<float>()[r * 40 + o]) << "row " << r;
      }
    }
  // A row so small that its scale (largest / 127) underflows to 0: codes of 0, the bias.
  Tensor tiny = x.clone();
  std::fill(tiny.data<float>() + 3 * 75, tiny.data<float>() + 4 * 75, 1e-44f);
  const Tensor got = p.forward(tiny);
  for (std::int64_t o = 0; o < 40; ++o) EXPECT_EQ(got.data<float>()[3 * 40 + o], b.data<float>()[o]) << o;
  // A row whose scale is subnormal (its inverse overflows): one element of 1e-38 among zeros
  // gives that element's code 127 and the zeros' 0, as a row of one 1 among zeros, 1e-38 times.
  PackedLinear unbiased(w, Tensor(), WeightFormat::kInt8);
  Tensor one = Tensor::zeros({1, 75}), small = Tensor::zeros({1, 75});
  one.data<float>()[10] = 1.0f;
  small.data<float>()[10] = 1e-38f;
  const Tensor big_out = unbiased.forward(one), small_out = unbiased.forward(small);
  for (std::int64_t o = 0; o < 40; ++o) {
    const double want = 1e-38 * big_out.data<float>()[o];
    EXPECT_NEAR(small_out.data<float>()[o], want, 0.02 * std::abs(want) + 1e-44) << o;
  }
}

// Weights in panels: every output is the chain of fused multiply-adds over the inputs in
// order, then times the channel's scale, plus its bias: the same bits for any rows (their
// count and a row's place among them), any channels asked for (one panel or several, the
// last one's padding past `out`), every element type, on every path this processor runs.
TEST(WeightPanels, EveryOutputIsOneFusedMultiplyAddChainOnEveryPath) {
  Rng rng(2);
  std::vector<const char*> paths;
  for (const char* p : {"avx512", "avx2", "scalar"})
    if (WeightPanels::runs(p)) paths.push_back(p);
  ASSERT_TRUE(WeightPanels::runs(WeightPanels::path()));
  for (auto [out, in] : {std::pair<std::int64_t, std::int64_t>{37, 70}, {300, 9}, {16, 1}, {5, 33}}) {
    Tensor wf = randn({out, in}, rng), sc = randn({out}, rng), b = randn({out}, rng);
    std::vector<std::uint16_t> wb(static_cast<std::size_t>(out * in));
    std::vector<std::int8_t> wq(static_cast<std::size_t>(out * in));
    for (std::size_t i = 0; i < wb.size(); ++i) {
      std::uint32_t u;
      std::memcpy(&u, wf.data<float>() + i, 4);
      wb[i] = static_cast<std::uint16_t>(u >> 16);
      wq[i] = static_cast<std::int8_t>(static_cast<int>(i * 37 % 255) - 127);
    }
    const WeightPanels panels[] = {WeightPanels(wf.data<float>(), out, in), WeightPanels(wb.data(), out, in),
                                   WeightPanels(wq.data(), out, in)};
    for (const WeightPanels& w : panels) {
      EXPECT_EQ(w.bytes(), (out + 15) / 16 * 16 * in *
                               (w.element() == WeightPanels::Element::kF32    ? 4
                                : w.element() == WeightPanels::Element::kBf16 ? 2
                                                                              : 1));
      for (const std::int64_t rows : {1, 2, 3, 5, 8, 13, 20}) {
        const std::int64_t ldx = in + 3, ldy = out + 5;
        Tensor x = randn({rows, ldx}, rng);
        for (const bool scaled : {false, true})
          for (const auto& [o0, o1] : {std::pair<std::int64_t, std::int64_t>{0, out}, {16, out}, {0, std::min<std::int64_t>(out, 16)}}) {
            if (o0 >= o1) continue;
            std::vector<float> want(static_cast<std::size_t>(rows * ldy), -7.0f);
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t o = o0; o < o1; ++o) {
                float acc = 0;
                for (std::int64_t i = 0; i < in; ++i) acc = std::fma(x.data<float>()[r * ldx + i], w.at(o, i), acc);
                if (scaled) acc = acc * sc.data<float>()[o] + b.data<float>()[o];
                want[static_cast<std::size_t>(r * ldy + o)] = acc;
              }
            for (const char* path : paths) {
              std::vector<float> got(want.size(), -7.0f);
              w.product_on(path, x.data<float>(), rows, ldx, scaled ? sc.data<float>() : nullptr,
                           scaled ? b.data<float>() : nullptr, got.data(), ldy, o0, o1);
              ASSERT_EQ(0, std::memcmp(got.data(), want.data(), 4 * want.size()))
                  << path << " element " << static_cast<int>(w.element()) << " out " << out << " in " << in << " rows "
                  << rows << " channels [" << o0 << ", " << o1 << ")";
            }
          }
      }
    }
    for (std::int64_t o = 0; o < out; ++o)  // the weights as given, widened
      for (std::int64_t i = 0; i < in; ++i) {
        const auto k = static_cast<std::size_t>(o * in + i);
        const std::uint32_t u = static_cast<std::uint32_t>(wb[k]) << 16;
        float bf;
        std::memcpy(&bf, &u, 4);
        ASSERT_EQ(panels[0].at(o, i), wf.data<float>()[k]);
        ASSERT_EQ(panels[1].at(o, i), bf);
        ASSERT_EQ(panels[2].at(o, i), static_cast<float>(wq[k]));
      }
  }
  // Float32 panels laid out by the caller (attention's keys and values): panels 16 x in + 40 floats
  // apart, the outputs written from o_begin's column, a product cut over its inputs in three
  // parts (`resume`) giving the bits of one pass, on every path.
  for (auto [out, in] : {std::pair<std::int64_t, std::int64_t>{37, 70}, {16, 5}, {50, 300}}) {
    const std::int64_t stride = 16 * in + 40, panels = (out + 15) / 16;
    std::vector<float> laid(static_cast<std::size_t>(panels * stride), 0.0f);
    Tensor wf = randn({out, in}, rng);
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i)
        laid[static_cast<std::size_t>(o / 16 * stride + i * 16 + o % 16)] = wf.data<float>()[o * in + i];
    for (const std::int64_t rows : {1, 3, 8, 13}) {
      Tensor x = randn({rows, in}, rng);
      for (const std::int64_t o0 : {std::int64_t{0}, std::int64_t{16}}) {
        if (o0 >= out) continue;
        const std::int64_t ldy = out - o0 + 2;
        std::vector<float> want(static_cast<std::size_t>(rows * ldy), -7.0f);
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t o = o0; o < out; ++o) {
            float acc = 0;
            for (std::int64_t i = 0; i < in; ++i) acc = std::fma(x.data<float>()[r * in + i], wf.data<float>()[o * in + i], acc);
            want[static_cast<std::size_t>(r * ldy + o - o0)] = acc;
          }
        for (const char* path : paths) {
          std::vector<float> got(want.size(), -7.0f);
          const std::int64_t cut[] = {0, in / 3, in / 2 + 1, in};
          for (int part = 0; part < 3; ++part)
            float_panel_product(laid.data() + cut[part] * 16, stride, cut[part + 1] - cut[part], x.data<float>() + cut[part],
                                rows, in, got.data(), ldy, o0, out, part > 0, path);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), 4 * want.size()))
              << path << " out " << out << " in " << in << " rows " << rows << " from channel " << o0;
        }
      }
    }
  }
  const float x = 1;
  float y = 0;
  const WeightPanels w(&x, 1, 1);
  EXPECT_THROW(w.product(&x, 1, 1, nullptr, nullptr, &y, 1, 8, 1), InternalError);  // channels past out
}

// A packed product's row is the same bits whatever rows are multiplied with it, in every
// format (int8 with and without VNNI): what lets a server batch a request with any others.
TEST(Quantize, ARowsProductDoesNotDependOnTheRowsBesideIt) {
  Rng rng(4);
  Tensor w = randn({300, 96}, rng), b = randn({300}, rng);
  for (const char* kernels : {"int8=emulated", "int8=native"}) {
    if (std::string(kernels) == "int8=native" && !onednn::has_int8_instructions()) continue;
    weft::testing::ScopedKernels use(kernels);
    for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kInt8}) {
      const PackedLinear p(w, b, f);
      for (const std::int64_t rows : {2, 5, 16, 70, 130}) {
        Tensor x = randn({rows, 96}, rng);
        const Tensor all = p.forward(x);
        for (const std::int64_t r : {std::int64_t{0}, rows / 2, rows - 1}) {
          Tensor one = Tensor::empty({1, 96});
          std::copy(x.data<float>() + r * 96, x.data<float>() + (r + 1) * 96, one.data<float>());
          const Tensor alone = p.forward(one);
          ASSERT_EQ(0, std::memcmp(alone.data<float>(), all.data<float>() + r * 300, 300 * 4))
              << weight_format_name(f) << " " << kernels << " row " << r << " of " << rows;
        }
      }
    }
  }
}

// Int8 weights in VNNI panels: every product is the exact integer sum of x w times
// the channel's and the row's scales plus the bias, whatever the rows, the channels asked for (whole panels, the rows past
// the last panel), the input length (padded to 4) and the kernel's width; a row's result
// does not depend on the rows multiplied with it.
// The row blocks of a pass share the next pass's panels: each panel fetched by exactly one
// block, in order, the later blocks taking them when there are fewer panels than blocks; a
// pass of one block fetches nothing.
TEST(PanelFetch, TheRowBlocksShareTheNextPassOnce) {
  for (std::int64_t next = 0; next <= 6; ++next) {
    for (std::int64_t blocks = 1; blocks <= 20; ++blocks) {
      std::vector<int> fetched(static_cast<std::size_t>(next), 0);
      std::int64_t at = 0;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const PanelShare share = next_pass_share(b, blocks, next);
        ASSERT_GE(share.count, 0);
        if (share.count == 0) continue;
        ASSERT_EQ(share.first, at) << "next " << next << ", blocks " << blocks << ", block " << b;
        for (std::int64_t p = share.first; p < share.first + share.count; ++p) ++fetched[static_cast<std::size_t>(p)];
        at = share.first + share.count;
      }
      for (int f : fetched) EXPECT_EQ(f, blocks > 1 ? 1 : 0) << "next " << next << ", blocks " << blocks;
    }
  }
  EXPECT_EQ(next_pass_share(3, 4, 1).count, 1);  // one panel of 4 blocks: the last fetches it
  EXPECT_EQ(next_pass_share(0, 4, 1).count, 0);
  EXPECT_EQ(next_pass_share(2, 4, 4).first, 2);  // 16 int8 rows: a panel each
}

// A product is cut into units of 64 rows and 64 channels dealt to the threads, each fetching
// the next unit's panels ahead (quantize.cpp): at shapes of several units in both directions,
// with a channel count that leaves a partial panel, the outputs on 2 and 3 threads (more
// threads than cores here) are bitwise those on 1, and float32's are the plain product's
// within rounding.
TEST(Quantize, ProductsCutIntoUnitsGiveTheSameBitsOnAnyThreadCount) {
  Rng rng(5);
  const Tensor w = randn({1000, 200}, rng), bias = randn({1000}, rng);
  for (const WeightFormat f : {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kInt8}) {
    const PackedLinear layer(w, bias, f);
    for (const std::int64_t rows : {1, 16, 130}) {
      const Tensor x = randn({rows, 200}, rng);
      set_num_threads(1);
      const Tensor one = layer.forward(x);
      for (const int threads : {2, 3}) {
        set_num_threads(threads);
        for (int again = 0; again < 20; ++again)
          ASSERT_TRUE(ops::equal(one, layer.forward(x)))
              << weight_format_name(f) << ", " << rows << " rows, " << threads << " threads";
      }
      set_num_threads(2);
      if (f != WeightFormat::kF32) continue;
      const Tensor ref = ops::linear(x, w, &bias);
      for (std::int64_t i = 0; i < one.numel(); ++i)
        ASSERT_NEAR(one.data<float>()[i], ref.data<float>()[i], 1e-3f) << rows << " rows, element " << i;
    }
  }
}

TEST(Quantize, VnniPanelsGiveTheExactIntegerProduct) {
  std::vector<int> widths;
  for (int width : {512, 256})
    if (vnni_runs(width)) widths.push_back(width);
  if (widths.empty()) GTEST_SKIP() << "no VNNI on this processor";
  Rng rng(7);
  for (auto [out, in] : {std::pair<std::int64_t, std::int64_t>{37, 70}, {64, 768}, {16, 3}, {5, 9}, {112, 40}}) {
    std::vector<std::int8_t> w(static_cast<std::size_t>(out * in));
    for (auto& v : w) v = static_cast<std::int8_t>(static_cast<int>(rng.below(255)) - 127);
    std::vector<float> scale(static_cast<std::size_t>(out));
    for (auto& v : scale) v = 0.001f + static_cast<float>(rng.below(1000)) * 1e-5f;
    std::vector<float> bias(static_cast<std::size_t>(out));
    for (auto& v : bias) v = static_cast<float>(rng.below(2001)) * 1e-3f - 1.0f;
    const Int8Panels panels(w.data(), out, in);
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i) ASSERT_EQ(panels.at(o, i), w[static_cast<std::size_t>(o * in + i)]);
    const std::int64_t ldx = panels.padded_in() + 8;
    for (std::int64_t rows : {1, 3, 8, 13, 70}) {
      std::vector<std::int8_t> x(static_cast<std::size_t>(rows * ldx), 0);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < in; ++i)
          x[static_cast<std::size_t>(r * ldx + i)] = static_cast<std::int8_t>(static_cast<int>(rng.below(255)) - 127);
      std::vector<std::int32_t> x_sums(static_cast<std::size_t>(rows));
      std::vector<float> x_scales(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t i = 0; i < in; ++i) x_sums[static_cast<std::size_t>(r)] += x[static_cast<std::size_t>(r * ldx + i)];
        x_scales[static_cast<std::size_t>(r)] = 0.5f + static_cast<float>(r) * 0.01f;
      }
      std::vector<float> want(static_cast<std::size_t>(rows * out));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t o = 0; o < out; ++o) {
          std::int64_t sum = 0;
          for (std::int64_t i = 0; i < in; ++i)
            sum += x[static_cast<std::size_t>(r * ldx + i)] * w[static_cast<std::size_t>(o * in + i)];
          const float v = static_cast<float>(sum) * scale[static_cast<std::size_t>(o)] * x_scales[static_cast<std::size_t>(r)];
          want[static_cast<std::size_t>(r * out + o)] = v + bias[static_cast<std::size_t>(o)];
        }
      for (int width : widths) {
        std::vector<float> y(static_cast<std::size_t>(rows * out), -1);
        panels.product(x.data(), rows, ldx, x_sums.data(), x_scales.data(), scale.data(), bias.data(), y.data(), out, 0,
                       out, width);
        EXPECT_EQ(y, want) << out << "x" << in << ", " << rows << " rows, " << width << " bits";
        // The channels from the second panel on, one row at a time.
        if (out > 16) {
          std::vector<float> part(static_cast<std::size_t>(out), -1);
          for (std::int64_t r = 0; r < rows; ++r) {
            panels.product(x.data() + r * ldx, 1, ldx, x_sums.data() + r, x_scales.data() + r, scale.data(), bias.data(),
                           part.data(), out, 16, out, width);
            for (std::int64_t o = 16; o < out; ++o)
              ASSERT_EQ(part[static_cast<std::size_t>(o)], want[static_cast<std::size_t>(r * out + o)]) << o;
          }
        }
      }
    }
  }
  EXPECT_THROW(Int8Panels(std::vector<std::int8_t>(64).data(), 16, 4)
                   .product(nullptr, 1, 4, nullptr, nullptr, nullptr, nullptr, nullptr, 16, 8, 16, widths[0]),
               InternalError);
  // Through a layer: a row alone and among 19 others gives the same bits.
  weft::testing::ScopedKernels use("int8=native");
  Tensor wf = randn({96, 64}, rng), bf = randn({96}, rng), x = randn({20, 64}, rng);
  PackedLinear q(wf, bf, WeightFormat::kInt8);
  const Tensor all = q.forward(x);
  for (std::int64_t r : {0, 7, 19}) {
    const Tensor one = q.forward(x.slice(0, r, r + 1).contiguous());
    for (std::int64_t o = 0; o < 96; ++o) ASSERT_EQ(one.data<float>()[o], all.data<float>()[r * 96 + o]) << r << " " << o;
  }
}

// The decoder's validation loss is the forward's cross-entropy over the same windows, and
// int8 weights change it only a little while taking under a third of the memory.
TEST(Quantize, ValidationLossThroughTheDecoderAndWithInt8Weights) {
  Rng rng(2);
  GPT model(small_gpt(), rng);
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < 200; ++i) tokens.push_back(static_cast<std::int32_t>((i * 13 + i / 7) % model.vocab()));
  GptDecoder fp32(model), int8(model, WeightFormat::kInt8);
  const LossReport a = next_token_loss(fp32, tokens, 3);
  // The same windows through the model's forward.
  const std::int64_t T = 24, span = 200 - T - 1;
  double total = 0;
  for (std::int64_t i = 0; i < 3; ++i) {
    const std::int64_t start = span * i / 3;
    NoGradGuard no_grad;
    Tensor ids = Tensor::empty({1, T});
    for (std::int64_t t = 0; t < T; ++t) ids.data<float>()[t] = static_cast<float>(tokens[static_cast<size_t>(start + t)]);
    Tensor logp = ops::log_softmax(model.forward(Var(ids)).value().reshape({T, model.vocab()}));
    for (std::int64_t t = 0; t < T; ++t) total -= logp.data<float>()[t * model.vocab() + tokens[static_cast<size_t>(start + t + 1)]];
  }
  EXPECT_EQ(a.tokens, 3 * T);
  EXPECT_NEAR(a.loss, total / (3 * T), 1e-4);
  const LossReport q = next_token_loss(int8, tokens, 3);
  EXPECT_NEAR(q.loss, a.loss, 0.02 * a.loss);
  EXPECT_LT(int8.weight_bytes() * 3, fp32.weight_bytes());
}

TEST(Sampling, GreedyTopKAndTopPAndSeeds) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f, 0.5f};
  Sampler greedy({0, 0, 1, 0});
  EXPECT_EQ(greedy.next(logits.data(), 5), 1);
  Sampler top1({1.0, 1, 1, 42});
  Sampler nucleus({1.0, 0, 1e-6, 42});
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(top1.next(logits.data(), 5), 1);
    EXPECT_EQ(nucleus.next(logits.data(), 5), 1);
  }
  // Top-2 draws only the two most likely; a seed repeats its draws.
  Sampler top2({1.0, 2, 1, 9}), again({1.0, 2, 1, 9});
  std::set<std::int32_t> seen;
  for (int i = 0; i < 200; ++i) {
    const auto t = top2.next(logits.data(), 5);
    EXPECT_EQ(t, again.next(logits.data(), 5));
    seen.insert(t);
  }
  EXPECT_EQ(seen, (std::set<std::int32_t>{1, 2}));
}

TEST(Generation, StopSequencesEndTheTextAndAreHeldBackWhileTheyMightBegin) {
  CharTokenizer tokenizer(kAlphabet);
  GenerationOptions o;
  o.max_tokens = 50;
  o.sampling.temperature = 0;
  o.stop = {"cab"};
  Generation g(tokenizer, "x", o);
  // Force the tokens a, b, c, a, b: "abcab" stops before "cab".
  std::string streamed;
  for (char ch : std::string("abcab")) {
    std::vector<float> logits(kAlphabet.size(), 0.0f);
    logits[static_cast<size_t>(tokenizer.encode(std::string(1, ch))[0])] = 1.0f;
    streamed += g.accept(logits.data(), static_cast<std::int64_t>(logits.size()));
    if (ch == 'c') {
      EXPECT_EQ(streamed, "ab");  // "c" might begin "cab": held back
    }
  }
  EXPECT_TRUE(g.done());
  EXPECT_EQ(g.finish_reason(), "stop");
  EXPECT_EQ(g.text(), "ab");
  EXPECT_EQ(streamed, "ab");
}

TEST(Generation, OneAtATimeWithAndWithoutTheCacheGivesTheSameTokens) {
  Rng rng(11);
  GPT model(small_gpt(), rng);
  CharTokenizer tokenizer(kAlphabet);
  GptDecoder cached(model);
  WindowDecoder window(model);
  for (double temperature : {0.0, 0.9}) {
    GenerationOptions o;
    o.max_tokens = 40;  // past the context of 24
    o.sampling = {temperature, 0, 0.95, 5};
    GenerationResult a = generate(cached, tokenizer, "hello there", o);
    GenerationResult b = generate(window, tokenizer, "hello there", o);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.text, b.text);
    EXPECT_EQ(a.tokens.size(), 40u);
    EXPECT_EQ(a.finish_reason, "length");
  }
}

// weft train's closing sample through the decoder: within the context, greedy and sampled at
// temperature 0.9 from the same seed, the tokens LanguageModel::generate (the forward over the
// window at every token) picks; an LSTM (a window decoder) the same; no tokens asked, the prompt.
TEST(Generation, ContinuedTokensAreTheModelsOwnGeneration) {
  Rng init(12);
  GPT gpt(small_gpt(), init);
  RecurrentLM lstm(RecurrentConfig{static_cast<std::int64_t>(kAlphabet.size()), 24, 16, 1, "lstm"}, init);
  const std::vector<std::int32_t> prompt = {7, 4, 11, 11, 14};
  for (LanguageModel* model : std::vector<LanguageModel*>{&gpt, &lstm}) {
    for (double temperature : {0.0, 0.9}) {
      Rng a(5), b(5);
      const std::vector<std::int32_t> want = model->generate(prompt, 19, temperature, 5, a);  // 24 tokens: the context
      const std::vector<std::int32_t> got = continue_tokens(*model, prompt, 19, temperature, 5, b);
      EXPECT_EQ(got, want) << model->describe() << " at temperature " << temperature;
      EXPECT_EQ(got.size(), 24u);
    }
  }
  Rng r(5);
  EXPECT_EQ(continue_tokens(gpt, prompt, 0, 0.9, 0, r), prompt);
}

namespace {
// The metrics an LmBatcher updates (the server declares them).
void declare_batcher_metrics(Metrics& metrics) {
  metrics.gauge("weft_queue_depth", "");
  metrics.gauge("weft_running_sequences", "");
  metrics.histogram("weft_batch_size", "", {1, 2, 4, 8});
  metrics.counter("weft_generated_tokens_total", "");
  metrics.histogram("weft_time_to_first_token_seconds", "", {1});
  metrics.gauge("weft_kv_cache_reserved_bytes", "");
}

// A decoder that passes every call to `inner` and shows a test each step it ran (`seen`).
struct WatchingDecoder : Decoder {
  explicit WatchingDecoder(Decoder& d) : inner(d) {}
  Decoder& inner;
  virtual void seen(const std::vector<SequenceState*>& s, const std::vector<std::vector<std::int32_t>>& t) = 0;
  std::unique_ptr<SequenceState> start() const override { return inner.start(); }
  Tensor extend(const std::vector<SequenceState*>& s, const std::vector<std::vector<std::int32_t>>& t) override {
    Tensor logits = inner.extend(s, t);
    seen(s, t);
    return logits;
  }
  std::int64_t vocab() const override { return inner.vocab(); }
  std::int64_t context() const override { return inner.context(); }
  std::int64_t cache_bytes_per_token() const override { return inner.cache_bytes_per_token(); }
  std::int64_t cache_block_positions() const override { return inner.cache_block_positions(); }
  std::int64_t cache_blocks_after(const SequenceState& s, std::int64_t fed) const override {
    return inner.cache_blocks_after(s, fed);
  }
  std::unique_ptr<SequenceState> restart(const SequenceState& s, std::vector<std::vector<std::int32_t>>& replay) const override {
    return inner.restart(s, replay);
  }
};

// Eight requests, request i's prompt the `shape(i).first` characters of one sentence from
// character i and its max_tokens `shape(i).second`, greedy when i is even and sampled at 0.8
// (seed i) when odd: their tickets, and what each gets alone from `alone_decoder`.
struct Requests {
  std::vector<std::shared_ptr<Ticket>> tickets;
  std::vector<GenerationResult> alone;
};
Requests eight_requests(Decoder& alone_decoder, const Tokenizer& tokenizer,
                        const std::function<std::pair<std::size_t, std::int64_t>(int)>& shape) {
  const std::string text = "the quick brown fox jumps over the lazy dog, and then it rests in the sun. ";
  Requests r;
  for (int i = 0; i < 8; ++i) {
    GenerationOptions o;
    o.max_tokens = shape(i).second;
    o.sampling = {i % 2 == 0 ? 0.0 : 0.8, 0, 1.0, static_cast<std::uint64_t>(i)};
    const std::string prompt = text.substr(static_cast<size_t>(i), shape(i).first);
    r.alone.push_back(generate(alone_decoder, tokenizer, prompt, o));
    r.tickets.push_back(std::make_shared<Ticket>(prompt, tokenizer.encode(prompt), o));
  }
  return r;
}

// A GPT of context 96 decoded alone and in cache blocks of 16 positions (the cache-limit tests).
struct BlocksGpt {
  Rng rng{9};
  GPT model{[] {
              GptConfig c = small_gpt();
              c.context = 96;
              return c;
            }(),
            rng};
  CharTokenizer tokenizer{kAlphabet};
  GptDecoder alone_decoder{model}, batch_decoder{model, DecoderFormat(WeightFormat::kF32, CacheFormat::kF32, 16)};
};

// A decoder that records the most sequences and the most cache blocks the sequences of a
// step hold after it.
struct RecordingBlocks : WatchingDecoder {
  using WatchingDecoder::WatchingDecoder;
  std::int64_t most_sequences = 0, most_blocks = 0;
  void seen(const std::vector<SequenceState*>& s, const std::vector<std::vector<std::int32_t>>&) override {
    std::int64_t blocks = 0;
    for (const SequenceState* q : s) blocks += inner.cache_blocks_after(*q, 0);
    most_sequences = std::max<std::int64_t>(most_sequences, static_cast<std::int64_t>(s.size()));
    most_blocks = std::max(most_blocks, blocks);
  }
};

// Waits for every ticket: no error, and the text and tokens of the request alone.
void expect_each_as_alone(const Requests& r) {
  for (std::size_t i = 0; i < r.tickets.size(); ++i) {
    r.tickets[i]->wait();
    EXPECT_EQ(r.tickets[i]->error, "") << "request " << i;
    EXPECT_EQ(r.tickets[i]->text, r.alone[i].text) << "request " << i;
    EXPECT_EQ(r.tickets[i]->completion_tokens, static_cast<std::int64_t>(r.alone[i].tokens.size())) << "request " << i;
  }
}
}  // namespace

// Requests that arrive together and at different times, with different lengths and
// settings, each get exactly what they get alone.
TEST(LmBatcher, ContinuousBatchingGivesEachRequestWhatItGetsAlone) {
  Rng rng(5);
  GPT model(small_gpt(), rng);
  CharTokenizer tokenizer(kAlphabet);
  GptDecoder alone_decoder(model);
  GptDecoder batch_decoder(model);
  Metrics metrics;
  declare_batcher_metrics(metrics);
  LmBatcher batcher(batch_decoder, tokenizer, {4, 1}, metrics);
  std::vector<std::shared_ptr<Ticket>> tickets;
  std::vector<GenerationResult> alone;
  for (int i = 0; i < 10; ++i) {  // each request alone first, so that submitting takes no time
    GenerationOptions o;
    o.max_tokens = 5 + 3 * i;
    o.sampling = {i % 3 == 0 ? 0.0 : 0.8, i % 2 ? 5 : 0, 1.0, static_cast<std::uint64_t>(i)};
    const std::string prompt = std::string(static_cast<size_t>(1 + i), "abcdefghij"[i]) + " is";
    alone.push_back(generate(alone_decoder, tokenizer, prompt, o));
    tickets.push_back(std::make_shared<Ticket>(prompt, tokenizer.encode(prompt), o));
  }
  for (int i = 0; i < 10; ++i) {
    batcher.submit(tickets[static_cast<std::size_t>(i)]);
    if (i % 4 == 3) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // some join a running batch
  }
  for (std::size_t i = 0; i < tickets.size(); ++i) {
    tickets[i]->wait();
    EXPECT_EQ(tickets[i]->text, alone[i].text) << "request " << i;
    EXPECT_EQ(tickets[i]->completion_tokens, static_cast<std::int64_t>(alone[i].tokens.size()));
    EXPECT_EQ(tickets[i]->finish_reason, "length");
  }
  EXPECT_EQ(metrics.value("weft_generated_tokens_total"), [&] {
    double n = 0;
    for (auto& a : alone) n += static_cast<double>(a.tokens.size());
    return n;
  }());
  // The requests did share steps: not every step decoded a single sequence.
  const std::string text = metrics.text();
  auto number_after = [&](const std::string& key) {
    const auto at = text.find(key);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + key.size()));
  };
  EXPECT_LT(number_after("weft_batch_size_bucket{kind=\"decode\",le=\"1\"} "),
            number_after("weft_batch_size_count{kind=\"decode\"} "));
}

// Chunked prefill: prompts longer than max_prefill_tokens go in pieces over steps that decode
// the other requests too, and each request still gets the tokens of its whole prompt fed at
// once, bit for bit (greedy and seeded, with pieces of 16 rows and more: prefill_piece).
TEST(LmBatcher, APromptInPiecesGetsTheTokensOfTheWholePrompt) {
  EXPECT_EQ(prefill_piece(40, 16), 16);
  EXPECT_EQ(prefill_piece(31, 16), 31);  // 16 + 15 would leave a piece under 16 rows
  EXPECT_EQ(prefill_piece(32, 16), 16);
  EXPECT_EQ(prefill_piece(5, 16), 5);
  EXPECT_EQ(prefill_piece(40, std::numeric_limits<std::int64_t>::max()), 40);  // no overflow
  // A decoder that records the largest piece of each step's feeds.
  struct Recording : WatchingDecoder {
    using WatchingDecoder::WatchingDecoder;
    std::vector<std::int64_t> largest;
    std::int64_t steps_with_both = 0;  // a piece of a prompt beside another sequence's token
    std::atomic<int> submitted{0};
    std::atomic<bool> first_step{false};
    void seen(const std::vector<SequenceState*>&, const std::vector<std::vector<std::int32_t>>& t) override {
      // The first step (the first request's prompt alone) waits for the second request, so that
      // its prompt meets the first one's decoding whatever the machine's load (the sleeps below
      // only spread the others).
      if (largest.empty()) {
        first_step = true;
        while (submitted.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      std::int64_t most = 0, ones = 0;
      for (const auto& f : t) most = std::max<std::int64_t>(most, static_cast<std::int64_t>(f.size())), ones += f.size() == 1;
      largest.push_back(most);
      steps_with_both += most > 1 && ones > 0;
    }
  };
  Rng rng(8);
  GptConfig c = small_gpt();
  c.context = 96;
  GPT model(c, rng);
  CharTokenizer tokenizer(kAlphabet);
  GptDecoder alone_decoder(model), batch_decoder(model);
  Recording recording(batch_decoder);
  Metrics metrics;
  declare_batcher_metrics(metrics);
  const Requests requests = eight_requests(alone_decoder, tokenizer, [](int i) {
    return std::pair{static_cast<std::size_t>(i % 4 == 0 ? 3 : 10 * i), std::int64_t{12 + 2 * i}};
  });
  const std::vector<GenerationResult>& alone = requests.alone;
  {
    LmBatcher batcher(recording, tokenizer, {8, 1, 16}, metrics);
    for (auto& t : requests.tickets) {
      batcher.submit(t);
      while (recording.submitted == 0 && !recording.first_step) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++recording.submitted;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // prompts arrive while others decode
    }
    expect_each_as_alone(requests);
  }
  // No step fed a prompt more than 16 + 15 tokens, and some fed a piece beside decoding tokens.
  EXPECT_LE(*std::max_element(recording.largest.begin(), recording.largest.end()), 31);
  EXPECT_GT(recording.steps_with_both, 0);
  EXPECT_EQ(metrics.value("weft_generated_tokens_total"), [&] {
    double n = 0;
    for (auto& a : alone) n += static_cast<double>(a.tokens.size());
    return n;
  }());
}

// A key-value cache limit: requests join while the blocks the running sequences may come to
// hold fit, in order; no step's sequences hold more, each request gets its tokens alone, and a
// request that could never fit ends with an error instead of waiting for ever.
TEST(LmBatcher, ACacheLimitHoldsTheRunningSequencesWithinIt) {
  EXPECT_EQ(cache_blocks_for(10, 6, 96, 16), 1);   // 16 positions
  EXPECT_EQ(cache_blocks_for(10, 7, 96, 16), 2);   // 17
  EXPECT_EQ(cache_blocks_for(90, 100, 96, 16), 6);  // at most the context
  EXPECT_EQ(cache_blocks_for(1, std::numeric_limits<std::int64_t>::max(), 96, 16), 6);  // no overflow
  EXPECT_EQ(cache_blocks_for(std::numeric_limits<std::int64_t>::max(), 5, 96, 16), 6);
  BlocksGpt g;
  GptDecoder &alone_decoder = g.alone_decoder, &batch_decoder = g.batch_decoder;
  CharTokenizer& tokenizer = g.tokenizer;
  ASSERT_EQ(batch_decoder.cache_block_positions(), 16);
  RecordingBlocks recording(batch_decoder);
  Metrics metrics;
  declare_batcher_metrics(metrics);
  // Request 3: 30 + 30 positions, 4 blocks; the others 10 + 15, 2 blocks.
  const Requests requests = eight_requests(alone_decoder, tokenizer, [](int i) {
    return i == 3 ? std::pair{std::size_t{30}, std::int64_t{30}} : std::pair{std::size_t{10}, std::int64_t{15}};
  });
  const std::int64_t block_bytes = 16 * batch_decoder.cache_bytes_per_token();
  {
    BatchOptions limited{8, 1};
    limited.cache_limit_bytes = 5 * block_bytes + block_bytes / 2;  // 5 blocks
    LmBatcher batcher(recording, tokenizer, limited, metrics);
    for (auto& t : requests.tickets) batcher.submit(t);
    expect_each_as_alone(requests);
  }
  EXPECT_LE(recording.most_blocks, 5);
  EXPECT_EQ(recording.most_sequences, 2);  // two of 2 blocks at a time; the long one beside none
  EXPECT_EQ(metrics.value("weft_kv_cache_reserved_bytes"), 0);
  // A request of more blocks than the limit's ends with an error.
  BatchOptions tiny{8, 1};
  tiny.cache_limit_bytes = block_bytes;
  LmBatcher batcher(batch_decoder, tokenizer, tiny, metrics);
  GenerationOptions o;
  o.max_tokens = 20;
  auto ticket = std::make_shared<Ticket>("the cat", tokenizer.encode("the cat"), o);
  batcher.submit(ticket);
  ASSERT_TRUE(ticket->wait_for(std::chrono::seconds(60)));
  EXPECT_NE(ticket->error.find("more than the limit's 1"), std::string::npos) << ticket->error;
  // ... and one that fits runs after it.
  o.max_tokens = 5;
  auto small = std::make_shared<Ticket>("the cat", tokenizer.encode("the cat"), o);
  batcher.submit(small);
  small->wait();
  EXPECT_EQ(small->completion_tokens, 5);
}

// Preemption by recomputation under a cache limit of 8 blocks (16 positions each): eight
// requests that may each come to hold 4 blocks (prompts of 10, 40 tokens) join on the one
// block their prompt takes, so more run at once than whole reservations let (2); as they
// grow past the limit the last to come leave and come back, and every request still gets the
// tokens it gets alone (greedy and sampled), no step's sequences holding more than the limit.
TEST(LmBatcher, PreemptionKeepsTheCacheWithinItsLimitAndEachRequestsTokens) {
  BlocksGpt g;
  GptDecoder &alone_decoder = g.alone_decoder, &batch_decoder = g.batch_decoder;
  CharTokenizer& tokenizer = g.tokenizer;
  RecordingBlocks recording(batch_decoder);
  Metrics metrics;
  declare_batcher_metrics(metrics);
  metrics.counter("weft_preemptions_total", "");
  const Requests requests =
      eight_requests(alone_decoder, tokenizer, [](int) { return std::pair{std::size_t{10}, std::int64_t{40}}; });
  {
    BatchOptions limited{8, 1};
    limited.cache_limit_bytes = 8 * 16 * batch_decoder.cache_bytes_per_token();
    limited.preempt = true;
    LmBatcher batcher(recording, tokenizer, limited, metrics);
    for (auto& t : requests.tickets) batcher.submit(t);
    expect_each_as_alone(requests);
  }
  EXPECT_LE(recording.most_blocks, 8);
  EXPECT_GE(recording.most_sequences, 4);
  EXPECT_GE(metrics.value("weft_preemptions_total"), 1);
  EXPECT_EQ(metrics.value("weft_queue_depth"), 0);
  EXPECT_EQ(metrics.value("weft_kv_cache_reserved_bytes"), 0);
}

// A preempted request whose client goes away while it waits to come back ends there
// ("abort", with the text it had), and the one it left room for finishes as alone.
TEST(LmBatcher, APreemptedRequestCancelledWhileWaitingEndsWithItsText) {
  struct Cancelling : WatchingDecoder {
    using WatchingDecoder::WatchingDecoder;
    Metrics* metrics = nullptr;
    std::shared_ptr<Ticket> victim;
    void seen(const std::vector<SequenceState*>&, const std::vector<std::vector<std::int32_t>>&) override {
      if (metrics->value("weft_preemptions_total") >= 1) victim->cancel();
    }
  };
  BlocksGpt g;
  GptDecoder &alone_decoder = g.alone_decoder, &batch_decoder = g.batch_decoder;
  CharTokenizer& tokenizer = g.tokenizer;
  Metrics metrics;
  declare_batcher_metrics(metrics);
  metrics.counter("weft_preemptions_total", "");
  GenerationOptions o;
  o.max_tokens = 40;
  const GenerationResult alone = generate(alone_decoder, tokenizer, "the quick ", o);
  auto first = std::make_shared<Ticket>("the quick ", tokenizer.encode("the quick "), o);
  auto second = std::make_shared<Ticket>("the quick ", tokenizer.encode("the quick "), o);
  Cancelling cancelling(batch_decoder);
  cancelling.metrics = &metrics;
  cancelling.victim = second;
  BatchOptions limited{2, 60000};  // (the first waits for the second: they start together)
  limited.cache_limit_bytes = 4 * 16 * batch_decoder.cache_bytes_per_token();  // both at 2 blocks, not at 3
  limited.preempt = true;
  LmBatcher batcher(cancelling, tokenizer, limited, metrics);
  batcher.submit(first);
  batcher.submit(second);
  first->wait();
  second->wait();
  EXPECT_EQ(first->text, alone.text);
  EXPECT_EQ(second->finish_reason, "abort");
  EXPECT_EQ(second->error, "");
  EXPECT_GE(second->completion_tokens, 16);
  EXPECT_LT(second->completion_tokens, 40);
  EXPECT_EQ(alone.text.rfind(second->text, 0), 0u) << second->text;  // what it had: the start of the text alone
  EXPECT_EQ(metrics.value("weft_preemptions_total"), 1);
}

// weft serve's cache limit: a given one must hold the longest sequence; auto limits only where
// --max-batch of them would pass half the memory available (a share per process).
TEST(ServeCacheLimit, GivenOrHalfTheMemoryAvailable) {
  const std::int64_t longest = 1 << 20;
  EXPECT_EQ(serve_cache_limit(std::int64_t{4} << 20, longest, 256, 16, std::nullopt, 1), std::int64_t{4} << 20);
  EXPECT_THROW(serve_cache_limit(longest - 1, longest, 256, 16, std::nullopt, 1), ConfigError);
  EXPECT_EQ(serve_cache_limit(std::nullopt, longest, 256, 16, std::nullopt, 1), 0);               // unknown memory
  EXPECT_EQ(serve_cache_limit(std::nullopt, longest, 256, 16, std::int64_t{32} << 20, 1), 0);     // 16 fit in 16 MiB
  EXPECT_EQ(serve_cache_limit(std::nullopt, longest, 256, 16, std::int64_t{8} << 20, 1), std::int64_t{4} << 20);
  EXPECT_EQ(serve_cache_limit(std::nullopt, longest, 256, 16, std::int64_t{32} << 20, 4), std::int64_t{4} << 20);
  try {
    serve_cache_limit(std::nullopt, longest, 256, 16, std::int64_t{8} << 20, 8);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("more than half the memory available (512.00 KiB, shared by 8 processes)"), std::string::npos)
        << e.what();
  }
}

TEST(Api, CompletionRequestsAreCheckedFieldByField) {
  ApiLimits limits{"m", 100, 4};
  auto status_of = [&](const std::string& body) {
    try {
      parse_completion_request(body, limits, 1);
    } catch (const RequestError& e) {
      return e.status;
    }
    return 200;
  };
  EXPECT_EQ(status_of(R"({"prompt": "hi"})"), 200);
  EXPECT_EQ(status_of(R"({"prompt": ["hi"], "model": "m", "max_tokens": 100, "stop": ["a", "b"], "stream": true})"), 200);
  EXPECT_EQ(status_of("{"), 400);
  EXPECT_EQ(status_of("[1]"), 400);
  EXPECT_EQ(status_of(R"({})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": 5})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "model": "other"})"), 404);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "max_tokens": 101})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "max_tokens": -1})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "max_tokens": 18446744073709551615})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "max_tokens": 1.5})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "temperature": "hot"})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "temperature": 3})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "top_p": 0})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "stop": [1]})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "stream": "yes"})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "n": 2, "best_of": 3, "logprobs": 5, "echo": true})"), 200);
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "hi", "logprobs": 0, "echo": true})", limits, 1)
                  .options.prompt_logprobs);  // the prompt's logprobs too
  EXPECT_EQ(status_of(R"({"prompt": "hi", "n": 2, "best_of": 3, "logprobs": 5})"), 200);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "n": 17})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "n": 3, "best_of": 2})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "best_of": 2, "stream": true})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "logprobs": 6})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": ["a", "b", "c", "d", "e"], "best_of": 16})"), 400);  // 80 sequences
  EXPECT_EQ(status_of(R"({"prompt": "hi", "logit_bias": {"3": 100, "4": -100}})"), 200);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "logit_bias": {"3": 101}})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "logit_bias": {"x": 1}})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "presence_penalty": 2.5})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "suffix": "x"})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "temprature": 0})"), 400);  // unknown: refused, not ignored
  EXPECT_EQ(status_of(R"({"prompt": [1, 2]})"), 400);                 // token ids need the tokenizer
  CompletionRequest r = parse_completion_request(R"({"prompt": "hi", "stop": "x", "seed": 7, "top_k": 3})", limits, 1);
  EXPECT_EQ(r.options.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.options.sampling.seed, 7u);
  EXPECT_EQ(r.options.sampling.top_k, 3);
  EXPECT_EQ(r.options.max_tokens, 16);
  EXPECT_EQ(r.options.top_logprobs, -1);
  // Prompts as token ids (decoded by the tokenizer, checked against the vocabulary) and arrays.
  const auto tokenizer = std::make_unique<CharTokenizer>("abc");
  ApiLimits small{"m", 100, 4, tokenizer->vocab_size()};
  r = parse_completion_request(R"({"prompt": [[0, 1], "ab"], "n": 2, "logprobs": 0})", small, 1, tokenizer.get());
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_TRUE(r.prompts[0].as_tokens);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(r.prompts[0].text, tokenizer->decode({0, 1}));
  EXPECT_EQ(r.prompts[1].text, "ab");
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.options.top_logprobs, 0);
  EXPECT_THROW(parse_completion_request(R"({"prompt": [0, 99]})", small, 1, tokenizer.get()), RequestError);
  EXPECT_THROW(parse_completion_request(R"({"prompt": "a", "logit_bias": {"99": 1}})", small, 1, tokenizer.get()),
               RequestError);
}

// A chat request's n sequences: as many as its choices (best_of is the completions API's).
TEST(Api, ChatRequestsGenerateOneSequencePerChoice) {
  ApiLimits limits{"m", 100, 4};
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "n": 3, "logprobs": true, "top_logprobs": 2})", limits, 1);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.best_of, 3);
  EXPECT_EQ(r.options.top_logprobs, 2);
  EXPECT_THROW(parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", limits, 1),
               RequestError);
  EXPECT_THROW(parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "best_of": 2})", limits, 1),
               RequestError);  // not a chat field
}

// A model trained on other data takes images of its own size, channels last, normalized with
// its recorded statistics; its classes are numbers.
TEST(Api, ClassifyRequestsTakeTheModelsImageSize) {
  ModelRecipe r;
  r.model = "cnn";
  r.image = {3, 4, 4, 13};
  r.mean = {0.0, 0.5, 1.0};
  r.stddev = {1.0, 0.5, 0.25};
  std::string flat = "[";
  for (int i = 0; i < 48; ++i) {
    if (i) flat += ',';
    flat += i % 3 == 0 ? "255" : "0";  // red pixels
  }
  flat += "]";
  const Tensor t = parse_classify_request(R"({"images": [)" + flat + "]}", ApiLimits{"m", 100, 2}, r);
  ASSERT_EQ(t.shape(), (Shape{1, 3, 4, 4}));
  EXPECT_FLOAT_EQ(static_cast<float>(t.at({0, 0, 1, 2})), 1.0f);   // (1 - 0) / 1
  EXPECT_FLOAT_EQ(static_cast<float>(t.at({0, 1, 3, 3})), -1.0f);  // (0 - 0.5) / 0.5
  EXPECT_FLOAT_EQ(static_cast<float>(t.at({0, 2, 0, 0})), -4.0f);  // (0 - 1) / 0.25
  EXPECT_THROW(parse_classify_request(R"({"images": [[1, 2, 3]]})", ApiLimits{"m", 100, 2}, r), RequestError);
  EXPECT_EQ(class_name(r, 12), "12");
  EXPECT_EQ(class_name(fashion_recipe(), 9), "Ankle boot");
  // The recipe's image keys round-trip through a file's metadata.
  const ModelRecipe back = ModelRecipe::from_metadata(r.to_metadata(), "m");
  EXPECT_EQ(back.image, r.image);
  EXPECT_EQ(back.mean, r.mean);
  EXPECT_EQ(back.stddev, r.stddev);
}

// A model file's recorded image size and classes are checked against the parameters it
// holds before a model of that size is allocated.
TEST(SavedModel, ImageSizesBeyondTheParametersAreRefused) {
  weft::testing::TempDir dir;
  ModelRecipe r;
  r.model = "mlp";
  r.image = {1, 8, 8, 3};
  Rng rng(0);
  const std::string path = dir.path() + "/m.safetensors";
  auto model = r.build(rng);
  write_file_atomic(path, encode_safetensors(model->state_dict(), r.to_metadata()));
  EXPECT_EQ(serve::load_model(path).recipe.image, r.image);
  Metadata huge = r.to_metadata();
  huge["weft_height"] = huge["weft_width"] = "60000";
  write_file_atomic(path, encode_safetensors(model->state_dict(), huge));
  try {
    serve::load_model(path);
    ADD_FAILURE() << "a 60000x60000 image model was built from an 8x8 model's parameters";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("the recorded image size needs more parameters than the file holds"),
              std::string::npos) << e.what();
  }
}

TEST(Api, ClassifyRequestsTakeArraysOrBase64AndCheckThem) {
  ApiLimits limits{"m", 100, 2};
  std::string flat = "[";
  for (int i = 0; i < 784; ++i) {
    if (i) flat += ',';
    flat += std::to_string(i % 256);
  }
  flat += "]";
  Tensor a = parse_classify_request(R"({"images": [)" + flat + "]}", limits, fashion_recipe());
  EXPECT_EQ(a.shape(), (Shape{1, 1, 28, 28}));
  // The same image in base64 (bytes 0..255, 0..255, 0..255, then 0..15).
  std::string bytes;
  for (int i = 0; i < 784; ++i) bytes += static_cast<char>(i % 256);
  const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t v = 0;
    int n = 0;
    for (; n < 3 && i + static_cast<size_t>(n) < bytes.size(); ++n) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + static_cast<size_t>(n)])) << (16 - 8 * n);
    for (int k = 0; k < 4; ++k) b64 += k <= n ? table[(v >> (18 - 6 * k)) & 63] : '=';
  }
  Tensor b = parse_classify_request(R"({"images_base64": [")" + b64 + "\"]}", limits, fashion_recipe());
  EXPECT_TRUE(ops::equal(a, b));
  auto status_of = [&](const std::string& body) {
    try {
      parse_classify_request(body, limits, fashion_recipe());
    } catch (const RequestError& e) {
      return e.status;
    }
    return 200;
  };
  EXPECT_EQ(status_of(R"({"images": [[1, 2, 3]]})"), 400);
  EXPECT_EQ(status_of(R"({"images": []})"), 400);
  EXPECT_EQ(status_of(R"({"images": [)" + flat + "," + flat + "," + flat + "]}"), 413);
  EXPECT_EQ(status_of(R"({"images_base64": ["AAAA"]})"), 400);
  EXPECT_EQ(status_of(R"({"images_base64": ["!!!!"]})"), 400);
  EXPECT_EQ(status_of(R"({})"), 400);
  std::string negative = flat;
  negative.replace(1, 1, "-1");
  EXPECT_EQ(status_of(R"({"images": [)" + negative + "]}"), 400);
}

TEST(Metrics, PrometheusTextHasHelpTypeAndCumulativeBuckets) {
  Metrics m;
  m.counter("x_total", "things");
  m.histogram("lat_seconds", "latency", {0.1, 1});
  m.add("x_total", 2, "code=\"200\"");
  m.observe("lat_seconds", 0.05);
  m.observe("lat_seconds", 0.5);
  m.observe("lat_seconds", 5);
  const std::string t = m.text();
  EXPECT_NE(t.find("# TYPE x_total counter\nx_total{code=\"200\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_bucket{le=\"0.1\"} 1\nlat_seconds_bucket{le=\"1\"} 2\nlat_seconds_bucket{le=\"+Inf\"} 3\n"),
            std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_count 3\n"), std::string::npos);
}


// Logprobs are the model's own (before the bias and penalties); the bias and the penalties
// change the choice.
TEST(Generation, LogprobsBiasAndPenalties) {
  const CharTokenizer tokenizer("abcd");
  const std::int64_t V = tokenizer.vocab_size();
  std::vector<float> logits(static_cast<std::size_t>(V), -5.0f);
  for (std::int64_t i = 0; i < 4 && i < V; ++i) logits[static_cast<std::size_t>(i)] = static_cast<float>(i);
  double lse = 0;
  for (float l : logits) lse += std::exp(static_cast<double>(l));
  lse = std::log(lse);
  GenerationOptions o;
  o.max_tokens = 3;
  o.sampling.temperature = 0;
  o.top_logprobs = 2;
  Generation plain(tokenizer, "a", o);
  plain.accept(logits.data(), V);
  ASSERT_EQ(plain.logprobs().size(), 1u);
  EXPECT_EQ(plain.logprobs()[0].token, 3);
  EXPECT_NEAR(plain.logprobs()[0].logprob, 3 - lse, 1e-9);
  ASSERT_EQ(plain.logprobs()[0].top.size(), 2u);
  EXPECT_EQ(plain.logprobs()[0].top[1].first, 2);
  EXPECT_NEAR(plain.cumulative_logprob(), 3 - lse, 1e-9);
  o.logit_bias = {{0, 10.0}};
  Generation biased(tokenizer, "a", o);
  biased.accept(logits.data(), V);
  EXPECT_EQ(biased.logprobs()[0].token, 0);
  EXPECT_NEAR(biased.logprobs()[0].logprob, 0 - lse, 1e-9);  // the model's own, not the biased one's
  o.logit_bias.clear();
  o.frequency_penalty = 2;
  Generation penalized(tokenizer, "a", o);
  for (int i = 0; i < 2; ++i) penalized.accept(logits.data(), V);
  EXPECT_EQ(penalized.completion(), (std::vector<std::int32_t>{3, 2}));  // 3 - 2 < 2
}

// The front end shows its replicas' metrics as one server's: samples summed, buckets in
// order, a stopped replica's counters and histograms kept (never going back), its gauges gone.
TEST(MetricsMerge, SumsReplicasAndKeepsAStoppedOnesCounters) {
  auto replica = [](double tokens, double queue, std::vector<double> ttft) {
    Metrics m;
    m.counter("weft_generated_tokens_total", "tokens generated");
    m.gauge("weft_queue_depth", "requests waiting");
    m.histogram("weft_time_to_first_token_seconds", "ttft", {0.01, 0.1, 1});
    m.counter("weft_requests_total", "requests");
    m.add("weft_generated_tokens_total", tokens);
    m.set("weft_queue_depth", queue);
    m.add("weft_requests_total", 1, "endpoint=\"/v1/completions\",code=\"200\"");
    for (double t : ttft) m.observe("weft_time_to_first_token_seconds", t);
    return parse_exposition(m.text());
  };
  const Exposition a = replica(100, 2, {0.005, 0.5}), b = replica(40, 1, {0.05});
  auto not_front_end = [](const std::string& family) { return family != "weft_requests_total"; };
  Exposition total;
  add_exposition(total, a, not_front_end);
  add_exposition(total, b, not_front_end);
  EXPECT_EQ(total.samples.at("weft_generated_tokens_total"), 140);
  EXPECT_EQ(total.samples.at("weft_queue_depth"), 3);
  EXPECT_EQ(total.samples.at("weft_time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(total.samples.at("weft_time_to_first_token_seconds_bucket{le=\"0.1\"}"), 2);
  EXPECT_EQ(total.samples.at("weft_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 3);
  EXPECT_EQ(total.families.count("weft_requests_total"), 0u);  // the front end's own
  const std::string text = exposition_text(total);
  EXPECT_NE(text.find("# TYPE weft_time_to_first_token_seconds histogram\n"), std::string::npos);
  EXPECT_LT(text.find("le=\"0.01\""), text.find("le=\"0.1\""));  // buckets in their order
  EXPECT_LT(text.find("le=\"1\""), text.find("le=\"+Inf\""));
  EXPECT_EQ(parse_exposition(text).samples, total.samples);  // it reads back
  // Replica b stops: its counters and histograms stay, its gauges go.
  Exposition retired;
  add_exposition(retired, b, not_front_end, true);
  Exposition shown = retired;
  add_exposition(shown, a, not_front_end);
  EXPECT_EQ(shown.samples.at("weft_generated_tokens_total"), 140);
  EXPECT_EQ(shown.samples.at("weft_queue_depth"), 2);
  EXPECT_EQ(shown.samples.at("weft_time_to_first_token_seconds_count"), 3);
  // Lines that are not samples of declared families are skipped.
  const Exposition junk = parse_exposition("garbage\nweft_unknown 3\n# TYPE x counter\nx notanumber\nx 2\n");
  EXPECT_EQ(junk.samples.size(), 1u);
  EXPECT_EQ(junk.samples.at("x"), 2);
}

}  // namespace
}  // namespace weft::serve

#include "weft/serve/chat_template.h"

using weft::serve::ChatTemplate;
using weft::serve::ChatTemplateError;

// The chat templates of Llama 3, Qwen 2 and Mistral (as their tokenizer_config.json holds
// them) render the prompts Hugging Face's apply_chat_template gives, and their checks raise
// with their own messages; whitespace follows trim_blocks and lstrip_blocks; what the subset
// lacks is refused when the template is read.
TEST(ChatTemplate, RendersTheTemplatesOfLlama3Qwen2AndMistral) {
  using nlohmann::json;
  const ChatTemplate llama3(
      R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})");
  const json chat = {{"messages", {{{"role", "system"}, {"content", "You are kind."}}, {{"role", "user"}, {"content", " Hi! "}}}},
                     {"add_generation_prompt", true}, {"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  EXPECT_EQ(llama3.render(chat),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are kind.<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");

  const ChatTemplate qwen2(
      R"({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})");
  EXPECT_EQ(qwen2.render({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"add_generation_prompt", true}}),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(qwen2.render(chat).rfind("<|im_start|>system\nYou are kind.<|im_end|>\n", 0), 0u);

  const ChatTemplate mistral(
      R"({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})");
  const json turns = {{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello"}},
                                    {{"role", "user"}, {"content", "Bye"}}}},
                      {"bos_token", "<s>"}, {"eos_token", "</s>"}};
  EXPECT_EQ(mistral.render(turns), "<s>[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]");
  try {
    mistral.render({{"messages", {{{"role", "assistant"}, {"content", "x"}}}}, {"bos_token", "<s>"}});
    ADD_FAILURE() << "no exception";
  } catch (const ChatTemplateError& e) {
    EXPECT_STREQ(e.what(), "Conversation roles must alternate user/assistant/user/assistant/...");
  }

  // trim_blocks and lstrip_blocks; '-' strips; expressions keep their spaces.
  const ChatTemplate lines("{% for m in messages %}\n  {{ m.role }}: {{ m.content }}\n{% endfor %}\n  {% if true %}x{% endif %}\n"
                           "{{- '|' -}}   \n {{ 7 // 2 }},{{ -7 % 3 }},{{ 'a' ~ 1 }},{{ [1, 2] | length }},{{ 'b' in 'abc' }},"
                           "{{ none is none }},{{ x is defined }}");
  EXPECT_EQ(lines.render({{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Yo"}}}}}),
            "  user: Hi\n  assistant: Yo\nx|3,2,a1,2,True,True,False");

  // (Jinja's own renderings, trim_blocks and lstrip_blocks on.)
  EXPECT_EQ(ChatTemplate("{% if true %}  {% endif %}|").render(json::object()), "  |");
  EXPECT_EQ(ChatTemplate("a\n  {% if true %}\n  b\n  {% endif %}\nc").render(json::object()), "a\n  b\nc");
  EXPECT_EQ(ChatTemplate("  {# c #}\nx{{ 1 }}  \n").render(json::object()), "x1  ");
  for (const char* bad : {"{{ messages | tojson }}", "{% macro f() %}{% endmacro %}", "{% set ns = namespace(a=1) %}",
                          "{{ x.strip() }}", "{% if x %}no end", "{{ 'open }}", "{% endfor %}"})
    EXPECT_THROW(ChatTemplate{bad}, ChatTemplateError) << bad;
  // A hostile template's nesting is refused, not followed down the stack.
  std::string deep_if, deep_paren = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  for (int i = 0; i < 100000; ++i) deep_if += "{% if true %}";
  EXPECT_THROW(ChatTemplate{deep_if}, ChatTemplateError);
  EXPECT_THROW(ChatTemplate{deep_paren}, ChatTemplateError);
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not -";
  EXPECT_THROW(ChatTemplate{nots + "1 }}"}, ChatTemplateError);
  // A long chain is read in linear time, and one longer than a tag may be refused.
  std::string chain = "{{ 1", longer = "{{ 1";
  for (int i = 0; i < 1000; ++i) chain += " + 1";
  for (int i = 0; i < 3000; ++i) longer += " + 1";
  EXPECT_EQ(ChatTemplate(chain + " }}").render(json::object()), "1001");
  EXPECT_THROW(ChatTemplate{longer + " }}"}, ChatTemplateError);
  // Loops are bounded in turns and in the text they make.
  EXPECT_THROW(ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}")
                   .render(json::object()),
               ChatTemplateError);
  EXPECT_THROW(ChatTemplate("{% for i in range(20000) %}{{ m }}{% endfor %}").render({{"m", std::string(1000, 'x')}}),
               ChatTemplateError);
}
