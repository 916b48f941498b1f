#include "weft/plan/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "weft/util/error.h"

namespace weft::plan {

Rate PlanInput::rate() const {
  Rate r;
  r.kernels.peak_flops = gpu.peak_flops;
  r.kernels.memory_bandwidth = gpu.memory_bandwidth;
  r.kernels.gemm_efficiency = gemm_efficiency;
  r.kernels.attention_efficiency = attention_efficiency;
  r.kernels.sms = gpu.sms;
  if (layout.fp8) r.kernels.fp8_peak_flops = gpu.peak_fp8_flops;
  if (achieved_flops > 0) {
    r.kind = rate_kind;
    r.hardware_flops = achieved_flops;
  } else if (mfu > 0) {
    r.kind = RateKind::kEndToEnd;
    r.mfu = mfu;
  } else {
    r.kind = RateKind::kPredicted;
  }
  return r;
}

namespace {
std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1e12) std::snprintf(buf, sizeof buf, "%.2f TB", b / 1e12);
  else if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  return buf;
}
std::string fmt_dim(const char* what, const DimensionTraffic& d) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s %s in %.3f s (%s, %.3f s exposed), ", what, human_bytes(d.bytes).c_str(), d.seconds,
                d.link, d.exposed_s);
  return buf;
}
std::string human_count(double n) {
  if (n < 1e6) return std::to_string(static_cast<long long>(n));
  char buf[64];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  return buf;
}
}  // namespace

