#include "weft/plan/estimates.h"

#include <algorithm>
#include <cmath>

#include "weft/util/error.h"

namespace weft::plan {

Precision parse_precision(const std::string& s) {
  if (s == "fp32-adam") return Precision::kFp32Adam;
  if (s == "mixed-adam") return Precision::kMixedAdam;
  if (s == "megatron-dist") return Precision::kMegatronDistributed;
  if (s == "fp16-weights") return Precision::kFp16Weights;
  throw ConfigError("unknown precision '" + s + "' (known: fp32-adam, mixed-adam, megatron-dist, fp16-weights)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32Adam: return "fp32-adam";
    case Precision::kMixedAdam: return "mixed-adam";
    case Precision::kMegatronDistributed: return "megatron-dist";
    case Precision::kFp16Weights: return "fp16-weights";
  }
  return "?";
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  throw ConfigError("unknown recomputation '" + s + "' (known: none, selective, full)");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

Offload parse_offload(const std::string& s) {
  if (s == "none") return Offload::kNone;
  if (s == "optimizer") return Offload::kOptimizer;
  if (s == "params") return Offload::kParams;
  throw ConfigError("unknown --offload '" + s + "' (known: none, optimizer, params)");
}

const char* offload_name(Offload o) {
  switch (o) {
    case Offload::kNone: return "none";
    case Offload::kOptimizer: return "optimizer";
    case Offload::kParams: return "params";
  }
  return "?";
}

double gradient_bytes(Precision p) { return p == Precision::kFp32Adam || p == Precision::kMegatronDistributed ? 4 : 2; }

bool sharded_states(Precision p, const Layout& l) { return l.zero >= 1 || p == Precision::kMegatronDistributed; }

std::int64_t bucket_parameters(const TransformerSpec& m, const Layout& l, std::int64_t layer, bool experts) {
  const ParameterCount pc = count_parameters(m);
  const bool moe = m.is_moe_layer(layer);
  if (experts) return moe ? pc.expert_params() / (static_cast<std::int64_t>(l.tp) * l.ep) : 0;
  std::int64_t n = pc.layer_without_experts(moe);
  if (layer == 0) n += pc.embedding;
  if (layer == m.layers - 1) n += pc.final_norm + pc.lm_head + (m.tied_embeddings && l.pp > 1 ? m.vocab * m.d_model : 0);
  return n / l.tp;
}

double optimizer_step_bytes(Precision p) {
  switch (p) {
    case Precision::kFp16Weights: return 0;
    case Precision::kFp32Adam: return 4 + 28 + 4;
    case Precision::kMixedAdam: return 6 + 8 + 4 + 28 + 6 + 2;
    case Precision::kMegatronDistributed: return 8 + 4 + 28 + 6 + 4;
  }
  return 0;
}

MemoryBreakdown state_memory(double psi, Precision p, const Layout& l) {
  double w = 0, g = 0, o = 0;
  // The optimizer's sharding group: data parallel, and context parallel (its GPUs hold the
  // same weights).
  const double nd = std::max(1, l.dp) * std::max(1, l.cp);
  switch (p) {
    case Precision::kFp32Adam: w = 4, g = 4, o = 8; break;
    case Precision::kMixedAdam: w = 2, g = 2, o = 12; break;
    // Megatron's distributed optimizer shards the optimizer over data parallel: it is ZeRO
    // stage 1 already, and --zero 1 does not shard it twice.
    case Precision::kMegatronDistributed: w = 2, g = 4, o = 12.0 / nd; break;
    case Precision::kFp16Weights: w = 2; break;
  }
  if (l.zero >= 1 && p != Precision::kMegatronDistributed) o /= nd;
  if (l.zero >= 2) g /= nd;
  if (l.zero >= 3) w /= nd;
  MemoryBreakdown m;
  m.parameters = psi;
  m.weights = w * psi;
  m.gradients = g * psi;
  m.optimizer = o * psi;
  return m;
}

std::vector<std::int64_t> stage_layers(const TransformerSpec& m, const Layout& l) {
  const std::int64_t L = m.layers, p = l.pp;
  if (p < 1) throw ConfigError("--pp must be at least 1");
  if (p > L) throw ConfigError("--pp " + std::to_string(p) + " exceeds the model's " + std::to_string(L) + " layers");
  std::vector<std::int64_t> layers(static_cast<std::size_t>(p));
  const bool uneven = l.first_stage_layers > 0 || l.last_stage_layers > 0;
  if (!uneven) {
    // Evenly; the remainder goes to the middle stages, so that the first (embedding) and
    // last (head) stages have the fewer layers.
    const std::int64_t base = L / p, extra = L % p;
    for (std::int64_t i = 0; i < p; ++i) layers[static_cast<std::size_t>(i)] = base;
    std::int64_t given = 0;
    for (std::int64_t i = 1; i < p - 1 && given < extra; ++i, ++given) ++layers[static_cast<std::size_t>(i)];
    for (std::int64_t i : {std::int64_t{0}, p - 1})
      if (given < extra && layers[static_cast<std::size_t>(i)] == base) ++layers[static_cast<std::size_t>(i)], ++given;
    return layers;
  }
  if (p < 3) throw ConfigError("--first-stage-layers and --last-stage-layers need --pp 3 or more");
  const std::int64_t first = l.first_stage_layers, last = l.last_stage_layers;
  if (first < 1 || last < 1) throw ConfigError("--first-stage-layers and --last-stage-layers must both be given (1 or more)");
  const std::int64_t middle = L - first - last;
  if (middle < p - 2 || middle % (p - 2) != 0)
    throw ConfigError("the " + std::to_string(middle) + " layers between the first and last stages do not divide evenly over the " +
                      std::to_string(p - 2) + " middle stages");
  for (auto& n : layers) n = middle / (p - 2);
  layers.front() = first;
  layers.back() = last;
  return layers;
}

double layer_activation_bytes(const TransformerSpec& spec, const Layout& l, bool recomputed, bool moe_layer) {
  const double s = static_cast<double>(spec.seq_len) / std::max(1, l.cp), s_keys = static_cast<double>(spec.seq_len);
  const double b = static_cast<double>(l.micro_batch), h = static_cast<double>(spec.d_model);
  const double a = static_cast<double>(spec.heads), t = l.tp;
  const double sb = s * b, split = l.sequence_parallel ? t : 1.0;  // the terms tensor parallelism alone leaves whole
  if (recomputed) return 2 * sb * h / split;
  // A GEMM's saved input: 16-bit, or 8-bit with FP8 GEMMs.
  const double gemm_in = l.fp8 ? 1 : 2, mask = spec.dropout ? 1 : 0;
  // Attention widths: queries and keys, values, the output projection's input.
  double q = h, k = static_cast<double>(spec.kv() * spec.head_dim()), v = k, o = h, latents = 0;
  if (spec.mla()) {
    q = k = a * static_cast<double>(spec.qk_nope_dim + spec.qk_rope_dim);
    v = o = a * static_cast<double>(spec.v_head_dim);
    // The latents (a norm's input and an up-projection's input each) and the rotary key.
    latents = 2 * (spec.q_lora_rank > 0 ? 2 * spec.q_lora_rank : 0) + 2 * 2 * spec.kv_lora_rank + 2 * spec.qk_rope_dim;
  }
  // Norms' inputs (2 x 2 s b h), the QKV input, the MLP input, dropout masks.
  double whole = sb * (4 * h + 2 * gemm_in * h / 2 + mask * 2 * h + latents);
  double divided = sb * (2 * q + 2 * k + 2 * v + gemm_in * o);
  const auto mlp_inner = [&](double f) { return spec.gated_ffn ? sb * f * (2 + 2 + gemm_in) : sb * f * (2 + gemm_in); };
  if (moe_layer) {
    const double routed = spec.routed_copies();
    whole += sb * h * gemm_in + 4 * sb * static_cast<double>(spec.experts);  // the MLP's input and the router's logits
    whole += routed * sb * h * gemm_in;                                       // each routed copy's input
    divided += (routed + static_cast<double>(spec.shared_experts)) * mlp_inner(static_cast<double>(spec.expert_size()));
  } else {
    whole += sb * h * gemm_in;
    divided += mlp_inner(static_cast<double>(spec.ffn_size()));
  }
  const double linear = whole / split + divided / t;
  if (l.flash_attention) return linear + 4 * a * s * b / t;
  if (l.recompute == Recompute::kSelective) return linear;
  return linear + (spec.dropout ? 5 : 2) * a * s * s_keys * b / t;
}

MemoryBreakdown training_memory(const TransformerSpec& spec, Precision p, const Layout& l) {
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.cp < 1 || l.ep < 1) throw ConfigError("tp, pp, dp, cp and ep must be at least 1");
  if (l.zero < 0 || l.zero > 3) throw ConfigError("--zero must be 0, 1, 2 or 3");
  if (l.interleave < 1) throw ConfigError("--interleave must be at least 1");
  if (l.interleave > 1 && l.first_stage_layers == 0 && l.last_stage_layers == 0 &&
      spec.layers < static_cast<std::int64_t>(l.pp) * l.interleave)
    throw ConfigError("--interleave " + std::to_string(l.interleave) + " x --pp " + std::to_string(l.pp) +
                      " chunks exceed the model's " + std::to_string(spec.layers) + " layers");
  const std::vector<std::int64_t> layers = stage_layers(spec, l);
  // Uneven stages (Llama 3's first and last one layer short: chunks of one layer, one fewer
  // there) need a layer per chunk in the largest stage.
  if (*std::max_element(layers.begin(), layers.end()) < l.interleave)
    throw ConfigError("--interleave " + std::to_string(l.interleave) + ": more chunks than the " +
                      std::to_string(*std::max_element(layers.begin(), layers.end())) + " layers of the largest pipeline stage");
  const ParameterCount c = count_parameters(spec);
  const std::int64_t pp = l.pp, m_batches = std::max<std::int64_t>(l.micro_batches, 1);
  const double s = static_cast<double>(spec.seq_len) / std::max(1, l.cp), b = static_cast<double>(l.micro_batch);
  const double h = static_cast<double>(spec.d_model), t = l.tp;
  // Korthikanti et al. 2022, 4.2.3: the interleaved schedule's first stage holds more.
  const double interleave_factor = l.interleave > 1 ? 1.0 + static_cast<double>(pp - 1) / static_cast<double>(pp * l.interleave) : 1.0;
  MemoryBreakdown best;
  double best_total = -1;
  std::int64_t first_layer = 0;
  for (std::int64_t i = 0; i < pp; ++i) {
    const std::int64_t n = layers[static_cast<std::size_t>(i)];
    // Parameters: the stage's layers (dense, or MoE with the experts split over ep), the
    // embedding on the first stage, the final norm and head (a copy of a tied embedding) on
    // the last; tensor parallelism divides them all.
    // The largest layer is what a GPU gathers or reduces at once (buffers below).
    double params = 0, layer = 0;
    for (std::int64_t k = first_layer; k < first_layer + n; ++k) {
      const bool moe_layer = spec.is_moe_layer(k);
      const double this_layer = static_cast<double>(c.layer_without_experts(moe_layer)) +
                                (moe_layer ? static_cast<double>(c.expert_params()) / l.ep : 0);
      params += this_layer;
      layer = std::max(layer, this_layer / t);
    }
    first_layer += n;
    if (i == 0) params += static_cast<double>(c.embedding);
    if (i == pp - 1) {
      params += static_cast<double>(c.final_norm + c.lm_head);
      if (spec.tied_embeddings && pp > 1) params += static_cast<double>(spec.vocab * spec.d_model);
    }
    MemoryBreakdown m = state_memory(params / t, p, l);
    m.layer_parameters = layer;
    // Activations of the micro-batches in flight.
    const double in_flight = static_cast<double>(std::min<std::int64_t>(pp - i, m_batches)) * interleave_factor;
    // Full recomputation with recompute_layers keeps only the stage's first layers' inputs.
    const std::int64_t recomputed = l.full_recompute() ? (l.recompute_layers > 0 ? std::min(l.recompute_layers, n) : n) : 0;
    double per_mb = 0, largest = 0;
    for (std::int64_t k = 0; k < n; ++k) {
      const double stored = layer_activation_bytes(spec, l, false, spec.is_moe_layer(first_layer - n + k));
      largest = std::max(largest, stored);
      per_mb += k < recomputed ? layer_activation_bytes(spec, l, true) : stored;
    }
    m.activations = per_mb * in_flight;
    if (l.full_recompute()) m.activations += largest;  // the layer being recomputed
    if (i == 0) m.activations += in_flight * s * b * h / t;  // the embedding's dropout mask (1 byte per element)
    if (i == pp - 1) m.activations += 4 * s * b * static_cast<double>(spec.vocab) / t;  // float32 logits of one micro-batch
    if (p == Precision::kFp16Weights) m.activations = 0;
    // Buffers and overheads.
    const double grad_bytes = gradient_bytes(p);
    const bool replicas = l.dp * l.cp > 1 && p != Precision::kFp16Weights;
    if (l.zero >= 3 && replicas) m.buffers = 2 * layer * 2 + layer * grad_bytes;
    else if (sharded_states(p, l) && replicas) m.buffers = layer * grad_bytes;
    else if (replicas) m.buffers = 2 * 25e6;
    // FP8 GEMMs keep an 8-bit copy of each weight and of its transpose while a step runs
    // (Transformer Engine's weight cache): of the stage's weights, or under ZeRO 3 of the
    // two gathered layers.
    if (l.fp8 && p != Precision::kFp16Weights) {
      if (l.zero >= 3 && replicas) m.buffers += 2 * 2 * layer;
      else m.weights += 2 * params / t;
    }
    if (l.offload != Offload::kNone) {
      m.host = m.optimizer;
      m.optimizer = 0;
      if (l.offload == Offload::kParams) {
        m.host += m.weights + m.gradients;
        m.weights = m.gradients = 0;
        m.buffers = std::max(m.buffers, 2 * layer * 2 + layer * grad_bytes);  // the layers it computes with
      }
      if (l.offload_nvme) std::swap(m.host, m.nvme);
    }
    m.overhead = l.runtime_bytes + l.fragmentation * (m.activations + m.buffers);
    m.stage = static_cast<int>(i);
    if (m.total() > best_total) {
      best_total = m.total();
      best = m;
    }
  }
  return best;
}

double kv_cache_bytes(const TransformerSpec& m, std::int64_t tokens, std::int64_t batch, double bytes_per_value) {
  return static_cast<double>(m.layers * m.kv_cache_values()) * static_cast<double>(tokens) *
         static_cast<double>(batch) * bytes_per_value;
}

std::int64_t min_gpus(double bytes, double gpu_bytes) {
  if (!(gpu_bytes > 0)) throw ConfigError("GPU memory must be positive");
  return static_cast<std::int64_t>(std::ceil(bytes / gpu_bytes - 1e-12));
}

TokenFlops token_flops(const TransformerSpec& m, const Layout& l) {
  const ParameterCount c = count_parameters(m);
  const double w = m.attention_width(), s = static_cast<double>(m.seq_len);
  double recomputed = 0, attention_extra = l.flash_attention ? 2 * w * s : 0;
  if (l.full_recompute()) {
    recomputed = l.recompute_layers > 0
                     ? std::min(1.0, static_cast<double>(l.recompute_layers * l.pp) / static_cast<double>(m.layers))
                     : 1.0;
    attention_extra += recomputed * 4 * w * s;
  } else if (l.recompute == Recompute::kSelective && !l.flash_attention) {
    attention_extra += 4 * w * s;
  }
  const double factor = 1 + recomputed / 3.0, attention = 12 * w * s + attention_extra;
  // Hardware FLOPs compute every capacity slot, filled or not (model FLOPs: top_k copies).
  const double moe_active = static_cast<double>(c.attention + c.norms + c.router + c.shared) +
                            m.routed_copies() * static_cast<double>(c.expert);
  TokenFlops f;
  f.dense_layer = 6 * static_cast<double>(c.block) * factor + attention;
  f.moe_layer = 6 * moe_active * factor + attention;
  f.head = 6 * static_cast<double>(m.vocab) * static_cast<double>(m.d_model);
  return f;
}

double hardware_flops_per_token(const TransformerSpec& m, const Layout& l) {
  const TokenFlops f = token_flops(m, l);
  return static_cast<double>(m.layers - m.moe_layers()) * f.dense_layer + static_cast<double>(m.moe_layers()) * f.moe_layer +
         f.head;
}

double model_flops_per_token(const TransformerSpec& m) {
  TransformerSpec useful = m;
  useful.capacity_factor = 0;  // padded capacity slots are not the model's work
  return hardware_flops_per_token(useful, Layout{});
}

double training_flops_per_token(const TransformerSpec& m, bool recompute) {
  Layout l;
  l.recompute = recompute ? Recompute::kFull : Recompute::kNone;
  return hardware_flops_per_token(m, l);
}

double training_seconds(double tokens, double parameters, double gpus, double flops_per_gpu, bool recompute) {
  if (!(gpus > 0) || !(flops_per_gpu > 0)) throw ConfigError("GPUs and FLOP/s per GPU must be positive");
  return (recompute ? 8.0 : 6.0) * tokens * parameters / (gpus * flops_per_gpu);
}

double energy_kwh(double watts, double gpus, double hours) { return watts * gpus * hours / 1000.0; }

double energy_cost(double watts, double gpus, double hours, double price) { return energy_kwh(watts, gpus, hours) * price; }

double storage_bytes_per_second(double bytes_per_flop, double flops_per_second) { return bytes_per_flop * flops_per_second; }

double dataset_bytes(double tokens, double bytes_per_token) { return tokens * bytes_per_token; }

}  // namespace weft::plan
