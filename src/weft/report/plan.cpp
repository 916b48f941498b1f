#include "weft/report/plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "weft/util/error.h"

namespace weft::report {

using nlohmann::json;

namespace {

const std::vector<std::pair<std::string, std::string>>& parts() {
  static const std::vector<std::pair<std::string, std::string>> p = {
      {"weights", "weights"}, {"gradients", "gradients"}, {"optimizer", "optimizer states"},
      {"activations", "activations"}, {"buffers", "buffers"}, {"overhead", "runtime and fragmentation"},
      {"kv_cache", "KV cache"}};
  return p;
}

double number(const json& j, const std::string& key, const std::string& name) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number())
    throw DataError(fmt::format("{}: no number '{}' (not a weft plan --json output?)", name, key));
  return j[key].get<double>();
}

std::string layout_label(const json& l) {
  std::string s = fmt::format("tp{} pp{} dp{}", l.value("tp", 1.0), l.value("pp", 1.0), l.value("dp", 1.0));
  if (l.value("zero", 0.0) > 0) s += fmt::format(" z{}", l.value("zero", 0.0));
  if (l.value("micro_batch", 1.0) > 1) s += fmt::format(" mb{}", l.value("micro_batch", 1.0));
  return s;
}

// Stacked bars of memory per GPU for `rows` ({label, memory_per_gpu}), with the capacity.
json memory_chart(const std::vector<std::pair<std::string, json>>& rows, double capacity, const std::string& name) {
  json categories = json::array(), series = json::array();
  for (const auto& [label, memory] : rows) categories.push_back(label);
  for (const auto& [key, label] : parts()) {
    json values = json::array();
    bool any = false;
    for (const auto& [row_label, memory] : rows) {
      const bool has = memory.contains(key);
      values.push_back(has ? number(memory, key, name) / 1e9 : 0.0);
      any = any || has;
    }
    if (any) series.push_back({{"name", label}, {"values", values}});
  }
  return {{"id", "memory"}, {"type", "bars"}, {"stacked", true}, {"title", "Memory per GPU"},
          {"how", "what each GPU holds (the first pipeline stage, the largest), against its capacity (dashed)"},
          {"y", "GB"}, {"categories", categories}, {"series", series},
          {"limit", {{"name", "GPU memory"}, {"value", capacity / 1e9}}}};
}

}  // namespace

bool is_plan(const json& doc) {
  return doc.is_object() && (doc.contains("memory_per_gpu") || doc.value("kind", std::string()) == "sweep");
}

json plan_sections(const json& doc, const std::string& name) {
  const json gpu = doc.value("gpu", json::object());
  const double capacity = number(gpu, "memory_bytes", name);
  const std::string model = doc.value("model", std::string("?"));
  json table = {{"columns", {"figure", "value"}}, {"rows", json::array()}};
  json charts = json::array(), notes = json::array();
  if (doc.value("kind", std::string()) == "sweep") {
    if (!doc.contains("layouts") || !doc["layouts"].is_array() || doc["layouts"].empty())
      throw DataError(name + ": a sweep without layouts");
    const auto& layouts = doc["layouts"];
    const std::size_t top = std::min<std::size_t>(layouts.size(), static_cast<std::size_t>(std::clamp(doc.value("top", 10.0), 1.0, 1e6)));
    std::vector<std::pair<std::string, json>> rows;
    json chosen = json::array(), others = json::array();
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      const json& l = layouts[i];
      const std::string label = layout_label(l.value("layout", json::object()));
      const double memory = number(l.value("memory_per_gpu", json::object()), "total", name) / 1e9;
      const double seconds = number(l.value("iteration", json::object()), "overlap_seconds", name);
      json point = {{"x", memory}, {"y", seconds}, {"label", label}};
      if (i < top) {
        point["mark"] = fmt::format("{}. {}", i + 1, label);
        chosen.push_back(point);
        rows.emplace_back(fmt::format("{}. {}", i + 1, label), l["memory_per_gpu"]);
      } else {
        others.push_back(point);
      }
    }
    charts.push_back({{"id", "sweep"}, {"type", "scatter"}, {"title", "Layouts: iteration time against memory"},
                      {"how", fmt::format("every layout that fits in {:.0f} GB; the {} fastest labelled with their rank",
                                          capacity / 1e9, top)},
                      {"x", "memory per GPU (GB)"}, {"y", "iteration (s)"},
                      {"series", json::array({{{"name", "the fastest"}, {"points", chosen}, {"radius", 5}},
                                              {{"name", "the others"}, {"points", others}, {"color", "#9aa3b5"}}})}});
    charts.push_back(memory_chart(rows, capacity, name));
    const json best = layouts[0];
    table["rows"].push_back({"model", model});
    table["rows"].push_back({"GPUs", fmt::format("{} × {}", doc.value("gpus", 0.0), gpu.value("name", std::string("?")))});
    table["rows"].push_back({"layouts that fit", layouts.size()});
    table["rows"].push_back({"fastest", fmt::format("{}: {:.3f} s per iteration, {:.1f} GB per GPU",
                                                    layout_label(best["layout"]), best["iteration"]["overlap_seconds"].get<double>(),
                                                    best["memory_per_gpu"]["total"].get<double>() / 1e9)});
    return json::array({{{"title", "Plan sweep: " + model}, {"notes", notes}, {"table", table}, {"charts", charts}}});
  }
  const json memory = doc["memory_per_gpu"];
  const json layout = doc.value("layout", json::object());
  charts.push_back(memory_chart({{layout_label(layout), memory}}, capacity, name));
  table["rows"].push_back({"model", fmt::format("{} ({:.3g} parameters)", model, doc.value("parameters", 0.0))});
  table["rows"].push_back({"layout", fmt::format("{} on {} GPUs ({})", layout_label(layout), layout.value("gpus", 0.0),
                                                 gpu.value("name", std::string("?")))});
  table["rows"].push_back({"memory per GPU", fmt::format("{:.1f} GB of {:.0f} GB: {}", number(memory, "total", name) / 1e9,
                                                         capacity / 1e9, memory.value("fits", false) ? "fits" : "does NOT fit")});
  if (doc.contains("iteration") && doc["iteration"].is_object()) {
    const json& it = doc["iteration"];
    // (Plans of the first edition have only overlap_seconds.)
    table["rows"].push_back({"iteration", fmt::format("{:.3f} s, {} (bubble {:.1f}%; MFU {:.1f}%, HFU {:.1f}%)",
                                                      it.value("seconds", it.value("overlap_seconds", 0.0)),
                                                      it.value("basis", std::string("predicted")), 100 * it.value("bubble", 0.0),
                                                      100 * it.value("mfu", 0.0), 100 * it.value("hfu", 0.0))});
  }
  if (doc.contains("training") && doc["training"].is_object()) {
    const json& t = doc["training"];
    table["rows"].push_back({"training", fmt::format("{:.1f} days, {:.3g} GPU-hours, {:.0f} kWh", t.value("days", 0.0),
                                                     t.value("gpu_hours", 0.0), t.value("energy_kwh", 0.0))});
  }
  for (const json& a : doc.value("assumptions", json::array()))
    if (a.is_string()) notes.push_back(a);
  return json::array({{{"title", "Plan: " + model}, {"notes", notes}, {"table", table}, {"charts", charts}}});
}

}  // namespace weft::report
