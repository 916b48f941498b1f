// weft flags COMMAND [GROUP]: a command's flags, from its table, as the Markdown tables the
// docs show (scripts/docs-flags.py writes them into the pages; docs.flags checks them).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>

#include "weft/cli/commands.h"
#include "weft/cli/flag_parser.h"
#include "weft/train/train_flags.h"
#include "weft/util/environment.h"
#include "weft/util/error.h"

namespace weft::cli {

namespace {

// The commands whose flags come from a table.
std::map<std::string, FlagDocs> documented_commands() {
  return {{"train", flag_docs(train_flags())}, {"launch", launch_flag_docs()}, {"sim", sim_flag_docs()}, {"serve", serve_flag_docs()},
          {"predict", predict_flag_docs()}, {"generate", generate_flag_docs()},
          {"plan", plan_flag_docs()}, {"comm-bench", comm_bench_flag_docs()}, {"serve-bench", serve_bench_flag_docs()}};
}

// The environment variables, as one more "command" whose groups are the table's.
FlagDocs environment_docs() {
  return {groups_in_order(environment_variables()), [](const std::string& group) { return environment_markdown(group); }};
}

int print_flags(const std::string& command, const std::string& group) {
  const FlagDocs docs = command == "env" ? environment_docs() : documented_commands().at(command);
  if (!group.empty()) {
    if (std::find(docs.groups.begin(), docs.groups.end(), group) == docs.groups.end())
      throw ConfigError(fmt::format("weft {} has no group of flags '{}' (groups: {})", command, group, fmt::join(docs.groups, ", ")));
    fmt::print("{}", docs.markdown(group));
    return 0;
  }
  for (std::size_t i = 0; i < docs.groups.size(); ++i)
    fmt::print("{}### {}\n\n{}", i ? "\n" : "", group_title(docs.groups[i]), docs.markdown(docs.groups[i]));
  return 0;
}

}  // namespace

void add_flags_command(CLI::App& app, Action& action) {
  auto command = std::make_shared<std::string>();
  auto group = std::make_shared<std::string>();
  std::vector<std::string> names;
  for (const auto& [name, docs] : documented_commands()) names.push_back(name);
  names.push_back("env");  // the environment variables
  CLI::App* cmd = app.add_subcommand("flags", "print a command's flags (env: the environment variables) as Markdown "
                                              "tables, as the docs list them");
  cmd->add_option("command", *command, fmt::format("the command: {}", fmt::join(names, ", ")))
      ->required()
      ->check(CLI::IsMember(names));
  cmd->add_option("group", *group, "only this group of its flags (as --help shows them, in lower case)");
  cmd->callback([command, group, &action] {
    action = [command, group] { return print_flags(*command, *group); };
  });
}

}  // namespace weft::cli
