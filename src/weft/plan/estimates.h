// The planner's formulas: memory per GPU, compute, training time, power, storage bandwidth
// and dataset size. Each function cites where its formula comes from (docs/planning.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// How activations are kept for backward (Korthikanti et al. 2022):
//   none       every activation stored
//   selective  the attention core (the s x s scores, softmax, dropout) recomputed in backward:
//              the 5 a s / h term of the formula below is not stored
//   full       each layer's input only; the layer is recomputed in backward
enum class Recompute { kNone, kSelective, kFull };
Recompute parse_recompute(const std::string& s);  // none | selective | full; throws ConfigError
const char* recompute_name(Recompute r);

// ZeRO-Offload / ZeRO-Infinity: the optimizer state (and with params the 16-bit weights and
// gradients too) in host memory, moved over the host link each iteration.
enum class Offload { kNone, kOptimizer, kParams };
Offload parse_offload(const std::string& s);  // none | optimizer | params; throws ConfigError
const char* offload_name(Offload o);

struct Layout {
  int tp = 1;  // tensor parallel
  int pp = 1;  // pipeline parallel
  int dp = 1;  // data parallel
  int cp = 1;  // context parallel (ring attention: the sequence split over cp GPUs)
  int ep = 1;  // expert parallel (mixture of experts: the experts split over ep of the dp GPUs)
  int zero = 0;  // ZeRO stage 0..3, over the data-parallel (and context-parallel) group
  std::int64_t micro_batch = 1;     // sequences per micro-batch
  std::int64_t micro_batches = 1;   // per iteration and pipeline
  Recompute recompute = Recompute::kNone;
  std::int64_t recompute_layers = 0;  // full: recompute only this many layers per stage (0: all)
  bool sequence_parallel = false;   // Megatron sequence parallelism (with tp)
  bool flash_attention = false;     // attention without stored s x s scores (FlashAttention)
  bool fp8 = false;                 // FP8 GEMMs: their saved inputs in 8 bits, FP8 weight copies
  int interleave = 1;               // model chunks per pipeline GPU (the interleaved 1F1B schedule)
  // What the training system does, for the iteration's time: the data-parallel gradient
  // reduction after the pipeline's last backward (Megatron-LM's own DDP in 2021) instead of
  // overlapped with the backward; ZeRO 3 gathering the weights once more for a recomputed
  // forward (DeepSpeed, whose hooks fire for it; FSDP recomputes inside the backward's gather).
  bool grad_reduce_after_backward = false;
  bool zero3_gather_for_recompute = false;
  // The pipeline's sends and receives overlapped with the compute (asynchronous point to
  // point, as the Llama 3 paper's pipeline ran them) instead of blocking between passes
  // (Megatron-LM's schedules, and the traces --emit-workload writes).
  bool pipeline_sends_overlapped = false;
  // Uneven stages: the first and last stages' layers (0: the layers spread evenly, the
  // first and last stages taking the fewer when pp does not divide them).
  std::int64_t first_stage_layers = 0, last_stage_layers = 0;
  // Memory beyond the model states and activations (docs/planning.md, "Memory per GPU").
  Offload offload = Offload::kNone;
  bool offload_nvme = false;     // offloaded state on NVMe (ZeRO-Infinity) instead of host memory
  double runtime_bytes = 1e9;    // CUDA context, library workspaces, communication buffers
  double fragmentation = 0.02;   // of activations and buffers, lost to the caching allocator
  int gpus() const { return tp * pp * dp * cp; }
  bool full_recompute() const { return recompute == Recompute::kFull; }
};

// The layers of each pipeline stage; throws ConfigError for a split that does not add up.
std::vector<std::int64_t> stage_layers(const TransformerSpec& m, const Layout& l);

struct MemoryBreakdown {
  double parameters = 0;  // parameters on the GPU (of the stage that needs the most memory)
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;  // bytes
  // Gather and prefetch buffers of sharded weights, gradient-reduction buckets; the runtime
  // context and the allocator's fragmentation.
  double buffers = 0, overhead = 0;
  double host = 0;        // bytes offloaded to host memory
  double nvme = 0;        // bytes offloaded to NVMe (offload_nvme)
  double layer_parameters = 0;  // the largest layer's parameters on the GPU (for the buffers)
  int stage = 0;          // that stage
  double total() const { return weights + gradients + optimizer + activations + buffers + overhead; }
};

// Activation bytes of one transformer layer for one micro-batch on one GPU, 16-bit
// (Korthikanti et al. 2022, section 4; s the sequence, b the micro-batch, h the width, a
// the heads, t the tensor-parallel size). For GPT's shape (ffn 4h, as many key-value heads
// as heads, dropout) that is
//   s b h (10 + 24 / t) + 5 a s^2 b / t      tensor parallel
//   s b h 34 / t + 5 a s^2 b / t             tensor and sequence parallel
// term by term (their section 4.1): the norms' inputs, the QKV and MLP inputs and the
// dropout masks (10 s b h, divided by t only with sequence parallelism); Q and K, V, the
// output projection's input and the MLP's inner activations (24 s b h, divided by t); the
// scores, softmax and its dropout (5 a s^2 b / t). In general the terms follow the model's
// widths: keys and values at kv heads x head dim (grouped-query attention), the MLP's inner
// terms 2 s b f twice (f the hidden size; a gated MLP keeps three: gate, up and their
// product), no masks without dropout (2 a s^2 b: the softmax output only); a MoE layer's
// MLP for top_k + shared experts of expert_ffn, each routed copy of a token with its own
// input, plus the router's float32 logits; multi-head latent attention with its
// per-head query/key and value widths and the query and key-value latents (and their
// norms' inputs), which tensor parallelism does not divide.
// Selective recomputation and FlashAttention drop the s^2 terms (FlashAttention keeps a
// float32 log-sum-exp per row and head: 4 a s b / t); full recomputation keeps the layer
// input, 2 s b h (/ t with sequence parallelism). Context parallelism divides s by cp in
// every term but one factor of the s^2 terms (each GPU's queries see every key). With FP8
// GEMMs (Transformer Engine) the inputs saved for the GEMMs' backward are kept in 8 bits.
double layer_activation_bytes(const TransformerSpec& m, const Layout& l, bool recomputed, bool moe_layer = false);

