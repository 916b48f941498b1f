// weft train --config FILE.yaml: flags from a YAML file. Each key is a long flag's name
// without its dashes ("lr: 0.01", "model: cnn", "resume: true"); a list gives an option
// several values. Flags on the command line win over the file. A key that names no flag, a
// key given twice, a nested mapping, a value a flag refuses, or YAML that does not parse is an error naming
// the file. resolved_config writes every option's value in the same format: the run's
// configuration, which weft train saves with the run and reads back unchanged.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace weft::cli {

// Sets the options of `app` that the command line left unset from the file at `path`;
// throws ConfigError naming the file and the key.
void apply_config_file(CLI::App& app, const std::string& path);

// Every option of `app` that has a value (given, or a default) and whose key `keep` takes
// (all when it is empty), as YAML.
std::string resolved_config(const CLI::App& app, const std::function<bool(const std::string& key)>& keep = {});

// The long names ("--lr") of the options of `app` given on the command line or by a
// configuration file (a flag: only when true).
std::vector<std::string> given_options(const CLI::App& app);

}  // namespace weft::cli