PlanReport make_plan(const PlanInput& in) {
  PlanReport r;
  r.input = in;
  const Layout& l = in.layout;
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.cp < 1 || l.ep < 1) throw ConfigError("--tp, --pp, --dp, --cp and --ep must be at least 1");
  if (l.ep > 1 && (l.dp * l.cp) % l.ep != 0)
    throw ConfigError("--ep " + std::to_string(l.ep) + " must divide the data-parallel size " + std::to_string(l.dp * l.cp));
  if (l.ep > 1 && (in.parameters || !in.model.moe()))
    throw ConfigError("--ep " + std::to_string(l.ep) + " spreads a mixture of experts' experts: the model has none (--experts)");
  if (l.ep > 1 && in.model.experts % l.ep != 0)
    throw ConfigError("--ep " + std::to_string(l.ep) + " must divide the model's " + std::to_string(in.model.experts) +
                      " experts (each expert-parallel rank holds experts / ep of them)");
  if (in.parameters && !(*in.parameters > 0)) throw ConfigError("--params must be positive");
  if (in.tokens < 0) throw ConfigError("--tokens must be >= 0");
  if (!(in.mfu >= 0 && in.mfu <= 1)) throw ConfigError("--mfu must be in (0, 1]");
  if (in.achieved_flops < 0) throw ConfigError("--tflops must be positive");
  if (!(in.gemm_efficiency > 0 && in.gemm_efficiency <= 1)) throw ConfigError("--gemm-efficiency must be in (0, 1]");
  if (l.fp8 && !(in.gpu.peak_fp8_flops > 0)) throw ConfigError("--fp8: the " + in.gpu.name + " has no FP8 tensor cores");
  const Rate rate = in.rate();
  const double gpus = l.gpus();
  if (in.parameters) {
    r.parameters = r.active_parameters = *in.parameters;
    r.memory = state_memory(r.parameters / (l.tp * l.pp), in.precision, l);
    r.model_flops_per_token = 6 * r.parameters;
    r.flops_per_token = (l.full_recompute() ? 8 : 6) * r.parameters;
    r.assumptions.push_back("model given by its parameter count only: no activations, parameters split evenly by "
                            "tensor and pipeline parallelism, FLOPs per token 6N (8N with full recomputation)");
  } else {
    check_shape(in.model, l.tp);
    // Context parallelism splits the sequence into 2 cp equal chunks, two per GPU (the
    // load-balanced ring of Megatron-LM's context parallelism, causal work evened out).
    if (l.cp > 1 && in.model.seq_len % (2 * static_cast<std::int64_t>(l.cp)) != 0)
      throw ConfigError(fmt::format("--seq {} is not a multiple of 2 x cp ({}): context parallelism gives each GPU two of "
                                    "2 cp equal chunks of the sequence", in.model.seq_len, 2 * l.cp));
    if (l.full_recompute() && l.recompute_layers > 0) {
      const std::vector<std::int64_t> layers = stage_layers(in.model, l);
      const std::int64_t most = *std::max_element(layers.begin(), layers.end());
      if (l.recompute_layers > most)
        throw ConfigError(fmt::format("--recompute-layers {} exceeds the {} layers of the largest pipeline stage (0: all of them)",
                                      l.recompute_layers, most));
    }
    r.counts = count_parameters(in.model);
    r.parameters = static_cast<double>(r.counts.total);
    r.active_parameters = static_cast<double>(r.counts.active);
    r.memory = training_memory(in.model, in.precision, l);
    r.model_flops_per_token = model_flops_per_token(in.model);
    r.flops_per_token = hardware_flops_per_token(in.model, l);
    r.assumptions.push_back("memory is for the pipeline stage that needs the most (stage " + std::to_string(r.memory.stage) + ")");
    std::string acts = std::string("activations: Korthikanti et al. 2022's terms at the model's widths, 16-bit, recomputation ") +
                       recompute_name(l.recompute);
    if (l.flash_attention) acts += ", FlashAttention (no s x s scores stored)";
    if (l.fp8) acts += ", the GEMMs' saved inputs in FP8 and FP8 weight copies (2 bytes per weight)";
    if (l.interleave > 1) acts += ", interleaved schedule of " + std::to_string(l.interleave) + " chunks";
    r.assumptions.push_back(acts);
    r.assumptions.push_back("FLOPs per token: 6N + 12 L d s (PaLM, appendix B; N the parameters a token multiplies)"
                            ", plus what is recomputed for the hardware FLOPs");
  }
  r.fits = r.memory.total() <= in.gpu.memory_bytes;
  if (in.global_batch > 0 && !in.parameters) {
    r.iteration = estimate_iteration(in.model, in.precision, l, in.cluster, in.global_batch, rate);
    char buf[300];
    std::snprintf(buf, sizeof buf,
                  "links: NVLink domain of %d GPUs at %.0f GB/s, rails at %.0f GB/s per GPU; tensor parallelism inside "
                  "a node, pipeline and data parallelism across; ring algorithms (alpha-beta)",
                  in.cluster.gpus_per_node, in.cluster.nvlink.bytes_per_second / 1e9, in.cluster.rail.bytes_per_second / 1e9);
    r.assumptions.push_back(buf);
    std::string overlap = l.grad_reduce_after_backward
                              ? "overlap: the data-parallel reduction after the last backward (--grad-reduce after-backward), "
                                "all of it exposed"
                              : "overlap: data-parallel reduction behind the last micro-batch's backward and the parameter "
                                "all-gather behind the first forward, but for one layer's bucket each";
    if (l.zero3_gather_for_recompute) overlap += "; ZeRO 3 gathers the weights again for the recomputed forward";
    if (l.pp > 1)
      overlap += l.pipeline_sends_overlapped ? "; pipeline sends behind the compute (--pipeline-sends overlapped)"
                                             : "; pipeline sends blocking between a stage's passes";
    r.assumptions.push_back(overlap + "; tensor- and expert-parallel collectives on the critical path; ring attention "
                            "behind attention");
  }
  r.min_gpus_weights_only = min_gpus(2 * r.parameters, in.gpu.memory_bytes);
  if (!in.parameters) {
    char overheads[200];
    std::snprintf(overheads, sizeof overheads,
                  "overheads: %.1f GB runtime (CUDA context, workspaces, communication buffers), %.0f%% of activations "
                  "and buffers lost to fragmentation", l.runtime_bytes / 1e9, 100 * l.fragmentation);
    r.assumptions.push_back(overheads);
  }
  r.assumptions.push_back(std::string("model states: ") + precision_name(in.precision) +
                          (l.zero ? ", ZeRO stage " + std::to_string(l.zero) + " over " + std::to_string(l.dp * l.cp) + " ranks"
                                  : ""));
  // The rate, read one way, and everything that follows from it.
  r.time_basis = rate_kind_name(rate.kind);
  char buf[300];
  if (r.iteration) {
    const IterationEstimate& e = *r.iteration;
    r.flops_per_gpu = e.hardware_flops / (e.iteration_s * gpus);
    r.mfu = e.mfu;
    r.hfu = e.hfu;
  } else if (rate.kind == RateKind::kPredicted) {
    if (in.parameters && in.tokens > 0)
      throw ConfigError("a model given by --params needs --tflops or --mfu for a time (nothing to predict a rate from)");
    r.flops_per_gpu = in.parameters ? 0 : predicted_kernel_flops(in.model, l, rate);
  } else {
    r.flops_per_gpu = rate.hardware_flops > 0 ? rate.hardware_flops
                                              : rate.mfu * in.gpu.peak_flops * r.flops_per_token / r.model_flops_per_token;
  }
  if (!r.iteration && r.flops_per_gpu > 0) {
    r.mfu = r.flops_per_gpu * r.model_flops_per_token / r.flops_per_token / in.gpu.peak_flops;
    r.hfu = r.flops_per_gpu / in.gpu.peak_flops;
  }
  if (rate.kind == RateKind::kEndToEnd)
    std::snprintf(buf, sizeof buf, "rate: %s end to end (communication and bubble included), as papers report it",
                  rate.hardware_flops > 0 ? "the given TFLOP/s" : "the given MFU");
  else if (rate.kind == RateKind::kKernel)
    std::snprintf(buf, sizeof buf, "rate: the given TFLOP/s while computing; the iteration adds the bubble and exposed communication");
  else
    std::snprintf(buf, sizeof buf, "rate: predicted kernel by kernel, large %sGEMMs at %.3f of the peak (less as their shapes "
                  "leave SMs idle), FlashAttention at %.2f, memory-bound kernels at 80%% of %.2f TB/s%s", l.fp8 ? "FP8 " : "",
                  in.gemm_efficiency, in.attention_efficiency, in.gpu.memory_bandwidth / 1e12,
                  r.iteration ? "" : " (no --global-batch: compute only, no bubble or communication)");
  r.assumptions.push_back(buf);
  if (in.tokens > 0) {
    if (r.iteration) {
      const double tokens_per_iteration = static_cast<double>(in.global_batch) * static_cast<double>(in.model.seq_len);
      r.iterations = in.tokens / tokens_per_iteration;
      r.training_seconds = r.iterations * r.iteration->iteration_s;
    } else {
      r.training_seconds = in.tokens * r.flops_per_token / (gpus * r.flops_per_gpu);
    }
    r.gpu_hours = r.training_seconds * gpus / 3600.0;
    r.energy_kwh = energy_kwh(in.gpu.watts, gpus, r.training_seconds / 3600.0);
    r.energy_cost = r.energy_kwh * in.price_per_kwh;
    r.dataset_bytes = dataset_bytes(in.tokens, in.bytes_per_token);
    std::snprintf(buf, sizeof buf, "power: %.0f W per GPU, all the time, $%.2f per kWh (seed 002 chapter 8's method)",
                  in.gpu.watts, in.price_per_kwh);
    r.assumptions.push_back(buf);
    std::snprintf(buf, sizeof buf, "dataset: %.2f bytes per token (seed 004)", in.bytes_per_token);
    r.assumptions.push_back(buf);
  }
  return r;
}

