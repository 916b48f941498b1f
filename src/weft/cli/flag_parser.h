// A command's flags on the parser, made from its table (util/flag_table.h): each flag an
// option of CLI11 bound to its field, its help line made from the table (help, choices,
// bounds, default, the runs it shapes, the environment variable), shown under its group, its
// value checked against the table's bounds or choices as it is parsed ("--batch: must be at
// least 1, got 0"), the flags it excludes refused together, its environment variable taken
// when it is not given. A default that is the field's
// initial value is captured, so that --help shows it and the run's configuration writes it.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <charconv>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/util/error.h"
#include "weft/util/flag_table.h"

namespace weft::cli {

inline CLI::Option* bind_flag(CLI::App* cmd, const std::string& name, bool& value, const std::string& help) {
  return cmd->add_flag(name, value, help);
}
inline CLI::Option* bind_flag(CLI::App* cmd, const std::string& name, std::vector<std::string>& value,
                              const std::string& help) {
  return cmd->add_option(name, value, help);  // texts may hold commas: the flag given again (comma_list: split)
}
template <class T>
CLI::Option* bind_flag(CLI::App* cmd, const std::string& name, std::vector<T>& value, const std::string& help) {
  return cmd->add_option(name, value, help)->delimiter(',');  // "1,2,4" or the flag given again
}
template <class T>
CLI::Option* bind_flag(CLI::App* cmd, const std::string& name, T& value, const std::string& help) {
  return cmd->add_option(name, value, help);
}

// A whole number written in decimal that does not fit its field: an error, where CLI11 would
// wrap "-1" into an unsigned field and saturate 18446744073709551616 to its largest value.
// Other texts are the parser's to read (or refuse).
template <class T>
std::string integer_range_error(const std::string& text) {
  std::string_view digits = text;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) digits.remove_prefix(1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return "";
  std::string_view number = text;
  if (number[0] == '+') number.remove_prefix(1);
  T value{};
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec == std::errc() && end == number.data() + number.size()) return "";
  if (text[0] == '-')
    return fmt::format("must be a whole number of at least {}, got {}", std::numeric_limits<T>::min(), text);
  return fmt::format("must be a whole number of at most {}, got {}", std::numeric_limits<T>::max(), text);
}

// The whole-number type a field holds (one, an optional one, or a list of them); void for others.
template <class T> struct IntegerOf { using type = std::conditional_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, T, void>; };
template <class T> struct IntegerOf<std::optional<T>> : IntegerOf<T> {};
template <class T> struct IntegerOf<std::vector<T>> : IntegerOf<T> {};

// The --help section title of a group ("language models": "Language models").
inline std::string group_title(std::string group) {
  if (!group.empty()) group[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(group[0])));
  return group;
}

// Adds every flag of `table` to `cmd`, bound to the fields of `o` (which must outlive parsing).
template <class O>
void add_flags(CLI::App* cmd, const FlagTable<O>& table, O& o) {
  O initial{};
  for (const Flag<O>& f : table) {
    std::string names = f.name;  // CLI11's form: "-r,--redirects"
    for (const std::string& a : f.aliases) names = a.size() == 2 ? a + "," + names : names + "," + a;
    if (f.parse) {  // text turned into the options as it is parsed; its bounds checked after (check_values)
      auto set = [parse = f.parse, &o](const std::string& text) {
        try {
          parse(o, text);
        } catch (const ConfigError& e) {
          throw CLI::ValidationError(e.what());
        }
      };
      CLI::Option* opt = cmd->add_option_function<std::string>(names, set, help_line(f))->group(group_title(f.group));
      if (!f.choices.empty()) {
        const FlagInfo info = f;
        opt->check(CLI::Validator([info](std::string& text) { return value_error(info, text); }, ""));
      }
      continue;
    }
    CLI::Option* opt = std::visit([&](auto* field) { return bind_flag(cmd, names, *field, help_line(f)); }, f.field(o));
    opt->group(group_title(f.group));
    if (f.comma_list) opt->delimiter(',');
    if (!f.env.empty()) opt->envname(f.env);
    const FieldRef start = f.field(initial);
    if (f.default_text.empty() && !std::holds_alternative<bool*>(start) && !value_text(start).empty())
      opt->capture_default_str();
    if (f.lo || f.hi || f.finite || !f.choices.empty()) {
      const FlagInfo info = f;
      opt->check(CLI::Validator([info](std::string& text) { return value_error(info, text); }, ""));
    }
    std::visit(
        [&](auto* field) {
          using T = typename IntegerOf<std::remove_pointer_t<decltype(field)>>::type;
          if constexpr (!std::is_void_v<T>)
            opt->check(CLI::Validator([](std::string& text) { return integer_range_error<T>(text); }, ""));
        },
        start);
  }
  for (const Flag<O>& f : table)
    for (const std::string& other : f.excludes) cmd->get_option(f.name)->excludes(cmd->get_option(other));
}

// A command's flags for the docs: its groups, and a group's Markdown table.
struct FlagDocs {
  std::vector<std::string> groups;
  std::function<std::string(const std::string& group)> markdown;
};
template <class O>
FlagDocs flag_docs(const FlagTable<O>& table) {
  return {groups_in_order(table), [&table](const std::string& group) { return flags_markdown(table, group); }};
}
FlagDocs launch_flag_docs();  // comm_commands.cpp
FlagDocs sim_flag_docs();     // sim_command.cpp
FlagDocs serve_flag_docs();   // serve_commands.cpp
FlagDocs predict_flag_docs();
FlagDocs generate_flag_docs();
FlagDocs plan_flag_docs();     // plan_command.cpp
FlagDocs comm_bench_flag_docs();   // comm_commands.cpp
FlagDocs serve_bench_flag_docs();  // serve_commands.cpp

// weft flags COMMAND [GROUP]: a command's flags as the docs' Markdown tables.
void add_flags_command(CLI::App& app, std::function<int()>& action);

}  // namespace weft::cli
