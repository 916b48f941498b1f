#include <fmt/format.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/report/plan.h"
#include "weft/report/report.h"
#include "weft/plan/report.h"
#include "weft/plan/sweep.h"
#include "weft/plan/workload.h"
#include "weft/util/checked.h"
#include "weft/util/error.h"

namespace weft::cli {

namespace {
struct PlanFlags {
  std::string model = "gpt3-175b";
  std::int64_t layers = 0, d_model = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, seq = 0;
  double params = 0;
  std::int64_t gpus = 0;
  int tp = 1, pp = 1, dp = 0, zero = 0;
  std::int64_t micro_batch = 1, global_batch = 0;
  bool recompute = false, sequence_parallel = false, json = false, sweep = false;
  int top = 10;
  std::string emit_workload, report;
  std::string precision = "mixed-adam", gpu = "a100-80gb";
  double tokens = 0, tflops = 0, mfu = 0.4, price = 0.10, bytes_per_token = 4, watts = 0, gpu_memory_gb = 0;
  int gpus_per_node = 8;
  double nvlink_gbps = 300, rail_gbps = 25;  // GB/s per GPU and direction
};

// The plan's page (a note on stderr when stdout carries JSON).
void write_plan_report(const nlohmann::json& plan, const std::string& path, bool json_out) {
  report::Page page;
  page.title = "weft: plan of " + plan.value("model", std::string("a model"));
  page.footer = "Written by weft plan --report; docs/reports.md tells how to read each chart.";
  page.sections = report::plan_sections(plan, path);
  const std::size_t bytes = report::write_page(page, path);
  fmt::print(json_out ? stderr : stdout, "report: {} ({:.0f} KB)\n", path, static_cast<double>(bytes) / 1e3);
}

int run_plan(const PlanFlags& f) {
  plan::PlanInput in;
  if (f.params > 0) {
    in.parameters = f.params;
    in.model.name = fmt::format("{:.3g} parameters", f.params);
  } else {
    in.model = plan::preset(f.model);
  }
  // Model dimensions are bounded far above any model built (so products of them stay exact).
  auto override_if = [](const char* flag, std::int64_t v, std::int64_t limit, std::int64_t& field) {
    if (v != 0) field = bounded(v, 1, limit, flag);
  };
  override_if("--layers", f.layers, 1'000'000, in.model.layers);
  override_if("--d-model", f.d_model, 10'000'000, in.model.d_model);
  override_if("--heads", f.heads, 1'000'000, in.model.heads);
  override_if("--kv-heads", f.kv_heads, 1'000'000, in.model.kv_heads);
  override_if("--ffn", f.ffn, 100'000'000, in.model.ffn);
  override_if("--vocab", f.vocab, 1'000'000'000, in.model.vocab);
  override_if("--seq", f.seq, 100'000'000, in.model.seq_len);
  in.precision = plan::parse_precision(f.precision);
  in.gpu = plan::gpu_preset(f.gpu);
  if (f.gpu_memory_gb > 0) in.gpu.memory_bytes = f.gpu_memory_gb * 1e9;
  if (f.watts > 0) in.gpu.watts = f.watts;
  plan::Layout& l = in.layout;
  l.tp = f.tp;
  l.pp = f.pp;
  if (f.tp < 1 || f.pp < 1) throw ConfigError("--tp and --pp must be at least 1");
  l.dp = f.dp > 0 ? f.dp : (f.gpus > 0 ? static_cast<int>(f.gpus / (f.tp * f.pp)) : 1);
  if (!f.sweep && f.gpus > 0 && f.gpus % (static_cast<std::int64_t>(f.tp) * f.pp) != 0) {
    throw ConfigError(fmt::format("--gpus {} is not a multiple of tp {} x pp {}", f.gpus, f.tp, f.pp));
  }
  if (!f.sweep && f.gpus > 0 && static_cast<std::int64_t>(l.tp) * l.pp * l.dp != f.gpus) {
    throw ConfigError(fmt::format("--gpus {} is not tp {} x pp {} x dp {}", f.gpus, l.tp, l.pp, l.dp));
  }
  if (l.dp < 1) throw ConfigError("the data-parallel size must be at least 1");
  l.zero = f.zero;
  if (f.zero < 0 || f.zero > 3) throw ConfigError("--zero must be 0, 1, 2 or 3");
  l.micro_batch = f.micro_batch;
  if (f.micro_batch < 1) throw ConfigError("--micro-batch must be at least 1");
  if (!f.sweep && f.global_batch > 0 && f.global_batch % (f.micro_batch * l.dp) != 0) {
    throw ConfigError(fmt::format("--global-batch {} is not a multiple of micro-batch {} x dp {}", f.global_batch,
                                  f.micro_batch, l.dp));
  }
  l.micro_batches = f.global_batch > 0 ? std::max<std::int64_t>(1, f.global_batch / (f.micro_batch * l.dp)) : l.pp;
  l.recompute = f.recompute;
  l.sequence_parallel = f.sequence_parallel;
  in.tokens = f.tokens;
  in.achieved_flops = f.tflops * 1e12;
  in.mfu = f.mfu;
  in.price_per_kwh = f.price;
  in.bytes_per_token = f.bytes_per_token;
  in.global_batch = f.global_batch;
  if (f.gpus_per_node < 1 || !(f.nvlink_gbps > 0) || !(f.rail_gbps > 0)) {
    throw ConfigError("--gpus-per-node, --nvlink-gbps and --rail-gbps must be positive");
  }
  in.cluster.gpus_per_node = f.gpus_per_node;
  in.cluster.nvlink.bytes_per_second = f.nvlink_gbps * 1e9;
  in.cluster.rail.bytes_per_second = f.rail_gbps * 1e9;
  if (f.sweep) {
    auto rows = plan::sweep_layouts(in, f.gpus);
    if (!rows.empty() && (f.json || !f.report.empty())) {
      const nlohmann::json sweep = plan::sweep_to_json(in, f.gpus, rows, f.top);
      if (f.json) fmt::print("{}\n", sweep.dump(2));
      if (!f.report.empty()) write_plan_report(sweep, f.report, f.json);
      if (f.json) return 0;
    }
    if (rows.empty()) {
      fmt::print("no layout of {} on {} GPUs fits in {:.0f} GB (try --recompute, --zero or more GPUs)\n",
                 in.model.name, f.gpus, in.gpu.memory_bytes / 1e9);
      return 1;
    }
    fmt::print("{} layouts of {} on {} {} GPUs fit; the fastest {}:\n", rows.size(), in.model.name, f.gpus, in.gpu.name,
               std::min<std::size_t>(rows.size(), static_cast<std::size_t>(f.top)));
    fmt::print("{:>4} {:>4} {:>5} {:>4} {:>3} {:>10} {:>8} {:>10} {:>10}\n", "tp", "pp", "dp", "zero", "mb",
               "memory GB", "bubble", "iter s", "no-ovl s");
    for (std::size_t i = 0; i < rows.size() && i < static_cast<std::size_t>(f.top); ++i) {
      const auto& row = rows[i];
      fmt::print("{:>4} {:>4} {:>5} {:>4} {:>3} {:>10.1f} {:>7.1f}% {:>10.3f} {:>10.3f}\n", row.layout.tp, row.layout.pp,
                 row.layout.dp, row.layout.zero, row.layout.micro_batch, row.memory.total() / 1e9,
                 100 * row.iteration.bubble, row.iteration.iteration_overlap_s, row.iteration.iteration_no_overlap_s);
    }
    return 0;
  }
  plan::PlanReport r = plan::make_plan(in);
  fmt::print("{}", f.json ? r.to_json().dump() + "\n" : r.to_text());
  if (!f.report.empty()) write_plan_report(r.to_json(), f.report, f.json);
  if (!f.emit_workload.empty()) {
    plan::EmittedWorkload w = plan::emit_workload(r, f.emit_workload);
    fmt::print(f.json ? stderr : stdout,
               "workload: one iteration for {} ranks, {} trace records in {} (rank 0 sends {:.3g} GB; the traces' own "
               "timeline {:.3f} s)\nreplay: weft sim --topology TOPOLOGY.yaml --workload {}\n",
               w.ranks, w.records, f.emit_workload, w.bytes_per_rank / 1e9, w.iteration_s, f.emit_workload);
  }
  return 0;
}
}  // namespace

void add_plan_command(CLI::App& app, Action& action) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "memory, compute, time, power and data for a training job at any scale");
  cmd->add_option("--model", f->model, "gpt2-124m | gpt3-175b | llama3-8b | llama3-70b | llama3-405b")
      ->capture_default_str();
  cmd->add_option("--params", f->params, "a model given only by its parameter count (e.g. 7.5e9)")->check(positive());
  cmd->add_option("--layers", f->layers, "override: transformer blocks")->check(positive());
  cmd->add_option("--d-model", f->d_model, "override: hidden size")->check(positive());
  cmd->add_option("--heads", f->heads, "override: attention heads")->check(positive());
  cmd->add_option("--kv-heads", f->kv_heads, "override: key-value heads (grouped-query attention)")->check(positive());
  cmd->add_option("--ffn", f->ffn, "override: feed-forward hidden size")->check(positive());
  cmd->add_option("--vocab", f->vocab, "override: vocabulary size")->check(positive());
  cmd->add_option("--seq", f->seq, "override: sequence length")->check(positive());
  cmd->add_option("--gpus", f->gpus, "GPUs in the job (= tp x pp x dp)")->check(positive());
  cmd->add_option("--tp", f->tp, "tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", f->pp, "pipeline-parallel size")->capture_default_str();
  cmd->add_option("--dp", f->dp, "data-parallel size (default: gpus / (tp x pp))")->check(positive());
  cmd->add_option("--zero", f->zero, "ZeRO stage 0-3")->capture_default_str();
  cmd->add_option("--precision", f->precision, "fp32-adam | mixed-adam | megatron-dist | fp16-weights")
      ->capture_default_str();
  cmd->add_option("--micro-batch", f->micro_batch, "sequences per micro-batch")->capture_default_str();
  cmd->add_option("--global-batch", f->global_batch, "sequences per iteration")->check(positive());
  cmd->add_flag("--recompute", f->recompute, "full activation recomputation");
  cmd->add_flag("--sequence-parallel", f->sequence_parallel, "Megatron sequence parallelism");
  cmd->add_option("--gpu", f->gpu, "a100-40gb | a100-80gb | h100-80gb | v100-16gb | v100-32gb")->capture_default_str();
  cmd->add_option("--gpu-memory", f->gpu_memory_gb, "override: GPU memory in GB")->check(positive());
  cmd->add_option("--watts", f->watts, "override: power per GPU in W")->check(positive());
  cmd->add_option("--tokens", f->tokens, "training tokens (for time, power and data)")->check(non_negative());
  cmd->add_option("--tflops", f->tflops, "achieved TFLOP/s per GPU (default: --mfu x peak)")->check(positive());
  cmd->add_option("--mfu", f->mfu, "model FLOPs utilization")->capture_default_str();
  cmd->add_option("--price", f->price, "dollars per kWh")->capture_default_str()->check(non_negative());
  cmd->add_option("--bytes-per-token", f->bytes_per_token, "dataset bytes per token")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--gpus-per-node", f->gpus_per_node, "GPUs sharing an NVLink domain")->capture_default_str();
  cmd->add_option("--nvlink-gbps", f->nvlink_gbps, "NVLink GB/s per GPU and direction")->capture_default_str();
  cmd->add_option("--rail-gbps", f->rail_gbps, "network GB/s per GPU and direction")->capture_default_str();
  cmd->add_flag("--json", f->json, "print JSON");
  cmd->add_option("--emit-workload", f->emit_workload,
                  "write one iteration as per-rank traces into this folder (for weft sim; needs --global-batch)");
  cmd->add_option("--report", f->report, "write an HTML report of the plan or the sweep (docs/reports.md)");
  cmd->add_flag("--sweep", f->sweep, "rank every layout that fits by estimated iteration time (needs --gpus, --global-batch)");
  cmd->add_option("--top", f->top, "--sweep: rows to show")->capture_default_str()->check(positive());
  cmd->callback([f, &action] { action = [f] { return run_plan(*f); }; });
}

}  // namespace weft::cli
