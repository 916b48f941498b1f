// Transformer layers and GPT: shapes, causality, the seed's positional-encoding vector,
// parameter counts, tied weights, gradients, and that a tiny GPT learns a sequence.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>

#include "weft/autograd/functions.h"
#include "weft/autograd/gradcheck.h"
#include "weft/nn/transformer.h"
#include "cycle_task.h"
#include "weft/tensor/ops.h"

using namespace weft;

TEST(Transformer, BookAndStandardPositionalEncodings) {
  // Seed 002 chapter 7: word 4 (1-based), d = 2: [sin 4, cos(4 / 10000)] = [-0.757, 1.0];
  // added to "clear" = [2.5, 1.0] gives [1.74, 2.0] (the book rounds to [1.7, 2.0]).
  Tensor book = sinusoidal_encoding(10, 2, Positional::kBook, DType::F64);
  EXPECT_NEAR(book.at({3, 0}), std::sin(4.0), 1e-12);
  EXPECT_NEAR(book.at({3, 1}), std::cos(4.0 / 10000.0), 1e-12);
  EXPECT_NEAR(2.5 + book.at({3, 0}), 1.7432, 1e-4);
  EXPECT_NEAR(1.0 + book.at({3, 1}), 2.0, 1e-6);
  // The second "clear" (word 10): [sin 10, cos(10 / 10000)] + [2.5, 1.0] = [1.956, 2.0].
  EXPECT_NEAR(2.5 + book.at({9, 0}), 1.9560, 1e-4);
  // Vaswani's convention (0-based, pairs share a frequency) differs: [sin 4, cos 4].
  Tensor standard = sinusoidal_encoding(10, 2, Positional::kStandard, DType::F64);
  EXPECT_NEAR(standard.at({4, 0}), std::sin(4.0), 1e-12);
  EXPECT_NEAR(standard.at({4, 1}), std::cos(4.0), 1e-12);
  EXPECT_THROW(parse_positional("alibi"), ConfigError);
}

TEST(Transformer, GptShapesParametersAndTying) {
  Rng rng(1);
  GptConfig c{50, 16, 32, 2, 4, Positional::kLearned, true};
  GPT gpt(c, rng);
  // wte + wpe + per block (2 LN, qkv, proj, fc, out) + final LN; the head is tied.
  const std::int64_t d = 32, block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d);
  EXPECT_EQ(gpt.num_parameters(), 50 * d + 16 * d + 2 * block + 2 * d);
  Tensor ids = Tensor::zeros({3, 16});
  Var logits = gpt.forward(Var(ids));
  EXPECT_EQ(logits.shape(), (Shape{3, 16, 50}));
  EXPECT_THROW(gpt.forward(Var(Tensor::zeros({1, 17}))), ConfigError);
  // The tied embedding receives gradient from both the input lookup and the head.
  cross_entropy(reshape(logits, {48, 50}), std::vector<std::int32_t>(48, 7)).backward();
  const Var wte = gpt.named_parameters()[0].second;
  EXPECT_TRUE(wte.grad().defined());
  EXPECT_GT(ops::max_abs_diff(wte.grad().select(0, 7), Tensor::zeros({d})), 0.0);  // row 7: head only
}

TEST(Transformer, AttentionIsCausal) {
  Rng rng(2);
  GPT gpt(GptConfig{20, 8, 16, 1, 2, Positional::kStandard, false}, rng);
  Tensor a = Tensor::zeros({1, 8}), b = Tensor::zeros({1, 8});
  for (std::int64_t t = 0; t < 8; ++t) {
    a.set({0, t}, static_cast<double>(t % 5));
    b.set({0, t}, t < 5 ? static_cast<double>(t % 5) : 9.0);  // differs only from position 5 on
  }
  Tensor la = gpt.forward(Var(a)).value(), lb = gpt.forward(Var(b)).value();
  EXPECT_LT(ops::max_abs_diff(la.slice(1, 0, 5), lb.slice(1, 0, 5)), 1e-6);  // earlier outputs unchanged
  EXPECT_GT(ops::max_abs_diff(la.slice(1, 5, 8), lb.slice(1, 5, 8)), 1e-4);
}

