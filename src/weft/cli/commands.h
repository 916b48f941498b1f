// Subcommands of the weft command line. Each registers its flags on the parser and
// returns the action to run once parsing succeeded; the action returns the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace weft::cli {

using Action = std::function<int()>;

// A parse error of `command` in the user's words: an unknown flag with the one probably
// meant ("unknown flag --lrr for weft train (did you mean --lr?)"), a flag given twice;
// CLI11's own message otherwise.
std::string parse_error_words(const CLI::App& command, const CLI::ParseError& e);
// Every numeric option of `app` and its subcommands refuses an empty value (CLI11 would
// leave the option at its default: `weft plan --gpus ""` planned for the default count).
void refuse_empty_numbers(CLI::App& app);

// The MPI backend (WEFT_TRANSPORT=mpi) from libweft_mpi.so, loaded on first use rather than
// linked into the command (mpi_plugin.cpp; only when CMake found MPI).
void use_mpi_plugin();

// weft train ...
void add_train_command(CLI::App& app, Action& action);
// weft timeline merge: the per-rank timelines of a run in one file.
void add_timeline_command(CLI::App& app, Action& action);
// weft demo: the README's main job.
void add_demo_command(CLI::App& app, Action& action);
// weft launch ... -- command
void add_launch_command(CLI::App& app, Action& action);
// weft launch's command starts at the first word that is not one of launch's options or
// their values (as torchrun reads its command line): returns `args` (argv without the
// program) with "--" put before that word, so that the command's own options stay its own.
// Throws CLI::ExtrasError naming an option that launch does not have.
std::vector<std::string> with_launch_separator(CLI::App& app, std::vector<std::string> args);
// weft comm-bench ...
void add_comm_bench_command(CLI::App& app, Action& action);
// weft plan ...
void add_plan_command(CLI::App& app, Action& action);
// weft sim ...
void add_sim_command(CLI::App& app, Action& action);
// weft predict, weft generate: inference with a saved model.
void add_predict_command(CLI::App& app, Action& action);
void add_generate_command(CLI::App& app, Action& action);
void add_export_command(CLI::App& app, Action& action);  // weft export (serve_commands.cpp)
// weft report: pages drawn from what train, sim and plan write.
void add_report_command(CLI::App& app, Action& action);
// weft serve: a model over HTTP.
void add_serve_command(CLI::App& app, Action& action);
// weft serve-bench: load an inference server.
void add_serve_bench_command(CLI::App& app, Action& action);

}  // namespace weft::cli
