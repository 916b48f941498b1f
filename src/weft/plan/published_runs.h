// Training runs that papers published with their layout and their speed, as plan inputs
// without a rate: what the planner predicts for each, set beside what the paper measured.
// The rows (docs/planning.md, "Predicted against published runs"):
//   Narayanan et al. 2021 (Megatron-LM on Selene), table 1: ten GPT models, 1.7B to 1T, with
//     the micro-batch sizes and interleaving of the paper's scripts (examples/sc21);
//     table 2: the 175B and 530B models with tensor and pipeline parallelism (PTD-P) and
//     with ZeRO-3 (DeepSpeed) without model parallelism, on three GPU counts each;
//   Korthikanti et al. 2022, tables 3 and 5: 22B to 1T with sequence parallelism and
//     selective recomputation, and with full recomputation;
//   the Llama 3 paper (2024), table 4: 405B on 8,192 and 16,384 H100s.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/plan/report.h"

namespace weft::plan {

struct PublishedRun {
  std::string source;  // "Narayanan et al. 2021, table 1"
  std::string system;  // the software that ran it: "Megatron-LM 2021", "DeepSpeed ZeRO-3 2021", ...
  std::string label;   // "145.6B, t 8 p 8 v 2, 1536 GPUs"
  // The paper's model, layout, GPUs, batch and what its system did (Layout's behaviour
  // switches); no rate: the planner predicts it.
  PlanInput input;
  // The paper's iteration: as stated, or its FLOPs per iteration (its own count) over the
  // GPUs at its per-GPU rate.
  double iteration_s = 0;
  double tflops = 0;  // the paper's per-GPU rate as it states it (its FLOP count); 0: not stated
  // The system's per-collective overhead is fitted too (DeepSpeed's ZeRO-3 of 2021: its
  // gathers and reductions paid a fixed cost each, beyond the bytes on the wire).
  bool fits_collective_overhead = false;
  // Why the planner cannot be held to this run (what the paper leaves unstated that the time
  // depends on); empty: held, and part of its system's fit.
  std::string not_held;
};

std::vector<PublishedRun> published_runs();

// What the planner learns of one software stack from its published runs: its kernels'
// quality (the GEMM efficiency) and, where fitted, its cost per collective.
struct SystemFit {
  double gemm_efficiency = 0.8;
  double collective_overhead_s = 0;
};

// The predicted iteration of one run with a system's constants (make_plan without a rate).
double predicted_iteration_seconds(const PublishedRun& run, const SystemFit& fit);

// The constants at which the largest relative error of the predicted iterations of `runs` is
// smallest: the GEMM efficiency by bisection on the balance of the largest over- and
// under-estimate (every prediction falls as the efficiency rises); the overhead, where the
// runs ask for it, by a search over 0-100 ms, coarse then fine.
SystemFit fit_system(const std::vector<PublishedRun>& runs);

// The GEMM efficiency at which the planner's iteration of `in` (no rate given) is
// `measured_s`: one measured run of a software stack calibrates the planner for the others
// (weft plan --fit-to). Throws ConfigError when no efficiency in (0.05, 1] reaches it.
double fit_gemm_efficiency_to(const PlanInput& in, double measured_s);

struct PublishedPrediction {
  PublishedRun run;
  SystemFit system;      // fitted on every held run of its system
  double fitted_s = 0;   // the iteration predicted with it
  // Fitted on the other held runs of its system only, and the iteration predicted with
  // that: the run itself told the planner nothing (leave-one-out).
  SystemFit held_out;
  double held_out_s = 0;
  double held_out_error() const { return held_out_s / run.iteration_s - 1; }
  double fitted_error() const { return fitted_s / run.iteration_s - 1; }
};
// Every published run, predicted both ways.
std::vector<PublishedPrediction> predict_published_runs();

// weft plan --published: the systems' fitted constants, then a row per run (the paper's
// iteration and rate; the held-out prediction and its error; the prediction with the
// system's constants fitted on all its runs and its error); runs not held say why.
std::string published_runs_text(const std::vector<PublishedPrediction>& predictions);
nlohmann::json published_runs_json(const std::vector<PublishedPrediction>& predictions);

}  // namespace weft::plan
