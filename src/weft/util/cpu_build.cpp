// What the compiler was told the processor has, from its predefined macros: compiled with the
// build's own flags (its baseline, or this machine's processor for a native build) and read
// by cpu.cpp's check before main. Data only: no code here runs.
namespace weft::cpu::detail {

extern const char kBuildBaseline[] = WEFT_BASELINE_NAME;

extern const char* const kBuildFeatures[] = {
#ifdef __SSE3__
    "sse3",
#endif
#ifdef __SSSE3__
    "ssse3",
#endif
#ifdef __SSE4_1__
    "sse4_1",
#endif
#ifdef __SSE4_2__
    "sse4_2",
#endif
#ifdef __POPCNT__
    "popcnt",
#endif
#ifdef __GCC_HAVE_SYNC_COMPARE_AND_SWAP_16
    "cx16",
#endif
#ifdef __SSE4A__
    "sse4a",
#endif
#ifdef __PCLMUL__
    "pclmulqdq",
#endif
#ifdef __AES__
    "aes",
#endif
#ifdef __RDRND__
    "rdrand",
#endif
#ifdef __AVX__
    "avx",
#endif
#ifdef __AVX2__
    "avx2",
#endif
#ifdef __FMA__
    "fma",
#endif
#ifdef __F16C__
    "f16c",
#endif
#ifdef __BMI__
    "bmi1",
#endif
#ifdef __BMI2__
    "bmi2",
#endif
#ifdef __LZCNT__
    "lzcnt",
#endif
#ifdef __MOVBE__
    "movbe",
#endif
#ifdef __ADX__
    "adx",
#endif
#ifdef __SHA__
    "sha_ni",
#endif
#ifdef __GFNI__
    "gfni",
#endif
#ifdef __VAES__
    "vaes",
#endif
#ifdef __VPCLMULQDQ__
    "vpclmulqdq",
#endif
#ifdef __AVXVNNI__
    "avx_vnni",
#endif
#ifdef __AVX512F__
    "avx512f",
#endif
#ifdef __AVX512BW__
    "avx512bw",
#endif
#ifdef __AVX512CD__
    "avx512cd",
#endif
#ifdef __AVX512DQ__
    "avx512dq",
#endif
#ifdef __AVX512VL__
    "avx512vl",
#endif
#ifdef __AVX512IFMA__
    "avx512ifma",
#endif
#ifdef __AVX512VBMI__
    "avx512vbmi",
#endif
#ifdef __AVX512VBMI2__
    "avx512_vbmi2",
#endif
#ifdef __AVX512VNNI__
    "avx512_vnni",
#endif
#ifdef __AVX512BITALG__
    "avx512_bitalg",
#endif
#ifdef __AVX512VPOPCNTDQ__
    "avx512_vpopcntdq",
#endif
#ifdef __AVX512VP2INTERSECT__
    "avx512_vp2intersect",
#endif
#ifdef __AVX512BF16__
    "avx512_bf16",
#endif
#ifdef __AVX512FP16__
    "avx512_fp16",
#endif
#ifdef __AMX_TILE__
    "amx_tile",
#endif
    nullptr};

}  // namespace weft::cpu::detail
