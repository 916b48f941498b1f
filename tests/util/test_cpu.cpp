// The processor's instruction sets (util/cpu.h) and the dispatch of weft's loops
// (util/dispatch.h): levels follow the processor and WEFT_CPU_ISA's cap, the check before main
// finds what a baseline needs, and the compiler builds constants right at every level.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "weft/util/cpu.h"
#include "weft/util/dispatch.h"
#include "weft/util/error.h"

namespace weft {
namespace {

// An environment variable set for one scope, then restored; the loops' level re-read.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name)) previous_ = v;
    ::setenv(name, value, 1);
    cpu::reload();
  }
  ~ScopedEnv() {
    if (previous_)
      ::setenv(name_, previous_->c_str(), 1);
    else
      ::unsetenv(name_);
    cpu::reload();
  }

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

// Linux's list of this processor's instruction sets (the "flags" line of /proc/cpuinfo).
std::string cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) return line.substr(line.find(':') + 1) + " ";
  return "";
}
bool cpuinfo_has(const std::string& flag) {
  return cpuinfo_flags().find(" " + flag + " ") != std::string::npos;
}

TEST(Cpu, InstructionSetsAgreeWithTheKernel) {
  if (cpuinfo_flags().empty()) GTEST_SKIP() << "no /proc/cpuinfo";
  // (A virtual machine's kernel may list fewer than CPUID gives: sse4a and abm, Linux's name
  // for lzcnt, were missing from /proc/cpuinfo on a KVM guest whose CPUID had them.)
  for (const char* f :
       {"sse4_2", "popcnt", "avx", "avx2", "fma", "bmi2", "f16c", "movbe", "avx512f", "avx512bw",
        "avx512_vnni", "avx512_bf16", "avx512_fp16", "lahf_lm"})
    EXPECT_EQ(cpu::has(f), cpuinfo_has(f)) << f;
  EXPECT_EQ(cpu::has("sse3"), cpuinfo_has("pni"));  // (Linux's name for it)
  EXPECT_FALSE(cpu::has("avx9"));
}

TEST(Cpu, TheLoopsRunAtTheProcessorsLevelUnderTheCap) {
  const bool avx2 = cpu::has("avx2") && cpu::has("fma") && cpu::has("bmi2") && cpu::has("f16c");
  EXPECT_EQ(cpu::processor_level(), avx2 ? cpu::Level::kAvx2 : cpu::Level::kBaseline);
  {
    ScopedEnv cap("WEFT_CPU_ISA", "sse41");
    EXPECT_EQ(cpu::loop_level(), cpu::Level::kBaseline);
    EXPECT_EQ(cpu::isa_cap(), "sse41");
  }
  {
    ScopedEnv cap("WEFT_CPU_ISA", "avx512_core_bf16");  // a cap above the processor is no cap
    EXPECT_EQ(cpu::loop_level(), cpu::processor_level());
  }
  ScopedEnv cap("WEFT_CPU_ISA", "avx9");
  try {
    cpu::loop_level();
    FAIL() << "an unknown WEFT_CPU_ISA was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("WEFT_CPU_ISA: unknown instruction set 'avx9'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Cpu, TheBaselineCheckNamesWhatIsMissing) {
  EXPECT_TRUE(cpu::missing_baseline().empty())
      << "this test runs, so the processor has the build's baseline";
  EXPECT_STREQ(cpu::build_baseline(), WEFT_TEST_BASELINE);
  // An instruction set this processor lacks: every processor lacks one of these two.
  const char* absent = cpu::has("avx512_fp16") ? "sse4a" : "avx512_fp16";
  ASSERT_FALSE(cpu::has(absent));
  {
    ScopedEnv extra("WEFT_CPU_BASELINE", (std::string("x86-64-v2,") + absent).c_str());
    const auto missing = cpu::missing_baseline();
    ASSERT_EQ(missing.size(), 1u);
    EXPECT_EQ(missing[0], absent);
  }
  ScopedEnv extra("WEFT_CPU_BASELINE", "x86-64-v9");
  EXPECT_THROW(cpu::missing_baseline(), ConfigError);
}

// Constant vectors whose low half is one value and high half zeros, stored by straight-line
// code inside a dispatched body (GCC 12 loads such constants as a broadcast where AVX-512 or
// an AVX-512 processor's tuning is on: {1, 1, 0, 0} became {1, 1, 1, 1}).
template <class T>
void expect_constants_at(cpu::Level level) {
  T four[4], eight[8];
  dispatched_at(level, [&] {
    const T a[4] = {1, 1, 0, 0};
    const T b[8] = {3, 3, 3, 3, 0, 0, 0, 0};
    for (int i = 0; i < 4; ++i) four[i] = a[i];
    for (int i = 0; i < 8; ++i) eight[i] = b[i];
  });
  asm volatile("" : : "r"(four), "r"(eight) : "memory");
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(static_cast<double>(four[i]), i < 2 ? 1.0 : 0.0) << "element " << i;
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(static_cast<double>(eight[i]), i < 4 ? 3.0 : 0.0) << "element " << i;
}

TEST(Compiler, ConstantVectorsKeepTheirZerosAtEveryDispatchLevel) {
  for (const cpu::Level level : {cpu::Level::kBaseline, cpu::Level::kAvx2}) {
    if (level > cpu::processor_level()) continue;
    SCOPED_TRACE(cpu::level_name(level));
    expect_constants_at<std::int64_t>(level);
    expect_constants_at<double>(level);
    expect_constants_at<std::int32_t>(level);
    expect_constants_at<float>(level);
    expect_constants_at<std::int16_t>(level);
  }
}

TEST(Dispatch, TheBodyRunsOnceWithItsArguments) {
  for (const cpu::Level level : {cpu::Level::kBaseline, cpu::Level::kAvx2}) {
    if (level > cpu::processor_level()) continue;
    int calls = 0;
    std::int64_t seen = 0;
    dispatched_at(
        level, [&](std::int64_t a, std::int64_t b) { ++calls, seen = a * 10 + b; }, std::int64_t{4},
        std::int64_t{2});
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(seen, 42);
  }
}

}  // namespace
}  // namespace weft
