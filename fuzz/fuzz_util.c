/* fuzz/fuzz_util.c: see fuzz_util.h. */
#include "fuzz_util.h"

#include <hdf5.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

void fuzz_init(void) {
  static bool done;
  if (done) return;
  done = true;
  lt_set_num_threads(1);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

lt_status fuzz_check_status(lt_status s, const char *what) {
  if (s != LT_OK) {
    const char *msg = lt_last_error();
    FUZZ_ASSERT(msg && msg[0], "%s failed with %s and an empty message", what, lt_status_name(s));
  }
  return s;
}

void fuzz_log(const char *fmt, ...) {
  static int verbose = -1;
  if (verbose < 0) verbose = getenv("LT_FUZZ_VERBOSE") != NULL;
  if (!verbose) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

const char *fuzz_temp_path(const char *tag) {
  static char buf[512];
  const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  if (!dir || !dir[0]) dir = "/tmp";
  snprintf(buf, sizeof buf, "%s/lt_fuzz_%s_%ld", dir, tag, (long)getpid());
  return buf;
}

void fuzz_write_file(const char *path, const void *head, size_t nhead, const void *body, size_t nbody) {
  FILE *f = fopen(path, "wb");
  FUZZ_ASSERT(f != NULL, "cannot create %s", path);
  FUZZ_ASSERT(fwrite(head, 1, nhead, f) == nhead && fwrite(body, 1, nbody, f) == nbody, "cannot write %s", path);
  FUZZ_ASSERT(fclose(f) == 0, "cannot close %s", path);
}

uint8_t fuzz_u8(fuzz_input *in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}
