/*
 * fuzz/fuzz_idx.c: the IDX reader of datasets/idx.c on arbitrary bytes. The
 * first input byte chooses how the payload is written to a temporary file
 * (bit 0: gzip-compressed, so that the checks behind zlib are reached; else
 * as it is, so that corrupt gzip streams are tried too) and the dtype to load
 * into (bits 1-3: f32, f64, i32, i64, or an unsupported one).
 *
 * Checked promises (datasets.h): failures have a message; a loaded tensor has
 * the header's shape and element count; an unsupported dtype is LT_ERR_DTYPE;
 * the MNIST loader, given the file as images and a label file the harness
 * writes to match its first dimension (labels 0..10, so that a bad one
 * occurs), either fails with a message and NULL outputs or returns
 * [N, rows*cols] f32 images in [0, 1] and [N] labels in 0..9.
 */
#include <string.h>
#include <zlib.h>

#include "datasets/datasets.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  fuzz_input in = {data, size};
  uint8_t mode = fuzz_u8(&in);
  const char *path = fuzz_temp_path("idx");
  if (mode & 1) {
    gzFile gz = gzopen(path, "wb1");
    FUZZ_ASSERT(gz != NULL, "gzopen %s", path);
    FUZZ_ASSERT(in.n == 0 || gzwrite(gz, in.p, (unsigned)in.n) == (int)in.n, "gzwrite");
    FUZZ_ASSERT(gzclose(gz) == Z_OK, "gzclose");
  } else {
    fuzz_write_file(path, "", 0, in.p, in.n);
  }
  static const lt_dtype dts[] = {LT_DTYPE_F32, LT_DTYPE_F64, LT_DTYPE_I32, LT_DTYPE_I64, LT_DTYPE_BOOL};
  lt_dtype dt = dts[(mode >> 1) % 5];

  lt_idx_header h;
  lt_status hs = fuzz_check_status(lt_idx_read_header(path, &h), "idx_read_header");
  lt_tensor *t = lt_idx_load(path, dt);
  if (!t) {
    lt_status s = fuzz_check_status(lt_last_status(), "idx_load");
    if (dt == LT_DTYPE_BOOL && hs == LT_OK) FUZZ_ASSERT(s == LT_ERR_DTYPE, "bool load: %s", lt_status_name(s));
  } else {
    FUZZ_ASSERT(hs == LT_OK, "idx_load accepted a file whose header read_header refused");
    FUZZ_ASSERT(dt != LT_DTYPE_BOOL, "idx_load accepted an unsupported dtype");
    FUZZ_ASSERT(t->dtype == dt && t->ndim == h.ndim && t->numel == h.numel, "the tensor does not match the header");
    for (int i = 0; i < h.ndim; i++) FUZZ_ASSERT(t->shape[i] == h.shape[i], "dim %d", i);
    lt_tensor_free(t);
  }

  lt_mnist_opts o = LT_MNIST_DEFAULTS;
  o.max_examples = mode >> 4;
  lt_tensor *im = NULL, *lab = NULL;
  char lpath[600];
  snprintf(lpath, sizeof lpath, "%s.labels", path);
  uint32_t nl = hs == LT_OK && h.shape[0] < (1 << 16) ? (uint32_t)h.shape[0] : 1;
  uint8_t *lb = malloc(8 + (size_t)nl);
  FUZZ_ASSERT(lb != NULL, "out of memory");
  memcpy(lb, "\0\0\x08\x01", 4);
  for (int k = 0; k < 4; k++) lb[4 + k] = (uint8_t)(nl >> (24 - 8 * k));
  for (uint32_t i = 0; i < nl; i++) lb[8 + i] = in.n ? (uint8_t)(in.p[i % in.n] % 11) : 0;
  fuzz_write_file(lpath, "", 0, lb, 8 + (size_t)nl);
  free(lb);
  lt_status s = fuzz_check_status(lt_mnist_load_files(path, lpath, &o, &im, &lab), "mnist_load_files");
  if (s == LT_OK) {
    FUZZ_ASSERT(im && lab && im->ndim == 2 && lab->ndim == 1 && im->shape[0] == lab->shape[0], "mnist shapes");
    const float *x = im->data;
    for (int64_t i = 0; i < im->numel; i++) FUZZ_ASSERT(x[i] >= 0.0f && x[i] <= 1.0f, "pixel %g", (double)x[i]);
    const int64_t *y = lab->data;
    for (int64_t i = 0; i < lab->numel; i++) FUZZ_ASSERT(y[i] >= 0 && y[i] <= 9, "label %lld", (long long)y[i]);
  } else {
    FUZZ_ASSERT(!im && !lab, "outputs not NULL after a failed mnist load");
  }
  lt_tensor_free(im), lt_tensor_free(lab);
  remove(path);
  remove(lpath);
  return 0;
}
