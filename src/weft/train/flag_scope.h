// Which of weft train's flags shape only some runs, declared once: each such flag with the
// runs it shapes (the image models, a language model, --strategy fedavg, a step schedule,
// ...). A flag given to a run it does not shape is an error naming the flag, what it needs
// and what the run has, never ignored (`--non-iid 0.1` without --strategy fedavg once
// trained plain DDP). Flags not in the table shape every run. The run's configuration
// (yaml_config.h) keeps only the flags that apply, so that it reads back.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "weft/train/options.h"

namespace weft {

// False when `flag` ("--non-iid") shapes only runs that `resolved` (with_task_defaults'
// options) is not one of; true for a flag that shapes every run.
bool flag_applies(std::string_view flag, const TrainOptions& resolved);

// Throws ConfigError for the first flag of `given` that does not apply to `resolved`.
void check_flags_apply(const std::vector<std::string>& given, const TrainOptions& resolved);

// Every flag the table names (the command's construction checks that each is a flag).
std::vector<std::string> scoped_flags();

}  // namespace weft
