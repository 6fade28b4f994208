/*
 * tensor/cpu.c: the one CPU probe (tensor/cpu_internal.h): instruction-set
 * flags from GCC's __builtin_cpu_supports (CPUID, and XCR0 for the register
 * state the operating system saves), and the AMX tile-data permission.
 *
 * What it is not: a selector (tensor/paths.c and the dispatch code decide
 * which implementation runs) nor a list of kernels.
 */
#define _DEFAULT_SOURCE /* syscall */
#include "tensor/cpu_internal.h"

#include <pthread.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LT__CPU_X86 1
#endif
#if defined(LT__CPU_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static lt__cpu_info cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_probe(void) {
#ifdef LT__CPU_X86
  __builtin_cpu_init();
#define F(field, name) cpu.field = __builtin_cpu_supports(name)
  F(ssse3, "ssse3");
  F(avx, "avx");
  F(avx2, "avx2");
  F(fma, "fma");
  F(avx512f, "avx512f");
  F(avx512dq, "avx512dq");
  F(avx512bw, "avx512bw");
  F(avx512vl, "avx512vl");
  F(avx512vnni, "avx512vnni");
#if !defined(__clang__) || __clang_major__ >= 16
  F(f16c, "f16c");
  F(avx512bf16, "avx512bf16");
  F(amx_tile, "amx-tile");
  F(amx_bf16, "amx-bf16");
  F(amx_int8, "amx-int8");
#endif
#undef F
  cpu.avx512 = cpu.avx512f && cpu.avx512dq && cpu.avx512bw && cpu.avx512vl;
#ifdef __linux__
  /* Linux >= 5.16: a process asks for the AMX tile data state
   * (ARCH_REQ_XCOMP_PERM 0x1023, XFEATURE_XTILEDATA 18) before its first
   * tile instruction; the request is per process and idempotent (oneDNN
   * asks the same). */
  if (cpu.amx_tile) cpu.amx_permitted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#endif
#endif
}

const lt__cpu_info *lt__cpu(void) {
  pthread_once(&cpu_once, cpu_probe);
  return &cpu;
}
