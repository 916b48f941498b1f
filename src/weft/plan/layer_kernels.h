// The kernels one transformer layer runs on one GPU for one micro-batch, and how long each
// takes: the planner's predicted compute (no rate given). Each kernel is a GEMM (its m, n, k
// and batch count) or a memory-bound operation (the bytes it reads and writes); a GEMM runs
// at the GPU's peak times an efficiency that follows its shape (tiles left idle in the last
// wave of the SMs, tiles padded at the edges, short inner dimensions), never faster than its
// operands move through memory; a memory-bound operation at a share of the HBM bandwidth.
// The kernels are those of Megatron-LM's layer (Narayanan et al. 2021, Korthikanti et al.
// 2022): layer norm, the QKV projection, the attention core (two batched GEMMs, the fused
// scale-mask-softmax and its dropout; or one FlashAttention kernel over the causal half),
// the output projection, bias-dropout-add, the MLP (GeLU, or SwiGLU's gate), with Llama's
// RMSNorm and rotary embedding where the model has them.
#pragma once

#include <vector>

#include "weft/plan/estimates.h"

namespace weft::plan {

struct Kernel {
  const char* name = "";
  bool gemm = false;
  double m = 0, n = 0, k = 0, batch = 1;  // a GEMM: batch x (m x k by k x n)
  double flops = 0;                       // FlashAttention: its FLOPs (not a cuBLAS GEMM)
  double bytes = 0;                       // a memory-bound operation: bytes read and written
  bool attention_core = false;            // recomputed by selective recomputation
};

// What the GPU offers a kernel.
struct KernelRates {
  double peak_flops = 312e12;     // dense 16-bit tensor FLOP/s
  double memory_bandwidth = 2.039e12;
  int sms = 108;                  // streaming multiprocessors (each runs one GEMM tile at a time)
  double gemm_efficiency = 0.8;   // the share of the peak a large GEMM's full tiles reach
  double memory_efficiency = 0.8;  // the share of the HBM bandwidth a streaming kernel reaches
  double attention_efficiency = 0.5;  // FlashAttention's share of the peak (forward; backward alike)
  double fp8_peak_flops = 0;      // GEMMs (not the attention core) at this peak when above 0
};

// One layer's kernels for one micro-batch on one GPU (tensor parallelism t divides the heads
// and the MLP; sequence parallelism the norms and dropouts; context parallelism the sequence).
struct LayerKernels {
  std::vector<Kernel> forward, backward;
};
LayerKernels layer_kernels(const TransformerSpec& m, const Layout& l, bool moe_layer = false);
// The head's GEMMs (vocabulary x width / t) for one micro-batch: forward and backward.
LayerKernels head_kernels(const TransformerSpec& m, const Layout& l);

// The share of the peak a GEMM of this shape reaches (gemm_efficiency for large ones).
double gemm_shape_efficiency(const Kernel& g, const KernelRates& r);
double kernel_seconds(const Kernel& k, const KernelRates& r);
double kernels_seconds(const std::vector<Kernel>& ks, const KernelRates& r, bool attention_core_only = false);

// One layer's forward, backward and what `l` recomputes, in seconds, for one micro-batch.
struct LayerTime {
  double forward = 0, backward = 0, recompute = 0;
  double memory_bound = 0;  // of the three: the memory-bound kernels' share
  double total() const { return forward + backward + recompute; }
};
LayerTime layer_time(const TransformerSpec& m, const Layout& l, const KernelRates& r, bool moe_layer = false);

}  // namespace weft::plan
