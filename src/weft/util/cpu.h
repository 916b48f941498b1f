// The processor's instruction sets, and the levels weft's code is compiled for.
//
// weft is compiled for a baseline (CMake's WEFT_BASELINE: x86-64-v2 by default, which every
// x86-64 server of the last decade runs) and checks the processor against it before any of
// its other code runs: on a processor without it, one line naming what is missing and exit
// status 2, never an illegal instruction. WEFT_CPU_BASELINE adds levels or instruction sets
// to what is checked (a comma-separated list: "x86-64-v4", "avx512_fp16"), so that a
// processor older than the build can be simulated.
//
// weft's hot loops are compiled again for wider instruction sets and run at the widest
// level the processor offers (util/dispatch.h), under the WEFT_CPU_ISA cap:
//   baseline  the build's baseline (x86-64-v2: 128-bit SSE vectors)
//   avx2      x86-64-v3: AVX, AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE (256-bit vectors)
// WEFT_CPU_ISA takes oneDNN's names and caps oneDNN and libxsmm too (tensor/onednn.h):
// sse41 (the baseline), avx2, avx512_core, avx512_core_vnni, avx512_core_bf16. A malformed
// value is a ConfigError naming it.
//
// Instruction sets are named as Linux's /proc/cpuinfo names them (sse4_2, avx2, avx512f,
// avx512_fp16, ...); an AVX or AVX-512 set counts only when the operating system saves its
// registers (XCR0).
#pragma once

#include <string>
#include <vector>

namespace weft::cpu {

enum class Level : int { kBaseline = 0, kAvx2 = 1 };
const char* level_name(Level level);  // "baseline", "avx2"

// Whether this processor has the instruction set (false for a name this file does not know).
bool has(const char* feature);
// The widest level this processor runs.
Level processor_level();
// The level weft's dispatched loops run at: the processor's, under WEFT_CPU_ISA's cap. Read
// once; reload() reads WEFT_CPU_ISA again (tests change it).
Level loop_level();
void reload();
// The WEFT_CPU_ISA value (oneDNN's name), empty when unset.
std::string isa_cap();

// The build's baseline ("x86-64-v2"), and what it and WEFT_CPU_BASELINE need that this
// processor lacks (empty when it runs weft). The check itself runs before main.
const char* build_baseline();
std::vector<std::string> missing_baseline();

}  // namespace weft::cpu
