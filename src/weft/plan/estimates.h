// The planner's formulas: memory per GPU, compute, training time, power, storage bandwidth
// and dataset size. Each function cites where its formula comes from (docs/planning.md).
#pragma once

#include <cstdint>
#include <string>

#include "weft/plan/model_spec.h"

namespace weft::plan {

// How the training state is stored, in bytes per parameter:
//   fp32-adam      weights 4, gradients 4, Adam moments 8
//   mixed-adam     fp16 weights 2, fp16 gradients 2, fp32 master weights + moments 12
//                  (the ZeRO paper's K = 12: 16 bytes per parameter)
//   megatron-dist  bf16 weights 2, fp32 gradients 4, optimizer 12 sharded over data parallel
//                  (Megatron-LM's distributed optimizer)
//   fp16-weights   inference: fp16 weights only, 2 (seed 002 chapter 13's figures)
enum class Precision { kFp32Adam, kMixedAdam, kMegatronDistributed, kFp16Weights };
Precision parse_precision(const std::string& s);  // throws ConfigError
const char* precision_name(Precision p);

struct Layout {
  int tp = 1;  // tensor parallel
  int pp = 1;  // pipeline parallel
  int dp = 1;  // data parallel
  int zero = 0;  // ZeRO stage 0..3, over the data-parallel group
  std::int64_t micro_batch = 1;     // sequences per micro-batch
  std::int64_t micro_batches = 1;   // per iteration and pipeline
  bool recompute = false;           // full activation recomputation
  bool sequence_parallel = false;   // Megatron sequence parallelism (with tp)
  int gpus() const { return tp * pp * dp; }
};

struct MemoryBreakdown {
  double parameters = 0;  // parameters on the GPU (the first pipeline stage, which is the largest)
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;  // bytes
  double total() const { return weights + gradients + optimizer + activations; }
};

// Bytes per GPU for training. Model states follow the ZeRO paper: with data parallelism Nd,
// stage 1 shards the optimizer, stage 2 also the gradients, stage 3 also the weights.
// Activations follow Korthikanti et al. 2022 (per layer per micro-batch, 16-bit):
//   s b h (34 + 5 a s / h)                  no parallelism
//   s b h (10 + 24 / t + 5 a s / (h t))     tensor parallel t
//   s b h (34 + 5 a s / h) / t              tensor and sequence parallel
//   2 s b h                                 full recomputation (the layer input only)
// and the first pipeline stage holds min(pp, micro-batches) micro-batches in flight.
MemoryBreakdown training_memory(const TransformerSpec& m, Precision p, const Layout& l);
// Model states only, for a model given by its parameter count.
MemoryBreakdown state_memory(double parameters, Precision p, const Layout& l);

// The key-value cache for inference: 2 (K and V) x layers x kv heads x head dim x tokens x
// batch x bytes per value.
double kv_cache_bytes(const TransformerSpec& m, std::int64_t tokens, std::int64_t batch, double bytes_per_value = 2);

// Smallest number of GPUs of `gpu_bytes` memory that holds `bytes` (no fragmentation).
std::int64_t min_gpus(double bytes, double gpu_bytes);

// Training FLOPs per token: 6 N (forward 2 N, backward 4 N) plus the attention scores,
// 12 L d s (PaLM, appendix B). With full recomputation, one more forward: 8 N + 16 L d s.
double training_flops_per_token(const TransformerSpec& m, bool recompute);
// End-to-end training time in seconds (Narayanan et al. 2021, eq. 4 with recomputation):
// (recompute ? 8 : 6) T P / (n X): T tokens, P parameters, n GPUs at X FLOP/s each.
double training_seconds(double tokens, double parameters, double gpus, double flops_per_gpu, bool recompute);

// Seed 002 chapter 8: energy = W x N x hours, cost = energy x price.
double energy_kwh(double watts_per_gpu, double gpus, double hours);
double energy_cost(double watts_per_gpu, double gpus, double hours, double price_per_kwh);

// Seed 004's method: storage bandwidth = (bytes per sample / FLOPs per sample) x achieved
// FLOP/s; given as bytes per FLOP directly (CosmoFlow: 65 GB/s per PFLOP/s).
double storage_bytes_per_second(double bytes_per_flop, double flops_per_second);

// Seed 004's dataset table: bytes = tokens x bytes per token.
double dataset_bytes(double tokens, double bytes_per_token);

}  // namespace weft::plan
