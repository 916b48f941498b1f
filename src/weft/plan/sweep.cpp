#include "weft/plan/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "weft/util/error.h"
#include "weft/util/progress.h"

namespace weft::plan {

std::vector<SweepRow> sweep_layouts(const PlanInput& in, std::int64_t gpus) {
  if (gpus < 1) throw ConfigError("--sweep needs --gpus");
  if (in.global_batch < 1) throw ConfigError("--sweep needs --global-batch");
  if (in.parameters) throw ConfigError("--sweep needs a model (a preset or its dimensions), not --params");
  check_shape(in.model);
  const Rate rate = in.rate();
  std::vector<SweepRow> rows;
  long tps = 0;
  for (int tp = 1; tp <= in.cluster.gpus_per_node; tp *= 2) ++tps;
  // A sweep of a deep model on many GPUs takes a while: a progress line on stderr.
  Progress progress("sweep", tps * in.model.layers, stderr, 5.0, false);
  long tried = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int tp = 1; tp <= in.cluster.gpus_per_node; tp *= 2) {
    if (in.model.heads % tp != 0 || gpus % tp != 0) {
      tried += in.model.layers;
      continue;
    }
    for (int pp = 1; pp <= in.model.layers; ++pp) {
      ++tried;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress.update(tried, elapsed / static_cast<double>(tried) * static_cast<double>(tps * in.model.layers - tried),
                      fmt::format("{} layouts fit so far", rows.size()));
      if (in.model.layers % pp != 0 || gpus % (static_cast<std::int64_t>(tp) * pp) != 0) continue;
      const int dp = static_cast<int>(gpus / (static_cast<std::int64_t>(tp) * pp));
      if (in.global_batch % dp != 0) continue;
      for (int zero = 0; zero <= 3; ++zero) {
        if (zero > 0 && dp == 1) continue;
        for (std::int64_t mb : {1, 2, 4}) {
          if ((in.global_batch / dp) % mb != 0) continue;
          Layout l = in.layout;
          l.tp = tp, l.pp = pp, l.dp = dp, l.zero = zero, l.micro_batch = mb;
          l.micro_batches = in.global_batch / dp / mb;
          MemoryBreakdown m = training_memory(in.model, in.precision, l);
          if (m.total() > in.gpu.memory_bytes) continue;
          rows.push_back({l, m, estimate_iteration(in.model, in.precision, l, in.cluster, in.global_batch, rate)});
        }
      }
    }
  }
  progress.finish();
  std::stable_sort(rows.begin(), rows.end(), [](const SweepRow& a, const SweepRow& b) {
    return a.iteration.iteration_overlap_s < b.iteration.iteration_overlap_s;
  });
  return rows;
}

nlohmann::json sweep_to_json(const PlanInput& in, std::int64_t gpus, const std::vector<SweepRow>& rows, int top) {
  nlohmann::json layouts = nlohmann::json::array();
  for (const SweepRow& r : rows) {
    const Layout& l = r.layout;
    layouts.push_back({{"layout", {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"zero", l.zero}, {"micro_batch", l.micro_batch},
                                   {"micro_batches", l.micro_batches}, {"recompute", l.recompute},
                                   {"sequence_parallel", l.sequence_parallel}}},
                       {"memory_per_gpu", {{"weights", r.memory.weights}, {"gradients", r.memory.gradients},
                                           {"optimizer", r.memory.optimizer}, {"activations", r.memory.activations},
                                           {"total", r.memory.total()}}},
                       {"iteration", {{"bubble", r.iteration.bubble}, {"overlap_seconds", r.iteration.iteration_overlap_s},
                                      {"no_overlap_seconds", r.iteration.iteration_no_overlap_s}}}});
  }
  return {{"kind", "sweep"},
                            {"model", in.model.name.empty() ? "custom" : in.model.name},
                            {"gpus", gpus},
                            {"global_batch", in.global_batch},
                            {"precision", precision_name(in.precision)},
                            {"gpu", {{"name", in.gpu.name}, {"memory_bytes", in.gpu.memory_bytes}}},
                            {"top", top},
                            {"layouts", layouts}};
}

}  // namespace weft::plan