TEST(Transformer, AttentionAndBlockGradientsCheckInDouble) {
  // The composition (projections, head split, scaled scores, causal mask, softmax, merge;
  // layer norms, GELU, residuals) against finite differences, in double, through the input.
  Rng rng(3);
  BlockConfig pre_cfg;
  pre_cfg.dim = 8;
  pre_cfg.heads = 2;
  BlockConfig post_cfg = pre_cfg;
  post_cfg.pre_ln = false;
  // The Llama family's block: RMSNorm, SwiGLU, rotary embeddings, two query heads per
  // key-value head, no biases, a sliding window.
  BlockConfig llama_cfg = pre_cfg;
  llama_cfg.heads = 4;
  llama_cfg.kv_heads = 2;
  llama_cfg.norm = Norm::kRms;
  llama_cfg.mlp = Activation::kSwiGlu;
  llama_cfg.hidden = 12;
  llama_cfg.bias = llama_cfg.qkv_bias = false;
  llama_cfg.rope_theta = 10000;
  llama_cfg.window = 3;
  CausalSelfAttention attn(pre_cfg, rng);
  TransformerBlock block(pre_cfg, rng), post(post_cfg, rng), llama(llama_cfg, rng);
  for (Module* m : {static_cast<Module*>(&attn), static_cast<Module*>(&block), static_cast<Module*>(&post),
                    static_cast<Module*>(&llama)}) {
    for (auto& p : m->parameters()) {
      Var q = p;
      q.mutable_value() = q.value().to(DType::F64);
    }
  }
  Tensor x = randn({2, 5, 8}, rng, 0, 1, DType::F64);
  GradcheckResult a = gradcheck([&](const std::vector<Var>& v) { return attn.forward(v[0]); }, {x});
  EXPECT_TRUE(a.ok) << a.message;
  GradcheckResult b = gradcheck([&](const std::vector<Var>& v) { return block.forward(v[0]); }, {x});
  EXPECT_TRUE(b.ok) << b.message;
  GradcheckResult c = gradcheck([&](const std::vector<Var>& v) { return post.forward(v[0]); }, {x});
  EXPECT_TRUE(c.ok) << c.message;
  GradcheckResult l = gradcheck([&](const std::vector<Var>& v) { return llama.forward(v[0]); }, {x});
  EXPECT_TRUE(l.ok) << l.message;
  EXPECT_EQ(llama.parameters().size(), 6u);  // two norm weights, four products without biases
}

TEST(Transformer, LlamaShapedGptLearnsARepeatingSequence) {
  Rng rng(4);
  GptConfig c{6, 12, 32, 2, 4, Positional::kRotary, true};
  c.norm = Norm::kRms;
  c.mlp = Activation::kSwiGlu;
  c.kv_heads = 2;
  c.bias = c.qkv_bias = false;
  c.tied_head = false;
  GPT gpt(c, rng);
  std::vector<std::string> names;
  for (auto& [name, p] : gpt.named_parameters()) names.push_back(name);
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_EQ(std::count(names.begin(), names.end(), "wpe.weight"), 0);
  EXPECT_EQ(gpt.part_of("lm_head.weight").kind, GptPart::kFinalNorm);
  const auto [first, last] = weft::testing::train_on_cycle(gpt, 3e-3);
  EXPECT_GT(first, 1.0);
  EXPECT_LT(last, 0.1);
  auto out = gpt.generate({2, 3, 4}, 6, 0.0, 0, rng);
  EXPECT_EQ(out, (std::vector<std::int32_t>{2, 3, 4, 5, 0, 1, 2, 3, 4}));
  // A key-value head count that does not group the heads, an odd head size under rotary
  // embeddings: one-line configuration errors.
  GptConfig bad = c;
  bad.kv_heads = 3;
  EXPECT_THROW(GPT(bad, rng), ConfigError);
  bad = c;
  bad.dim = 36;
  bad.heads = 4;  // head size 9
  EXPECT_THROW(GPT(bad, rng), ConfigError);
}

TEST(Transformer, TinyGptLearnsARepeatingSequence) {
  Rng rng(4);
  GPT gpt(GptConfig{6, 12, 32, 2, 4, Positional::kLearned, true}, rng);
  const auto [first, last] = weft::testing::train_on_cycle(gpt, 3e-3);
  EXPECT_GT(first, 1.0);
  EXPECT_LT(last, 0.1);
  auto out = gpt.generate({2, 3, 4}, 6, 0.0, 0, rng);  // greedy continues the cycle
  EXPECT_EQ(out, (std::vector<std::int32_t>{2, 3, 4, 5, 0, 1, 2, 3, 4}));
}

// The model says where each parameter sits (pipelines partition by it) and names its layers
// (ZeRO-3 gathers by them); nobody else parses its parameter names.
TEST(Transformer, GptAnswersWhereEachParameterSits) {
  Rng rng(1);
  GPT gpt(GptConfig{20, 8, 16, 3, 2, Positional::kLearned, true, false}, rng);
  int embeddings = 0, norms = 0;
  std::vector<int> per_block(3, 0);
  for (const auto& [name, p] : gpt.named_parameters()) {
    const GptPart part = gpt.part_of(name);
    if (part.kind == GptPart::kEmbedding) ++embeddings;
    if (part.kind == GptPart::kFinalNorm) ++norms;
    if (part.kind == GptPart::kBlock) {
      ASSERT_TRUE(part.block >= 0 && part.block < 3) << name;
      ++per_block[static_cast<std::size_t>(part.block)];
      EXPECT_EQ(name.rfind(gpt.layer_prefixes()[static_cast<std::size_t>(part.block)], 0), 0u) << name;
    }
  }
  EXPECT_EQ(embeddings, 2);  // token and position embeddings
  EXPECT_EQ(norms, 2);       // the final layer norm's gain and bias
  EXPECT_EQ(per_block[0], per_block[1]);
  EXPECT_EQ(per_block[1], per_block[2]);
  EXPECT_EQ(gpt.part_of(GPT::tied_weight()).kind, GptPart::kEmbedding);
  EXPECT_EQ(gpt.layer_prefixes().size(), 3u);
  EXPECT_THROW(gpt.part_of("nonsense.weight"), InternalError);
}
