/*
 * bench/bench_util.h: what every benchmark program shares, in one place: the
 * CPU clock, the median of rounds, the peak RSS, how busy the rest of the
 * machine was, the parsing of command-line flags, and the runtime line
 * (libtensor's version, kernel set, threads and its path table) that a
 * benchmark prints first so that a result says what it measured.
 *
 * What this is not: part of the library (benchmarks only, linked into each
 * bench/ program by lt_bench() in bench/CMakeLists.txt). Like any program,
 * its callers may exit; these functions do not.
 */
#ifndef LT_BENCH_UTIL_H
#define LT_BENCH_UTIL_H

#include "libtensor.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The wall clock is the library's lt_monotonic_seconds (tensor/tensor.h). */

/* CPU seconds this process used so far, all threads
 * (CLOCK_PROCESS_CPUTIME_ID). With OMP_WAIT_POLICY=PASSIVE idle threads do
 * not spin, so differences count work done: steadier than wall time on a
 * loaded machine. */
double lt_bench_cpu_now(void);

/* qsort comparator for doubles, ascending. */
int lt_bench_cmp_double(const void *a, const void *b);

/* The median of v[0..n) (the mean of the two middle values for even n);
 * sorts v in place. NAN when n < 1. */
double lt_bench_median(double *v, int n);

/* The peak resident set size of this process so far (getrusage ru_maxrss), MiB. */
double lt_bench_peak_rss_mib(void);

/* A mark for lt_bench_others_cores: wall time, the machine's busy CPU
 * seconds (/proc/stat: user nice system irq softirq steal) and this
 * process's own CPU seconds. */
typedef struct {
  double wall, busy, self;
} lt_bench_mark;

/* Takes a mark now. */
lt_bench_mark lt_bench_mark_now(void);

/* How many cores other processes used on average since `since`: the
 * machine's busy time minus this process's own, per second of wall time;
 * 0 when /proc/stat is unreadable or the figure is negative. */
double lt_bench_others_cores(lt_bench_mark since);

/* The kinds of value a flag takes. */
typedef enum {
  LT_BENCH_FLAG,     /* no value: sets *(bool *)out to true */
  LT_BENCH_INT,      /* a whole number >= min: *(int64_t *)out */
  LT_BENCH_DOUBLE,   /* a finite number: *(double *)out */
  LT_BENCH_STRING,   /* any word: *(const char **)out borrows argv's */
  LT_BENCH_INT_LIST, /* comma-separated whole numbers >= min, at most cap:
                        (int64_t *)out, their number in *count */
} lt_bench_kind;

/* One flag: its name ("--threads"), kind, where its value goes, and for
 * LT_BENCH_INT / LT_BENCH_INT_LIST the smallest value accepted (and for a
 * list its capacity and count). */
typedef struct {
  const char *name;
  lt_bench_kind kind;
  void *out;
  int64_t min;
  int cap;
  int *count;
} lt_bench_opt;

/* Parses argv[1..argc) against opts[0..nopts): each flag sets its out;
 * other words (not starting with "--") go to rest[0..*nrest) in order, at
 * most the *nrest given (rest may be NULL with *nrest 0, or nrest NULL: no
 * positional arguments). Returns 0, or on an unknown flag, a missing or bad
 * value or too many positional arguments prints what was wrong and
 * "usage: USAGE" to stderr and returns 2 (main returns it). Borrows argv. */
int lt_bench_parse(int argc, char **argv, const lt_bench_opt *opts, int nopts, const char *usage, char **rest,
                   int *nrest);

/* Prints the runtime line and the path line to f:
 *   "libtensor V, BLIS kernels ARCH (WHY), N threads, bf16 products: X, CPU MODEL, DATE UTC"
 *   "paths (= forced, () not on this CPU; ...): gemm: blis small ... | ..."
 * (in the path line a path the CPU lacks is in parentheses, a path forced by
 * its switch in the environment is marked '='). Scripts read "BLIS kernels
 * ARCH" from the first line. Returns lt_runtime_get_info's status; prints
 * nothing when it fails. */
lt_status lt_bench_print_runtime(FILE *f);

/* The path line alone, from info (lt_bench_print_runtime's second line). */
void lt_bench_print_paths(FILE *f, const lt_runtime_info *info);

#endif /* LT_BENCH_UTIL_H */
