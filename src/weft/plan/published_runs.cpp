#include "weft/plan/published_runs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "weft/util/error.h"

namespace weft::plan {

namespace {

// A GPT of Megatron's papers: sequence 2,048, vocabulary 51,200, GPT's blocks.
TransformerSpec megatron_gpt(std::int64_t heads, std::int64_t hidden, std::int64_t layers) {
  TransformerSpec m = preset("gpt3-175b");
  m.name = "";
  m.heads = heads, m.d_model = hidden, m.layers = layers;
  m.vocab = 51200, m.seq_len = 2048;
  return m;
}

// Narayanan et al. 2021, equation 3: the FLOPs of an iteration with full recomputation,
// 96 B s l h^2 (1 + s / 6h + V / 16 l h); their per-GPU rates are this over time and GPUs.
double megatron_flops(const TransformerSpec& m, std::int64_t batch) {
  const double s = static_cast<double>(m.seq_len), h = static_cast<double>(m.d_model), l = static_cast<double>(m.layers);
  return 96.0 * static_cast<double>(batch) * s * l * h * h * (1 + s / (6 * h) + static_cast<double>(m.vocab) / (16 * l * h));
}

struct Shape {
  int tp, pp, gpus;
  std::int64_t batch, micro_batch;
  int interleave;
};

PlanInput layout_input(const TransformerSpec& m, const std::string& gpu, const Shape& s, Recompute recompute) {
  PlanInput in;
  in.model = m;
  in.gpu = gpu_preset(gpu);
  in.cluster = cluster_for(in.gpu);
  Layout& l = in.layout;
  l.tp = s.tp, l.pp = s.pp, l.dp = s.gpus / (s.tp * s.pp);
  l.micro_batch = s.micro_batch;
  l.micro_batches = s.batch / (l.dp * s.micro_batch);
  l.interleave = s.interleave;
  l.recompute = recompute;
  in.global_batch = s.batch;
  return in;
}

std::string billions(const TransformerSpec& m) { return fmt::format("{:.1f}B", static_cast<double>(count_parameters(m).total) / 1e9); }

void add_megatron_table_1(std::vector<PublishedRun>& runs) {
  struct Row {
    std::int64_t heads, hidden, layers;
    Shape shape;
    double tflops;
  };
  // Table 1, with the micro-batch sizes and chunks (layers per virtual stage) of the
  // paper's scripts (Megatron-LM, examples/sc21/run_table_1.sh); full recomputation.
  const Row rows[] = {
      {24, 2304, 24, {1, 1, 32, 512, 16, 1}, 137},        {32, 3072, 30, {2, 1, 64, 512, 16, 1}, 138},
      {32, 4096, 36, {4, 1, 128, 512, 16, 1}, 142},       {48, 6144, 40, {8, 1, 256, 1024, 8, 1}, 135},
      {64, 8192, 48, {8, 2, 512, 1536, 4, 1}, 138},       {80, 10240, 60, {8, 4, 1024, 1792, 2, 3}, 140},
      {96, 12288, 80, {8, 8, 1536, 2304, 2, 2}, 148},     {128, 16384, 96, {8, 16, 1920, 2160, 1, 2}, 155},
      {128, 20480, 105, {8, 35, 2520, 2520, 1, 3}, 163},  {160, 25600, 128, {8, 64, 3072, 3072, 1, 1}, 163}};
  for (const Row& r : rows) {
    const TransformerSpec m = megatron_gpt(r.heads, r.hidden, r.layers);
    PublishedRun run;
    run.source = "Narayanan et al. 2021, table 1";
    run.system = "Megatron-LM 2021";
    run.label = fmt::format("{}, t {} p {}{}, {} GPUs", billions(m), r.shape.tp, r.shape.pp,
                            r.shape.interleave > 1 ? fmt::format(" v {}", r.shape.interleave) : "", r.shape.gpus);
    run.input = layout_input(m, "a100-80gb", r.shape, Recompute::kFull);
    // Megatron's own DDP (the scripts' DDP=local, with pipelines) reduced the gradients after
    // the last backward; PyTorch's DDP (DDP=torch, without) overlapped them.
    run.input.layout.grad_reduce_after_backward = r.shape.pp > 1;
    run.tflops = r.tflops;
    run.iteration_s = megatron_flops(m, r.shape.batch) / (r.shape.gpus * r.tflops * 1e12);
    runs.push_back(run);
  }
}

void add_megatron_table_2(std::vector<PublishedRun>& runs) {
  struct Row {
    bool zero3;
    std::int64_t heads, hidden, layers;
    Shape shape;
    double tflops;
  };
  // Table 2: PTD-P (tensor 8, pipeline 12 or 35, micro-batches of 1) against ZeRO-3 without
  // model parallelism (DeepSpeed), full recomputation in both.
  const Row rows[] = {{false, 96, 12288, 96, {8, 12, 384, 1536, 1, 1}, 153},
                      {false, 96, 12288, 96, {8, 12, 768, 1536, 1, 1}, 149},
                      {false, 96, 12288, 96, {8, 12, 1536, 1536, 1, 1}, 141},
                      {false, 128, 20480, 105, {8, 35, 560, 2240, 1, 1}, 171},
                      {false, 128, 20480, 105, {8, 35, 1120, 2240, 1, 1}, 167},
                      {false, 128, 20480, 105, {8, 35, 2240, 2240, 1, 1}, 159},
                      {true, 96, 12288, 96, {1, 1, 384, 1536, 4, 1}, 144},
                      {true, 96, 12288, 96, {1, 1, 768, 1536, 2, 1}, 88},
                      {true, 96, 12288, 96, {1, 1, 1536, 1536, 1, 1}, 44},
                      {true, 128, 20480, 105, {1, 1, 640, 2560, 4, 1}, 138},
                      {true, 128, 20480, 105, {1, 1, 1120, 2240, 2, 1}, 98},
                      {true, 128, 20480, 105, {1, 1, 2240, 2240, 1, 1}, 48}};
  for (const Row& r : rows) {
    const TransformerSpec m = megatron_gpt(r.heads, r.hidden, r.layers);
    PublishedRun run;
    run.source = "Narayanan et al. 2021, table 2";
    run.system = r.zero3 ? "DeepSpeed ZeRO-3 2021" : "Megatron-LM 2021";
    run.label = r.zero3 ? fmt::format("{}, ZeRO-3, {} GPUs", billions(m), r.shape.gpus)
                        : fmt::format("{}, t {} p {}, {} GPUs", billions(m), r.shape.tp, r.shape.pp, r.shape.gpus);
    run.input = layout_input(m, "a100-80gb", r.shape, Recompute::kFull);
    if (r.zero3) {
      run.input.layout.zero = 3, run.input.layout.zero3_gather_for_recompute = true;
      run.fits_collective_overhead = true;
    } else {
      run.input.layout.grad_reduce_after_backward = true;
    }
    run.tflops = r.tflops;
    run.iteration_s = megatron_flops(m, r.shape.batch) / (r.shape.gpus * r.tflops * 1e12);
    runs.push_back(run);
  }
}

void add_korthikanti_table_5(std::vector<PublishedRun>& runs) {
  struct Row {
    std::int64_t heads, hidden, layers;
    Shape shape;
    double selective_s, full_s;
  };
  // Tables 3 and 5: "present work" (sequence parallelism and selective recomputation) and
  // full recomputation, one data-parallel replica.
  const Row rows[] = {{64, 6144, 48, {8, 1, 8, 4, 4, 1}, 1.10, 1.42},
                      {96, 12288, 96, {8, 8, 64, 64, 1, 1}, 13.75, 18.13},
                      {128, 20480, 105, {8, 35, 280, 280, 1, 1}, 37.83, 49.05},
                      {160, 25600, 128, {8, 64, 512, 512, 1, 1}, 71.49, 94.42}};
  for (const Row& r : rows) {
    const TransformerSpec m = megatron_gpt(r.heads, r.hidden, r.layers);
    for (const bool selective : {true, false}) {
      PublishedRun run;
      run.source = "Korthikanti et al. 2022, table 5";
      run.system = "Megatron-LM 2022";
      run.label = fmt::format("{}, t {} p {}, {}", billions(m), r.shape.tp, r.shape.pp,
                              selective ? "sequence parallel + selective" : "full recomputation");
      run.input = layout_input(m, "a100-80gb", r.shape, selective ? Recompute::kSelective : Recompute::kFull);
      run.input.layout.sequence_parallel = selective;
      run.iteration_s = selective ? r.selective_s : r.full_s;
      // The table states MFU (model FLOPs), not a rate: no TFLOP/s shown.
      runs.push_back(run);
    }
  }
}

void add_llama3(std::vector<PublishedRun>& runs) {
  struct Row {
    int tp, cp, pp, dp;
    std::int64_t seq, batch;
    double tflops;
  };
  // Table 4 (BF16, 16M tokens per batch); its TFLOP/s are model FLOPs (41% MFU at 400).
  const Row rows[] = {{8, 1, 16, 64, 8192, 2048, 430}, {8, 1, 16, 128, 8192, 2048, 400}, {8, 16, 16, 8, 131072, 128, 380}};
  for (const Row& r : rows) {
    PublishedRun run;
    run.source = "Llama 3 paper 2024, table 4";
    run.system = "Meta's Llama 3 stack 2024";
    PlanInput& in = run.input;
    in.model = preset("llama3-405b");
    in.model.seq_len = r.seq;
    in.gpu = gpu_preset("h100-80gb");
    in.cluster = cluster_for(in.gpu);
    in.precision = Precision::kMegatronDistributed;
    // FlashAttention-2 reaches 35% of the H100's peak (Shah et al. 2024, FlashAttention-3).
    in.attention_efficiency = 0.35;
    Layout& l = in.layout;
    l.tp = r.tp, l.cp = r.cp, l.pp = r.pp, l.dp = r.dp, l.zero = 2;
    l.sequence_parallel = l.flash_attention = true;
    l.first_stage_layers = l.last_stage_layers = 7;  // 126 = 7 + 14 x 8 + 7
    // "We use asynchronous point-to-point communication in PP" (section 3.3.2).
    l.pipeline_sends_overlapped = true;
    // The interleaved schedule with V virtual stages per rank (section 3.3.2); the paper does
    // not give V: one layer per virtual stage, the 16 x 8 slots of which the first and last
    // stages leave one empty, is V = 8.
    l.interleave = 8;
    l.micro_batches = r.batch / r.dp;
    in.global_batch = r.batch;
    const int gpus = l.gpus();
    run.label = fmt::format("405B, t {} cp {} p {} dp {}, {} GPUs", r.tp, r.cp, r.pp, r.dp, gpus);
    run.tflops = r.tflops;
    run.iteration_s = static_cast<double>(r.batch * r.seq) * model_flops_per_token(in.model) / (gpus * r.tflops * 1e12);
    if (r.cp > 1)
      run.not_held = "the paper's FLOP count for causal attention over 131,072 tokens is not stated (counting the causal "
                     "half, as the kernels compute, its iteration would be 29% shorter), nor FlashAttention's rate at that length";
    runs.push_back(run);
  }
}

}  // namespace

std::vector<PublishedRun> published_runs() {
  std::vector<PublishedRun> runs;
  add_megatron_table_1(runs);
  add_megatron_table_2(runs);
  add_korthikanti_table_5(runs);
  add_llama3(runs);
  return runs;
}

double predicted_iteration_seconds(const PublishedRun& run, const SystemFit& fit) {
  PlanInput in = run.input;
  in.gemm_efficiency = fit.gemm_efficiency;
  in.cluster.collective_overhead_s = fit.collective_overhead_s;
  const PlanReport r = make_plan(in);
  if (!r.iteration) throw InternalError("a published run without a global batch");
  return r.iteration->iteration_s;
}

namespace {

struct Errors {
  double over = -1e300, under = 1e300;  // the largest over- and under-estimate
  double worst() const { return std::max(over, -under); }
};

Errors errors_at(const std::vector<PublishedRun>& runs, const SystemFit& fit) {
  Errors e;
  for (const PublishedRun& r : runs) {
    const double error = predicted_iteration_seconds(r, fit) / r.iteration_s - 1;
    e.over = std::max(e.over, error);
    e.under = std::min(e.under, error);
  }
  return e;
}

// The minimax GEMM efficiency at a given overhead.
SystemFit fit_efficiency(const std::vector<PublishedRun>& runs, double overhead_s) {
  SystemFit fit{1.0, overhead_s};
  const auto balance = [&](double e) {
    fit.gemm_efficiency = e;
    const Errors x = errors_at(runs, fit);
    return x.over + x.under;
  };
  double lo = 0.05, hi = 1.0;
  if (balance(hi) >= 0) {
    fit.gemm_efficiency = hi;
    return fit;
  }
  if (balance(lo) <= 0) {
    fit.gemm_efficiency = lo;
    return fit;
  }
  for (int i = 0; i < 40; ++i) {
    const double mid = (lo + hi) / 2;
    (balance(mid) > 0 ? lo : hi) = mid;
  }
  fit.gemm_efficiency = (lo + hi) / 2;
  return fit;
}

}  // namespace

SystemFit fit_system(const std::vector<PublishedRun>& runs) {
  if (runs.empty()) throw InternalError("fit_system of no runs");
  if (!runs.front().fits_collective_overhead) return fit_efficiency(runs, 0);
  SystemFit best;
  double best_worst = 1e300;
  const auto consider = [&](double overhead_s) {
    const SystemFit fit = fit_efficiency(runs, overhead_s);
    const double worst = errors_at(runs, fit).worst();
    if (worst < best_worst) best_worst = worst, best = fit;
  };
  for (double ms = 0; ms <= 100; ms += 5) consider(ms * 1e-3);
  const double centre = best.collective_overhead_s * 1e3;
  for (double ms = std::max(0.0, centre - 5); ms <= centre + 5; ms += 0.5) consider(ms * 1e-3);
  return best;
}

double fit_gemm_efficiency_to(const PlanInput& in, double measured_s) {
  if (!(measured_s > 0)) throw ConfigError("--fit-to needs a measured iteration in seconds above 0");
  PublishedRun run;
  run.input = in;
  run.iteration_s = measured_s;
  const SystemFit fit = fit_system({run});
  const double predicted = predicted_iteration_seconds(run, fit);
  if (std::abs(predicted / measured_s - 1) > 1e-3)
    throw ConfigError(predicted > measured_s
                          ? fmt::format("--fit-to {:.4g} s: faster than the plan can be (its iteration is {:.4g} s even at GEMM "
                                        "efficiency {:.2f}): check the layout, the batch and the GPU",
                                        measured_s, predicted, fit.gemm_efficiency)
                          : fmt::format("--fit-to {:.4g} s: slower than the plan can be (its iteration is {:.4g} s even at GEMM "
                                        "efficiency {:.2f}): the run spends time the model does not (check the layout and the "
                                        "network)",
                                        measured_s, predicted, fit.gemm_efficiency));
  return fit.gemm_efficiency;
}

std::vector<PublishedPrediction> predict_published_runs() {
  const std::vector<PublishedRun> runs = published_runs();
  const auto held_of = [&](const std::string& system, std::size_t skip) {
    std::vector<PublishedRun> held;
    for (std::size_t j = 0; j < runs.size(); ++j)
      if (j != skip && runs[j].system == system && runs[j].not_held.empty()) held.push_back(runs[j]);
    return held;
  };
  std::map<std::string, SystemFit> systems;
  for (const PublishedRun& run : runs)
    if (!systems.count(run.system)) systems[run.system] = fit_system(held_of(run.system, runs.size()));
  std::vector<PublishedPrediction> out;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    PublishedPrediction p;
    p.run = runs[i];
    p.system = systems[runs[i].system];
    p.fitted_s = predicted_iteration_seconds(runs[i], p.system);
    const std::vector<PublishedRun> others = held_of(runs[i].system, i);
    p.held_out = others.empty() || !runs[i].not_held.empty() ? p.system : fit_system(others);
    p.held_out_s = predicted_iteration_seconds(runs[i], p.held_out);
    out.push_back(p);
  }
  return out;
}

