// A command's flags declared once. Each flag of a command is one entry of its table: the
// option it sets (a field of the command's options), its help, its group, its default when
// that is not the field's initial value, its bounds or choices, the runs it shapes (a flag
// given to another run is an error, never ignored), the flags it excludes and the environment
// variable that also sets what it sets. From the one table come the parser's options and their
// checks (cli/flag_parser.h), --help, the keys of a --config YAML file (the long flags without
// their dashes), the check of a library caller's options (check_values) and the docs' option
// lists (flags_markdown, printed by `weft flags COMMAND [GROUP]`, which docs.flags compares
// with the pages). The table itself has no parser in it: util stays below the command line.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace weft {

// Where a flag's value lives in the command's options.
using FieldRef = std::variant<bool*, int*, std::int64_t*, std::uint64_t*, double*, std::string*,
                              std::optional<std::int64_t>*, std::optional<double>*, std::optional<std::string>*,
                              std::vector<double>*, std::vector<std::string>*, std::vector<int>*,
                              std::vector<std::int64_t>*>;

// What every flag declares, whatever options it belongs to.
struct FlagInfo {
  std::string name;          // "--lr"
  std::vector<std::string> aliases;  // other names ("--nproc_per_node", "-r"), taken as the name
  std::string help;          // what it does, in a user's words
  std::string group;         // the --help section and the docs' list it belongs to
  std::string default_text;  // when the default is not the field's initial value ("images 0.01, text 3e-3")
  std::optional<double> lo, hi;  // bounds of a number, inclusive unless open
  bool lo_open = false, hi_open = false;
  bool finite = false;       // a number that must be finite (bounds imply it)
  std::vector<std::string> choices;  // the words a text flag takes (each word of a list)
  bool comma_list = false;   // a list of texts also given as "a,b" (numbers' lists always are)
  std::string needs;         // the runs it shapes, in the flags' words ("--strategy fedavg"); "" for every run
  std::vector<std::string> excludes;  // flags it cannot be given with
  std::string env;           // an environment variable the parser takes when the flag is not given
};

// The flag of options `O`: its declaration and how to reach its value.
template <class O>
struct Flag : FlagInfo {
  std::function<FieldRef(O&)> field;               // null for a flag that only `parse` sets
  // A flag given as text that another form holds ("1MiB" as bytes, "2:4" as two counts): sets
  // the options from the text, or throws ConfigError naming the flag. The bounds then apply to
  // `field` once it is set (check_values), not to the text.
  std::function<void(O&, const std::string&)> parse;
  bool (*applies)(const O&) = nullptr;             // null: every run
  std::string (*run_has)(const O&) = nullptr;      // what a run it does not apply to has instead

  Flag(std::string flag_name, std::function<FieldRef(O&)> where, std::string what) : field(std::move(where)) {
    name = std::move(flag_name);
    help = std::move(what);
  }
  Flag&& parsed_by(std::function<void(O&, const std::string&)> fn) && { parse = std::move(fn); return std::move(*this); }
  Flag&& also_named(std::vector<std::string> names) && { aliases = std::move(names); return std::move(*this); }
  Flag&& defaults(std::string text) && { default_text = std::move(text); return std::move(*this); }
  Flag&& at_least(double v) && { lo = v; return std::move(*this); }
  Flag&& above(double v) && { lo = v; lo_open = true; return std::move(*this); }
  Flag&& in(double a, double b) && { lo = a; hi = b; return std::move(*this); }
  Flag&& in_open(double a, double b) && { lo = a; hi = b; hi_open = true; return std::move(*this); }
  Flag&& finite_value() && { finite = true; return std::move(*this); }
  Flag&& comma_separated() && { comma_list = true; return std::move(*this); }
  Flag&& one_of(std::vector<std::string> words) && { choices = std::move(words); return std::move(*this); }
  Flag&& excluding(std::vector<std::string> flags) && { excludes = std::move(flags); return std::move(*this); }
  Flag&& from_env(std::string variable) && { env = std::move(variable); return std::move(*this); }
  // The runs the flag shapes: `is` tells one, `words` names them, `has` says what another run has.
  Flag&& only_for(bool (*is)(const O&), std::string words, std::string (*has)(const O&)) && {
    applies = is;
    needs = std::move(words);
    run_has = has;
    return std::move(*this);
  }
};

