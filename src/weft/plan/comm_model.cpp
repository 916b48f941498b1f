#include "weft/plan/comm_model.h"

#include <algorithm>
#include <vector>

#include "weft/util/error.h"

namespace weft::plan {

Cluster cluster_for(const GpuSpec& gpu) {
  Cluster c;
  c.gpus_per_node = gpu.domain_gpus;
  c.nvlink.bytes_per_second = gpu.domain_bandwidth;
  c.rail.bytes_per_second = gpu.network_bandwidth;
  c.host.bytes_per_second = gpu.host_bandwidth;
  return c;
}

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

RateKind parse_rate_kind(const std::string& s) {
  if (s == "end-to-end") return RateKind::kEndToEnd;
  if (s == "kernel") return RateKind::kKernel;
  throw ConfigError("unknown --tflops-kind '" + s + "' (known: end-to-end, kernel)");
}

const char* rate_kind_name(RateKind k) {
  switch (k) {
    case RateKind::kEndToEnd: return "end-to-end";
    case RateKind::kKernel: return "kernel";
    case RateKind::kPredicted: return "predicted";
  }
  return "?";
}

double predicted_kernel_flops(const TransformerSpec& m, const Layout& l, const Rate& rate) {
  const TokenFlops tf = token_flops(m, l);
  const double tokens = static_cast<double>(m.seq_len) / std::max(1, l.cp) * static_cast<double>(l.micro_batch) / l.tp;
  return tf.dense_layer * tokens / layer_time(m, l, rate.kernels, false).total();
}

IterationEstimate estimate_iteration(const TransformerSpec& m, Precision p, const Layout& l, const Cluster& c,
                                     std::int64_t global_batch, const Rate& rate) {
  if (global_batch < 1) throw ConfigError("--global-batch must be at least 1");
  if (!(rate.kernels.peak_flops > 0)) throw ConfigError("the GPU's peak FLOP/s must be positive");
  IterationEstimate e;
  e.basis = rate.kind;
  const std::int64_t micro = std::max<std::int64_t>(1, l.micro_batches);
  const double s = static_cast<double>(m.seq_len), b = static_cast<double>(l.micro_batch), h = static_cast<double>(m.d_model);
  const double s_local = s / l.cp;
  const std::vector<std::int64_t> layers = stage_layers(m, l);
  const TokenFlops tf = token_flops(m, l);
  const double tokens_mb = s_local * b / l.tp;  // a GPU's share of a micro-batch's tokens
  // (An end-to-end rate is the whole iteration's: the breakdown uses the predicted compute.)
  const bool predicted = rate.kind != RateKind::kKernel;
  e.kernel_flops = predicted ? 0 : rate.hardware_flops;
  if (!predicted && !(e.kernel_flops > 0)) throw ConfigError("the kernel FLOP/s per GPU must be positive");

  // Predicted: a dense layer's, a MoE layer's and the head's times, kernel by kernel
  // (layer_kernels.h), the same on every stage.
  LayerTime dense, moe;
  double head_s = 0;
  if (predicted) {
    dense = layer_time(m, l, rate.kernels, false);
    if (m.moe()) moe = layer_time(m, l, rate.kernels, true);
    const LayerKernels head = head_kernels(m, l);
    head_s = kernels_seconds(head.forward, rate.kernels) + kernels_seconds(head.backward, rate.kernels);
  }
  // Per stage: one micro-batch's forward and backward; the slowest stage sets the pace.
  double stage_mb_s = 0, stage_memory_s = 0, stage_flops = 0, stages_sum_s = 0, stage_head_s = 0;
  std::int64_t first = 0, most_layers = 0, most_moe_layers = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    std::int64_t moe_layers = 0;
    for (std::int64_t k = first; k < first + layers[i]; ++k) moe_layers += m.is_moe_layer(k) ? 1 : 0;
    first += layers[i];
    const double flops = (static_cast<double>(layers[i] - moe_layers) * tf.dense_layer +
                          static_cast<double>(moe_layers) * tf.moe_layer + (i + 1 == layers.size() ? tf.head : 0)) * tokens_mb;
    double t = 0, memory = 0, head = 0;
    if (predicted) {
      const double n_dense = static_cast<double>(layers[i] - moe_layers), n_moe = static_cast<double>(moe_layers);
      head = i + 1 == layers.size() ? head_s : 0;
      t = n_dense * dense.total() + n_moe * moe.total() + head;
      memory = n_dense * dense.memory_bound + n_moe * moe.memory_bound;
    } else {
      t = flops / e.kernel_flops;
      head = i + 1 == layers.size() ? tf.head * tokens_mb / e.kernel_flops : 0;
    }
    stages_sum_s += t;
    if (t > stage_mb_s) stage_mb_s = t, stage_memory_s = memory, stage_flops = flops, stage_head_s = head;
    most_layers = std::max(most_layers, layers[i]);
    most_moe_layers = std::max(most_moe_layers, moe_layers);
  }
  // Predicted: the rate the slowest stage's kernels reach (what a trace of the plan computes at).
  if (predicted) e.kernel_flops = stage_flops / stage_mb_s;
  e.compute_s = stage_mb_s * static_cast<double>(micro);
  e.memory_bound_s = stage_memory_s * static_cast<double>(micro);
  const double backward_share = l.full_recompute() ? 0.75 : 2.0 / 3.0;
  const double hidden_bytes = s_local * b * h * 2;  // a micro-batch's hidden states on a GPU's share, 16-bit