// Bytes of one gradient element: 4 for fp32-adam and megatron-dist, else 2.
double gradient_bytes(Precision p);
// Whether the optimizer states are sharded over the data-parallel ranks (ZeRO 1 and up, or
// Megatron's distributed optimizer): the gradients reduce-scattered, the weights all-gathered.
bool sharded_states(Precision p, const Layout& l);
// One layer's data-parallel bucket on a GPU, in parameters: the layer's (its share under
// tensor parallelism), the embedding with the first layer, the final norm and head with the
// last (a tied embedding's copy there when pipelined); with experts, only the routed experts'
// share instead (reduced over the ranks holding the same experts).
std::int64_t bucket_parameters(const TransformerSpec& m, const Layout& l, std::int64_t layer, bool experts);
// Bytes the optimizer's step moves per parameter it updates, as Megatron-LM's mixed-precision
// optimizer runs it: 16-bit gradients copied into float32 main gradients (read 2, write 4:
// mixed-adam only; megatron-dist accumulates them in float32 already), unscaled and checked
// for overflow (read and write 4; mixed precision), the gradient norm (read 4), Adam (the
// gradient read, the float32 weights and both moments read and written: 28), the 16-bit
// weights refreshed from the float32 ones (read 4, write 2) and the gradients zeroed (write
// the gradient's bytes): 54 for mixed-adam, 50 for megatron-dist, 36 for fp32-adam.
double optimizer_step_bytes(Precision p);

// Bytes per GPU for training, for the pipeline stage that needs the most. Model states follow
// the ZeRO paper: with data parallelism Nd, stage 1 shards the optimizer, stage 2 also the
// gradients, stage 3 also the weights (Megatron's distributed optimizer is stage 1).
// Activations: layer_activation_bytes per layer and micro-batch in flight (1F1B: stage i
// holds min(pp - i, micro-batches); the interleaved schedule multiplies by
// 1 + (pp - 1) / (pp x chunks), Korthikanti et al. 2022 section 4.2.3), plus the first
// stage's embedding dropout mask and the last stage's float32 logits. Buffers: ZeRO 3 holds
// the gathered 16-bit weights of two layers (the one computing and the one prefetched) and
// one layer's unsharded gradients; sharded gradients (ZeRO 1/2, the distributed optimizer) a
// bucket of one layer's gradients; plain data parallelism two 25 MB buckets. Overhead: the
// runtime bytes and the fragmentation share of activations and buffers. Offload moves the
// optimizer state (params: the weights and gradients too, leaving the buffers) to the host,
// or to NVMe with offload_nvme.
MemoryBreakdown training_memory(const TransformerSpec& m, Precision p, const Layout& l);
// Model states only, for a model given by its parameter count.
MemoryBreakdown state_memory(double parameters, Precision p, const Layout& l);

// The key-value cache for inference: 2 (K and V) x layers x kv heads x head dim x tokens x
// batch x bytes per value.
double kv_cache_bytes(const TransformerSpec& m, std::int64_t tokens, std::int64_t batch, double bytes_per_value = 2);

// Smallest number of GPUs of `gpu_bytes` memory that holds `bytes` (no fragmentation).
std::int64_t min_gpus(double bytes, double gpu_bytes);

// Training FLOPs per token, forward and backward, of one dense layer, one MoE layer and the
// head (PaLM, appendix B): 6 x the parameters it multiplies (a MoE layer: top_k experts)
// plus the attention scores, 12 s w (w = attention_width(): d for ordinary attention); and
// what `l` recomputes: full recomputation one more forward of the layer (x 4/3 on the
// parameters, + 4 s w; with recompute_layers, that share of the layers), selective
// recomputation the attention core's forward (+ 4 s w), FlashAttention's backward the
// scores (+ 2 s w). The head is never recomputed.
struct TokenFlops {
  double dense_layer = 0, moe_layer = 0, head = 0;
};
TokenFlops token_flops(const TransformerSpec& m, const Layout& l);
// The whole model per token: hardware FLOPs (HFU's) with what `l` recomputes, model FLOPs
// (MFU's) without: 6 N + 12 L s w for N the parameters a token multiplies (the head, not the
// embedding lookup).
double hardware_flops_per_token(const TransformerSpec& m, const Layout& l);
double model_flops_per_token(const TransformerSpec& m);
// (The first edition's name: the hardware FLOPs with or without full recomputation.)
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
