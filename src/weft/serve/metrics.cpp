#include "weft/serve/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "weft/util/error.h"

namespace weft::serve {

void Metrics::counter(const std::string& name, const std::string& help) {
  std::lock_guard lock(mu_);
  families_[name] = {help, "counter", {}, {}};
}

void Metrics::gauge(const std::string& name, const std::string& help) {
  std::lock_guard lock(mu_);
  families_[name] = {help, "gauge", {}, {}};
}

void Metrics::histogram(const std::string& name, const std::string& help, std::vector<double> buckets) {
  std::sort(buckets.begin(), buckets.end());
  std::lock_guard lock(mu_);
  families_[name] = {help, "histogram", std::move(buckets), {}};
}

Metrics::Family& Metrics::family(const std::string& name) {
  auto it = families_.find(name);
  WEFT_CHECK(it != families_.end(), "Metrics: undeclared metric " + name);
  return it->second;
}

void Metrics::add(const std::string& name, double value, const std::string& labels) {
  std::lock_guard lock(mu_);
  family(name).series[labels].value += value;
}

void Metrics::set(const std::string& name, double value, const std::string& labels) {
  std::lock_guard lock(mu_);
  family(name).series[labels].value = value;
}

void Metrics::observe(const std::string& name, double value, const std::string& labels) {
  std::lock_guard lock(mu_);
  Family& f = family(name);
  Series& s = f.series[labels];
  s.counts.resize(f.buckets.size() + 1);
  const auto bucket = std::lower_bound(f.buckets.begin(), f.buckets.end(), value) - f.buckets.begin();
  ++s.counts[static_cast<std::size_t>(bucket)];
  s.sum += value;
  ++s.count;
}

double Metrics::value(const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mu_);
  auto f = families_.find(name);
  if (f == families_.end()) return 0;
  auto s = f->second.series.find(labels);
  return s == f->second.series.end() ? 0 : s->second.value;
}

std::string Metrics::text() const {
  std::lock_guard lock(mu_);
  std::string out;
  auto braces = [](const std::string& labels, const std::string& extra) {
    std::string all = labels;
    if (!extra.empty()) all += (all.empty() ? "" : ",") + extra;
    return all.empty() ? std::string() : "{" + all + "}";
  };
  for (const auto& [name, f] : families_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, f.type);
    if (f.type != "histogram" && f.series.empty()) out += name + " 0\n";
    for (const auto& [labels, s] : f.series) {
      if (f.type != "histogram") {
        out += fmt::format("{}{} {}\n", name, braces(labels, ""), s.value);
        continue;
      }
      std::uint64_t cumulative = 0;
      for (std::size_t b = 0; b <= f.buckets.size(); ++b) {
        cumulative += b < s.counts.size() ? s.counts[b] : 0;
        const std::string le = b < f.buckets.size() ? fmt::format("{}", f.buckets[b]) : "+Inf";
        out += fmt::format("{}_bucket{} {}\n", name, braces(labels, "le=\"" + le + "\""), cumulative);
      }
      out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces(labels, ""), s.sum, name, braces(labels, ""), s.count);
    }
  }
  return out;
}

}  // namespace weft::serve
