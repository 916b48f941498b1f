// The plan part of a report, from weft plan --json (one layout) or weft plan --sweep --json
// (every layout that fits): memory per GPU as stacked bars (weights, gradients, optimizer,
// activations, and a KV cache when the plan has one) against the GPU's capacity, and for a
// sweep the iteration time of every layout against its memory, the fastest labelled.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace weft::report {

// Whether `doc` is a plan (it has "memory_per_gpu") or a sweep ("kind": "sweep").
bool is_plan(const nlohmann::json& doc);

// The report's sections; throws DataError naming `name` when a field is missing.
nlohmann::json plan_sections(const nlohmann::json& doc, const std::string& name);

}  // namespace weft::report
