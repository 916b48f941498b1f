#include "weft/plan/model_spec.h"

#include "weft/util/checked.h"
#include "weft/util/error.h"

namespace weft::plan {

void check_shape(const TransformerSpec& m, int tp) {
  if (m.d_model % m.heads != 0) throw ConfigError("--d-model must be divisible by --heads");
  if (m.kv() > m.heads || m.heads % m.kv() != 0) {
    throw ConfigError("--kv-heads " + std::to_string(m.kv()) + " must divide the " + std::to_string(m.heads) +
                      " attention heads (grouped-query attention shares each key-value head among query heads)");
  }
  if (m.moe() && (m.top_k < 1 || m.top_k > m.experts))
    throw ConfigError("--top-k " + std::to_string(m.top_k) + " must be in 1.." + std::to_string(m.experts) + " (the experts)");
  if (m.mla() && (m.qk_nope_dim < 1 || m.qk_rope_dim < 0 || m.v_head_dim < 1 || m.q_lora_rank < 0))
    throw ConfigError("multi-head latent attention needs --qk-nope-dim and --v-head-dim (1 or more)");
  if (m.dense_layers < 0 || m.dense_layers > m.layers)
    throw ConfigError("--dense-layers must be in 0.." + std::to_string(m.layers));
  if (m.heads % tp != 0) {
    throw ConfigError("--tp " + std::to_string(tp) + " must divide the " + std::to_string(m.heads) +
                      " attention heads (tensor parallelism splits the heads among the GPUs)");
  }
}

// Checked: model dimensions come from flags (--layers, --vocab, --ffn near 2^63 must be
// refused, not wrapped into a negative count).
ParameterCount count_parameters(const TransformerSpec& m) {
  ParameterCount c;
  const std::string what = "the parameter count of these model dimensions";
  auto mul = [&](std::int64_t a, std::int64_t b) { return checked_mul(a, b, what); };
  auto add = [&](std::int64_t a, std::int64_t b) { return checked_add(a, b, what); };
  const std::int64_t d = m.d_model, kvd = mul(m.kv(), m.head_dim()), f = m.ffn_size();
  c.embedding = add(mul(m.vocab, d), m.learned_positions ? mul(m.seq_len, d) : 0);
  // Q and O are d x d; K and V are d x (kv heads x head dim).
  c.attention = add(add(mul(2, mul(d, d)), mul(2, mul(d, kvd))), m.biases ? add(mul(2, d), mul(2, kvd)) : 0);
  if (m.mla()) {
    // Queries: d -> q_lora_rank (normed) -> heads x (nope + rope), or d -> heads x (nope + rope);
    // keys and values: d -> kv_lora_rank (normed) + rope, the latent -> heads x (nope + v);
    // output: heads x v -> d (DeepSeek-V2, section 2.1).
    const std::int64_t H = m.heads, qk = add(m.qk_nope_dim, m.qk_rope_dim);
    const std::int64_t q = m.q_lora_rank > 0 ? add(add(mul(d, m.q_lora_rank), m.q_lora_rank), mul(m.q_lora_rank, mul(H, qk)))
                                             : mul(d, mul(H, qk));
    const std::int64_t kv = add(add(mul(d, add(m.kv_lora_rank, m.qk_rope_dim)), m.kv_lora_rank),
                                mul(m.kv_lora_rank, mul(H, add(m.qk_nope_dim, m.v_head_dim))));
    c.attention = add(add(q, kv), mul(mul(H, m.v_head_dim), d));
  }
  auto mlp = [&](std::int64_t hidden) { return add(mul(m.gated_ffn ? 3 : 2, mul(d, hidden)), m.biases ? add(hidden, d) : 0); };
  c.ffn = mlp(f);
  const std::int64_t norm = m.layer_norm ? mul(2, d) : d;
  c.norms = mul(2, norm);
  c.block = add(add(c.attention, c.ffn), c.norms);
  c.final_norm = norm;
  c.lm_head = m.tied_embeddings ? 0 : mul(m.vocab, d);
  const std::int64_t outside = add(add(c.embedding, c.final_norm), c.lm_head);
  if (!m.moe()) {
    c.blocks = mul(c.block, m.layers);
    c.total = add(outside, c.blocks);
    c.active = c.total;
    return c;
  }
  c.router = mul(d, m.experts);
  c.expert = mlp(m.expert_size());
  c.shared = mul(m.shared_experts, c.expert);
  c.moe_block = add(add(add(add(c.attention, c.norms), c.router), c.shared), mul(m.experts, c.expert));
  const std::int64_t moe_active = add(add(add(add(c.attention, c.norms), c.router), c.shared), mul(m.top_k, c.expert));
  c.blocks = add(mul(c.block, m.dense_layers), mul(c.moe_block, m.moe_layers()));
  c.total = add(outside, c.blocks);
  c.active = add(add(outside, mul(c.block, m.dense_layers)), mul(moe_active, m.moe_layers()));
  return c;
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names{"gpt2-124m",   "gpt3-175b",    "llama3-8b",  "llama3-70b",
                                              "llama3-405b", "mixtral-8x7b", "deepseek-v3"};
  return names;
}

TransformerSpec preset(const std::string& name) {
  TransformerSpec m;
  m.name = name;
  if (name == "gpt2-124m") {
    m.layers = 12, m.d_model = 768, m.heads = 12, m.vocab = 50257, m.seq_len = 1024;
    return m;
  }
  if (name == "gpt3-175b") {  // Brown et al. 2020, table 2.1
    m.layers = 96, m.d_model = 12288, m.heads = 96, m.vocab = 50257, m.seq_len = 2048;
    return m;
  }
  auto llama = [&](std::int64_t layers, std::int64_t d, std::int64_t heads, std::int64_t ffn) {
    m.layers = layers, m.d_model = d, m.heads = heads, m.kv_heads = 8, m.ffn = ffn;
    m.vocab = 128256, m.seq_len = 8192, m.tied_embeddings = false, m.learned_positions = false;
    m.gated_ffn = true, m.biases = false, m.layer_norm = false, m.dropout = false;
    return m;
  };
  // The Llama 3 herd of models (2024), table 3.
  if (name == "llama3-8b") return llama(32, 4096, 32, 14336);
  if (name == "llama3-70b") return llama(80, 8192, 64, 28672);
  if (name == "llama3-405b") return llama(126, 16384, 128, 53248);
  if (name == "mixtral-8x7b") {  // Jiang et al. 2024 (Mixtral of experts), table 1: 8 experts, top 2
    llama(32, 4096, 32, 14336);
    m.vocab = 32000, m.seq_len = 32768, m.experts = 8, m.top_k = 2;
    return m;
  }
  if (name == "deepseek-v3") {  // DeepSeek-AI 2024 (DeepSeek-V3 technical report), section 4.2
    llama(61, 7168, 128, 18432);
    m.kv_heads = 0, m.vocab = 129280, m.seq_len = 4096;
    m.experts = 256, m.top_k = 8, m.expert_ffn = 2048, m.shared_experts = 1, m.dense_layers = 3;
    m.q_lora_rank = 1536, m.kv_lora_rank = 512, m.qk_nope_dim = 128, m.qk_rope_dim = 64, m.v_head_dim = 128;
    return m;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown model '" + name + "' (presets: " + known + "; or give --layers --d-model --heads ...)");
}

}  // namespace weft::plan
