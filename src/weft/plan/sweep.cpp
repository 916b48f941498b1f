#include "weft/plan/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "weft/util/error.h"
#include "weft/util/progress.h"

namespace weft::plan {

namespace {

template <typename T>
std::vector<T> or_default(const std::vector<T>& given, std::vector<T> fallback) {
  return given.empty() ? fallback : given;
}

}  // namespace

std::string layout_label(const Layout& l) {
  std::string s = fmt::format("tp {} pp {} dp {}", l.tp, l.pp, l.dp);
  if (l.cp > 1) s += fmt::format(" cp {}", l.cp);
  if (l.ep > 1) s += fmt::format(" ep {}", l.ep);
  s += fmt::format(" zero {} mb {}", l.zero, l.micro_batch);
  if (l.recompute != Recompute::kNone) s += std::string(" recompute ") + recompute_name(l.recompute);
  if (l.interleave > 1) s += fmt::format(" interleave {}", l.interleave);
  if (l.sequence_parallel) s += " sp";
  if (l.flash_attention) s += " flash";
  return s;
}

std::optional<SweepRow> evaluate_layout(const PlanInput& in) {
  const MemoryBreakdown m = training_memory(in.model, in.precision, in.layout);
  if (m.total() > in.gpu.memory_bytes) return std::nullopt;
  return SweepRow{in.layout, m, estimate_iteration(in.model, in.precision, in.layout, in.cluster, in.global_batch, in.rate()), {}};
}

std::vector<SweepRow> sweep_layouts(const PlanInput& in, std::int64_t gpus, const SweepSpace& space) {
  if (gpus < 1) throw ConfigError("--sweep needs --gpus");
  if (in.global_batch < 1) throw ConfigError("--sweep needs --global-batch");
  if (in.parameters) throw ConfigError("--sweep needs a model (a preset or its dimensions), not --params");
  check_shape(in.model);
  std::vector<int> tps, pps;
  for (int tp = 1; tp <= in.cluster.gpus_per_node; tp *= 2) tps.push_back(tp);
  for (int pp = 1; pp <= in.model.layers; ++pp) pps.push_back(pp);
  tps = or_default(space.tp, tps);
  pps = or_default(space.pp, pps);
  const auto cps = or_default(space.cp, {1}), eps = or_default(space.ep, {1}), zeros = or_default(space.zero, {0, 1, 2, 3});
  const auto interleaves = or_default(space.interleave, {in.layout.interleave});
  const auto mbs = or_default(space.micro_batch, {1, 2, 4});
  const auto recomputes = or_default(space.recompute, {in.layout.recompute});
  const auto sps = or_default(space.sequence_parallel, {in.layout.sequence_parallel ? 1 : 0});
  const auto flashes = or_default(space.flash_attention, {in.layout.flash_attention ? 1 : 0});
  for (const auto* switches : {&sps, &flashes})
    for (int v : *switches) if (v != 0 && v != 1) throw ConfigError("--sweep-sp and --sweep-flash take on and off");
  for (int v : tps) if (v < 1) throw ConfigError("--sweep-tp values must be at least 1");
  for (int v : pps) if (v < 1) throw ConfigError("--sweep-pp values must be at least 1");
  for (int v : space.dp) if (v < 1) throw ConfigError("--sweep-dp values must be at least 1");
  const Rate rate = in.rate();
  std::vector<SweepRow> rows;
  const long total = static_cast<long>(tps.size() * pps.size() * cps.size());
  // A sweep of a deep model on many GPUs takes a while: a progress line on stderr.
  Progress progress("sweep", total, stderr, 5.0, false);
  long tried = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int tp : tps) {
    for (int pp : pps) {
      for (int cp : cps) {
        ++tried;
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        progress.update(tried, elapsed / static_cast<double>(tried) * static_cast<double>(total - tried),
                        fmt::format("{} layouts fit so far", rows.size()));
        const std::int64_t model_gpus = static_cast<std::int64_t>(tp) * pp * cp;
        if (in.model.heads % tp != 0 || pp > in.model.layers || gpus % model_gpus != 0) continue;
        const int dp = static_cast<int>(gpus / model_gpus);
        if (in.global_batch % dp != 0) continue;
        if (!space.dp.empty() && std::find(space.dp.begin(), space.dp.end(), dp) == space.dp.end()) continue;
        for (int ep : eps) {
          if (ep > 1 && (!in.model.moe() || (dp * cp) % ep != 0 || in.model.experts % ep != 0)) continue;
          for (int zero : zeros) {
            if (zero > 0 && dp * cp == 1) continue;
            for (std::int64_t mb : mbs) {
              if ((in.global_batch / dp) % mb != 0) continue;
              for (Recompute rc : recomputes) {
                for (int v : interleaves) {
                  // Megatron's interleaved schedule: layers in pp x v equal chunks, micro-batches a
                  // multiple of pp.
                  if (v > 1 && (pp < 2 || in.model.layers % (static_cast<std::int64_t>(pp) * v) != 0 ||
                                (in.global_batch / dp / mb) % pp != 0))
                    continue;
                  for (int sp : sps) {
                    if (sp && tp == 1 && sps.size() > 1) continue;  // the same layout as without
                    for (int flash : flashes) {
                      // With FlashAttention selective recomputation changes nothing: one row.
                      if (flash && rc == Recompute::kSelective &&
                          std::find(recomputes.begin(), recomputes.end(), Recompute::kNone) != recomputes.end())
                        continue;
                      Layout l = in.layout;
                      l.tp = tp, l.pp = pp, l.dp = dp, l.cp = cp, l.ep = ep, l.zero = zero, l.micro_batch = mb;
                      l.micro_batches = in.global_batch / dp / mb;
                      l.recompute = rc;
                      l.recompute_layers = rc == Recompute::kFull ? in.layout.recompute_layers : 0;
                      l.interleave = v;
                      l.sequence_parallel = sp != 0 && tp > 1;
                      l.flash_attention = flash != 0;
                      l.first_stage_layers = l.last_stage_layers = 0;  // spread evenly, ends lighter
                      MemoryBreakdown m = training_memory(in.model, in.precision, l);
                      if (m.total() > in.gpu.memory_bytes) continue;
                      rows.push_back({l, m, estimate_iteration(in.model, in.precision, l, in.cluster, in.global_batch, rate), {}});
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  progress.finish();
  // Collapse ZeRO stages that change nothing but memory: the lowest stage within 0.5% of the
  // fastest of its layout stands for them.
  std::map<std::tuple<int, int, int, int, std::int64_t, int, int, bool, bool>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Layout& l = rows[i].layout;
    groups[{l.tp, l.pp, l.cp, l.ep, l.micro_batch, static_cast<int>(l.recompute), l.interleave, l.sequence_parallel,
            l.flash_attention}]
        .push_back(i);
  }
  std::vector<SweepRow> kept;
  for (auto& [key, members] : groups) {
    std::sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) { return rows[a].layout.zero < rows[b].layout.zero; });
    std::vector<bool> used(members.size(), false);
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (used[i]) continue;
      SweepRow row = rows[members[i]];
      for (std::size_t j = i + 1; j < members.size(); ++j) {
        const double t = rows[members[j]].iteration.iteration_overlap_s, base = row.iteration.iteration_overlap_s;
        if (!used[j] && std::abs(t - base) <= 0.005 * base) {
          used[j] = true;
          row.same_time_zero.push_back(rows[members[j]].layout.zero);
        }
      }
      kept.push_back(std::move(row));
    }
  }
  std::stable_sort(kept.begin(), kept.end(), [](const SweepRow& a, const SweepRow& b) {
    return a.iteration.iteration_overlap_s < b.iteration.iteration_overlap_s;
  });
  return kept;
}

std::size_t rank_among(const std::vector<SweepRow>& rows, const SweepRow& row) {
  std::size_t rank = 1;
  while (rank <= rows.size() && rows[rank - 1].iteration.iteration_overlap_s < row.iteration.iteration_overlap_s - 1e-12) ++rank;
  return rank;
}

std::string explain_difference(const SweepRow& faster, const SweepRow& slower) {
  const IterationEstimate &f = faster.iteration, &s = slower.iteration;
  std::vector<std::pair<double, std::string>> parts = {
      {s.compute_s - f.compute_s, "compute"},
      {s.bubble_s - f.bubble_s, "bubble"},
      {s.tensor.exposed_s - f.tensor.exposed_s, "tensor"},
      {s.pipeline.exposed_s - f.pipeline.exposed_s, "pipeline"},
      {s.data.exposed_s - f.data.exposed_s, "data"},
      {s.context.exposed_s - f.context.exposed_s, "context"},
      {s.expert.exposed_s - f.expert.exposed_s, "expert"}};
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return std::abs(a.first) > std::abs(b.first); });
  std::string out;
  for (const auto& [delta, what] : parts) {
    if (std::abs(delta) < 0.0005 * s.iteration_overlap_s) continue;
    out += fmt::format("{}{} {:+.3f} s", out.empty() ? "" : ", ", what, delta);
  }
  return out.empty() ? "the same" : out;
}

nlohmann::json sweep_to_json(const PlanInput& in, std::int64_t gpus, const std::vector<SweepRow>& rows, int top,
                             const std::optional<SweepRow>& reference) {
  auto row_json = [&](const SweepRow& r) {
    const Layout& l = r.layout;
    nlohmann::json j = {
        {"layout", {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"cp", l.cp}, {"ep", l.ep}, {"zero", l.zero},
                    {"micro_batch", l.micro_batch}, {"micro_batches", l.micro_batches},
                    {"recompute", recompute_name(l.recompute)}, {"interleave", l.interleave},
                    {"sequence_parallel", l.sequence_parallel}, {"flash_attention", l.flash_attention}}},
        {"label", layout_label(l)},
        {"same_time_zero", r.same_time_zero},
        {"memory_per_gpu", {{"weights", r.memory.weights}, {"gradients", r.memory.gradients},
                            {"optimizer", r.memory.optimizer}, {"activations", r.memory.activations},
                            {"buffers", r.memory.buffers}, {"overhead", r.memory.overhead},
                            {"total", r.memory.total()}, {"headroom", in.gpu.memory_bytes - r.memory.total()}}},
        {"iteration", {{"bubble", r.iteration.bubble}, {"overlap_seconds", r.iteration.iteration_overlap_s},
                       {"no_overlap_seconds", r.iteration.iteration_no_overlap_s}, {"compute_seconds", r.iteration.compute_s},
                       {"bubble_seconds", r.iteration.bubble_s}, {"tensor_exposed_seconds", r.iteration.tensor.exposed_s},
                       {"pipeline_exposed_seconds", r.iteration.pipeline.exposed_s},
                       {"data_exposed_seconds", r.iteration.data.exposed_s}}}};
    if (!rows.empty()) j["slower_than_fastest"] = explain_difference(rows.front(), r);
    return j;
  };
  nlohmann::json layouts = nlohmann::json::array();
  for (const SweepRow& r : rows) layouts.push_back(row_json(r));
  nlohmann::json out = {{"kind", "sweep"},
                        {"model", in.model.name.empty() ? "custom" : in.model.name},
                        {"gpus", gpus},
                        {"global_batch", in.global_batch},
                        {"precision", precision_name(in.precision)},
                        {"gpu", {{"name", in.gpu.name}, {"memory_bytes", in.gpu.memory_bytes}}},
                        {"rate", rate_kind_name(in.rate().kind == RateKind::kKernel ? RateKind::kKernel : RateKind::kPredicted)},
                        {"top", top},
                        {"layouts", layouts}};
  if (reference) {
    nlohmann::json ref = row_json(*reference);
    ref["rank"] = rank_among(rows, *reference);
    if (!rows.empty()) ref["fastest_is_faster_by"] = explain_difference(rows.front(), *reference);
    out["reference"] = ref;
  }
  return out;
}

}  // namespace weft::plan
