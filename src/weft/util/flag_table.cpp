#include "weft/util/flag_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "weft/util/error.h"

namespace weft {

namespace {

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

std::string number_text(double v) { return fmt::format("{}", v); }

std::string bounds_words(const FlagInfo& f) {
  if (f.lo && f.hi)
    return fmt::format("in {}{}, {}{}", f.lo_open ? '(' : '[', number_text(*f.lo), number_text(*f.hi), f.hi_open ? ')' : ']');
  if (f.lo) return fmt::format("{} {}", f.lo_open ? "above" : "at least", number_text(*f.lo));
  if (f.hi) return fmt::format("{} {}", f.hi_open ? "below" : "at most", number_text(*f.hi));
  return "";
}

std::string choice_words(const FlagInfo& f) { return fmt::format("{}", fmt::join(f.choices, " | ")); }

}  // namespace

std::string value_text(const FieldRef& ref) {
  return std::visit(
      [](const auto* v) -> std::string {
        using T = std::decay_t<decltype(*v)>;
        if constexpr (std::is_same_v<T, bool>) return *v ? "on" : "off";
        else if constexpr (std::is_same_v<T, std::string>) return *v;
        else if constexpr (std::is_same_v<T, double>) return number_text(*v);
        else if constexpr (IsOptional<T>::value) return *v ? fmt::format("{}", **v) : std::string();
        else if constexpr (IsVector<T>::value) return fmt::format("{}", fmt::join(*v, ","));
        else return std::to_string(*v);
      },
      ref);
}

bool value_set(const FieldRef& ref) {
  return std::visit(
      [](const auto* v) {
        using T = std::decay_t<decltype(*v)>;
        if constexpr (IsOptional<T>::value) return v->has_value();
        else if constexpr (IsVector<T>::value) return !v->empty();
        else return true;
      },
      ref);
}

std::string value_error(const FlagInfo& f, const std::string& text) {
  if (!f.choices.empty()) {
    for (const std::string& c : f.choices)
      if (text == c) return "";
    return fmt::format("unknown value '{}' (known: {})", text, fmt::join(f.choices, ", "));
  }
  if (!f.lo && !f.hi && !f.finite) return "";
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0') return "";  // not a number: the parser's to refuse
  if (!std::isfinite(v)) return "must be a finite number, got " + text;
  const bool low = f.lo && (f.lo_open ? !(v > *f.lo) : !(v >= *f.lo));
  const bool high = f.hi && (f.hi_open ? !(v < *f.hi) : !(v <= *f.hi));
  if (low || high) return "must be " + bounds_words(f) + ", got " + text;
  return "";
}

void check_value(const FlagInfo& f, const FieldRef& ref) {
  const std::string error = value_error(f, value_text(ref));
  if (!error.empty()) throw ConfigError(f.name + ": " + error);
}

void throw_not_applicable(const FlagInfo& f, const std::string& run_has) {
  throw ConfigError(fmt::format("{} does not apply to this run: it is for {}, and the run has {}", f.name, f.needs, run_has));
}

std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

namespace {
// The help and, in parentheses, the facts the table holds: choices or bounds, the default
// (when asked), the runs it shapes, the flags it excludes, the environment variable.
std::string described(const FlagInfo& f, bool with_default, const std::string& quote) {
  std::vector<std::string> facts;
  if (!f.choices.empty()) facts.push_back(choice_words(f));
  if (!bounds_words(f).empty()) facts.push_back(bounds_words(f));
  if (with_default && !f.default_text.empty()) facts.push_back("default: " + f.default_text);
  if (!f.needs.empty()) facts.push_back("only for " + f.needs);
  if (!f.excludes.empty()) facts.push_back(fmt::format("not with {}", fmt::join(f.excludes, ", ")));
  if (!f.env.empty()) facts.push_back("also " + quote + f.env + quote);
  return facts.empty() ? f.help : fmt::format("{} ({})", f.help, fmt::join(facts, "; "));
}
}  // namespace

std::string help_line(const FlagInfo& f) { return described(f, true, ""); }

std::string flags_markdown(const std::vector<const FlagInfo*>& flags, const std::vector<std::string>& initials) {
  if (flags.empty()) return "";
  std::string md = "| flag | default | meaning |\n|---|---|---|\n";
  for (std::size_t i = 0; i < flags.size(); ++i) {
    const FlagInfo& f = *flags[i];
    const std::string meaning = described(f, false, "`");
    const std::string& given = f.default_text.empty() ? initials[i] : f.default_text;
    const std::string def = given.empty() ? "none" : given;
    std::string names = "`" + f.name + "`";
    for (const std::string& a : f.aliases) names += ", `" + a + "`";
    md += fmt::format("| {} | {} | {} |\n", names, markdown_cell(def), markdown_cell(meaning));
  }
  return md;
}

}  // namespace weft
