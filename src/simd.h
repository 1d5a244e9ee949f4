// AVX-512 and AVX2 code paths: compiled per function (target attributes, no global -m
// flags) on x86 with GCC or Clang, and taken only when the CPU reports the extension at
// run time (ONNX_LIGHT_AVX512 guards both).
// Elsewhere ONNX_LIGHT_AVX512 is 0 and the callers keep their portable loops or let
// the numpy twins run.
#pragma once

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ONNX_LIGHT_AVX512 1
// GCC 12 reports its own _mm512_undefined_ps() inside _mm512_max_ps as "may be used
// uninitialized"; the value is never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2,fma")))
inline bool has_avx512f() { return __builtin_cpu_supports("avx512f"); }
inline bool has_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#else
#define ONNX_LIGHT_AVX512 0
inline bool has_avx512f() { return false; }
inline bool has_avx2_fma() { return false; }
#endif
