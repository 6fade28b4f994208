/*
 * tensor/cpu_internal.h: what this CPU runs, probed once (tensor/cpu.c), and
 * kernels compiled for several instruction sets (LT__CLONES). Not installed.
 *
 * What it holds: the one CPU probe of the library. lt__cpu() answers every
 * "may this kernel run here?" question: the instruction-set flags (CPUID,
 * with the operating system's consent for the register state, as GCC's
 * __builtin_cpu_supports checks XCR0) and, for AMX, the kernel's permission
 * to use the tile data (Linux's arch_prctl(ARCH_REQ_XCOMP_PERM), asked once
 * here). The path table (tensor/paths.def) states each alternative
 * implementation's requirement in these flags.
 *
 * What it is not: a choice of kernel. Which implementation runs is the
 * selectors' (tensor/paths_internal.h), which ask lt__cpu() through the path
 * table; a kernel file only compiles its instructions.
 *
 * LT__CLONES before a function definition compiles it three times, for
 * x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline (SSE2), and
 * the dynamic loader picks the best one the CPU runs (an ifunc, GCC's
 * target_clones). Where the compiler or platform has no target_clones
 * (clang, other architectures, other systems) it is empty: one baseline
 * build. The clones of portable C give the same bits: -std=c11 implies
 * -ffp-contract=off, so no clone contracts a multiply and an add into an
 * FMA. Kernels written with AVX-512 intrinsics say so with their own target
 * attribute and check lt__cpu() (or their path, tensor/paths_internal.h)
 * before they run.
 */
#ifndef LT_TENSOR_CPU_INTERNAL_H
#define LT_TENSOR_CPU_INTERNAL_H

#include <stdbool.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define LT__CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LT__CLONES
#endif

/* The instruction sets this CPU (and operating system) runs; all false on
 * other architectures. */
typedef struct lt__cpu_info {
  bool ssse3, avx, avx2, fma, f16c;
  bool avx512f, avx512dq, avx512bw, avx512vl;
  bool avx512vnni; /* vpdpbusd (the quantized dot products) */
  bool avx512bf16; /* vdpbf16ps */
  bool amx_tile, amx_bf16, amx_int8;
  /* The process may use the AMX tile data: Linux >= 5.16 grants it on
   * request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked
   * once by the probe when the CPU has AMX-TILE. */
  bool amx_permitted;
  /* AVX-512 F, DQ, BW and VL together: what the library's AVX-512 kernels
   * (target "avx512f,avx512dq,avx512bw,avx512vl") need. */
  bool avx512;
} lt__cpu_info;

/* This CPU's flags, probed on the first call (thread-safe) and read ever
 * after. Borrowed, static, never NULL. */
const lt__cpu_info *lt__cpu(void);

#endif /* LT_TENSOR_CPU_INTERNAL_H */
