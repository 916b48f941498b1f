#include "weft/util/flag_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>

#include "weft/util/error.h"

namespace weft {

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

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
  return std::visit(Overloaded{
                        [](bool* v) { return std::string(*v ? "on" : "off"); },
                        [](const std::string* v) { return *v; },
                        [](const std::optional<std::string>* v) { return v->value_or(""); },
                        [](const double* v) { return number_text(*v); },
                        [](const std::optional<double>* v) { return *v ? number_text(**v) : std::string(); },
                        [](const std::optional<std::int64_t>* v) { return *v ? std::to_string(**v) : std::string(); },
                        [](const std::vector<double>* v) {
                          std::string text;
                          for (double x : *v) {
                            if (!text.empty()) text += ',';
                            text += number_text(x);
                          }
                          return text;
                        },
                        [](const std::vector<std::string>* v) { return fmt::format("{}", fmt::join(*v, ",")); },
                        [](const std::vector<int>* v) { return fmt::format("{}", fmt::join(*v, ",")); },
                        [](const std::vector<std::int64_t>* v) { return fmt::format("{}", fmt::join(*v, ",")); },
                        [](const auto* v) { return std::to_string(*v); },
                    },
                    ref);
}

bool value_set(const FieldRef& ref) {
  return std::visit(Overloaded{
                        [](const std::optional<std::string>* v) { return v->has_value(); },
                        [](const std::optional<double>* v) { return v->has_value(); },
                        [](const std::optional<std::int64_t>* v) { return v->has_value(); },
                        [](const std::vector<double>* v) { return !v->empty(); },
                        [](const std::vector<std::string>* v) { return !v->empty(); },
                        [](const std::vector<int>* v) { return !v->empty(); },
                        [](const std::vector<std::int64_t>* v) { return !v->empty(); },
                        [](const auto*) { return true; },
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

std::string default_words(const FlagInfo& f, const std::string& initial) {
  return f.default_text.empty() ? initial : f.default_text;
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
  const auto cell = [](std::string text) {
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c == '\n' ? ' ' : c;
    }
    return out;
  };
  std::string md = "| flag | default | meaning |\n|---|---|---|\n";
  for (std::size_t i = 0; i < flags.size(); ++i) {
    const FlagInfo& f = *flags[i];
    const std::string meaning = described(f, false, "`");
    const std::string def = default_words(f, initials[i]).empty() ? "none" : default_words(f, initials[i]);
    std::string names = "`" + f.name + "`";
    for (const std::string& a : f.aliases) names += ", `" + a + "`";
    md += fmt::format("| {} | {} | {} |\n", names, cell(def), cell(meaning));
  }
  return md;
}

}  // namespace weft
