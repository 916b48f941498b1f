// weft: distributed deep-learning training, fabric simulation and planning.
// Parses the command line, runs one subcommand, and turns every error into one line
// "error: ..." with a non-zero exit code.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "weft/cli/commands.h"
#include "weft/cli/flag_parser.h"
#include "weft/util/cpu.h"
#include "weft/util/error.h"
#include "weft/util/huge_page_malloc.h"

namespace {

// The commands, each with what adds its flags, help and checks to the parser, and whether it
// holds models, data or a simulated fabric: such a command restarts once with huge pages for
// malloc's large blocks (util/huge_page_malloc.h); the others end before it would pay.
struct Command {
  const char* name;
  void (*add)(CLI::App&, weft::cli::Action&);
  bool large_memory;
};
constexpr Command kCommands[] = {
    {"train", weft::cli::add_train_command, true},          {"demo", weft::cli::add_demo_command, true},
    {"timeline", weft::cli::add_timeline_command, false},   {"launch", weft::cli::add_launch_command, true},
    {"comm-bench", weft::cli::add_comm_bench_command, false}, {"plan", weft::cli::add_plan_command, false},
    {"sim", weft::cli::add_sim_command, true},              {"report", weft::cli::add_report_command, false},
    {"predict", weft::cli::add_predict_command, true},      {"generate", weft::cli::add_generate_command, true},
    {"export", weft::cli::add_export_command, true},        {"serve", weft::cli::add_serve_command, true},
    {"serve-bench", weft::cli::add_serve_bench_command, false}, {"flags", weft::cli::add_flags_command, false}};

}  // namespace

int main(int argc, char** argv) {
  const std::string asked = argc > 1 ? argv[1] : "";
  const Command* chosen = nullptr;
  for (const Command& c : kCommands)
    if (asked == c.name) chosen = &c;
  if (chosen && chosen->large_memory) weft::restart_with_huge_page_malloc(argv);
#ifdef WEFT_MPI_PLUGIN
  weft::cli::use_mpi_plugin();
#endif
  CLI::App app{"weft: distributed deep-learning training, the AI fabric that carries it, and planning"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "weft 0.1.0");
  weft::cli::Action action;
  // Only the command asked for is built (the others' tables cost every start about 2 ms);
  // --help, --version, no command or a mistyped one get them all.
  for (const Command& c : kCommands)
    if (!chosen || chosen == &c) c.add(app, action);
  weft::cli::refuse_empty_numbers(app);
  try {
    // weft launch's command keeps its own options (torchrun's command line).
    std::vector<std::string> args = weft::cli::with_launch_separator(app, std::vector<std::string>(argv + 1, argv + argc));
    std::vector<char*> words{argv[0]};
    for (auto& a : args) words.push_back(a.data());
    app.parse(static_cast<int>(words.size()), words.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::string help = "weft --help";
    if (argc > 1 && argv[1][0] != '-' && !chosen) {
      std::string known;
      for (const auto* sub : app.get_subcommands({})) known += (known.empty() ? "" : ", ") + sub->get_name();
      msg = "unknown command '" + std::string(argv[1]) + "' (commands: " + known + ")";
    } else if (chosen) {
      const CLI::App* command = app.get_subcommand(argv[1]);
      help = "weft " + command->get_name() + " --help";
      msg = weft::cli::parse_error_words(*command, e);
    }
    for (char& ch : msg)
      if (ch == '\n') ch = ' ';  // CLI11's own messages wrap
    std::fprintf(stderr, "error: %s (see '%s')\n", weft::one_line(msg).c_str(), help.c_str());
    return 2;
  }
  try {
    weft::cpu::loop_level();  // WEFT_CPU_ISA checked before any command runs
    return action ? action() : 0;
  } catch (const weft::ConfigError& e) {
    // A bad value on the command line or in a config: a usage error, as the flag parser's.
    std::fprintf(stderr, "error: %s\n", weft::one_line(e.what()).c_str());
    return 2;
  } catch (const weft::InternalError& e) {
    std::fprintf(stderr, "error: internal: %s\n", weft::one_line(e.what()).c_str());
  } catch (const weft::Error& e) {
    std::fprintf(stderr, "error: %s\n", weft::one_line(e.what()).c_str());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", weft::one_line(e.what()).c_str());
  }
  return 1;
}
