#include "weft/plan/report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "weft/util/error.h"

namespace weft::plan {

GpuSpec gpu_preset(const std::string& name) {
  if (name == "a100-40gb") return {name, 40e9, 312e12, 400};
  if (name == "a100-80gb") return {name, 80e9, 312e12, 400};
  if (name == "h100-80gb") return {name, 80e9, 989e12, 700};
  if (name == "v100-16gb") return {name, 16e9, 125e12, 300};
  if (name == "v100-32gb") return {name, 32e9, 125e12, 300};
  throw ConfigError("unknown GPU '" + name + "' (known: a100-40gb, a100-80gb, h100-80gb, v100-16gb, v100-32gb)");
}

namespace {
std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1e12) std::snprintf(buf, sizeof buf, "%.2f TB", b / 1e12);
  else if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  return buf;
}
std::string human_count(double n) {
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
  if (l.tp < 1 || l.pp < 1 || l.dp < 1) throw ConfigError("--tp, --pp and --dp must be at least 1");
  if (in.parameters && !(*in.parameters > 0)) throw ConfigError("--params must be positive");
  if (in.tokens < 0) throw ConfigError("--tokens must be >= 0");
  if (!(in.mfu > 0 && in.mfu <= 1)) throw ConfigError("--mfu must be in (0, 1]");
  if (in.achieved_flops < 0) throw ConfigError("--tflops must be positive");
  const double flops = in.achieved_flops > 0 ? in.achieved_flops : in.mfu * in.gpu.peak_flops;
  if (in.parameters) {
    r.parameters = *in.parameters;
    r.memory = state_memory(r.parameters / (l.tp * l.pp), in.precision, l);
    r.flops_per_token = (l.recompute ? 8 : 6) * r.parameters;
    r.assumptions.push_back("model given by its parameter count only: no activations, parameters split evenly by "
                            "tensor and pipeline parallelism");
  } else {
    check_shape(in.model, l.tp);
    r.counts = count_parameters(in.model);
    r.parameters = static_cast<double>(r.counts.total);
    r.memory = training_memory(in.model, in.precision, l);
    r.flops_per_token = training_flops_per_token(in.model, l.recompute);
    r.assumptions.push_back("memory is for the first pipeline stage (the embedding makes it the largest)");
    r.assumptions.push_back("activations: Korthikanti et al. 2022, 16-bit, " +
                            std::to_string(std::min<std::int64_t>(l.pp, l.micro_batches)) + " micro-batch(es) in flight");
    r.assumptions.push_back("FLOPs per token: 6N + 12 L d s (PaLM, appendix B)" +
                            std::string(l.recompute ? ", plus one forward pass for recomputation" : ""));
  }
  r.fits = r.memory.total() <= in.gpu.memory_bytes;
  if (in.global_batch > 0 && !in.parameters) {
    r.iteration = estimate_iteration(in.model, in.precision, l, in.cluster, in.global_batch, flops);
    char buf[300];
    std::snprintf(buf, sizeof buf,
                  "links: NVLink domain of %d GPUs at %.0f GB/s, rails at %.0f GB/s per GPU; tensor parallelism inside "
                  "a node, pipeline and data parallelism across; ring algorithms (alpha-beta)",
                  in.cluster.gpus_per_node, in.cluster.nvlink.bytes_per_second / 1e9, in.cluster.rail.bytes_per_second / 1e9);
    r.assumptions.push_back(buf);
    r.assumptions.push_back("overlap: the data-parallel all-reduce hides behind backward (2/3 of the compute); "
                            "tensor-parallel all-reduces stay on the critical path");
  }
  r.min_gpus_weights_only = min_gpus(2 * r.parameters, in.gpu.memory_bytes);
  r.assumptions.push_back(std::string("model states: ") + precision_name(in.precision) +
                          (l.zero ? ", ZeRO stage " + std::to_string(l.zero) + " over " + std::to_string(l.dp) + " ranks"
                                  : ""));
  if (in.tokens > 0) {
    r.training_seconds = in.tokens * r.flops_per_token / (l.gpus() * flops);
    r.energy_kwh = energy_kwh(in.gpu.watts, l.gpus(), r.training_seconds / 3600.0);
    r.energy_cost = r.energy_kwh * in.price_per_kwh;
    r.dataset_bytes = dataset_bytes(in.tokens, in.bytes_per_token);
    char buf[200];
    std::snprintf(buf, sizeof buf, "%.0f TFLOP/s achieved per GPU (%s)", flops / 1e12,
                  in.achieved_flops > 0 ? "given" : ("MFU " + std::to_string(in.mfu).substr(0, 4) + " of peak").c_str());
    r.assumptions.push_back(buf);
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
  line("model        %s: %s parameters", input.model.name.empty() ? "custom" : input.model.name.c_str(),
       human_count(parameters).c_str());
  if (!input.parameters) {
    line("             per block %s (attention %s, feed-forward %s), embedding %s, head %s", human_count(counts.block).c_str(),
         human_count(counts.attention).c_str(), human_count(counts.ffn).c_str(), human_count(counts.embedding).c_str(),
         counts.lm_head ? human_count(counts.lm_head).c_str() : "tied");
  }
  line("layout       %d GPUs = tensor %d x pipeline %d x data %d; %s; ZeRO %d%s%s", l.gpus(), l.tp, l.pp, l.dp,
       precision_name(input.precision), l.zero, l.recompute ? "; recomputation" : "",
       l.sequence_parallel ? "; sequence parallel" : "");
  line("memory/GPU   weights %s, gradients %s, optimizer %s, activations %s", human_bytes(memory.weights).c_str(),
       human_bytes(memory.gradients).c_str(), human_bytes(memory.optimizer).c_str(), human_bytes(memory.activations).c_str());
  line("             total %s of %s (%s): %s", human_bytes(memory.total()).c_str(), human_bytes(input.gpu.memory_bytes).c_str(),
       input.gpu.name.c_str(), fits ? "fits" : "does NOT fit");
  line("             16-bit weights alone need %lld GPU(s) of this kind", static_cast<long long>(min_gpus_weights_only));
  if (training_seconds > 0) {
    line("compute      %.3g FLOPs per token; %.3g tokens: %.1f days on %d GPUs", flops_per_token, input.tokens,
         training_seconds / 86400.0, l.gpus());
    line("power        %.0f MWh, $%.0f", energy_kwh / 1000.0, energy_cost);
    line("data         %s of training text", human_bytes(dataset_bytes).c_str());
  }
  if (iteration) {
    const IterationEstimate& e = *iteration;
    line("traffic/GPU  tensor %s in %.3f s (%s), pipeline %s in %.3f s (%s), data %s in %.3f s (%s) per iteration",
         human_bytes(e.tensor.bytes).c_str(), e.tensor.seconds, e.tensor.link, human_bytes(e.pipeline.bytes).c_str(),
         e.pipeline.seconds, e.pipeline.link, human_bytes(e.data.bytes).c_str(), e.data.seconds, e.data.link);
    line("iteration    compute %.3f s + bubble %.1f%% (%.3f s): %.3f s without overlap, %.3f s with", e.compute_s,
         100 * e.bubble, e.bubble_s, e.iteration_no_overlap_s, e.iteration_overlap_s);
  }
  out += "assumptions\n";
  for (const auto& a : assumptions) out += "  - " + a + "\n";
  return out;
}

nlohmann::json PlanReport::to_json() const {
  const Layout& l = input.layout;
  nlohmann::json j = {
      {"model", input.model.name.empty() ? "custom" : input.model.name},
      {"parameters", parameters},
      {"layout", {{"gpus", l.gpus()}, {"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"zero", l.zero},
                  {"recompute", l.recompute}, {"sequence_parallel", l.sequence_parallel},
                  {"micro_batch", l.micro_batch}, {"micro_batches", l.micro_batches}}},
      {"precision", precision_name(input.precision)},
      {"gpu", {{"name", input.gpu.name}, {"memory_bytes", input.gpu.memory_bytes}, {"peak_flops", input.gpu.peak_flops},
               {"watts", input.gpu.watts}}},
      {"memory_per_gpu", {{"weights", memory.weights}, {"gradients", memory.gradients}, {"optimizer", memory.optimizer},
                          {"activations", memory.activations}, {"total", memory.total()}, {"fits", fits}}},
      {"min_gpus_weights_only", min_gpus_weights_only},
      {"flops_per_token", flops_per_token},
      {"assumptions", assumptions}};
  if (!input.parameters) {
    j["parameter_counts"] = {{"embedding", counts.embedding}, {"attention_per_block", counts.attention},
                             {"ffn_per_block", counts.ffn}, {"block", counts.block}, {"blocks", counts.blocks},
                             {"lm_head", counts.lm_head}, {"total", counts.total}};
  }
  if (iteration) {
    const IterationEstimate& e = *iteration;
    auto dim = [](const DimensionTraffic& d) {
      return nlohmann::json{{"bytes", d.bytes}, {"seconds", d.seconds}, {"link", d.link}};
    };
    j["iteration"] = {{"tensor", dim(e.tensor)},       {"pipeline", dim(e.pipeline)},
                      {"data", dim(e.data)},           {"compute_seconds", e.compute_s},
                      {"bubble", e.bubble},            {"bubble_seconds", e.bubble_s},
                      {"no_overlap_seconds", e.iteration_no_overlap_s},
                      {"overlap_seconds", e.iteration_overlap_s}};
  }
  if (training_seconds > 0) {
    j["training"] = {{"tokens", input.tokens}, {"seconds", training_seconds}, {"days", training_seconds / 86400.0},
                     {"energy_kwh", energy_kwh}, {"energy_cost", energy_cost}, {"dataset_bytes", dataset_bytes}};
  }
  return j;
}

}  // namespace weft::plan
