#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flag_parser.h"
#include "weft/report/plan.h"
#include "weft/report/report.h"
#include "weft/plan/inference.h"
#include "weft/plan/published_runs.h"
#include "weft/plan/report.h"
#include "weft/plan/sweep.h"
#include "weft/plan/workload.h"
#include "weft/util/error.h"

namespace weft::cli {

namespace {
struct PlanFlags {
  std::string model = "gpt3-175b";
  std::int64_t layers = 0, d_model = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, seq = 0;
  std::int64_t experts = 0, top_k = 0, expert_ffn = 0, shared_experts = -1, dense_layers = -1;
  std::int64_t q_lora_rank = -1, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = -1, v_head_dim = 0;
  double params = 0;
  double gpus = 0, global_batch = 0;  // whole numbers, accepted as 1e3 too
  int tp = 1, pp = 1, dp = 0, cp = 1, ep = 1, zero = 0, interleave = 1;
  std::int64_t micro_batch = 1, recompute_layers = 0, first_stage_layers = 0, last_stage_layers = 0;
  bool recompute = false, sequence_parallel = false, flash_attention = false, json = false, sweep = false, fp8 = false;
  std::string recompute_granularity;
  int top = 10;
  std::string emit_workload, report, emit_schedule = "1f1b";
  std::string precision = "mixed-adam", gpu = "a100-80gb", tflops_kind = "end-to-end", network;
  double attention_efficiency = 0.5;
  double fit_to = 0;  // a measured iteration (s) the GEMM efficiency is fitted to
  std::string grad_reduce = "overlapped", pipeline_sends = "blocking";
  bool zero3_regather = false;
  double tokens = 0, tflops = 0, mfu = 0, gemm_efficiency = 0.8, price = 0.10, bytes_per_token = 4, watts = 0,
         gpu_memory_gb = 0, peak_tflops = 0, memory_bandwidth_gbps = 0;
  int gpus_per_node = 0;
  double nvlink_gbps = 0, rail_gbps = 0, host_gbps = 0;  // GB/s per GPU and direction (0: the GPU preset's)
  double collective_overhead_us = 0;
  double expert_capacity = -1;  // -1: the preset's
  std::string offload = "none", offload_to = "host";
  double nvme_gbps = 0;
  double runtime_gb = 1.0, fragmentation = 0.02;
  // --sweep's ranges
  std::vector<int> sweep_tp, sweep_pp, sweep_dp, sweep_cp, sweep_ep, sweep_zero, sweep_interleave;
  std::vector<std::int64_t> sweep_mb;
  std::vector<std::string> sweep_recompute, sweep_sp, sweep_flash;
  bool reference = false;  // a layout was given with --sweep: compare against it
  bool gemm_efficiency_given = false, attention_efficiency_given = false;
  // --published
  bool published = false;
  std::string published_with;  // a flag given beside --published (it takes only --json)
  // --inference
  bool inference = false;
  std::int64_t context = 0, prompt = 0, batch = 1;
  std::string weight_precision = "bf16", kv_precision = "bf16";
  double bandwidth_efficiency = 0.8;
};

// A count given as a number (1024 or 1e3; its range is the flag table's): whole.
std::int64_t whole(const char* flag, double v) {
  if (v != std::floor(v)) throw ConfigError(fmt::format("{} must be a whole number, got {}", flag, v));
  return static_cast<std::int64_t>(v);
}

// The plan's page (a note on stderr when stdout carries JSON).
void write_plan_report(const nlohmann::json& plan, const std::string& path, bool json_out) {
  report::Page page;
  page.title = "weft: plan of " + plan.value("model", std::string("a model"));
  page.footer = "Written by weft plan --report; docs/reports.md tells how to read each chart.";
  page.sections = report::plan_sections(plan, path);
  const std::size_t bytes = report::write_page(page, path);
  fmt::print(json_out ? stderr : stdout, "report: {} ({:.0f} KB)\n", path, static_cast<double>(bytes) / 1e3);
}

// The model: a preset, with dimensions changed by flags, or a parameter count.
void set_model(const PlanFlags& f, plan::PlanInput& in) {
  if (f.params > 0) {
    in.parameters = f.params;
    in.model.name = fmt::format("{:.3g} parameters", f.params);
  } else {
    in.model = plan::preset(f.model);
  }
  // A preset with a dimension changed is no longer that model: its name says so. (Each
  // dimension's bounds: the flag table.)
  std::string changed;
  auto override_if = [&](const char* flag, std::int64_t v, std::int64_t low, std::int64_t& field) {
    if (v == 0 || (low == 0 && v < 0)) return;  // not given
    field = v;
    changed += fmt::format("{}{} {}", changed.empty() ? "" : ", ", flag, v);
  };
  override_if("--layers", f.layers, 1, in.model.layers);
  override_if("--d-model", f.d_model, 1, in.model.d_model);
  override_if("--heads", f.heads, 1, in.model.heads);
  override_if("--kv-heads", f.kv_heads, 1, in.model.kv_heads);
  override_if("--ffn", f.ffn, 1, in.model.ffn);
  override_if("--vocab", f.vocab, 1, in.model.vocab);
  override_if("--seq", f.seq, 1, in.model.seq_len);
  override_if("--experts", f.experts, 1, in.model.experts);
  override_if("--top-k", f.top_k, 1, in.model.top_k);
  override_if("--expert-ffn", f.expert_ffn, 1, in.model.expert_ffn);
  override_if("--shared-experts", f.shared_experts, 0, in.model.shared_experts);
  override_if("--dense-layers", f.dense_layers, 0, in.model.dense_layers);
  if (f.expert_capacity >= 0) {
    if (!in.model.moe()) throw ConfigError("--expert-capacity needs a mixture of experts (--experts)");
    in.model.capacity_factor = f.expert_capacity;
  }
  override_if("--q-lora-rank", f.q_lora_rank, 0, in.model.q_lora_rank);
  override_if("--kv-lora-rank", f.kv_lora_rank, 1, in.model.kv_lora_rank);
  override_if("--qk-nope-dim", f.qk_nope_dim, 1, in.model.qk_nope_dim);
  override_if("--qk-rope-dim", f.qk_rope_dim, 0, in.model.qk_rope_dim);
  override_if("--v-head-dim", f.v_head_dim, 1, in.model.v_head_dim);
  if (!changed.empty() && f.params == 0) in.model.name += " modified (" + changed + ")";
}

// The GPU: a preset, its figures changed by flags.
void set_gpu(const PlanFlags& f, plan::PlanInput& in) {
  in.precision = plan::parse_precision(f.precision);
  in.gpu = plan::gpu_preset(f.gpu);
  if (f.gpu_memory_gb > 0) in.gpu.memory_bytes = f.gpu_memory_gb * 1e9;
  if (f.watts > 0) in.gpu.watts = f.watts;
  if (f.peak_tflops > 0) in.gpu.peak_flops = f.peak_tflops * 1e12;
  if (f.memory_bandwidth_gbps > 0) in.gpu.memory_bandwidth = f.memory_bandwidth_gbps * 1e9;
}

// The layout over `gpus` GPUs (0: not given) for `global_batch` sequences (0: not given).
void set_layout(const PlanFlags& f, std::int64_t gpus, std::int64_t global_batch, plan::PlanInput& in) {
  plan::Layout& l = in.layout;
  l.tp = f.tp;
  l.pp = f.pp;
  l.cp = f.cp;
  l.ep = f.ep;
  const std::int64_t model_gpus = static_cast<std::int64_t>(f.tp) * f.pp * f.cp;
  l.dp = f.dp > 0 ? f.dp : (gpus > 0 ? static_cast<int>(gpus / model_gpus) : 1);
  if (!f.sweep && gpus > 0 && gpus % model_gpus != 0) {
    throw ConfigError(fmt::format("--gpus {} is not a multiple of tp {} x pp {}{}", gpus, f.tp, f.pp,
                                  f.cp > 1 ? fmt::format(" x cp {}", f.cp) : ""));
  }
  if (!f.sweep && gpus > 0 && model_gpus * l.dp != gpus) {
    throw ConfigError(fmt::format("--gpus {} is not tp {} x pp {} x dp {}{}", gpus, l.tp, l.pp, l.dp,
                                  f.cp > 1 ? fmt::format(" x cp {}", f.cp) : ""));
  }
  if (l.dp < 1) throw ConfigError("the data-parallel size must be at least 1");
  l.zero = f.zero;
  l.micro_batch = f.micro_batch;
  if (!f.sweep && global_batch > 0 && global_batch % (f.micro_batch * l.dp) != 0) {
    throw ConfigError(fmt::format("--global-batch {} is not a multiple of micro-batch {} x dp {}", global_batch,
                                  f.micro_batch, l.dp));
  }
  l.micro_batches = global_batch > 0 ? std::max<std::int64_t>(1, global_batch / (f.micro_batch * l.dp)) : l.pp;
  if (!f.recompute_granularity.empty()) {
    l.recompute = plan::parse_recompute(f.recompute_granularity);
    if (f.recompute && l.recompute != plan::Recompute::kFull)
      throw ConfigError("--recompute (full) contradicts --recompute-granularity " + f.recompute_granularity);
  } else if (f.recompute) {
    l.recompute = plan::Recompute::kFull;
  }
  l.recompute_layers = f.recompute_layers;
  if (f.recompute_layers > 0 && !l.full_recompute()) throw ConfigError("--recompute-layers needs full recomputation (--recompute)");
  l.sequence_parallel = f.sequence_parallel;
  if (f.sequence_parallel && !f.sweep && f.tp < 2)  // (a sweep gives it to its layouts of tp 2 or more)
    throw ConfigError("--sequence-parallel splits along the sequence what tensor parallelism keeps whole: it needs --tp 2 or more");
  l.flash_attention = f.flash_attention;
  l.interleave = f.interleave;
  if (f.interleave > 1 && f.pp < 2) throw ConfigError("--interleave needs --pp 2 or more");
  l.offload = plan::parse_offload(f.offload);
  if (f.offload_to == "nvme" && l.offload == plan::Offload::kNone) throw ConfigError("--offload-to nvme needs --offload optimizer or params");
  l.offload_nvme = f.offload_to == "nvme";
  l.runtime_bytes = f.runtime_gb * 1e9;
  l.fragmentation = f.fragmentation;
  l.first_stage_layers = f.first_stage_layers;
  l.last_stage_layers = f.last_stage_layers;
  in.tokens = f.tokens;
  in.achieved_flops = f.tflops * 1e12;
  in.rate_kind = plan::parse_rate_kind(f.tflops_kind);
  if (f.tflops > 0 && f.mfu > 0) throw ConfigError("give --tflops or --mfu, not both");
  in.mfu = f.mfu;
  in.gemm_efficiency = f.gemm_efficiency;
  in.attention_efficiency = f.attention_efficiency;
  l.grad_reduce_after_backward = f.grad_reduce == "after-backward";
  l.pipeline_sends_overlapped = f.pipeline_sends == "overlapped";
  if (f.zero3_regather && (f.zero < 3 || !l.full_recompute()))
    throw ConfigError("--zero3-regather gathers the weights for a recomputed forward: it needs --zero 3 and full recomputation");
  l.zero3_gather_for_recompute = f.zero3_regather;
  l.fp8 = f.fp8;  // the GEMMs' saved inputs and weight copies; with no rate given, the predicted rate too
  in.price_per_kwh = f.price;
  in.bytes_per_token = f.bytes_per_token;
  in.global_batch = global_batch;
}

// The cluster: GPUs per node, NVLink, the rails (a network preset or a rate), host and NVMe.
void set_cluster(const PlanFlags& f, plan::PlanInput& in) {
  in.cluster = plan::cluster_for(in.gpu);
  if (f.gpus_per_node > 0) in.cluster.gpus_per_node = f.gpus_per_node;
  if (f.nvlink_gbps > 0) in.cluster.nvlink.bytes_per_second = f.nvlink_gbps * 1e9;
  if (!f.network.empty()) {
    const plan::NetworkSpec net = plan::network_preset(f.network);
    in.cluster.rail = {net.bytes_per_second, net.latency_s};
  }
  if (f.rail_gbps > 0) in.cluster.rail.bytes_per_second = f.rail_gbps * 1e9;
  in.cluster.collective_overhead_s = f.collective_overhead_us * 1e-6;
  if (f.host_gbps > 0) in.cluster.host.bytes_per_second = f.host_gbps * 1e9;
  if (f.nvme_gbps > 0) in.cluster.nvme.bytes_per_second = f.nvme_gbps * 1e9;
}

// --inference: serving's memory and times for the model, GPU and cluster of `in`.
int run_inference(const PlanFlags& f, const plan::PlanInput& in, std::int64_t global_batch) {
  if (f.sweep || !f.emit_workload.empty() || !f.report.empty() || f.params > 0 || f.tokens > 0 || global_batch > 0 ||
      f.dp > 0 || f.cp > 1 || f.grad_reduce != "overlapped" || f.pipeline_sends != "blocking" || f.zero3_regather ||
      f.fit_to > 0)
    throw ConfigError("--inference sizes serving: it takes --tp, --pp, --batch, --context and --prompt, not --sweep, "
                      "--emit-workload, --report, --params, --tokens, --global-batch, --dp, --cp, --grad-reduce, "
                      "--pipeline-sends, --zero3-regather or --fit-to");
  plan::InferenceInput ii;
  ii.model = in.model;
  ii.gpu = in.gpu;
  ii.cluster = in.cluster;
  ii.tp = f.tp;
  ii.pp = f.pp;
  ii.weight_bytes = plan::precision_bytes(f.weight_precision, "--weight-precision");
  ii.kv_bytes = plan::precision_bytes(f.kv_precision, "--kv-precision");
  ii.context = f.context;
  ii.prompt = f.prompt;
  ii.batch = f.batch;
  ii.gemm_efficiency = f.gemm_efficiency;
  ii.attention_efficiency = f.attention_efficiency;
  ii.fp8 = f.fp8;
  ii.bandwidth_efficiency = f.bandwidth_efficiency;
  if (!(f.bandwidth_efficiency > 0 && f.bandwidth_efficiency <= 1) || !(f.gemm_efficiency > 0 && f.gemm_efficiency <= 1))
    throw ConfigError("--bandwidth-efficiency and --gemm-efficiency must be in (0, 1]");
  const plan::InferenceReport r = plan::plan_inference(ii);
  fmt::print("{}", f.json ? r.to_json().dump() + "\n" : r.to_text());
  return 0;
}

// --sweep: every layout of `space` on `gpus` GPUs that fits, the fastest first; the layout
// given on the command line placed among them (--reference).
int run_sweep(const PlanFlags& f, const plan::PlanInput& in, std::int64_t gpus, std::int64_t global_batch) {
  const plan::Layout& l = in.layout;
  const std::int64_t model_gpus = static_cast<std::int64_t>(f.tp) * f.pp * f.cp;
  plan::SweepSpace space;
  space.tp = f.sweep_tp, space.pp = f.sweep_pp, space.dp = f.sweep_dp, space.cp = f.sweep_cp, space.ep = f.sweep_ep;
  space.zero = f.sweep_zero, space.interleave = f.sweep_interleave, space.micro_batch = f.sweep_mb;
  for (const auto& r : f.sweep_recompute) space.recompute.push_back(plan::parse_recompute(r));
  auto on_off = [](const std::vector<std::string>& given, const char* flag) {
    std::vector<int> out;
    for (const auto& v : given) {
      if (v != "on" && v != "off") throw ConfigError(fmt::format("{} takes on and off, not '{}'", flag, v));
      out.push_back(v == "on" ? 1 : 0);
    }
    return out;
  };
  space.sequence_parallel = on_off(f.sweep_sp, "--sweep-sp");
  space.flash_attention = on_off(f.sweep_flash, "--sweep-flash");
  auto rows = plan::sweep_layouts(in, gpus, space);
  // The layout on the command line, when one was given: where it ranks, and why.
  std::optional<plan::SweepRow> reference;
  bool reference_fits = true;
  if (f.reference) {
    if (gpus % model_gpus != 0 || global_batch % (l.dp * l.micro_batch) != 0)
      throw ConfigError(fmt::format("the layout given with --sweep (tp {} pp {} cp {}) does not divide --gpus {} and "
                                    "--global-batch {}", l.tp, l.pp, l.cp, gpus, global_batch));
    reference = plan::evaluate_layout(in);
    reference_fits = reference.has_value();
  }
  if (f.json || !f.report.empty()) {
    const nlohmann::json sweep = plan::sweep_to_json(in, gpus, rows, f.top, reference);
    if (f.json) fmt::print("{}\n", sweep.dump(2));
    if (!rows.empty() && !f.report.empty()) write_plan_report(sweep, f.report, f.json);
    if (f.json) return rows.empty() ? 1 : 0;
  }
  if (rows.empty()) {
    fmt::print("no layout of {} on {} GPUs fits in {:.0f} GB (try --recompute, --zero or more GPUs)\n",
               in.model.name, gpus, in.gpu.memory_bytes / 1e9);
    return 1;
  }
  const std::size_t shown = std::min<std::size_t>(rows.size(), static_cast<std::size_t>(f.top));
  fmt::print("{} layouts of {} on {} {} GPUs fit (ZeRO stages that change only memory shown as one row); the fastest {}, "
             "by the iteration at the {} rate:\n",
             rows.size(), in.model.name, gpus, in.gpu.name, shown,
             in.rate().kind == plan::RateKind::kKernel ? "given kernel" : "predicted kernel");
  fmt::print("{:>4} {:>4} {:>5} {:>3} {:>3} {:>5} {:>3} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}\n", "tp", "pp", "dp", "cp", "ep",
             "zero", "mb", "recompute", "memory GB", "headroom", "bubble", "iter s", "no-ovl s");
  for (std::size_t i = 0; i < shown; ++i) {
    const auto& row = rows[i];
    std::string zero = std::to_string(row.layout.zero);
    if (!row.same_time_zero.empty()) zero += "-" + std::to_string(row.same_time_zero.back());
    fmt::print("{:>4} {:>4} {:>5} {:>3} {:>3} {:>5} {:>3} {:>9} {:>9.1f} {:>9.1f} {:>6.1f}% {:>9.3f} {:>9.3f}\n", row.layout.tp,
               row.layout.pp, row.layout.dp, row.layout.cp, row.layout.ep, zero, row.layout.micro_batch,
               plan::recompute_name(row.layout.recompute), row.memory.total() / 1e9,
               (in.gpu.memory_bytes - row.memory.total()) / 1e9, 100 * row.iteration.bubble,
               row.iteration.iteration_overlap_s, row.iteration.iteration_no_overlap_s);
  }
  fmt::print("what each spends beyond the fastest (+) or saves (-), per iteration:\n");
  for (std::size_t i = 1; i < shown; ++i)
    fmt::print("  {:>2}. {}: {}\n", i + 1, plan::layout_label(rows[i].layout), plan::explain_difference(rows.front(), rows[i]));
  if (f.reference) {
    if (!reference_fits) {
      fmt::print("your layout ({}) does not fit in {:.0f} GB\n", plan::layout_label(l), in.gpu.memory_bytes / 1e9);
    } else {
      const std::size_t rank = plan::rank_among(rows, *reference);
      fmt::print("your layout ({}): {:.3f} s, rank {} of {}; the fastest is {:.1f}% faster, your layout spends {}\n", plan::layout_label(l),
                 reference->iteration.iteration_overlap_s, rank, rows.size(),
                 100 * (1 - rows.front().iteration.iteration_overlap_s / reference->iteration.iteration_overlap_s),
                 plan::explain_difference(rows.front(), *reference));
    }
  }
  return 0;
}

// --published: the planner's predictions of published training runs.
int run_published(const PlanFlags& f) {
  if (!f.published_with.empty())
    throw ConfigError("--published predicts the papers' own runs: it takes only --json, not " + f.published_with);
  const std::vector<plan::PublishedPrediction> p = plan::predict_published_runs();
  fmt::print("{}", f.json ? plan::published_runs_json(p).dump() + "\n" : plan::published_runs_text(p));
  return 0;
}

int run_plan(const PlanFlags& f) {
  if (f.published) return run_published(f);
  if (!f.report.empty()) report::check_page_path(f.report, "--report");
  plan::PlanInput in;
  const std::int64_t gpus = f.gpus > 0 ? whole("--gpus", f.gpus) : 0;
  const std::int64_t global_batch = f.global_batch > 0 ? whole("--global-batch", f.global_batch) : 0;
  set_model(f, in);
  set_gpu(f, in);
  set_layout(f, gpus, global_batch, in);
  set_cluster(f, in);
  // What the workload needs, checked before anything is printed.
  if (f.inference) return run_inference(f, in, global_batch);
  if (!f.emit_workload.empty()) {
    if (f.sweep) throw ConfigError("--emit-workload writes one plan's iteration, not a sweep's");
    if (f.params > 0) throw ConfigError("--emit-workload needs a transformer model (a preset or dimensions), not --params");
    if (global_batch < 1) throw ConfigError("--emit-workload needs --global-batch (sequences per iteration)");
    plan::check_emit_folder(f.emit_workload, in.layout.gpus());
  }
  const plan::EmitOrder emit_order = plan::parse_emit_order(f.emit_schedule);
  if (f.emit_workload.empty() && emit_order != plan::parse_emit_order("1f1b"))
    throw ConfigError("--emit-schedule orders the micro-batches of the traces --emit-workload writes: it needs --emit-workload DIR");
  // The system's behaviours shape the iteration: without one (no --global-batch) or without
  // what they act on they do not apply.
  const plan::Layout& l = in.layout;
  if (l.grad_reduce_after_backward &&
      (global_batch < 1 || (!f.sweep && (l.dp * l.cp == 1 || l.zero >= 3))))
    throw ConfigError("--grad-reduce after-backward times the data-parallel reduction of an iteration: it needs "
                      "--global-batch and data parallelism without ZeRO 3");
  if (l.pipeline_sends_overlapped && (global_batch < 1 || (!f.sweep && l.pp == 1)))
    throw ConfigError("--pipeline-sends overlapped times a pipeline's sends in an iteration: it needs --global-batch and --pp "
                      "above 1");
  if (l.pipeline_sends_overlapped && !f.emit_workload.empty())
    throw ConfigError("--pipeline-sends overlapped: the traces --emit-workload writes send between the passes (blocking); "
                      "leave it out to emit");
  if (l.zero3_gather_for_recompute && global_batch < 1)
    throw ConfigError("--zero3-regather times ZeRO 3's gathers in an iteration: it needs --global-batch");
  if (f.attention_efficiency_given && !l.flash_attention)
    throw ConfigError("--attention-efficiency is FlashAttention's rate: it needs --flash-attention (or --inference)");
  if (f.fit_to > 0) {
    if (global_batch < 1) throw ConfigError("--fit-to needs --global-batch (the measured iteration's sequences)");
    if (f.tflops > 0 || f.mfu > 0 || f.gemm_efficiency_given)
      throw ConfigError("--fit-to fits the GEMM efficiency: not with --tflops, --mfu or --gemm-efficiency");
    if (f.params > 0) throw ConfigError("--fit-to needs a transformer model (a preset or dimensions), not --params");
    in.gemm_efficiency = plan::fit_gemm_efficiency_to(in, f.fit_to);
    fmt::print(f.json ? stderr : stdout, "fitted: GEMM efficiency {:.3f}, at which this layout's iteration is the measured {:.4g} s\n",
               in.gemm_efficiency, f.fit_to);
  }
  if (f.sweep) return run_sweep(f, in, gpus, global_batch);
  plan::PlanReport r = plan::make_plan(in);
  fmt::print("{}", f.json ? r.to_json().dump() + "\n" : r.to_text());
  if (!f.report.empty()) write_plan_report(r.to_json(), f.report, f.json);
  if (!f.emit_workload.empty()) {
    plan::EmittedWorkload w = plan::emit_workload(r, f.emit_workload, emit_order);
    fmt::print(f.json ? stderr : stdout,
               "workload: one iteration for {} ranks, {} trace records in {} (rank 0 sends {:.3g} GB; the traces' own "
               "timeline {:.3f} s)\nreplay: weft sim --topology TOPOLOGY.yaml --workload {}\n",
               w.ranks, w.records, f.emit_workload, w.bytes_per_rank / 1e9, w.iteration_s, f.emit_workload);
  }
  return 0;
}
#define AT(member) [](PlanFlags& o) -> FieldRef { return &o.member; }
using PlanFlag = Flag<PlanFlags>;

// The model: a preset, its dimensions, mixture of experts, latent attention (bounded far above
// any model built, so that products of them stay exact).
void add_model(FlagTable<PlanFlags>& t) {
  FlagGroup<PlanFlags> add{t, "the model"};
  add(PlanFlag("--model", AT(model), "gpt2-124m | gpt3-175b | llama3-8b | llama3-70b | llama3-405b | mixtral-8x7b | deepseek-v3"));
  add(PlanFlag("--params", AT(params), "a model given only by its parameter count (e.g. 7.5e9)").above(0));
  add(PlanFlag("--layers", AT(layers), "override: transformer blocks").in(1, 1e6));
  add(PlanFlag("--d-model", AT(d_model), "override: hidden size").in(1, 1e7));
  add(PlanFlag("--heads", AT(heads), "override: attention heads").in(1, 1e6));
  add(PlanFlag("--kv-heads", AT(kv_heads), "override: key-value heads (grouped-query attention)").in(1, 1e6));
  add(PlanFlag("--ffn", AT(ffn), "override: feed-forward hidden size").in(1, 1e8));
  add(PlanFlag("--vocab", AT(vocab), "override: vocabulary size").in(1, 1e9));
  add(PlanFlag("--seq", AT(seq), "override: sequence length").in(1, 1e8));
  add(PlanFlag("--experts", AT(experts), "mixture of experts: routed experts per MoE layer").in(1, 1e6));
  add(PlanFlag("--top-k", AT(top_k), "mixture of experts: experts per token").in(1, 1e6));
  add(PlanFlag("--expert-capacity", AT(expert_capacity),
        "mixture of experts: capacity factor (each expert's slots are this x tokens x top-k / experts, computed and sent "
        "whether filled or not; 0: dropless)")
          .defaults("the preset's").in(0, 64));
  add(PlanFlag("--expert-ffn", AT(expert_ffn), "mixture of experts: an expert's hidden size").defaults("--ffn").in(1, 1e8));
  add(PlanFlag("--shared-experts", AT(shared_experts), "mixture of experts: experts every token uses").defaults("the preset's")
          .in(0, 1e6));
  add(PlanFlag("--dense-layers", AT(dense_layers), "mixture of experts: leading layers with a dense feed-forward block")
          .defaults("the preset's").in(0, 1e6));
  add(PlanFlag("--kv-lora-rank", AT(kv_lora_rank), "multi-head latent attention: the key-value latent's rank").in(1, 1e6));
  add(PlanFlag("--q-lora-rank", AT(q_lora_rank), "multi-head latent attention: the query bottleneck's rank (0: none)")
          .defaults("the preset's").in(0, 1e6));
  add(PlanFlag("--qk-nope-dim", AT(qk_nope_dim), "multi-head latent attention: query/key dims per head without rotary").in(1, 1e6));
  add(PlanFlag("--qk-rope-dim", AT(qk_rope_dim), "multi-head latent attention: rotary query/key dims per head")
          .defaults("the preset's").in(0, 1e6));
  add(PlanFlag("--v-head-dim", AT(v_head_dim), "multi-head latent attention: value dims per head").in(1, 1e6));
}

// The layout: GPUs, parallel sizes, ZeRO, batches, recomputation, pipeline shape.
void add_layout(FlagTable<PlanFlags>& t) {
  FlagGroup<PlanFlags> add{t, "the layout"};
  add(PlanFlag("--gpus", AT(gpus), "GPUs in the job (= tp x pp x cp x dp; 1024 or 1e3)").in(1, 1e9));
  add(PlanFlag("--tp", AT(tp), "tensor-parallel size").at_least(1));
  add(PlanFlag("--pp", AT(pp), "pipeline-parallel size").at_least(1));
  add(PlanFlag("--dp", AT(dp), "data-parallel size").defaults("gpus / (tp x pp x cp)").at_least(1));
  add(PlanFlag("--cp", AT(cp), "context-parallel size (ring attention)").at_least(1));
  add(PlanFlag("--ep", AT(ep), "expert-parallel size (within data x context parallel)").at_least(1));
  add(PlanFlag("--zero", AT(zero), "ZeRO stage").in(0, 3));
  add(PlanFlag("--precision", AT(precision), "the numbers held per parameter")
          .one_of({"fp32-adam", "mixed-adam", "megatron-dist", "fp16-weights"}));
  add(PlanFlag("--micro-batch", AT(micro_batch), "sequences per micro-batch").at_least(1));
  add(PlanFlag("--global-batch", AT(global_batch), "sequences per iteration").in(1, 1e12));
  add(PlanFlag("--recompute", AT(recompute), "full activation recomputation (--recompute-granularity full)"));
  add(PlanFlag("--recompute-granularity", AT(recompute_granularity),
        "none, selective (the attention core, Korthikanti et al.) or full")
          .defaults("none").one_of({"none", "selective", "full"}));
  add(PlanFlag("--recompute-layers", AT(recompute_layers), "full recomputation of only this many layers per stage (0: all)")
          .at_least(0));
  add(PlanFlag("--sequence-parallel", AT(sequence_parallel), "Megatron sequence parallelism"));
  add(PlanFlag("--flash-attention", AT(flash_attention), "attention without stored s x s scores (FlashAttention)"));
  add(PlanFlag("--interleave", AT(interleave), "model chunks per pipeline GPU (interleaved 1F1B)").at_least(1));
  add(PlanFlag("--first-stage-layers", AT(first_stage_layers), "uneven pipeline: layers of the first stage").at_least(1));
  add(PlanFlag("--last-stage-layers", AT(last_stage_layers), "uneven pipeline: layers of the last stage").at_least(1));
}

// The hardware and the run: the GPU, rates, power, the cluster's links.
void add_hardware(FlagTable<PlanFlags>& t) {
  FlagGroup<PlanFlags> add{t, "the hardware and the run"};
  add(PlanFlag("--gpu", AT(gpu), "v100-16gb | v100-32gb | a100-40gb | a100-80gb | h100-80gb | h200-141gb | b200-180gb | "
                          "gb200-nvl72 | mi300x"));
  add(PlanFlag("--gpu-memory", AT(gpu_memory_gb), "override: GPU memory in GB").above(0));
  add(PlanFlag("--peak-tflops", AT(peak_tflops), "override: dense 16-bit peak TFLOP/s").above(0));
  add(PlanFlag("--memory-bandwidth", AT(memory_bandwidth_gbps), "override: HBM GB/s").above(0));
  add(PlanFlag("--watts", AT(watts), "override: power per GPU in W").above(0));
  add(PlanFlag("--tokens", AT(tokens), "training tokens (for time, power and data)").at_least(0));
  add(PlanFlag("--tflops", AT(tflops), "achieved TFLOP/s per GPU, recomputation counted (see --tflops-kind)").above(0));
  add(PlanFlag("--tflops-kind", AT(tflops_kind), "end-to-end (whole iterations, as papers report) or kernel (while computing)")
          .one_of({"end-to-end", "kernel"}));
  add(PlanFlag("--mfu", AT(mfu), "end-to-end model FLOPs utilization (instead of --tflops)").in(1e-9, 1));
  add(PlanFlag("--gemm-efficiency", AT(gemm_efficiency),
        "no rate given: the share of the peak a large GEMM's full tiles reach (the software's; weft plan --published fits "
        "it for published systems)")
          .above(0));
  add(PlanFlag("--fit-to", AT(fit_to),
        "a measured iteration in seconds of this layout: fit --gemm-efficiency to it, then plan (and sweep) with it "
        "(needs --global-batch; not with --tflops, --mfu or --gemm-efficiency)")
          .above(0));
  add(PlanFlag("--attention-efficiency", AT(attention_efficiency),
        "no rate given: FlashAttention's share of the peak (FlashAttention-2 on an H100: 0.35)")
          .in(1e-3, 1));
  add(PlanFlag("--grad-reduce", AT(grad_reduce),
        "the data-parallel gradient reduction: overlapped with the backward, or after the last backward (Megatron-LM's "
        "own DDP in 2021)")
          .one_of({"overlapped", "after-backward"}));
  add(PlanFlag("--pipeline-sends", AT(pipeline_sends),
        "the pipeline's activation and gradient sends: blocking between a stage's passes (Megatron-LM's schedules), or "
        "overlapped with the compute (asynchronous, as the Llama 3 paper's pipeline)")
          .one_of({"blocking", "overlapped"}));
  add(PlanFlag("--zero3-regather", AT(zero3_regather),
        "ZeRO 3 gathers the weights again for a recomputed forward (DeepSpeed; FSDP recomputes inside the backward's gather)"));
  add(PlanFlag("--fp8", AT(fp8), "FP8 GEMMs: saved GEMM inputs in 8 bits and FP8 weight copies; no rate given, GEMMs at the "
                          "GPU's FP8 peak (MFU against the 16-bit peak)"));
  add(PlanFlag("--price", AT(price), "dollars per kWh").at_least(0));
  add(PlanFlag("--bytes-per-token", AT(bytes_per_token), "dataset bytes per token").above(0));
  add(PlanFlag("--gpus-per-node", AT(gpus_per_node), "GPUs sharing an NVLink domain").defaults("the GPU's").at_least(1));
  add(PlanFlag("--nvlink-gbps", AT(nvlink_gbps), "NVLink GB/s per GPU and direction").defaults("the GPU's").above(0));
  add(PlanFlag("--network", AT(network), "the scale-out network per GPU: hdr-ib | ndr-ib | xdr-ib | roce-100g | roce-200g | "
                                  "roce-400g | roce-800g")
          .defaults("the GPU's"));
  add(PlanFlag("--rail-gbps", AT(rail_gbps), "network GB/s per GPU and direction").defaults("the GPU's").above(0));
  add(PlanFlag("--collective-overhead-us", AT(collective_overhead_us),
        "microseconds per collective or send beyond its alpha-beta time (framework overhead)")
          .at_least(0));
}

// Serving, offloading and memory overheads.
void add_serving_and_memory(FlagTable<PlanFlags>& t) {
  FlagGroup<PlanFlags> add{t, "serving, offload and memory"};
  add(PlanFlag("--inference", AT(inference), "size serving instead of training: weights, key-value cache, prefill and decode"));
  add(PlanFlag("--context", AT(context), "--inference: tokens per sequence").defaults("the model's sequence").at_least(1));
  add(PlanFlag("--prompt", AT(prompt), "--inference: prompt tokens").defaults("half the context").at_least(1));
  add(PlanFlag("--batch", AT(batch), "--inference: sequences decoded together").at_least(1));
  add(PlanFlag("--weight-precision", AT(weight_precision), "--inference: the weights'")
          .one_of({"fp32", "bf16", "fp16", "fp8", "int8", "int4"}));
  add(PlanFlag("--kv-precision", AT(kv_precision), "--inference: the key-value cache's").one_of({"fp32", "bf16", "fp16", "fp8", "int8"}));
  add(PlanFlag("--bandwidth-efficiency", AT(bandwidth_efficiency), "--inference: the share of HBM bandwidth a step reaches")
          .above(0));
  add(PlanFlag("--offload", AT(offload), "ZeRO-Offload (optimizer) or ZeRO-Infinity (params: weights too)")
          .one_of({"none", "optimizer", "params"}));
  add(PlanFlag("--offload-to", AT(offload_to), "--offload: host memory, or nvme (ZeRO-Infinity's drives)").one_of({"host", "nvme"}));
  add(PlanFlag("--nvme-gbps", AT(nvme_gbps), "--offload-to nvme: NVMe GB/s per GPU").defaults("3: a node's drives shared by its GPUs")
          .above(0));
  add(PlanFlag("--host-gbps", AT(host_gbps), "host link GB/s per GPU and direction").defaults("the GPU's").above(0));
  add(PlanFlag("--runtime-gb", AT(runtime_gb), "GPU memory for the runtime (context, workspaces, NCCL buffers)").at_least(0));
  add(PlanFlag("--fragmentation", AT(fragmentation), "share of activations and buffers lost to fragmentation").in_open(0, 1));
}

// The outputs: JSON, workloads, reports, sweeps.
void add_outputs(FlagTable<PlanFlags>& t) {
  FlagGroup<PlanFlags> add{t, "output and sweeps"};
  add(PlanFlag("--json", AT(json), "print JSON"));
  add(PlanFlag("--published", AT(published),
        "predict the training runs papers published (Megatron-LM 2021 and 2022, DeepSpeed ZeRO-3, Llama 3) and set the "
        "predictions beside the papers' times (takes only --json)"));
  add(PlanFlag("--emit-workload", AT(emit_workload),
        "write one iteration as per-rank traces into this folder (for weft sim; needs --global-batch)"));
  add(PlanFlag("--emit-schedule", AT(emit_schedule), "--emit-workload: micro-batch order").one_of({"1f1b", "gpipe"}));
  add(PlanFlag("--report", AT(report), "write an HTML report of the plan or the sweep (docs/reports.md)"));
  add(PlanFlag("--sweep", AT(sweep), "rank every layout that fits by estimated iteration time (needs --gpus, --global-batch)"));
  add(PlanFlag("--top", AT(top), "--sweep: rows to show").at_least(1));
  add(PlanFlag("--sweep-tp", AT(sweep_tp), "--sweep: tensor sizes to try (comma-separated)"));
  add(PlanFlag("--sweep-pp", AT(sweep_pp), "--sweep: pipeline sizes to try"));
  add(PlanFlag("--sweep-dp", AT(sweep_dp), "--sweep: data-parallel sizes to try"));
  add(PlanFlag("--sweep-cp", AT(sweep_cp), "--sweep: context-parallel sizes to try"));
  add(PlanFlag("--sweep-ep", AT(sweep_ep), "--sweep: expert-parallel sizes to try"));
  add(PlanFlag("--sweep-zero", AT(sweep_zero), "--sweep: ZeRO stages to try"));
  add(PlanFlag("--sweep-mb", AT(sweep_mb), "--sweep: micro-batch sizes to try"));
  add(PlanFlag("--sweep-recompute", AT(sweep_recompute), "--sweep: recomputation to try").comma_separated()
          .one_of({"none", "selective", "full"}));
  add(PlanFlag("--sweep-interleave", AT(sweep_interleave), "--sweep: model chunks per pipeline GPU to try"));
  add(PlanFlag("--sweep-sp", AT(sweep_sp), "--sweep: sequence parallelism to try").comma_separated().one_of({"on", "off"}));
  add(PlanFlag("--sweep-flash", AT(sweep_flash), "--sweep: FlashAttention to try").comma_separated().one_of({"on", "off"}));
}

#undef AT

const FlagTable<PlanFlags>& plan_flags() {
  static const FlagTable<PlanFlags> table = [] {
    FlagTable<PlanFlags> t;
    add_model(t);
    add_layout(t);
    add_hardware(t);
    add_serving_and_memory(t);
    add_outputs(t);
    return t;
  }();
  return table;
}

}  // namespace

FlagDocs plan_flag_docs() { return flag_docs(plan_flags()); }

void add_plan_command(CLI::App& app, Action& action) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "memory, compute, time, power and data for a training job at any scale");
  add_flags(cmd, plan_flags(), *f);
  cmd->callback([f, cmd, &action] {
    // With --sweep, a layout given on the command line is the one to compare against.
    for (const char* flag : {"--tp", "--pp", "--dp", "--cp", "--ep", "--zero", "--micro-batch"})
      if (cmd->count(flag) > 0) f->reference = true;
    f->gemm_efficiency_given = cmd->count("--gemm-efficiency") > 0;
    f->attention_efficiency_given = cmd->count("--attention-efficiency") > 0;
    // --published takes no layout, model or hardware: any other flag is refused.
    if (f->published)
      for (const CLI::Option* o : cmd->get_options())
        if (o->count() > 0 && o->get_name() != "--published" && o->get_name() != "--json" && f->published_with.empty())
          f->published_with = o->get_name();
    action = [f] { return run_plan(*f); };
  });
}

}  // namespace weft::cli
