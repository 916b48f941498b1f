#include "weft/plan/inference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "weft/util/error.h"

namespace weft::plan {

double precision_bytes(const std::string& name, const char* flag) {
  if (name == "fp32") return 4;
  if (name == "bf16" || name == "fp16") return 2;
  if (name == "fp8" || name == "int8") return 1;
  if (name == "int4") return 0.5;
  throw ConfigError(std::string(flag) + " '" + name + "' is not one of fp32, bf16, fp16, fp8, int8, int4");
}

InferenceReport plan_inference(const InferenceInput& in) {
  const TransformerSpec& m = in.model;
  check_shape(m, in.tp);
  if (in.pp < 1 || in.pp > m.layers)
    throw ConfigError("--pp " + std::to_string(in.pp) + " must be in 1.." + std::to_string(m.layers) + " (the layers)");
  if (in.batch < 1) throw ConfigError("--batch must be at least 1");
  InferenceReport r;
  r.input = in;
  const std::int64_t context = in.context > 0 ? in.context : m.seq_len;
  const std::int64_t prompt = in.prompt > 0 ? in.prompt : std::max<std::int64_t>(1, context / 2);
  if (prompt > context) throw ConfigError("--prompt " + std::to_string(prompt) + " exceeds the context of " + std::to_string(context));
  r.input.context = context;
  r.input.prompt = prompt;
  const ParameterCount c = count_parameters(m);
  r.parameters = static_cast<double>(c.total);
  r.active_parameters = static_cast<double>(c.active);
  // The largest stage's share: its layers, and the embedding (first stage) or the head
  // (last stage; a tied head is a copy of the embedding) whichever is larger.
  const double per_layer = static_cast<double>(c.blocks) / static_cast<double>(m.layers);
  const double stage_layers = std::ceil(static_cast<double>(m.layers) / in.pp);
  const double head = static_cast<double>(c.lm_head ? c.lm_head : m.vocab * m.d_model) + static_cast<double>(c.final_norm);
  const double stage_params =
      in.pp == 1 ? r.parameters : stage_layers * per_layer + std::max(static_cast<double>(c.embedding), head);
  r.weights_per_gpu = stage_params / in.tp * in.weight_bytes;
  // The cache: a tensor-parallel GPU holds kv_heads / tp heads (at least one: a head is not split).
  // (MLA's latent is shared by the heads: every tensor-parallel GPU keeps all of it.)
  const double kv_heads_per_gpu = std::max(1.0, static_cast<double>(m.kv()) / in.tp);
  r.kv_per_token = m.mla() ? stage_layers * static_cast<double>(m.kv_cache_values()) * in.kv_bytes
                           : 2 * stage_layers * kv_heads_per_gpu * static_cast<double>(m.head_dim()) * in.kv_bytes;
  r.kv_per_gpu = r.kv_per_token * static_cast<double>(context) * static_cast<double>(in.batch);
  r.total_per_gpu = r.weights_per_gpu + r.kv_per_gpu;
  r.fits = r.total_per_gpu <= in.gpu.memory_bytes;
  const double free_bytes = in.gpu.memory_bytes - r.weights_per_gpu;
  r.max_batch = free_bytes > 0 ? static_cast<std::int64_t>(free_bytes / (r.kv_per_token * static_cast<double>(context))) : 0;
  r.max_context = free_bytes > 0 ? static_cast<std::int64_t>(free_bytes / (r.kv_per_token * static_cast<double>(in.batch))) : 0;

  // Prefill: every layer's forward over the batch's prompts, kernel by kernel
  // (layer_kernels.h: FlashAttention over the causal half), and its two tensor-parallel
  // all-reduces; the stages one after another.
  Layout l;
  l.tp = in.tp;
  l.micro_batch = in.batch;
  l.flash_attention = true;
  Rate rate;
  rate.kernels.peak_flops = in.gpu.peak_flops;
  rate.kernels.memory_bandwidth = in.gpu.memory_bandwidth;
  rate.kernels.sms = in.gpu.sms;
  rate.kernels.gemm_efficiency = in.gemm_efficiency;
  rate.kernels.attention_efficiency = in.attention_efficiency;
  if (in.fp8) {
    if (!(in.gpu.peak_fp8_flops > 0)) throw ConfigError("--fp8: the " + in.gpu.name + " has no FP8 tensor cores");
    rate.kernels.fp8_peak_flops = in.gpu.peak_fp8_flops;
  }
  const double d = m.attention_width(), L = static_cast<double>(m.layers), B = static_cast<double>(in.batch);
  const double p = static_cast<double>(prompt), ctx = static_cast<double>(context);
  TransformerSpec prompt_shape = m;
  prompt_shape.seq_len = prompt;
  const KernelRates& kr = rate.kernels;
  const LinkClass& link = in.tp <= in.cluster.gpus_per_node ? in.cluster.nvlink : in.cluster.rail;
  const double prefill_comm = in.tp > 1 ? 2 * ring_allreduce_seconds(B * p * static_cast<double>(m.d_model) * 2, in.tp, link) : 0;
  r.prefill_s = 0;
  for (std::int64_t layer = 0; layer < m.layers; ++layer)
    r.prefill_s += kernels_seconds(layer_kernels(prompt_shape, l, m.is_moe_layer(layer)).forward, kr) + prefill_comm;
  // Decode's compute at the kernel rate of the model's training shape (a bound beside the
  // bytes it reads: decode is memory-bound but for large batches).
  const double kernel = predicted_kernel_flops(m, l, rate);
  // Decode, one step at the full context: every weight of the stage read once (the experts
  // the batch's B x top_k choices reach: E (1 - (1 - k/E)^B) of them on average), the cache
  // of the batch, and 2 N + 4 L d ctx FLOPs per sequence.
  double weights_read = r.weights_per_gpu * in.pp;  // all stages
  if (m.moe()) {
    const double E = static_cast<double>(m.experts), k = static_cast<double>(m.top_k);
    const double reached = E * (1 - std::pow(1 - k / E, B));
    const double expert_bytes = static_cast<double>(c.expert) * static_cast<double>(m.moe_layers()) / in.tp * in.weight_bytes;
    weights_read -= expert_bytes * (E - reached);
  }
  const double bandwidth = in.gpu.memory_bandwidth * in.bandwidth_efficiency;
  r.decode_memory_s = (weights_read + r.kv_per_gpu * in.pp) / bandwidth;
  r.decode_compute_s = B * (2 * r.active_parameters + 4 * L * d * ctx) / (in.tp * kernel);
  if (in.tp > 1) r.decode_comm_s = 2 * L * ring_allreduce_seconds(B * d * 2, in.tp, link);
  r.decode_bound = r.decode_memory_s >= r.decode_compute_s ? "memory" : "compute";
  r.decode_step_s = std::max(r.decode_memory_s, r.decode_compute_s) + r.decode_comm_s;
  r.tokens_per_second = B / r.decode_step_s;
  r.time_to_first_token_s = r.prefill_s + r.decode_step_s;
  return r;
}

namespace {
std::string gb(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}
}  // namespace

std::string InferenceReport::to_text() const {
  const InferenceInput& in = input;
  char buf[512];
  std::string out;
  auto line = [&](const char* fmt, auto... args) {
    if constexpr (sizeof...(args) == 0) {
      out += fmt;  // a line without fields is printed as it is
    } else {
      std::snprintf(buf, sizeof buf, fmt, args...);
      out += buf;
    }
    out += "\n";
  };
  if (active_parameters < parameters)
    line("model        %s: %.2fB parameters, %.2fB active per token", in.model.name.c_str(), parameters / 1e9,
         active_parameters / 1e9);
  else
    line("model        %s: %.2fB parameters", in.model.name.c_str(), parameters / 1e9);
  line("serving      %d GPU(s) = tensor %d x pipeline %d of %s; weights %.1f bytes, cache %.1f bytes per value",
       in.tp * in.pp, in.tp, in.pp, in.gpu.name.c_str(), in.weight_bytes, in.kv_bytes);
  line("memory/GPU   weights %s + cache %s (%lld sequences x %lld tokens, %.0f KB per token) = %s of %s: %s",
       gb(weights_per_gpu).c_str(), gb(kv_per_gpu).c_str(), static_cast<long long>(in.batch),
       static_cast<long long>(in.context), kv_per_token / 1e3, gb(total_per_gpu).c_str(), gb(in.gpu.memory_bytes).c_str(),
       fits ? "fits" : "does NOT fit");
  line("             at most %lld sequences of %lld tokens, or %lld tokens per sequence for %lld",
       static_cast<long long>(max_batch), static_cast<long long>(in.context), static_cast<long long>(max_context),
       static_cast<long long>(in.batch));
  line("prefill      %lld-token prompts: %.3f s for the batch", static_cast<long long>(in.prompt), prefill_s);
  line("decode       %.2f ms per step (%s-bound: memory %.2f ms, compute %.2f ms, all-reduces %.2f ms): %.0f tokens/s, "
       "%.1f per sequence", 1e3 * decode_step_s, decode_bound.c_str(), 1e3 * decode_memory_s, 1e3 * decode_compute_s,
       1e3 * decode_comm_s, tokens_per_second, tokens_per_second / static_cast<double>(in.batch));
  line("             time to first token %.3f s", time_to_first_token_s);
  out += "assumptions\n";
  line("  - decode: HBM at %.0f%% of %.2f TB/s; prefill kernel by kernel, large GEMMs at %.0f%% of %.0f TFLOP/s (less as "
       "their shape leaves SMs idle), FlashAttention at %.0f%%; no allowance for activations or the runtime (leave headroom)",
       100 * in.bandwidth_efficiency, in.gpu.memory_bandwidth / 1e12, 100 * in.gemm_efficiency, in.gpu.peak_flops / 1e12,
       100 * in.attention_efficiency);
  line("  - the pipeline's stages run one after another for a step (no micro-batching across stages)");
  return out;
}

nlohmann::json InferenceReport::to_json() const {
  const InferenceInput& in = input;
  return {{"kind", "inference"},
          {"model", in.model.name},
          {"parameters", parameters},
          {"active_parameters", active_parameters},
          {"gpu", in.gpu.name},
          {"tp", in.tp},
          {"pp", in.pp},
          {"weight_bytes", in.weight_bytes},
          {"kv_bytes", in.kv_bytes},
          {"context", in.context},
          {"prompt", in.prompt},
          {"batch", in.batch},
          {"memory_per_gpu", {{"weights", weights_per_gpu}, {"kv_cache", kv_per_gpu}, {"kv_per_token", kv_per_token},
                              {"total", total_per_gpu}, {"capacity", in.gpu.memory_bytes}, {"fits", fits}}},
          {"max_batch", max_batch},
          {"max_context", max_context},
          {"prefill_seconds", prefill_s},
          {"decode", {{"step_seconds", decode_step_s}, {"memory_seconds", decode_memory_s},
                      {"compute_seconds", decode_compute_s}, {"allreduce_seconds", decode_comm_s}, {"bound", decode_bound},
                      {"tokens_per_second", tokens_per_second}}},
          {"time_to_first_token_seconds", time_to_first_token_s}};
}

}  // namespace weft::plan