template <class O>
using FlagTable = std::vector<Flag<O>>;

// Adds flags to a table under one group: FlagGroup<O> add{table, "the model"}; add(Flag<O>(...)).
template <class O>
struct FlagGroup {
  FlagTable<O>& table;
  std::string name;
  void operator()(Flag<O> f) const {
    f.group = name;
    table.push_back(std::move(f));
  }
};

// `text` as a Markdown table's cell: '|' escaped, new lines as spaces.
std::string markdown_cell(const std::string& text);
// The `group` fields of `items` (flags, environment variables), each once, in order.
template <class Items>
std::vector<std::string> groups_in_order(const Items& items) {
  std::vector<std::string> groups;
  for (const auto& item : items)
    if (std::find(groups.begin(), groups.end(), item.group) == groups.end()) groups.push_back(item.group);
  return groups;
}

// The value at `ref` as a flag's text ("0.01", "on" for a set switch, "1,2" for a list; "" when
// an optional is unset).
std::string value_text(const FieldRef& ref);
// Whether the value at `ref` is set: an optional holds a value, a list is not empty, other
// values always.
bool value_set(const FieldRef& ref);
// What is wrong with `text` as the value of `flag` against its bounds or choices ("must be at
// least 1, got 0"), or "" when nothing is (a value that is not a number passes here: the
// parser refuses it).
std::string value_error(const FlagInfo& flag, const std::string& text);
// The help line the parser shows: the help, the choices, the bounds, the runs it shapes, the
// environment variable.
std::string help_line(const FlagInfo& flag);
// The group's flags as a Markdown table (flag | default | meaning), as the docs show them.
std::string flags_markdown(const std::vector<const FlagInfo*>& flags, const std::vector<std::string>& initials);
// Throws ConfigError for a flag's value that breaks its bounds or choices
// ("--batch: must be at least 1, got 0").
void check_value(const FlagInfo& flag, const FieldRef& ref);

// Checks every value of `o` that differs from the options' initial one against its flag's
// bounds and choices (a library caller's options get the command line's checks; the initial
// values mean "the default" and pass). Throws ConfigError naming the first flag.
template <class O>
void check_values(const FlagTable<O>& table, const O& o) {
  O& given = const_cast<O&>(o);  // read only: the accessor hands out a pointer
  O initial{};
  for (const Flag<O>& f : table) {
    if (!f.field || (!f.lo && !f.hi && !f.finite && f.choices.empty())) continue;
    const FieldRef ref = f.field(given);
    if (!value_set(ref) || value_text(ref) == value_text(f.field(initial))) continue;
    check_value(f, ref);
  }
}

// The flag of `table` called `name`, or null.
template <class O>
const Flag<O>* find_flag(const FlagTable<O>& table, const std::string& name) {
  for (const Flag<O>& f : table)
    if (f.name == name) return &f;
  return nullptr;
}

// Whether `name` shapes the run `o` (a flag not in the table, or one for every run: true).
template <class O>
bool flag_applies(const FlagTable<O>& table, const std::string& name, const O& o) {
  const Flag<O>* f = find_flag(table, name);
  return !f || !f->applies || f->applies(o);
}

// Throws ConfigError for the first of `given` that does not shape the run `o`: "--non-iid does
// not apply to this run: it is for --strategy fedavg, and the run has --strategy ddp".
void throw_not_applicable(const FlagInfo& flag, const std::string& run_has);
template <class O>
void check_flags_apply(const FlagTable<O>& table, const std::vector<std::string>& given, const O& o) {
  for (const std::string& name : given) {
    const Flag<O>* f = find_flag(table, name);
    if (f && f->applies && !f->applies(o)) throw_not_applicable(*f, f->run_has(o));
  }
}

// The group's flags of `table` as the docs' Markdown table ("" for a group with none).
template <class O>
std::string flags_markdown(const FlagTable<O>& table, const std::string& group) {
  O initial{};
  std::vector<const FlagInfo*> flags;
  std::vector<std::string> initials;
  for (const Flag<O>& f : table) {
    if (!group.empty() && f.group != group) continue;
    flags.push_back(&f);
    initials.push_back(f.field ? value_text(f.field(initial)) : "");
  }
  return flags_markdown(flags, initials);
}


}  // namespace weft
