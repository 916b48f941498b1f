// weft train's flags, declared once (util/flag_table.h): each flag with the option it sets,
// its help and group, its default, bounds or choices, the runs it shapes, the flags it
// excludes and the environment variable that also sets it. The command line's parser, --help,
// --config's YAML keys and the docs' option lists are made from this table; validate()
// checks a library caller's options against its bounds and choices. A flag given to a run it
// does not shape is an error naming the flag, what it needs and what the run has, never
// ignored (`--non-iid 0.1` without --strategy fedavg once trained plain DDP); the run's
// configuration (cli/yaml_config.h) keeps only the flags that apply, so that it reads back.
#pragma once

#include <string>
#include <vector>

#include "weft/train/options.h"
#include "weft/util/flag_table.h"

namespace weft {

// Every flag of weft train, in the order --help shows them.
const FlagTable<TrainOptions>& train_flags();

// False when `flag` ("--non-iid") shapes only runs that `resolved` (with_task_defaults'
// options) is not one of; true for a flag that shapes every run.
bool flag_applies(const std::string& flag, const TrainOptions& resolved);

// Throws ConfigError for the first flag of `given` that does not apply to `resolved`.
void check_flags_apply(const std::vector<std::string>& given, const TrainOptions& resolved);

}  // namespace weft
