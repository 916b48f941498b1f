# The instruction sets weft is compiled for (docs/dependencies.md, "Building").
#
# By default, a baseline that every x86-64 server of the last decade runs (WEFT_BASELINE,
# x86-64-v2) tuned for none in particular (-mtune=generic): a binary built on one machine runs
# on every other one of its cluster; src/weft/util/cpu.cpp checks the processor before main.
# weft's hot loops are compiled for AVX2 and AVX-512 as well and picked at run time
# (src/weft/util/dispatch.h). On a build machine older than the baseline, this build takes the
# first x86-64 processors' instruction sets instead, so that make and make test work anywhere.
#
# WEFT_NATIVE=ON compiles everything for this machine's processor (-march=native), for its own
# use. GCC 12 miscompiles constant vectors where AVX-512 or an AVX-512 processor's tuning is
# on: the native build leaves both out there (-mno-avx512f -mtune=generic).
#
# Either way, a probe compiled with the chosen flags checks that the compiler keeps the
# zeros of constant vectors on this machine before anything is built.
#
# Sets WEFT_ARCH_FLAGS (the compile options) and WEFT_BASELINE_NAME (what the check before
# main names).

set(WEFT_BASELINE "x86-64-v2" CACHE STRING "The instruction sets weft is compiled for: x86-64, x86-64-v2, x86-64-v3 or x86-64-v4")
set_property(CACHE WEFT_BASELINE PROPERTY STRINGS x86-64 x86-64-v2 x86-64-v3 x86-64-v4)
set(_weft_levels x86-64 x86-64-v2 x86-64-v3 x86-64-v4)
if(NOT WEFT_BASELINE IN_LIST _weft_levels)
  message(FATAL_ERROR "WEFT_BASELINE: '${WEFT_BASELINE}' is not x86-64, x86-64-v2, x86-64-v3 or x86-64-v4")
endif()

if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(WEFT_ARCH_FLAGS "")
  set(WEFT_BASELINE_NAME "${CMAKE_SYSTEM_PROCESSOR}")
elseif(WEFT_NATIVE)
  set(WEFT_ARCH_FLAGS -march=native)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    list(APPEND WEFT_ARCH_FLAGS -mno-avx512f -mtune=generic)
  endif()
  set(WEFT_BASELINE_NAME "native")
else()
  set(WEFT_BASELINE_NAME "${WEFT_BASELINE}")
  if(NOT CMAKE_CROSSCOMPILING AND NOT WEFT_BASELINE STREQUAL "x86-64")
    list(FIND _weft_levels "${WEFT_BASELINE}" _weft_level)
    math(EXPR _weft_level "${_weft_level} + 1")
    try_run(_weft_runs _weft_compiles ${CMAKE_BINARY_DIR}/probes/runs_level ${CMAKE_SOURCE_DIR}/cmake/probes/runs_level.cpp
            COMPILE_DEFINITIONS -DWEFT_LEVEL=${_weft_level} -march=x86-64)
    if(_weft_compiles AND NOT _weft_runs EQUAL 0)
      message(WARNING "weft: this machine's processor does not run ${WEFT_BASELINE}: building for x86-64 "
                      "(the first x86-64 processors) instead; weft's hot loops still use AVX2 and AVX-512 where a "
                      "processor has them")
      set(WEFT_BASELINE_NAME "x86-64")
    endif()
  endif()
  set(WEFT_ARCH_FLAGS -march=${WEFT_BASELINE_NAME} -mtune=generic)
endif()

if(NOT CMAKE_CROSSCOMPILING AND WEFT_ARCH_FLAGS)
  string(REPLACE ";" " " _weft_flags_text "${WEFT_ARCH_FLAGS}")
  try_run(_weft_runs _weft_compiles ${CMAKE_BINARY_DIR}/probes/constant_vectors
          ${CMAKE_SOURCE_DIR}/cmake/probes/constant_vectors.cpp
          COMPILE_DEFINITIONS -O3 ${WEFT_ARCH_FLAGS}
          COMPILE_OUTPUT_VARIABLE _weft_probe_output)
  if(NOT _weft_compiles)
    message(FATAL_ERROR "weft: the compiler cannot build a probe with ${_weft_flags_text}:\n${_weft_probe_output}")
  elseif(NOT _weft_runs EQUAL 0)
    message(FATAL_ERROR "weft: ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} miscompiles constant vectors "
                        "with ${_weft_flags_text} on this machine (cmake/probes/constant_vectors.cpp); build with "
                        "the default flags (-DWEFT_NATIVE=OFF) or another compiler")
  endif()
endif()
message(STATUS "weft: compiled for ${WEFT_BASELINE_NAME} (${WEFT_ARCH_FLAGS}); hot loops dispatched at run time")
