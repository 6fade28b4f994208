/*
 * fuzz/make_ckpt_seeds.c: writes the seeds of the checkpoint fuzzer,
 * fuzz/corpus/checkpoint/: real checkpoints of the three architectures
 * (tests/util_tfckpt.c: a tiny model after two AdamW steps), a training and
 * a model-only checkpoint of each, stripped of the 512-byte integrity header
 * (the harness seals its input itself). Their tensors are small, so they are
 * stored contiguous; HDF5's per-object overhead makes most of their size.
 *
 *     build/fuzz/make_ckpt_seeds fuzz/corpus/checkpoint
 *
 * Not run by the tests; run it when the checkpoint format changes and commit
 * the files (16 to 110 KB each).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/internal.h" /* LT__CKPT_UB */
#include "util_tfckpt.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  static const char *const arch_names[] = {"encdec", "deconly", "enconly"};
  for (int a = 0; a < 3; a++)
    for (int v = 0; v < 2; v++) {
      char tmp[4096], out[4096];
      static const char *const variant[] = {"train", "model"};
      snprintf(tmp, sizeof tmp, "%s/.%s-%s.h5", argv[1], arch_names[a], variant[v]);
      snprintf(out, sizeof out, "%s/%s-%s", argv[1], arch_names[a], variant[v]);
      lt_status s = tfckpt_write(tmp, (lt_tf_arch)a, 2, v == 0, NULL);
      if (s) {
        fprintf(stderr, "%s: %s\n", tmp, lt_last_error());
        return 1;
      }
      FILE *f = fopen(tmp, "rb"), *g = fopen(out, "wb");
      if (!f || !g) return perror(f ? out : tmp), 1;
      char buf[1 << 16];
      size_t n, total = 0;
      fseek(f, LT__CKPT_UB, SEEK_SET);
      while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        if (fwrite(buf, 1, n, g) != n) return perror(out), 1;
        total += n;
      }
      fclose(f);
      if (fclose(g) != 0) return perror(out), 1;
      remove(tmp);
      printf("%s: %zu bytes\n", out, total);
    }
  return 0;
}
