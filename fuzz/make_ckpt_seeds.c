/*
 * fuzz/make_ckpt_seeds.c: writes the seeds of the two checkpoint fuzzers.
 *
 * fuzz/corpus/checkpoint/ (fuzz_checkpoint.c): real checkpoints of the three
 * architectures (tests/util_tfckpt.c: a tiny model after two AdamW steps), a
 * training and a model-only checkpoint of each, stripped of the 512-byte
 * integrity header (the harness seals its input itself). Their tensors are
 * small, so they are stored contiguous; HDF5's per-object overhead makes most
 * of their size.
 *
 * fuzz/corpus/ckpt_meta/ (fuzz_ckpt_meta.c): the same checkpoints, with
 * train's settings and the trainer's loader keys in /extra as train saves
 * them (tests/train_settings.h), in that harness's encoding of what HDF5
 * returns, read with libhdf5 and the loader's own
 * gathering of a dataset's facts (lt__h5_dset_facts, lt__h5_dset_written)
 * and of attributes (lt__h5_read_meta).
 *
 *     build/fuzz/make_ckpt_seeds fuzz/corpus/checkpoint fuzz/corpus/ckpt_meta
 *
 * Not run by the tests; run it when the checkpoint format changes and commit
 * the files (16 to 110 KB each; 3 to 12 KB encoded).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/internal.h" /* LT__CKPT_UB, the fact gathering */
#include "util_tfckpt.h"
#include "train_settings.h"

/* ---- fuzz_ckpt_meta.c's encoding (its opening comment has the grammar) ---- */

