// What each parallel dimension sends per iteration, how long it takes on each link class
// (alpha-beta models of the algorithms weft's collectives use), the pipeline bubble, and
// an iteration-time estimate with and without overlap.
#pragma once

#include "weft/plan/estimates.h"

namespace weft::plan {

struct LinkClass {
  double bytes_per_second;  // per GPU and direction
  double latency_s;         // per message (alpha)
};

struct Cluster {
  int gpus_per_node = 8;
  LinkClass nvlink{300e9, 3e-6};  // the NVLink/NVSwitch domain of a node (A100: 600 GB/s both ways)
  LinkClass rail{25e9, 6e-6};     // a 200 Gb/s NIC per GPU to its rail switch
};

// Ring all-reduce of `bytes` over `n` ranks: 2(n-1) alpha + 2(n-1)/n bytes/B.
double ring_allreduce_seconds(double bytes, int n, const LinkClass& link);
// Ring reduce-scatter or all-gather: (n-1) alpha + (n-1)/n bytes/B.
double ring_half_seconds(double bytes, int n, const LinkClass& link);
// The pipeline bubble of GPipe and 1F1B: (p - 1) / (m + p - 1).
double bubble_fraction(int stages, std::int64_t micro_batches);

struct DimensionTraffic {
  double bytes = 0;    // sent per GPU per iteration
  double seconds = 0;  // on its link class
  const char* link = "";
};

struct IterationEstimate {
  DimensionTraffic tensor, pipeline, data;
  double compute_s = 0;   // forward and backward of every micro-batch, without the bubble
  double bubble = 0;      // fraction
  double bubble_s = 0;
  double iteration_no_overlap_s = 0;
  double iteration_overlap_s = 0;  // data-parallel traffic hidden behind backward
};

// `global_batch` sequences per iteration; `flops_per_gpu` achieved.
IterationEstimate estimate_iteration(const TransformerSpec& m, Precision p, const Layout& l, const Cluster& c,
                                     std::int64_t global_batch, double flops_per_gpu);

}  // namespace weft::plan
