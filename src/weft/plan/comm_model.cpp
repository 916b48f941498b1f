#include "weft/plan/comm_model.h"

#include <algorithm>

#include "weft/util/error.h"

namespace weft::plan {

double ring_allreduce_seconds(double bytes, int n, const LinkClass& link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * link.latency_s + 2.0 * (n - 1) / n * bytes / link.bytes_per_second;
}

double ring_half_seconds(double bytes, int n, const LinkClass& link) {
  if (n <= 1) return 0;
  return (n - 1) * link.latency_s + static_cast<double>(n - 1) / n * bytes / link.bytes_per_second;
}

double bubble_fraction(int stages, std::int64_t micro_batches) {
  if (stages < 1 || micro_batches < 1) throw ConfigError("stages and micro-batches must be at least 1");
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

IterationEstimate estimate_iteration(const TransformerSpec& m, Precision p, const Layout& l, const Cluster& c,
                                     std::int64_t global_batch, double flops_per_gpu) {
  if (global_batch < 1) throw ConfigError("--global-batch must be at least 1");
  if (!(flops_per_gpu > 0)) throw ConfigError("achieved FLOP/s must be positive");
  IterationEstimate e;
  const std::int64_t per_pipeline = std::max<std::int64_t>(1, global_batch / l.dp);
  const std::int64_t micro = std::max<std::int64_t>(1, per_pipeline / l.micro_batch);
  const double s = static_cast<double>(m.seq_len), b = static_cast<double>(l.micro_batch), h = static_cast<double>(m.d_model);
  const std::int64_t layers_per_stage = (m.layers + l.pp - 1) / l.pp;
  const double activation_bytes = s * b * h * 2;  // one micro-batch's hidden states, 16-bit
  // Tensor parallelism (Megatron): 2 all-reduces of the activations per layer in forward and 2
  // in backward (with sequence parallelism: all-gather + reduce-scatter, the same bytes); inside
  // the NVLink domain when tp fits in a node.
  const LinkClass& tp_link = l.tp <= c.gpus_per_node ? c.nvlink : c.rail;
  const double tp_ops = 4.0 * static_cast<double>(layers_per_stage * micro);
  e.tensor.link = l.tp <= c.gpus_per_node ? "nvlink" : "rail";
  if (l.tp > 1) {
    e.tensor.bytes = tp_ops * 2.0 * (l.tp - 1) / l.tp * activation_bytes;
    e.tensor.seconds = tp_ops * ring_allreduce_seconds(activation_bytes, l.tp, tp_link);
  }
  // Pipeline: each micro-batch's activations forward and gradients backward, point to point,
  // across nodes over the rails.
  e.pipeline.link = "rail";
  if (l.pp > 1) {
    e.pipeline.bytes = 2.0 * static_cast<double>(micro) * activation_bytes / l.tp;
    e.pipeline.seconds = 2.0 * static_cast<double>(micro) * (c.rail.latency_s + activation_bytes / l.tp / c.rail.bytes_per_second);
  }
  // Data parallelism: the gradients of this GPU's parameters, all-reduced (or reduce-scatter +
  // all-gather with ZeRO 1 and 2: the same bytes; ZeRO 3 adds the parameter all-gathers of
  // forward and backward: 1.5x), over the rails.
  e.data.link = "rail";
  if (l.dp > 1) {
    ParameterCount pc = count_parameters(m);
    const double params = static_cast<double>(layers_per_stage * pc.block + pc.embedding) / l.tp;
    const double grad_bytes = params * (p == Precision::kFp32Adam || p == Precision::kMegatronDistributed ? 4.0 : 2.0);
    const double factor = l.zero >= 3 ? 1.5 : 1.0;
    e.data.bytes = factor * 2.0 * (l.dp - 1) / l.dp * grad_bytes;
    e.data.seconds = factor * ring_allreduce_seconds(grad_bytes, l.dp, c.rail);
  }
  // Compute: FLOPs of the iteration spread over every GPU.
  const double tokens = static_cast<double>(global_batch) * s;
  e.compute_s = tokens * training_flops_per_token(m, l.recompute) / (static_cast<double>(l.gpus()) * flops_per_gpu);
  e.bubble = bubble_fraction(l.pp, micro);
  e.bubble_s = e.compute_s * e.bubble / (1.0 - e.bubble);
  e.iteration_no_overlap_s = e.compute_s + e.bubble_s + e.tensor.seconds + e.pipeline.seconds + e.data.seconds;
  // Overlap: the data-parallel all-reduce runs during backward (two thirds of the compute);
  // tensor-parallel all-reduces sit on the critical path; pipeline sends overlap other micro-batches.
  const double hidden = std::min(e.data.seconds, e.compute_s * 2.0 / 3.0);
  e.iteration_overlap_s = e.compute_s + e.bubble_s + e.tensor.seconds + (e.data.seconds - hidden);
  return e;
}

}  // namespace weft::plan
