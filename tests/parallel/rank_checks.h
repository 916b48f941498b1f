// The checks of a multi-process test program run under weft launch (strategy_check,
// model_check): each counted, the first 20 failures said on stderr; the program prints
// "rank R of W: N checks, F failures" and exits 1 on a failure.
#pragma once

#include <cstdio>
#include <string>

namespace weft::testing {

inline int g_checks = 0, g_failures = 0;

inline void check(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok && ++g_failures <= 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

}  // namespace weft::testing
