#include "weft/serve/metrics_merge.h"

#include <fmt/format.h>

#include <cstdlib>
#include <sstream>

namespace weft::serve {

namespace {
// "name{labels} 12.5" -> ("name", "name{labels}", 12.5); false for a line that is not a sample.
bool split_sample(const std::string& line, std::string& name, std::string& key, double& value) {
  const std::size_t brace = line.find('{');
  const std::size_t space = brace == std::string::npos ? line.find(' ') : line.find(' ', line.find('}', brace));
  if (space == std::string::npos || space == 0) return false;
  key = line.substr(0, space);
  name = line.substr(0, std::min(brace, space));
  const std::string number = line.substr(space + 1);
  char* end = nullptr;
  value = std::strtod(number.c_str(), &end);
  return end != number.c_str() && (*end == '\0' || *end == ' ');
}
}  // namespace

std::string family_of(const Exposition& e, const std::string& name) {
  if (e.families.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      auto it = e.families.find(base);
      if (it != e.families.end() && it->second == "histogram") return base;
    }
  }
  return "";
}

Exposition parse_exposition(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      if (words >> name >> type) e.families[name] = type;
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string rest = line.substr(7);
      const std::size_t space = rest.find(' ');
      if (space != std::string::npos) e.help[rest.substr(0, space)] = rest.substr(space + 1);
      continue;
    }
    std::string name, key;
    double value = 0;
    if (line.empty() || line[0] == '#' || !split_sample(line, name, key, value)) continue;
    if (family_of(e, name).empty()) continue;
    if (!e.samples.count(key)) e.order.push_back(key);
    e.samples[key] = value;
  }
  return e;
}

void add_exposition(Exposition& total, const Exposition& part, const std::function<bool(const std::string&)>& keep,
                    bool monotonic_only) {
  for (const std::string& key : part.order) {
    const double value = part.samples.at(key);
    const std::string family = family_of(part, key.substr(0, key.find('{')));
    if (family.empty() || (keep && !keep(family))) continue;
    const std::string& type = part.families.at(family);
    if (monotonic_only && type != "counter" && type != "histogram") continue;
    total.families[family] = type;
    if (part.help.count(family)) total.help[family] = part.help.at(family);
    if (!total.samples.count(key)) total.order.push_back(key);
    total.samples[key] += value;
  }
}

std::string exposition_text(const Exposition& e) {
  std::string out;
  for (const auto& [family, type] : e.families) {
    auto help = e.help.find(family);
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", family, help == e.help.end() ? family : help->second, family,
                       type);
    for (const std::string& key : e.order)
      if (family_of(e, key.substr(0, key.find('{'))) == family) out += fmt::format("{} {}\n", key, e.samples.at(key));
  }
  return out;
}

}  // namespace weft::serve
