// Every algorithm, by collective and name, and the one weft picks by default.
#pragma once

#include <string>
#include <vector>

#include "weft/algo/program.h"

namespace weft::algo {

using Builder = Program (*)(int rank, int world, std::int64_t n, const Options& options);

struct Algorithm {
  Collective collective;
  std::string name;
  Builder build;
  std::string summary;
};

const std::vector<Algorithm>& algorithms();
std::vector<std::string> algorithm_names(Collective c);
// Throws ConfigError naming the collective and listing its algorithms.
const Algorithm& find_algorithm(Collective c, const std::string& name);

// Builds one rank's program, checking the arguments (world >= 1, 0 <= rank < world,
// n >= 0, root in range, all-to-all counts divisible by the world); throws ConfigError.
Program build_program(Collective c, const std::string& algorithm, int rank, int world, std::int64_t n,
                      const Options& options = {});

}  // namespace weft::algo