std::string PlanReport::to_text() const {
  const Layout& l = input.layout;
  std::string out;
  char buf[512];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    out += buf;
    out += "\n";
  };
  const std::string name = input.model.name.empty() ? "custom" : input.model.name;
  if (active_parameters < parameters)
    line("model        %s: %s parameters, %s active per token", name.c_str(), human_count(parameters).c_str(),
         human_count(active_parameters).c_str());
  else
    line("model        %s: %s parameters", name.c_str(), human_count(parameters).c_str());
  if (!input.parameters) {
    const TransformerSpec& m = input.model;
    line("             %lld layers, d %lld, %lld heads (%lld key-value), feed-forward %lld, vocabulary %lld, sequence %lld",
         static_cast<long long>(m.layers), static_cast<long long>(m.d_model), static_cast<long long>(m.heads),
         static_cast<long long>(m.kv()), static_cast<long long>(m.ffn_size()), static_cast<long long>(m.vocab),
         static_cast<long long>(m.seq_len));
    if (m.moe()) {
      line("             %lld experts of %lld, top %lld, %lld shared, first %lld layers dense; per MoE layer %s (router %s, "
           "expert %s)", static_cast<long long>(m.experts), static_cast<long long>(m.expert_size()),
           static_cast<long long>(m.top_k), static_cast<long long>(m.shared_experts), static_cast<long long>(m.dense_layers),
           human_count(counts.moe_block).c_str(), human_count(counts.router).c_str(), human_count(counts.expert).c_str());
      if (m.capacity_factor > 0)
        line("             expert capacity %.2f: %.2f token copies computed and sent per token (top %lld), dropped beyond",
             m.capacity_factor, m.routed_copies(), static_cast<long long>(m.top_k));
    }
    line("             per block %s (attention %s, feed-forward %s, norms %s), embedding %s, final norm %s, head %s",
         human_count(counts.block).c_str(), human_count(counts.attention).c_str(), human_count(counts.ffn).c_str(),
         human_count(counts.norms).c_str(), human_count(counts.embedding).c_str(), human_count(counts.final_norm).c_str(),
         counts.lm_head ? human_count(counts.lm_head).c_str() : "tied");
  }
  std::string dims = "tensor " + std::to_string(l.tp) + " x pipeline " + std::to_string(l.pp) + " x data " + std::to_string(l.dp);
  if (l.cp > 1) dims += " x context " + std::to_string(l.cp);
  if (l.ep > 1) dims += " (experts over " + std::to_string(l.ep) + ")";
  std::string extras;
  if (l.recompute != Recompute::kNone) extras += std::string("; recomputation ") + recompute_name(l.recompute);
  if (l.full_recompute() && l.recompute_layers > 0) extras += " (" + std::to_string(l.recompute_layers) + " layers per stage)";
  if (l.sequence_parallel) extras += "; sequence parallel";
  if (l.flash_attention) extras += "; FlashAttention";
  if (l.fp8) extras += "; FP8 GEMMs";
  if (l.interleave > 1) extras += "; interleaved x" + std::to_string(l.interleave);
  line("layout       %d GPUs = %s; %s; ZeRO %d%s", l.gpus(), dims.c_str(), precision_name(input.precision), l.zero,
       extras.c_str());
  if (!input.parameters && l.pp > 1) {
    std::string split;
    for (std::int64_t n : stage_layers(input.model, l)) split += (split.empty() ? "" : " ") + std::to_string(n);
    line("             layers per stage: %s", split.c_str());
  }
  line("memory/GPU   weights %s, gradients %s, optimizer %s, activations %s, buffers %s, runtime and fragmentation %s",
       human_bytes(memory.weights).c_str(), human_bytes(memory.gradients).c_str(), human_bytes(memory.optimizer).c_str(),
       human_bytes(memory.activations).c_str(), human_bytes(memory.buffers).c_str(), human_bytes(memory.overhead).c_str());
  if (memory.host > 0)
    line("             offloaded (%s) to host memory: %s per GPU", offload_name(l.offload), human_bytes(memory.host).c_str());
  if (memory.nvme > 0)
    line("             offloaded (%s) to NVMe: %s per GPU", offload_name(l.offload), human_bytes(memory.nvme).c_str());
  line("             total %s of %s (%s): %s", human_bytes(memory.total()).c_str(), human_bytes(input.gpu.memory_bytes).c_str(),
       input.gpu.name.c_str(), fits ? "fits" : "does NOT fit");
  line("             16-bit weights alone need %lld GPU(s) of this kind", static_cast<long long>(min_gpus_weights_only));
  if (iteration) {
    const IterationEstimate& e = *iteration;
    std::string traffic = fmt_dim("tensor", e.tensor) + fmt_dim("pipeline", e.pipeline) + fmt_dim("data", e.data);
    if (l.cp > 1) traffic += fmt_dim("context", e.context);
    if (input.model.moe() && l.ep > 1) traffic += fmt_dim("expert", e.expert);
    if (l.offload != Offload::kNone) traffic += fmt_dim("offload", e.host);
    line("traffic/GPU  %s per iteration", traffic.substr(0, traffic.size() - 2).c_str());
    const std::string optimizer = e.optimizer_s > 0 ? fmt::format(" + optimizer step {:.3f} s", e.optimizer_s) : "";
    line("iteration    compute %.3f s (at %.0f TFLOP/s per GPU) + bubble %.1f%% (%.3f s)%s + exposed communication: %.3f s; "
         "%.3f s without overlap", e.compute_s, e.kernel_flops / 1e12, 100 * e.bubble, e.bubble_s, optimizer.c_str(),
         e.iteration_overlap_s, e.iteration_no_overlap_s);
    line("             the plan's iteration: %.3f s (%s), %.0f tokens/s, MFU %.1f%%, HFU %.1f%%", e.iteration_s,
         time_basis.c_str(), e.tokens_per_second, 100 * mfu, 100 * hfu);
  }
  if (training_seconds > 0) {
    if (iterations > 0)
      line("time         %.3g tokens = %.0f iterations = %.1f days on %d GPUs (%.3g GPU-hours); %.3g FLOPs per token "
           "(model %.3g)", input.tokens, iterations, training_seconds / 86400.0, l.gpus(), gpu_hours, flops_per_token,
           model_flops_per_token);
    else
      line("time         %.3g tokens: %.1f days on %d GPUs (%.3g GPU-hours) at %.0f TFLOP/s per GPU (%s; MFU %.1f%%, "
           "HFU %.1f%%); %.3g FLOPs per token (model %.3g)", input.tokens, training_seconds / 86400.0, l.gpus(), gpu_hours,
           flops_per_gpu / 1e12, time_basis.c_str(), 100 * mfu, 100 * hfu, flops_per_token, model_flops_per_token);
    line("             %.3g FLOPs in all (the 6 N T of scaling-law papers: %.3g)", input.tokens * model_flops_per_token,
         6 * active_parameters * input.tokens);
    line("power        %.0f MWh, $%.0f", energy_kwh / 1000.0, energy_cost);
    line("data         %s of training text", human_bytes(dataset_bytes).c_str());
  }
  out += "assumptions\n";
  for (const auto& a : assumptions) out += "  - " + a + "\n";
  return out;
}