std::string published_runs_text(const std::vector<PublishedPrediction>& predictions) {
  std::string out =
      "the planner's own predictions (no rate given) of published training runs; each system's constants fitted on its\n"
      "other runs (held out: the run told the planner nothing), and on all of them\n";
  std::vector<std::string> seen;
  for (const PublishedPrediction& p : predictions) {
    if (std::find(seen.begin(), seen.end(), p.run.system) != seen.end()) continue;
    seen.push_back(p.run.system);
    out += fmt::format("  {}: GEMM efficiency {:.3f}{}\n", p.run.system, p.system.gemm_efficiency,
                       p.system.collective_overhead_s > 0 ? fmt::format(", {:.1f} ms per collective", 1e3 * p.system.collective_overhead_s)
                                                          : "");
  }
  out += fmt::format("{:<32} {:<48} {:>9} {:>7} {:>9} {:>7} {:>9} {:>7}\n", "source", "run", "paper s", "TFLOP/s", "held out",
                     "error", "all", "error");
  std::string notes;
  for (const PublishedPrediction& p : predictions) {
    const bool held = p.run.not_held.empty();
    out += fmt::format("{:<32} {:<48} {:>9.3f} {:>7} {:>9.3f} {:>+6.1f}% {:>9.3f} {:>+6.1f}%{}\n", p.run.source, p.run.label,
                       p.run.iteration_s, p.run.tflops > 0 ? fmt::format("{:.1f}", p.run.tflops) : "-", p.held_out_s,
                       100 * p.held_out_error(), p.fitted_s, 100 * p.fitted_error(), held ? "" : "  (not held)");
    if (!held) notes += fmt::format("not held: {}, {}: {}\n", p.run.source, p.run.label, p.run.not_held);
  }
  int count = 0, within = 0;
  double worst = 0;
  for (const PublishedPrediction& p : predictions) {
    if (!p.run.not_held.empty()) continue;
    ++count;
    within += std::abs(p.held_out_error()) < 0.05 ? 1 : 0;
    worst = std::max(worst, std::abs(p.held_out_error()));
  }
  out += notes;
  out += fmt::format("held out: {} of {} held runs within 5% (the largest error {:.1f}%)\n", within, count, 100 * worst);
  return out;
}

nlohmann::json published_runs_json(const std::vector<PublishedPrediction>& predictions) {
  nlohmann::json runs = nlohmann::json::array();
  for (const PublishedPrediction& p : predictions) {
    nlohmann::json j = {{"source", p.run.source},
                        {"system", p.run.system},
                        {"run", p.run.label},
                        {"paper_seconds", p.run.iteration_s},
                        {"held_out", {{"gemm_efficiency", p.held_out.gemm_efficiency},
                                      {"collective_overhead_seconds", p.held_out.collective_overhead_s},
                                      {"seconds", p.held_out_s},
                                      {"error", p.held_out_error()}}},
                        {"all", {{"gemm_efficiency", p.system.gemm_efficiency},
                                 {"collective_overhead_seconds", p.system.collective_overhead_s},
                                 {"seconds", p.fitted_s},
                                 {"error", p.fitted_error()}}}};
    if (p.run.tflops > 0) j["paper_tflops"] = p.run.tflops;
    if (!p.run.not_held.empty()) j["not_held"] = p.run.not_held;
    runs.push_back(j);
  }
  return {{"kind", "published_runs"}, {"runs", runs}};
}

}  // namespace weft::plan
