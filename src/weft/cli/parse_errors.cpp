#include <string>
#include <vector>

#include "weft/cli/commands.h"
#include "weft/util/spelling.h"

namespace weft::cli {

std::string parse_error_words(const CLI::App& command, const CLI::ParseError& e) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // The words the parser left (or, for an error thrown before parsing, the message's).
    std::vector<std::string> extras = command.remaining();
    if (const std::size_t colon = what.find(": "); extras.empty() && colon != std::string::npos) {
      const std::size_t start = colon + 2;
      extras.push_back(what.substr(start, what.find(' ', start) - start));
    }
    if (extras.empty()) return what;
    const std::string& first = extras.front();
    if (first.rfind("--", 0) != 0) return "unexpected argument '" + first + "'";
    const std::string flag = first.substr(0, first.find('='));
    std::vector<std::string> flags;
    for (const CLI::Option* opt : command.get_options())
      for (const std::string& name : opt->get_lnames()) flags.push_back("--" + name);
    const auto meant = closest_spelling(flag, flags);
    return "unknown flag " + flag + " for weft " + command.get_name() + (meant ? " (did you mean " + *meant + "?)" : "");
  }
  // CLI11: "--lr: At Most 1 required but received 2".
  const std::string at_most = ": At Most 1 required but received ";
  const std::size_t at = what.find(at_most);
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && at != std::string::npos)
    return what.substr(0, at) + " is given " + what.substr(at + at_most.size()) + " times: give it once";
  return what;
}

void refuse_empty_numbers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 || type.rfind("FLOAT", 0) == 0)
      opt->check(CLI::Validator([](std::string& text) { return text.empty() ? std::string("an empty value is not a number") : ""; }, ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) refuse_empty_numbers(*sub);
}

}  // namespace weft::cli
