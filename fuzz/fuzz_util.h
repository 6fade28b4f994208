/*
 * fuzz/fuzz_util.h: what the fuzz harnesses share (fuzz/README.md has the
 * harness convention). Each harness is one file fuzz/fuzz_<name>.c defining
 * LLVMFuzzerTestOneInput; it is built twice: with clang and libFuzzer for
 * `./do.sh fuzz`, and with the normal compiler and fuzz/replay_main.c as the
 * ctest regression test fuzz_<name>, which replays fuzz/corpus/<name>/ and
 * fuzz/findings/<name>/.
 *
 * What this is not: a test framework. A harness checks the library's promises
 * with FUZZ_ASSERT, which prints what broke and aborts, so that libFuzzer
 * records the input as a crash and the replay test fails.
 */
#ifndef LT_FUZZ_UTIL_H
#define LT_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tensor/tensor.h"

/* The entry point libFuzzer (or replay_main.c) calls once per input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Prints "fuzz: <file>:<line>: <message>" and aborts when cond is false. */
#define FUZZ_ASSERT(cond, ...)                                              \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "fuzz: %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                         \
      fputc('\n', stderr);                                                  \
      abort();                                                              \
    }                                                                       \
  } while (0)

/* Once per process (later calls do nothing): one thread for the library and
 * BLIS (inputs are small, and the machine is shared), HDF5's automatic error
 * printing off. */
void fuzz_init(void);

/* The library's error contract after a call that returned status s: LT_OK,
 * or a failure with a non-empty lt_last_error(). Aborts (naming what) if a
 * failure has no message. Returns s. */
lt_status fuzz_check_status(lt_status s, const char *what);

/* Prints to stderr when LT_FUZZ_VERBOSE is set (what a harness reached, to
 * check that the seeds go deep: LT_FUZZ_VERBOSE=1 build/fuzz/fuzz_<name>_replay
 * fuzz/corpus/<name>). */
void fuzz_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A path for this process's temporary file tag ("<dir>/lt_fuzz_<tag>_<pid>",
 * dir /dev/shm when writable, else $TMPDIR or /tmp), in a static buffer
 * overwritten by the next call. */
const char *fuzz_temp_path(const char *tag);
/* Writes head[0..nhead) then body[0..nbody) as the whole file path; aborts if
 * it cannot (the harness cannot go on without its file). */
void fuzz_write_file(const char *path, const void *head, size_t nhead, const void *body, size_t nbody);

/* A little-endian reader over the input, for harnesses that take their
 * options from its first bytes: returns 0 once the input is used up. */
typedef struct fuzz_input {
  const uint8_t *p;
  size_t n;
} fuzz_input;
uint8_t fuzz_u8(fuzz_input *in);

#endif
