// weft plan --inference: serving a model, sized per GPU. Memory: the weights (in their
// serving precision, split by tensor and pipeline parallelism) and the key-value cache,
// 2 x layers x kv heads x head dim x bytes per value for every token of every sequence in
// the batch (grouped-query attention stores only its kv heads; a tensor-parallel GPU holds
// its share of them, at least one). Time (seed 002 chapter 13; Pope et al. 2022):
//   prefill   every layer's forward over the batch's prompts, kernel by kernel
//             (layer_kernels.h, FlashAttention over the causal half), and its two
//             tensor-parallel all-reduces
//   decode    each step reads every weight once (a mixture of experts: the experts the
//             batch's tokens reach) and the batch's cache, and computes 2 N per token:
//             the slower of HBM bytes / bandwidth and FLOPs / rate, plus the tensor-parallel
//             all-reduces (2 per layer); the pipeline's stages run one after another.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/plan/comm_model.h"
#include "weft/plan/hardware.h"
#include "weft/plan/model_spec.h"

namespace weft::plan {

struct InferenceInput {
  TransformerSpec model;
  GpuSpec gpu = gpu_preset("h100-80gb");
  Cluster cluster;
  int tp = 1, pp = 1;
  double weight_bytes = 2;  // per parameter: bf16/fp16 2, fp8/int8 1, int4 0.5
  double kv_bytes = 2;      // per cached value
  std::int64_t context = 0;  // tokens per sequence (prompt and generated); 0: the model's sequence
  std::int64_t prompt = 0;   // prompt tokens; 0: half the context
  std::int64_t batch = 1;    // sequences decoded together
  double gemm_efficiency = 0.8;       // of the peak, for large GEMMs (prefill)
  double attention_efficiency = 0.5;  // FlashAttention's share of the peak (prefill)
  bool fp8 = false;                   // GEMMs at the FP8 peak
  double bandwidth_efficiency = 0.8;  // of the HBM bandwidth a decode step reaches
};

struct InferenceReport {
  InferenceInput input;
  double parameters = 0, active_parameters = 0;
  double weights_per_gpu = 0;       // bytes
  double kv_per_token = 0;          // bytes per token on one GPU
  double kv_per_gpu = 0;            // the batch at the full context
  double total_per_gpu = 0;
  bool fits = false;
  std::int64_t max_batch = 0;       // sequences of the full context that fit
  std::int64_t max_context = 0;     // tokens per sequence that fit at the batch
  double prefill_s = 0;             // one batch's prompts
  double decode_step_s = 0;         // one token for every sequence, at the full context
  double decode_memory_s = 0, decode_compute_s = 0, decode_comm_s = 0;  // per step, all stages
  std::string decode_bound;         // "memory" | "compute"
  double tokens_per_second = 0;     // decode, the whole batch
  double time_to_first_token_s = 0;
  std::string to_text() const;
  nlohmann::json to_json() const;
};

// Throws ConfigError for sizes that do not make sense (tp not dividing the heads, pp over the
// layers, a prompt longer than the context).
InferenceReport plan_inference(const InferenceInput& input);

// Bytes per weight or cached value for a precision name: fp32 4, bf16/fp16 2, fp8/int8 1,
// int4 0.5; throws ConfigError.
double precision_bytes(const std::string& name, const char* flag);

}  // namespace weft::plan
