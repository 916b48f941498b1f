// Configure-time probe (cmake/WeftCpu.cmake): exits 0 when this machine runs the level WEFT_LEVEL
// (1 x86-64, 2 x86-64-v2, 3 x86-64-v3, 4 x86-64-v4). Compiled for the first x86-64 processors.
int main() {
  __builtin_cpu_init();
  bool ok = true;
  if (WEFT_LEVEL >= 2)
    ok = ok && __builtin_cpu_supports("sse3") && __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1") &&
         __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt");
  if (WEFT_LEVEL >= 3)
    ok = ok && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
         __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("fma");
  if (WEFT_LEVEL >= 4)
    ok = ok && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return ok ? 0 : 1;
}