  // Tensor parallelism (Megatron): 2 all-reduces per layer forward and 2 backward (with
  // sequence parallelism all-gather + reduce-scatter: the same bytes, and in backward the
  // two saved sharded inputs all-gathered again for the weights' gradients: one all-reduce's
  // bytes more), 2 more with full recomputation; inside the NVLink domain when tp fits; on
  // the critical path.
  const double per_layer_ops = 4.0 + (l.full_recompute() ? 2.0 : 0.0) + (l.sequence_parallel ? 1.0 : 0.0);
  if (l.tp > 1) {
    const LinkClass& link = l.tp <= c.gpus_per_node ? c.nvlink : c.rail;
    e.tensor.link = l.tp <= c.gpus_per_node ? "nvlink" : "rail";
    const double ops = per_layer_ops * static_cast<double>(most_layers * micro);
    e.tensor.bytes = ops * 2.0 * (l.tp - 1) / l.tp * hidden_bytes;
    e.tensor.seconds = ops * (ring_allreduce_seconds(hidden_bytes, l.tp, link) + c.collective_overhead_s);
    e.tensor.exposed_s = e.tensor.seconds;
  }
  // Pipeline: each micro-batch's activations forward and gradients backward across each
  // stage boundary (chunks times with interleaving), over the rails (each tensor-parallel
  // rank its share). Blocking between a stage's passes, as Megatron-LM's schedules send, on
  // the critical path; overlapped with the compute (asynchronous sends), hidden.
  e.pipeline.link = "rail";
  if (l.pp > 1) {
    const double sends = 2.0 * static_cast<double>(micro) * l.interleave;
    e.pipeline.bytes = sends * hidden_bytes / l.tp;
    e.pipeline.seconds = sends * (c.rail.latency_s + hidden_bytes / l.tp / c.rail.bytes_per_second + c.collective_overhead_s);
    e.pipeline.exposed_s = l.pipeline_sends_overlapped ? 0 : e.pipeline.seconds;
  }
  // The bubble, as a 1F1B pipeline runs it (Narayanan et al. 2021, section 2.2): the slowest
  // stage computes every micro-batch back to back, and the first micro-batch's forward and
  // the last one's backward pass through every other stage: their compute, exposed
  // tensor-parallel collectives and blocking sends, over v with interleaving. With equal
  // stages, (p - 1) / v of a stage's step.
  const double per_mb_exposed_s = (e.tensor.exposed_s + e.pipeline.exposed_s) / static_cast<double>(micro);
  e.bubble_s = (stages_sum_s - stage_mb_s + static_cast<double>(l.pp - 1) * per_mb_exposed_s) / l.interleave;
  e.bubble = e.bubble_s / (e.compute_s + e.tensor.exposed_s + e.pipeline.exposed_s + e.bubble_s);
  // Context parallelism (ring attention): each layer passes the key-value blocks around the
  // ring, cp - 1 steps forward and twice that backward (keys, values and their gradients),
  // overlapped with the attention it feeds.
  if (l.cp > 1) {
    const bool inside = static_cast<std::int64_t>(l.tp) * l.cp <= c.gpus_per_node;
    const LinkClass& link = inside ? c.nvlink : c.rail;
    e.context.link = inside ? "nvlink" : "rail";
    const double kv_block = s_local * b * static_cast<double>(m.kv_cache_values()) * 2 / l.tp;
    const double sends = 3.0 * (l.cp - 1) * static_cast<double>(most_layers * micro);
    e.context.bytes = sends * kv_block;
    e.context.seconds = sends * (link.latency_s + kv_block / link.bytes_per_second + c.collective_overhead_s);
    const double attention_s =
        12 * m.attention_width() * s * s_local * b / l.tp / e.kernel_flops * static_cast<double>(most_layers * micro);
    e.context.exposed_s = std::max(0.0, e.context.seconds - attention_s);
  }
  // Expert parallelism: each MoE layer's tokens go to their experts and back, an all-to-all
  // each way forward and backward, top_k copies of every token (the capacity's slots with an
  // expert capacity); inside the domain when ep x tp fits; on the critical path.
  if (m.moe() && l.ep > 1) {
    const bool inside = static_cast<std::int64_t>(l.tp) * l.ep <= c.gpus_per_node;
    const LinkClass& link = inside ? c.nvlink : c.rail;
    e.expert.link = inside ? "nvlink" : "rail";
    const double dispatched = hidden_bytes / l.tp * m.routed_copies();
    const double ops = 4.0 * static_cast<double>(most_moe_layers * micro);
    e.expert.bytes = ops * dispatched * (l.ep - 1) / l.ep;
    e.expert.seconds =
        ops * ((l.ep - 1) * link.latency_s + dispatched * (l.ep - 1) / l.ep / link.bytes_per_second + c.collective_overhead_s);
    e.expert.exposed_s = e.expert.seconds;
  }
  // Data parallelism, over data x context parallel GPUs on the rails: the gradients of this
  // GPU's parameters reduced (reduce-scatter + all-gather under ZeRO 1/2 and Megatron's
  // distributed optimizer: the same bytes). An all-reduce hides behind the last
  // micro-batch's backward; sharded states' reduce-scatter there and their all-gather behind
  // the next iteration's first forward; each but the bucket that comes last (and is needed
  // first). ZeRO 3 gathers the weights for every micro-batch's forward and backward and
  // reduce-scatters its gradients, overlapped layer by layer with that micro-batch's compute.
  const int group = l.dp * l.cp;
  // This GPU's parameters (of the stage that needs the most memory), for data parallelism and offload.
  const double params = group > 1 || l.offload != Offload::kNone ? training_memory(m, p, l).parameters : 0;
  e.data.link = "rail";
  if (group > 1) {
    const double grad_bytes = params * gradient_bytes(p);
    // One bucket per layer: each a collective of its own (the overhead per call).
    const double buckets = static_cast<double>(std::max<std::int64_t>(most_layers, 1));
    // The buckets go around the ring back to back: its latency once, the per-call overhead
    // for each.
    const double half = ring_half_seconds(grad_bytes, group, c.rail) + buckets * c.collective_overhead_s;
    const double t_bwd = backward_share * stage_mb_s, t_fwd = stage_mb_s - t_bwd;
    // The bucket that cannot hide: the first stage's first layer with the embedding, whose
    // gradients a backward finishes last and whose weights a forward needs first (GPT-2's
    // embedding alone is a third of its parameters).
    const double edge = static_cast<double>(bucket_parameters(m, l, 0, false) + bucket_parameters(m, l, 0, true));
    const double bucket = std::min(1.0, edge / params);
    if (l.zero >= 3) {
      // The weights gathered for the forward, again for the backward (and for the recomputed
      // forward when the system gathers for it), the gradients reduce-scattered.
      const double passes = 3 + (l.full_recompute() && l.zero3_gather_for_recompute ? 1 : 0);
      const double per_mb = passes * (ring_half_seconds(params * 2, group, c.rail) + buckets * c.collective_overhead_s);
      e.data.bytes = passes * static_cast<double>(micro) * (group - 1) / group * params * 2;
      e.data.seconds = per_mb * static_cast<double>(micro);
      // Each layer's compute prefetches the next layer's weights (as the traces gather
      // them): the head's compute, with no layer's weights to fetch behind it, hides none.
      e.data.exposed_s = static_cast<double>(micro) * std::max(per_mb * bucket, per_mb - (stage_mb_s - stage_head_s));
    } else {
      e.data.bytes = 2.0 * (group - 1) / group * grad_bytes;
      e.data.seconds = 2 * half;
      // An all-reduce runs whole behind the last backward; sharded states reduce-scatter
      // there and all-gather the updated weights behind the next first forward.
      e.data.exposed_s = l.grad_reduce_after_backward ? e.data.seconds
                         : sharded_states(p, l) ? std::max(half * bucket, half - t_bwd) + std::max(half * bucket, half - t_fwd)
                                   : std::max(2 * half * bucket, 2 * half - t_bwd);
    }
  }
  // Offload (ZeRO-Offload, ZeRO-Infinity): the optimizer state on the host: this GPU's
  // gradient shard goes down (float32) and its updated 16-bit weights come up each
  // iteration, exposed; with params, the 16-bit weights also come up for every micro-batch's
  // forward and backward, hidden behind that micro-batch's compute as far as it lasts. On
  // NVMe the same bytes move at the slower of the host link and the drives, and the
  // optimizer's step reads and writes the offloaded state once more (the optimizer state;
  // with params also the gradients it reads and the weights it updates), exposed.
  if (l.offload != Offload::kNone) {
    const double shard = params / std::max(1, l.zero >= 1 ? l.dp * l.cp : 1);
    const LinkClass path = l.offload_nvme ? LinkClass{std::min(c.host.bytes_per_second, c.nvme.bytes_per_second),
                                                      c.host.latency_s + c.nvme.latency_s}
                                          : c.host;
    e.host.link = l.offload_nvme ? "nvme" : "host";
    e.host.bytes = shard * (4 + 2);
    e.host.seconds = 2 * path.latency_s + e.host.bytes / path.bytes_per_second;
    if (l.offload_nvme) {
      const double state = 2 * training_memory(m, p, l).nvme;  // read and written back
      e.host.bytes += state;
      e.host.seconds += state / c.nvme.bytes_per_second;
    }
    e.host.exposed_s = e.host.seconds;
    if (l.offload == Offload::kParams) {
      const double fetch = 2 * params * 2;  // forward and backward, 16-bit
      const double per_mb = fetch / path.bytes_per_second;
      e.host.bytes += fetch * static_cast<double>(micro);
      e.host.seconds += per_mb * static_cast<double>(micro);
      e.host.exposed_s += std::max(0.0, per_mb - stage_mb_s) * static_cast<double>(micro);
    }
  }
  // The optimizer's step over this GPU's shard of the state (sharded over data and context
  // parallelism by ZeRO 1+ and Megatron's distributed optimizer; on the host when offloaded).
  if (predicted && rate.kernels.memory_bandwidth > 0 && l.offload == Offload::kNone) {
    const double local = training_memory(m, p, l).parameters;
    const double shard = sharded_states(p, l) ? local / group : local;
    e.optimizer_s = shard * optimizer_step_bytes(p) / (rate.kernels.memory_bandwidth * rate.kernels.memory_efficiency);
  }
  const double all_comm =
      e.tensor.seconds + e.context.seconds + e.expert.seconds + e.pipeline.seconds + e.data.seconds + e.host.seconds;
  const double exposed = e.tensor.exposed_s + e.pipeline.exposed_s + e.context.exposed_s + e.expert.exposed_s +
                         e.data.exposed_s + e.host.exposed_s;
  e.iteration_no_overlap_s = e.compute_s + e.bubble_s + e.optimizer_s + all_comm;
  e.iteration_overlap_s = e.compute_s + e.bubble_s + e.optimizer_s + exposed;

  // The iteration the plan reports, and what follows from it.
  const double tokens = static_cast<double>(global_batch) * s;
  e.model_flops = tokens * model_flops_per_token(m);
  e.hardware_flops = tokens * hardware_flops_per_token(m, l);
  const double gpus = l.gpus();
  if (rate.kind == RateKind::kEndToEnd) {
    if (rate.hardware_flops > 0) e.iteration_s = e.hardware_flops / (gpus * rate.hardware_flops);
    else if (rate.mfu > 0) e.iteration_s = e.model_flops / (gpus * rate.mfu * rate.kernels.peak_flops);
    else throw ConfigError("an end-to-end rate needs --tflops or --mfu");
  } else {
    e.iteration_s = e.iteration_overlap_s;
  }
  e.mfu = e.model_flops / (e.iteration_s * gpus * rate.kernels.peak_flops);
  e.hfu = e.hardware_flops / (e.iteration_s * gpus * rate.kernels.peak_flops);
  e.tokens_per_second = tokens / e.iteration_s;
  return e;
}

}  // namespace weft::plan
