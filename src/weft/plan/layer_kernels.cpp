#include "weft/plan/layer_kernels.h"

#include <algorithm>
#include <cmath>

namespace weft::plan {

namespace {

Kernel gemm(const char* name, double m, double n, double k, double batch = 1, bool core = false) {
  Kernel g;
  g.name = name, g.gemm = true, g.m = m, g.n = n, g.k = k, g.batch = batch, g.attention_core = core;
  g.flops = 2 * m * n * k * batch;
  return g;
}

Kernel streaming(const char* name, double bytes, bool core = false) {
  Kernel s;
  s.name = name, s.bytes = bytes, s.attention_core = core;
  return s;
}

// A GEMM's backward: the input's gradient (m x n by n x k) and the weight's (k x m by m x n).
void add_backward(std::vector<Kernel>& out, const Kernel& g) {
  out.push_back(gemm(g.name, g.m, g.k, g.n, g.batch, g.attention_core));
  out.push_back(gemm(g.name, g.k, g.n, g.m, g.batch, g.attention_core));
}

}  // namespace

LayerKernels layer_kernels(const TransformerSpec& spec, const Layout& l, bool moe_layer) {
  const double t = l.tp, b = static_cast<double>(l.micro_batch);
  const double s_keys = static_cast<double>(spec.seq_len), s = s_keys / std::max(1, l.cp);
  const double T = s * b, h = static_cast<double>(spec.d_model);
  const double e = l.sequence_parallel ? T / t : T;  // tokens the norms and dropouts see
  const double heads = static_cast<double>(spec.heads) / t;
  // Per head: query/key and value dimensions; key-value heads on this GPU (at least one).
  double qk = static_cast<double>(spec.head_dim()), v = qk;
  double kv_heads = std::max(1.0, static_cast<double>(spec.kv()) / t);
  if (spec.mla()) {
    qk = static_cast<double>(spec.qk_nope_dim + spec.qk_rope_dim);
    v = static_cast<double>(spec.v_head_dim);
    kv_heads = heads;
  }
  const ParameterCount c = count_parameters(spec);
  const double out_width = heads * v;  // the output projection's input on this GPU
  // Every projection into the attention as one GEMM of the width its parameters give.
  const double in_width = (static_cast<double>(c.attention) / t - out_width * h) / h;
  const bool gpt = spec.dropout, flash = l.flash_attention;
  LayerKernels k;
  std::vector<Kernel>& f = k.forward;
  f.push_back(streaming("norm", 4 * e * h));
  f.push_back(gemm("qkv", T, in_width, h));
  if (!spec.learned_positions) f.push_back(streaming("rotary", 4 * T * (heads + kv_heads) * qk));
  const double scores = b * heads * s * s_keys;  // elements of the s x s scores on this GPU
  if (flash) {
    // FlashAttention over the causal half: 2 s s' (qk + v) FLOPs per head, halved.
    Kernel a = streaming("flash attention", 0, true);
    a.flops = b * heads * s * s_keys * 2 * (qk + v) / 2;
    f.push_back(a);
  } else {
    f.push_back(gemm("scores", s, s_keys, qk, b * heads, true));
    f.push_back(streaming("softmax", 4 * scores, true));  // fused scale, mask and softmax
    if (gpt) f.push_back(streaming("attention dropout", 5 * scores, true));
    f.push_back(gemm("attention x values", s, v, s_keys, b * heads, true));
  }
  f.push_back(gemm("output", T, h, out_width));
  f.push_back(streaming(gpt ? "bias-dropout-add" : "residual add", (gpt ? 7 : 6) * e * h));
  f.push_back(streaming("norm", 4 * e * h));
  // The MLP: dense, or a MoE layer's routed experts (each GPU's tokens spread evenly over its
  // experts, a grouped GEMM) and shared experts.
  std::vector<std::pair<double, double>> mlps;  // (tokens, hidden width on this GPU) per GEMM group
  double groups = 1;
  if (moe_layer) {
    const double local_experts = std::max(1.0, static_cast<double>(spec.experts) / l.ep);
    groups = local_experts;
    mlps.push_back({T * spec.routed_copies() / local_experts, static_cast<double>(spec.expert_size()) / t});
    if (spec.shared_experts > 0)
      mlps.push_back({T, static_cast<double>(spec.expert_size() * spec.shared_experts) / t});
  } else {
    mlps.push_back({T, static_cast<double>(spec.ffn_size()) / t});
  }
  for (std::size_t i = 0; i < mlps.size(); ++i) {
    const auto [tokens, width] = mlps[i];
    const double batch = i == 0 ? groups : 1;
    f.push_back(gemm("mlp up", tokens, (spec.gated_ffn ? 2 : 1) * width, h, batch));
    f.push_back(streaming(spec.gated_ffn ? "swiglu" : "bias-gelu", (spec.gated_ffn ? 6 : 4) * tokens * width * batch));
    f.push_back(gemm("mlp down", tokens, h, width, batch));
  }
  f.push_back(streaming(gpt ? "bias-dropout-add" : "residual add", (gpt ? 7 : 6) * e * h));
  // Backward: each GEMM twice, FlashAttention 2.5 times its forward FLOPs (the scores
  // recomputed), each memory-bound operation twice its bytes (the saved input and the
  // incoming gradient read, the gradient written).
  for (const Kernel& x : f) {
    if (x.gemm) {
      add_backward(k.backward, x);
    } else if (x.flops > 0) {
      Kernel a = x;
      a.flops *= 2.5;
      k.backward.push_back(a);
    } else {
      k.backward.push_back(streaming(x.name, 2 * x.bytes, x.attention_core));
    }
  }
  return k;
}

LayerKernels head_kernels(const TransformerSpec& spec, const Layout& l) {
  const double T = static_cast<double>(spec.seq_len) / std::max(1, l.cp) * static_cast<double>(l.micro_batch);
  const double h = static_cast<double>(spec.d_model), V = static_cast<double>(spec.vocab) / l.tp;
  LayerKernels k;
  k.forward.push_back(streaming("final norm", 4 * (l.sequence_parallel ? T / l.tp : T) * h));
  const Kernel logits = gemm("head", T, V, h);
  k.forward.push_back(logits);
  // Cross-entropy in float32 over the vocabulary's share: the logits read, the softmax
  // written and read back, the gradient written.
  k.forward.push_back(streaming("cross entropy", 10 * T * V));
  add_backward(k.backward, logits);
  k.backward.push_back(streaming("final norm", 8 * (l.sequence_parallel ? T / l.tp : T) * h));
  return k;
}

double gemm_shape_efficiency(const Kernel& g, const KernelRates& r) {
  // cuBLAS picks a tile shape per GEMM: the best of the common ones. A tile occupies one SM;
  // the last wave of tiles leaves SMs idle, and edge tiles compute padding.
  double best = 0;
  for (const auto& [tm, tn] : {std::pair{256.0, 128.0}, std::pair{128.0, 256.0}, std::pair{128.0, 128.0}, std::pair{64.0, 64.0}}) {
    const double tiles = std::ceil(g.m / tm) * std::ceil(g.n / tn) * g.batch;
    const double waves = std::ceil(tiles / r.sms);
    // Smaller tiles reuse operands less: 128 x 128 reaches 90% of the large tiles' rate, 64 x 64 60%.
    const double tile_rate = tm * tn >= 256 * 128 ? 1.0 : tm * tn >= 128 * 128 ? 0.9 : 0.6;
    best = std::max(best, tile_rate * g.m * g.n * g.batch / (waves * r.sms * tm * tn));
  }
  // A short inner dimension spends a larger share of each tile on loading and storing it.
  return r.gemm_efficiency * best * g.k / (g.k + 64);
}

double kernel_seconds(const Kernel& k, const KernelRates& r) {
  constexpr double kLaunch = 4e-6;  // a kernel's launch, as PyTorch issues it
  // Bytes at the bandwidth's share (none given: memory is not what bounds).
  const double bandwidth = r.memory_bandwidth * r.memory_efficiency;
  const auto streamed = [&](double bytes) { return bandwidth > 0 ? bytes / bandwidth : 0.0; };
  if (k.gemm) {
    const double peak = r.fp8_peak_flops > 0 && !k.attention_core ? r.fp8_peak_flops : r.peak_flops;
    const double moved = 2 * (k.m * k.k + k.k * k.n + k.m * k.n) * k.batch;
    return kLaunch + std::max(k.flops / (peak * gemm_shape_efficiency(k, r)), streamed(moved));
  }
  if (k.flops > 0) return kLaunch + k.flops / (r.peak_flops * r.attention_efficiency);
  return kLaunch + streamed(k.bytes);
}

double kernels_seconds(const std::vector<Kernel>& ks, const KernelRates& r, bool attention_core_only) {
  double t = 0;
  for (const Kernel& k : ks)
    if (!attention_core_only || k.attention_core) t += kernel_seconds(k, r);
  return t;
}

LayerTime layer_time(const TransformerSpec& m, const Layout& l, const KernelRates& r, bool moe_layer) {
  const LayerKernels k = layer_kernels(m, l, moe_layer);
  LayerTime t;
  t.forward = kernels_seconds(k.forward, r);
  t.backward = kernels_seconds(k.backward, r);
  if (l.full_recompute()) {
    const double share = l.recompute_layers > 0 ? std::min(1.0, static_cast<double>(l.recompute_layers * l.pp) /
                                                                    static_cast<double>(m.layers))
                                                : 1.0;
    t.recompute = share * t.forward;
  } else if (l.recompute == Recompute::kSelective && !l.flash_attention) {
    t.recompute = kernels_seconds(k.forward, r, true);
  }
  const auto streamed = [&](const std::vector<Kernel>& ks, bool core_only) {
    double sum = 0;
    for (const Kernel& x : ks)
      if (!x.gemm && x.flops == 0 && (!core_only || x.attention_core)) sum += kernel_seconds(x, r);
    return sum;
  };
  t.memory_bound = streamed(k.forward, false) + streamed(k.backward, false);
  if (l.full_recompute()) t.memory_bound += t.recompute / t.forward * streamed(k.forward, false);
  else if (t.recompute > 0) t.memory_bound += streamed(k.forward, true);
  return t;
}

}  // namespace weft::plan