nlohmann::json PlanReport::to_json() const {
  const Layout& l = input.layout;
  const TransformerSpec& ms = input.model;
  nlohmann::json j = {
      {"model", ms.name.empty() ? "custom" : ms.name},
      {"parameters", parameters},
      {"active_parameters", active_parameters},
      {"layout", {{"gpus", l.gpus()}, {"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"cp", l.cp}, {"ep", l.ep},
                  {"zero", l.zero}, {"recompute", recompute_name(l.recompute)}, {"recompute_layers", l.recompute_layers},
                  {"sequence_parallel", l.sequence_parallel}, {"flash_attention", l.flash_attention},
                  {"fp8", l.fp8}, {"interleave", l.interleave}, {"micro_batch", l.micro_batch}, {"micro_batches", l.micro_batches},
                  {"grad_reduce", l.grad_reduce_after_backward ? "after-backward" : "overlapped"},
                  {"zero3_regather", l.zero3_gather_for_recompute},
                  {"pipeline_sends", l.pipeline_sends_overlapped ? "overlapped" : "blocking"},
                  {"global_batch", input.global_batch}}},
      {"precision", precision_name(input.precision)},
      {"gpu", {{"name", input.gpu.name}, {"memory_bytes", input.gpu.memory_bytes}, {"peak_flops", input.gpu.peak_flops},
               {"peak_fp8_flops", input.gpu.peak_fp8_flops}, {"memory_bandwidth", input.gpu.memory_bandwidth},
               {"watts", input.gpu.watts}}},
      {"links", {{"gpus_per_node", input.cluster.gpus_per_node},
                 {"nvlink_bytes_per_second", input.cluster.nvlink.bytes_per_second},
                 {"nvlink_latency_s", input.cluster.nvlink.latency_s},
                 {"rail_bytes_per_second", input.cluster.rail.bytes_per_second},
                 {"rail_latency_s", input.cluster.rail.latency_s}}},
      {"memory_per_gpu", {{"weights", memory.weights}, {"gradients", memory.gradients}, {"optimizer", memory.optimizer},
                          {"activations", memory.activations}, {"buffers", memory.buffers}, {"overhead", memory.overhead},
                          {"host", memory.host}, {"nvme", memory.nvme}, {"total", memory.total()}, {"fits", fits}, {"stage", memory.stage}}},
      {"min_gpus_weights_only", min_gpus_weights_only},
      {"flops_per_token", flops_per_token},
      {"model_flops_per_token", model_flops_per_token},
      {"rate", {{"basis", time_basis}, {"achieved_tflops", flops_per_gpu / 1e12}, {"mfu", mfu}, {"hfu", hfu},
                {"given_tflops", input.achieved_flops / 1e12}, {"given_mfu", input.mfu}}},
      {"assumptions", assumptions}};
  if (!input.parameters) {
    j["dimensions"] = {{"layers", ms.layers}, {"d_model", ms.d_model}, {"heads", ms.heads}, {"kv_heads", ms.kv()},
                       {"ffn", ms.ffn_size()}, {"vocab", ms.vocab}, {"seq_len", ms.seq_len},
                       {"tied_embeddings", ms.tied_embeddings}, {"gated_ffn", ms.gated_ffn},
                       {"experts", ms.experts}, {"top_k", ms.top_k}, {"expert_ffn", ms.expert_size()},
                       {"shared_experts", ms.shared_experts}, {"dense_layers", ms.dense_layers},
                       {"capacity_factor", ms.capacity_factor}};
    // Every count: embedding + blocks + final_norm + lm_head = total.
    j["parameter_counts"] = {{"embedding", counts.embedding}, {"attention_per_block", counts.attention},
                             {"ffn_per_block", counts.ffn}, {"norms_per_block", counts.norms}, {"block", counts.block},
                             {"moe_block", counts.moe_block}, {"router", counts.router}, {"expert", counts.expert},
                             {"blocks", counts.blocks}, {"final_norm", counts.final_norm}, {"lm_head", counts.lm_head},
                             {"total", counts.total}, {"active", counts.active}};
    j["layers_per_stage"] = stage_layers(ms, l);
  }
  if (iteration) {
    const IterationEstimate& e = *iteration;
    auto dim = [](const DimensionTraffic& d) {
      return nlohmann::json{{"bytes", d.bytes}, {"seconds", d.seconds}, {"exposed_seconds", d.exposed_s}, {"link", d.link}};
    };
    j["iteration"] = {{"tensor", dim(e.tensor)},       {"pipeline", dim(e.pipeline)}, {"host", dim(e.host)},
                      {"data", dim(e.data)},           {"context", dim(e.context)},
                      {"expert", dim(e.expert)},       {"kernel_tflops", e.kernel_flops / 1e12},
                      {"compute_seconds", e.compute_s}, {"memory_bound_seconds", e.memory_bound_s},
                      {"optimizer_seconds", e.optimizer_s},
                      {"bubble", e.bubble},            {"bubble_seconds", e.bubble_s},
                      {"no_overlap_seconds", e.iteration_no_overlap_s},
                      {"overlap_seconds", e.iteration_overlap_s},
                      {"seconds", e.iteration_s},      {"basis", rate_kind_name(e.basis)},
                      {"tokens_per_second", e.tokens_per_second}, {"mfu", e.mfu}, {"hfu", e.hfu}};
  }
  if (training_seconds > 0) {
    j["training"] = {{"tokens", input.tokens}, {"iterations", iterations}, {"seconds", training_seconds},
                     {"days", training_seconds / 86400.0}, {"gpu_hours", gpu_hours}, {"energy_kwh", energy_kwh},
                     {"energy_cost", energy_cost}, {"dataset_bytes", dataset_bytes}};
  }
  return j;
}

}  // namespace weft::plan
