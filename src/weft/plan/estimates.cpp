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

MemoryBreakdown state_memory(double psi, Precision p, const Layout& l) {
  double w = 0, g = 0, o = 0;
  switch (p) {
    case Precision::kFp32Adam: w = 4, g = 4, o = 8; break;
    case Precision::kMixedAdam: w = 2, g = 2, o = 12; break;
    case Precision::kMegatronDistributed: w = 2, g = 4, o = 12.0 / std::max(1, l.dp); break;
    case Precision::kFp16Weights: w = 2; break;
  }
  const double nd = std::max(1, l.dp);
  if (l.zero >= 1) o /= nd;
  if (l.zero >= 2) g /= nd;
  if (l.zero >= 3) w /= nd;
  MemoryBreakdown m;
  m.parameters = psi;
  m.weights = w * psi;
  m.gradients = g * psi;
  m.optimizer = o * psi;
  return m;
}

MemoryBreakdown training_memory(const TransformerSpec& spec, Precision p, const Layout& l) {
  if (l.tp < 1 || l.pp < 1 || l.dp < 1) throw ConfigError("tp, pp and dp must be at least 1");
  if (l.zero < 0 || l.zero > 3) throw ConfigError("--zero must be 0, 1, 2 or 3");
  if (l.pp > spec.layers) throw ConfigError("--pp " + std::to_string(l.pp) + " exceeds the model's " +
                                            std::to_string(spec.layers) + " layers");
  ParameterCount c = count_parameters(spec);
  const std::int64_t layers_per_stage = (spec.layers + l.pp - 1) / l.pp;
  // The first stage: its blocks and the embedding (and the head and final norm when pp = 1).
  double stage = static_cast<double>(layers_per_stage * c.block + c.embedding);
  if (l.pp == 1) stage += static_cast<double>(c.lm_head + c.final_norm);
  MemoryBreakdown m = state_memory(stage / l.tp, p, l);
  // Activations (16-bit).
  const double s = static_cast<double>(spec.seq_len), b = static_cast<double>(l.micro_batch);
  const double h = static_cast<double>(spec.d_model), a = static_cast<double>(spec.heads), t = l.tp;
  double per_layer;
  if (l.recompute) {
    per_layer = 2 * s * b * h / (l.sequence_parallel ? t : 1.0);
  } else if (l.sequence_parallel) {
    per_layer = s * b * h * (34 + 5 * a * s / h) / t;
  } else {
    per_layer = s * b * h * (10 + 24 / t + 5 * a * s / (h * t));
  }
  const double in_flight = static_cast<double>(std::min<std::int64_t>(l.pp, std::max<std::int64_t>(l.micro_batches, 1)));
  m.activations = per_layer * static_cast<double>(layers_per_stage) * in_flight;
  if (l.recompute) {  // plus one layer's full activations while it is recomputed
    m.activations += s * b * h * (10 + 24 / t + 5 * a * s / (h * t));
  }
  if (p == Precision::kFp16Weights) m.activations = 0;
  return m;
}

double kv_cache_bytes(const TransformerSpec& m, std::int64_t tokens, std::int64_t batch, double bytes_per_value) {
  return 2.0 * static_cast<double>(m.layers * m.kv() * m.head_dim()) * static_cast<double>(tokens) *
         static_cast<double>(batch) * bytes_per_value;
}

std::int64_t min_gpus(double bytes, double gpu_bytes) {
  if (!(gpu_bytes > 0)) throw ConfigError("GPU memory must be positive");
  return static_cast<std::int64_t>(std::ceil(bytes / gpu_bytes - 1e-12));
}

double training_flops_per_token(const TransformerSpec& m, bool recompute) {
  const double n = static_cast<double>(count_parameters(m).total);
  const double attention = 12.0 * static_cast<double>(m.layers * m.d_model * m.seq_len);
  return recompute ? 8 * n + attention * 4.0 / 3.0 : 6 * n + attention;
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
