#include "weft/cli/yaml_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <vector>

#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/utf8.h"

namespace weft::cli {

namespace {

// The key ("lr" for --lr) of an option a configuration file may set, or "".
std::string key_of(const CLI::Option* opt) {
  if (opt->get_lnames().empty() || opt->get_lnames()[0] == "help" || opt->get_lnames()[0] == "config") return "";
  return opt->get_lnames()[0];
}

std::vector<std::string> values_of(const std::string& where, const std::string& key, const YAML::Node& v) {
  std::vector<std::string> values;
  if (v.IsSequence()) {
    for (const auto& e : v) {
      if (!e.IsScalar()) throw ConfigError(where + ": '" + key + "': a list of lists is not a value");
      values.push_back(e.as<std::string>());
    }
  } else if (v.IsScalar()) {
    values.push_back(v.as<std::string>());
  } else if (v.IsNull()) {
    throw ConfigError(where + ": '" + key + "' has no value");
  } else {
    throw ConfigError(where + ": '" + key + "': a nested mapping is not a flag's value");
  }
  return values;
}

}  // namespace

void apply_config_file(CLI::App& app, const std::string& path) {
  if (!file_exists(path)) throw ConfigError("--config: " + path + " does not exist");
  if (is_directory(path)) throw ConfigError("--config: " + path + " is a folder, not a file");
  const std::string text = read_file(path);
  // YAML as weft writes it: UTF-8 text (yaml-cpp reads other bytes as an empty document).
  const std::string readable = valid_utf8(text);
  std::size_t bad = 0;
  while (bad < text.size() && text[bad] == readable[bad] && text[bad] != '\0') ++bad;
  if (bad < text.size())
    throw ConfigError(path + ": not UTF-8 text (byte " + std::to_string(bad) + " is " +
                      (text[bad] == '\0' ? std::string("NUL") : fmt::format("{:#04x}", static_cast<unsigned char>(text[bad]))) + ")");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": not valid YAML (" + e.msg + " at line " + std::to_string(e.mark.line + 1) + ")");
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) throw ConfigError(path + ": not a mapping of flags to values");
  std::set<std::string> seen;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (!seen.insert(key).second)
      throw ConfigError(path + ": '" + key + "' is given twice (line " + std::to_string(kv.first.Mark().line + 1) + ")");
    CLI::Option* opt = nullptr;
    for (CLI::Option* o : app.get_options())
      if (key_of(o) == key) opt = o;
    if (!opt)
      throw ConfigError(path + ": '" + key + "' is not a flag of weft " + app.get_name() +
                        " (keys are the long flags without their dashes)");
    const std::vector<std::string> values = values_of(path, key, kv.second);
    if (opt->count() > 0) continue;  // the command line wins
    try {
      opt->add_result(values);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      throw ConfigError(path + ": '" + key + "': " + e.what());
    }
  }
}

std::string resolved_config(const CLI::App& app, const std::function<bool(const std::string& key)>& keep) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const CLI::Option* opt : app.get_options()) {
    const std::string key = key_of(opt);
    if (key.empty() || (keep && !keep(key))) continue;
    if (opt->get_type_size() == 0) {  // a flag
      out << YAML::Key << key << YAML::Value << (opt->count() > 0 && opt->as<bool>());
      continue;
    }
    std::vector<std::string> values = opt->results();
    if (values.empty() && !opt->get_default_str().empty()) values = {opt->get_default_str()};
    if (values.empty()) continue;  // unset: the model's own default applies
    out << YAML::Key << key << YAML::Value;
    if (values.size() == 1 && opt->get_expected_max() <= 1) {
      out << values[0];
    } else {
      out << YAML::Flow << values;
    }
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> given_options(const CLI::App& app) {
  std::vector<std::string> given;
  for (const CLI::Option* opt : app.get_options()) {
    const std::string key = key_of(opt);
    if (key.empty() || opt->count() == 0) continue;
    if (opt->get_type_size() == 0 && !opt->as<bool>()) continue;  // a flag set to false
    given.push_back("--" + key);
  }
  return given;
}

}  // namespace weft::cli