static void put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }
static void u8(FILE *f, unsigned v) { fputc((int)(v & 0xff), f); }
static void varint(FILE *f, uint64_t v) {
  do {
    u8(f, (unsigned)(v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
}
static void str8(FILE *f, const char *s) {
  size_t n = strlen(s);
  u8(f, (unsigned)n);
  put(f, s, n);
}

static void put_attrs(FILE *f, int group, const lt_ckpt_meta *m) {
  const char *key;
  lt__meta_val v;
  for (int i = 0; lt__ckpt_meta_at(m, i, &key, &v); i++) {
    if (v.kind == LT_CKPT_BYTES) continue;
    u8(f, 'A');
    u8(f, (unsigned)group);
    str8(f, key);
    u8(f, v.kind == LT_CKPT_INT ? 0 : v.kind == LT_CKPT_DOUBLE ? 1 : 2);
    if (v.kind == LT_CKPT_INT) put(f, &v.i, 8);
    else if (v.kind == LT_CKPT_DOUBLE) put(f, &v.d, 8);
    else {
      uint16_t n = (uint16_t)strlen(v.s);
      put(f, &n, 2);
      put(f, v.s, n);
    }
  }
}

static lt_status put_dataset(FILE *f, hid_t file, int group, const char *path, const char *name) {
  hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
  if (d < 0) return lt_error_set(LT_ERR_FORMAT, "cannot open %s", path);
  lt__ckpt_dset x;
  lt__ckpt_written w;
  lt__h5_dset_facts(d, &x);
  lt__h5_dset_written(d, &x, &w);
  u8(f, 'D');
  u8(f, (unsigned)(group - 1));
  str8(f, name);
  u8(f, (unsigned)x.failed);
  u8(f, (unsigned)x.layout);
  u8(f, (unsigned)x.n_external);
  u8(f, x.n_filters < 0 ? 255u : (unsigned)x.n_filters);
  for (int i = 0; i < x.n_filters && i < LT__CKPT_MAX_FILTERS; i++) u8(f, (unsigned)x.filters[i]);
  u8(f, (unsigned)x.dtype);
  u8(f, (unsigned)x.raw);
  u8(f, (unsigned)x.type_size);
  u8(f, x.float_class);
  u8(f, (unsigned)x.space);
  u8(f, (unsigned)x.ndim);
  uint64_t n = x.type_size;
  for (int i = 0; i < x.ndim; i++) varint(f, x.dims[i]), n *= x.dims[i];
  u8(f, w.known);
  u8(f, w.allocated);
  u8(f, (unsigned)w.chunk_ndim);
  for (int i = 0; i < w.chunk_ndim; i++) varint(f, w.chunk[i]);
  varint(f, w.n_chunks);
  /* the data as stored (the file's own type, little-endian) */
  void *buf = malloc(n ? n : 1);
  hid_t t = H5Dget_type(d);
  uint32_t len = (uint32_t)n;
  lt_status s = LT_OK;
  if (!buf || t < 0 || (n && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0))
    s = lt_error_set(LT_ERR_FORMAT, "cannot read %s", path);
  put(f, &len, 4);
  if (!s) put(f, buf, n);
  free(buf);
  if (t >= 0) H5Tclose(t);
  H5Dclose(d);
  return s;
}

static herr_t top_cb(hid_t g, const char *name, const H5L_info_t *info, void *f) {
  u8(f, 'L');
  str8(f, name);
  return 0;
}
static herr_t blob_cb(hid_t g, const char *name, const H5L_info_t *info, void *f) {
  char path[600];
  snprintf(path, sizeof path, "/extra/%s", name);
  return put_dataset(f, g, 4, path, name) ? -1 : 0;
}

/* Writes the encoding of the checkpoint at path (sealed, size bytes) to out. */
static lt_status encode(const char *path, uint64_t size, const char *out) {
  FILE *f = fopen(out, "wb");
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (!f || file < 0) return lt_error_set(LT_ERR_IO, "cannot open %s or %s", path, out);
  lt__h5_raw raw = {.fd = -1, .size = size, .check = false, .path = path};
  u8(f, 'F');
  put(f, &size, 8);
  static const char *const groups[] = {"/", "/model", "/optim", "/schedule", "/extra"};
  lt_status s = LT_OK;
  for (int g = 0; g < 5 && !s; g++) {
    if (g && H5Lexists(file, groups[g] + 1, H5P_DEFAULT) <= 0) continue;
    hid_t o = H5Gopen2(file, groups[g], H5P_DEFAULT);
    lt_ckpt_meta *m = lt_ckpt_meta_new();
    s = o < 0 || !m ? lt_error_set(LT_ERR_FORMAT, "cannot open %s", groups[g]) : lt__h5_read_meta(o, &raw, groups[g], m, NULL);
    if (!s) put_attrs(f, g, m);
    if (!s && g == 0) H5Literate(o, H5_INDEX_NAME, H5_ITER_INC, NULL, top_cb, f);
    if (!s && g == 4 && H5Literate(o, H5_INDEX_NAME, H5_ITER_INC, NULL, blob_cb, f) < 0)
      s = lt_error_set(LT_ERR_FORMAT, "cannot list /extra");
    lt_ckpt_meta_free(m);
    if (o >= 0) H5Gclose(o);
  }
  static const char *const trees[] = {"/model", "/optim", "/rng"};
  for (int g = 0; g < 3 && !s; g++) {
    if (H5Lexists(file, trees[g] + 1, H5P_DEFAULT) <= 0) continue;
    lt__h5_list list;
    if ((s = lt__h5_walk(file, &raw, trees[g], &list))) break;
    for (int i = 0; i < list.n && !s; i++) s = put_dataset(f, file, g + 1, list.v[i].path, list.v[i].name);
    lt__h5_list_free(&list);
  }
  H5Fclose(file);
  if (fclose(f) != 0 && !s) s = lt_error_set(LT_ERR_IO, "writing %s", out);
  return s;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <checkpoint seed dir> <ckpt_meta seed dir>\n", argv[0]);
    return 2;
  }
  static const char *const arch_names[] = {"encdec", "deconly", "enconly"};
  for (int a = 0; a < 3; a++)
    for (int v = 0; v < 2; v++) {
      char tmp[4096], out[4096];
      static const char *const variant[] = {"train", "model"};
      snprintf(tmp, sizeof tmp, "%s/.%s-%s.h5", argv[1], arch_names[a], variant[v]);
      snprintf(out, sizeof out, "%s/%s-%s", argv[1], arch_names[a], variant[v]);
      tfckpt_extra_hook = NULL;
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
      printf("%s: %zu bytes\n", out, total);
      snprintf(out, sizeof out, "%s/%s-%s", argv[2], arch_names[a], variant[v]);
      if (v == 0) { /* the encoded training state with train's settings */
        tfckpt_extra_hook = trainset_extra;
        s = tfckpt_write(tmp, (lt_tf_arch)a, 2, true, NULL);
        struct stat st;
        total = !s && stat(tmp, &st) == 0 ? (size_t)st.st_size - LT__CKPT_UB : 0;
      }
      if (s || (s = encode(tmp, total + LT__CKPT_UB, out))) {
        fprintf(stderr, "%s: %s\n", out, lt_last_error());
        return 1;
      }
      remove(tmp);
      printf("%s: encoded\n", out);
    }
  return 0;
}
