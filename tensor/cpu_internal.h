/*
 * tensor/cpu_internal.h: kernels compiled for several instruction sets.
 * Not installed.
 *
 * LT__CLONES before a function definition compiles it three times, for
 * x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline (SSE2), and
 * the dynamic loader picks the best one the CPU runs (an ifunc, GCC's
 * target_clones). Where the compiler or platform has no target_clones
 * (clang, other architectures, other systems) it is empty: one baseline
 * build. The clones of portable C give the same bits: -std=c11 implies
 * -ffp-contract=off, so no clone contracts a multiply and an add into an
 * FMA. Kernels written with AVX-512 intrinsics say so with their own target
 * attribute and check the CPU (lt__cpu_avx512, tensor/vmath.h) before they
 * run.
 */
#ifndef LT_TENSOR_CPU_INTERNAL_H
#define LT_TENSOR_CPU_INTERNAL_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define LT__CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LT__CLONES
#endif

#endif /* LT_TENSOR_CPU_INTERNAL_H */
