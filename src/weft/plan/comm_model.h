// The iteration of a planned job: each pipeline stage's compute at a kernel rate (given, or
// predicted from the GPU), the bubble of 1F1B and interleaved schedules, what each parallel
// dimension (tensor, context, expert, pipeline, data, host offload) sends and how long it
// takes on its link class (alpha-beta models of the algorithms weft's collectives use), how
// much of it is exposed, and the one iteration time the plan reports, with MFU and HFU.
#pragma once

#include <string>

#include "weft/plan/estimates.h"
#include "weft/plan/hardware.h"
#include "weft/plan/layer_kernels.h"

namespace weft::plan {

struct LinkClass {
  double bytes_per_second;  // per GPU and direction
  double latency_s;         // per message (alpha)
};

struct Cluster {
  int gpus_per_node = 8;
  LinkClass nvlink{300e9, 3e-6};  // the NVLink/NVSwitch domain of a node (A100: 600 GB/s both ways)
  LinkClass rail{25e9, 6e-6};     // a 200 Gb/s NIC per GPU to its rail switch
  LinkClass host{25e9, 10e-6};    // PCIe to host memory (offload)
  LinkClass nvme{3e9, 100e-6};    // a GPU's share of its node's NVMe drives (ZeRO-Infinity offload)
  // Per collective or send a framework issues, on top of its alpha-beta time: launch,
  // bookkeeping and synchronization (0: none; a calibration input, docs/planning.md).
  double collective_overhead_s = 0;
};

// The cluster of a GPU preset: its NVLink domain, network and host link.
Cluster cluster_for(const GpuSpec& gpu);

// Ring all-reduce of `bytes` over `n` ranks: 2(n-1) alpha + 2(n-1)/n bytes/B.
double ring_allreduce_seconds(double bytes, int n, const LinkClass& link);
// Ring reduce-scatter or all-gather: (n-1) alpha + (n-1)/n bytes/B.
double ring_half_seconds(double bytes, int n, const LinkClass& link);
// The pipeline bubble of GPipe and 1F1B: (p - 1) / (m + p - 1).
double bubble_fraction(int stages, std::int64_t micro_batches);

struct DimensionTraffic {
  double bytes = 0;    // sent per GPU per iteration
  double seconds = 0;  // on its link class
  double exposed_s = 0;  // of those, on the critical path (not hidden behind compute)
  const char* link = "";
};

// How the per-GPU rate of the plan is to be read (docs/planning.md, "One time model"):
//   end-to-end  the achieved rate of whole iterations, as papers report it: communication,
//               the bubble and everything else included; the iteration time follows from it
//   kernel      the rate while computing: the iteration adds the bubble and the exposed
//               communication
//   predicted   no rate given: the kernel rate predicted from the GPU (GEMM efficiency against
//               the peak for the per-GPU matrix width, memory-bound operations at the HBM
//               bandwidth), then as kernel
enum class RateKind { kEndToEnd, kKernel, kPredicted };
RateKind parse_rate_kind(const std::string& s);  // end-to-end | kernel; throws ConfigError
const char* rate_kind_name(RateKind k);

struct Rate {
  RateKind kind = RateKind::kPredicted;
  double hardware_flops = 0;  // per GPU, recomputation counted (Narayanan et al.'s "achieved")
  double mfu = 0;             // end-to-end model FLOPs utilization (instead of a rate)
  // The GPU and its software's kernels: what a prediction computes with (layer_kernels.h);
  // its peak is also MFU's and HFU's.
  KernelRates kernels;
};

struct IterationEstimate {
  DimensionTraffic tensor, pipeline, data, context, expert, host;
  double kernel_flops = 0;  // per GPU, the compute rate of the compute model
  double compute_s = 0;     // the slowest stage's forward and backward of every micro-batch
  double memory_bound_s = 0;  // of compute_s: memory-bound operations (predicted only)
  double bubble = 0;        // fraction of the iteration
  double bubble_s = 0;
  // Predicted only: the optimizer's step, memory-bound over this GPU's share of the
  // optimizer state (optimizer_step_bytes per parameter at the HBM bandwidth's share).
  double optimizer_s = 0;
  double iteration_no_overlap_s = 0;  // compute + bubble + optimizer + every transfer
  double iteration_overlap_s = 0;     // compute + bubble + optimizer + the exposed transfers
  // The iteration the plan uses: from the end-to-end rate, else iteration_overlap_s; and
  // what follows from it, consistently.
  double iteration_s = 0;
  RateKind basis = RateKind::kPredicted;
  double model_flops = 0, hardware_flops = 0;  // per iteration, all GPUs
  double mfu = 0, hfu = 0;
  double tokens_per_second = 0;
};

// `global_batch` sequences per iteration.
IterationEstimate estimate_iteration(const TransformerSpec& m, Precision p, const Layout& l, const Cluster& c,
                                     std::int64_t global_batch, const Rate& rate);

// The predicted kernel rate per GPU: the hardware FLOPs of one layer's forward, backward and
// recomputation for one micro-batch over their time, kernel by kernel (layer_kernels.h;
// with FP8, the GEMMs at the FP8 peak and the attention core at the 16-bit one).
double predicted_kernel_flops(const TransformerSpec& m, const Layout& l, const Rate& rate);

}  // namespace weft::plan
