// Every environment variable weft reads, declared once: its name, what it sets, and who sets
// it (a user, or weft's launcher for its ranks). env_string (util/env.h) refuses to read a
// WEFT_ variable this table does not name (InternalError), so that none is read unannounced;
// `weft flags env` prints the table, docs/environment.md shows it, and docs.flags checks
// both that the page agrees and that every WEFT_ name in the sources is here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace weft {

struct EnvVariable {
  std::string name;    // "WEFT_SPIN_US"
  std::string group;   // "communication", "set by weft launch", ...
  std::string value;   // what it takes, in words ("microseconds", "auto | shm | tcp | mpi")
  std::string help;    // what it does
};

// Every variable, by group.
const std::vector<EnvVariable>& environment_variables();
// The declaration of `name`, or null.
const EnvVariable* find_environment_variable(std::string_view name);
// The group's variables (every group when empty) as a Markdown table.
std::string environment_markdown(const std::string& group);

}  // namespace weft
