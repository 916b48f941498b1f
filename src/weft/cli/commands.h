// Subcommands of the weft command line. Each registers its flags on the parser and
// returns the action to run once parsing succeeded; the action returns the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace weft::cli {

using Action = std::function<int()>;

// weft train ...
void add_train_command(CLI::App& app, Action& action);
// weft demo: the README's main job.
void add_demo_command(CLI::App& app, Action& action);
// weft launch ... -- command
void add_launch_command(CLI::App& app, Action& action);
// weft comm-bench ...
void add_comm_bench_command(CLI::App& app, Action& action);
// weft plan ...
void add_plan_command(CLI::App& app, Action& action);
// weft sim ...
void add_sim_command(CLI::App& app, Action& action);

}  // namespace weft::cli
