/*
 * fuzz/fuzz_safetensors.c: the safetensors reader of
 * checkpoint/safetensors.c on arbitrary bytes. The whole input is the file
 * (no mode byte: the 8-byte header length comes first, as in a real file).
 *
 * Checked promises (checkpoint/safetensors.h): a refusal has a message; an
 * opened file's tensors have byte ranges inside the data section that tile
 * it (sorted, no overlap, no gap) and match dtype size x shape; every tensor
 * loads into each dtype lt_st_dtype_loads_into accepts with the header's
 * shape, and is refused (LT_ERR_DTYPE) for the others; names are unique; the
 * metadata reads back; a file saved from what was read (the 16-bit dtypes as
 * f32) opens again with the same names, shapes and values, bit for bit; a
 * float tensor passes lt_st_check_finite exactly when its values are finite,
 * and lt_st_read_into refuses a non-finite one without writing; rows read
 * by lt_st_read_rows_f32 (and released, lt_st_release_rows) are
 * lt_st_tensor's rows.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"
#include "fuzz_util.h"

static const lt_dtype dts[] = {LT_DTYPE_F32, LT_DTYPE_F64, LT_DTYPE_I32, LT_DTYPE_I64};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  const char *path = fuzz_temp_path("safetensors");
  fuzz_write_file(path, "", 0, data, size);
  lt_st_file *f = lt_st_open(path);
  if (!f) {
    fuzz_check_status(lt_last_status(), "st_open");
    remove(path);
    return 0;
  }
  const int n = lt_st_count(f);
  fuzz_log("safetensors: %d tensors, %d metadata entries\n", n, lt_st_metadata_count(f));
  uint64_t at = 0;
  const char **names = calloc((size_t)n + 1, sizeof *names);
  lt_tensor **loaded = calloc((size_t)n + 1, sizeof *loaded);
  FUZZ_ASSERT(names && loaded, "out of memory");
  for (int i = 0; i < n; i++) {
    const lt_st_tensor_info *ti = lt_st_info(f, i);
    FUZZ_ASSERT(ti && ti->begin == at && ti->end >= ti->begin, "tensor %d: range [%llu, %llu) after %llu", i,
                (unsigned long long)ti->begin, (unsigned long long)ti->end, (unsigned long long)at);
    FUZZ_ASSERT(ti->end - ti->begin == (uint64_t)ti->numel * lt_st_dtype_size(ti->dtype), "tensor %d: size", i);
    FUZZ_ASSERT(lt_st_find(f, ti->name) == i, "tensor '%s' is not unique", ti->name);
    at = ti->end;
    names[i] = ti->name;
    for (int k = 0; k < 4; k++) {
      lt_tensor *t = lt_st_tensor(f, i, dts[k]);
      if (!lt_st_dtype_loads_into(ti->dtype, dts[k])) {
        FUZZ_ASSERT(!t && lt_last_status() == LT_ERR_DTYPE, "'%s' loaded as %s", ti->name, lt_dtype_name(dts[k]));
        continue;
      }
      if (!t) { /* only memory can fail here */
        FUZZ_ASSERT(fuzz_check_status(lt_last_status(), "st_tensor") == LT_ERR_NOMEM, "st_tensor failed");
        continue;
      }
      FUZZ_ASSERT(t->ndim == ti->ndim && t->numel == ti->numel, "'%s': shape", ti->name);
      if (!loaded[i] && (dts[k] == LT_DTYPE_F32 || dts[k] == LT_DTYPE_F64 || dts[k] == LT_DTYPE_I64 ||
                         (dts[k] == LT_DTYPE_I32 && ti->dtype == LT_ST_I32)))
        loaded[i] = t; /* the first (narrowest) dtype that holds it exactly */
      else
        lt_tensor_free(t);
    }
    /* non-finite values: lt_st_check_finite says so exactly when the values
     * hold one, and lt_st_read_into refuses them leaving dst unchanged */
    lt_tensor *wide = lt_st_dtype_loads_into(ti->dtype, LT_DTYPE_F64) ? lt_st_tensor(f, i, LT_DTYPE_F64) : NULL;
    if (wide) {
      bool finite = true;
      for (int64_t k = 0; k < wide->numel && finite; k++) finite = isfinite(((const double *)wide->data)[k]);
      const lt_status fs = lt_st_check_finite(f, i);
      FUZZ_ASSERT(finite ? fs == LT_OK : fs == LT_ERR_NUMERIC, "'%s': check_finite %s", ti->name, lt_status_name(fs));
      lt_tensor *dst = lt_zeros(LT_DTYPE_F64, ti->ndim, ti->shape);
      if (dst) {
        const lt_status rs = lt_st_read_into(f, i, dst);
        FUZZ_ASSERT(finite ? rs == LT_OK : rs == LT_ERR_NUMERIC, "'%s': read_into %s", ti->name, lt_status_name(rs));
        for (int64_t k = 0; !finite && k < dst->numel; k++)
          FUZZ_ASSERT(((const double *)dst->data)[k] == 0, "'%s': a refused read_into wrote", ti->name);
      }
      lt_tensor_free(dst);
      lt_tensor_free(wide);
    }
    /* rows: lt_st_read_rows_f32 gives lt_st_tensor's f32 values row by row (and refuses rows out of range);
     * releasing them changes nothing that is read again */
    lt_tensor *whole = lt_st_dtype_loads_into(ti->dtype, LT_DTYPE_F32) ? lt_st_tensor(f, i, LT_DTYPE_F32) : NULL;
    if (whole) {
      const int64_t rows = ti->ndim > 0 ? ti->shape[0] : 1, row = rows > 0 ? ti->numel / rows : 0;
      float *buf = malloc(sizeof(float) * (size_t)(row > 0 ? row : 1));
      for (int64_t r = 0; buf && r < rows && r < 64; r++) {
        FUZZ_ASSERT(lt_st_read_rows_f32(f, i, r, 1, buf) == LT_OK, "'%s': row %lld", ti->name, (long long)r);
        lt_st_release_rows(f, i, r, 1);
        FUZZ_ASSERT(memcmp(buf, (const float *)whole->data + r * row, sizeof(float) * (size_t)row) == 0,
                    "'%s': row %lld differs from lt_st_tensor's", ti->name, (long long)r);
      }
      FUZZ_ASSERT(lt_st_read_rows_f32(f, i, rows, 1, buf) == LT_ERR_INDEX, "'%s': a row past the end", ti->name);
      free(buf);
      lt_tensor_free(whole);
    }
    lt_st_release(f, i);
    lt_tensor *v = lt_st_view(f, i);
    if (v) FUZZ_ASSERT(v->numel == ti->numel, "view of '%s'", ti->name);
    else fuzz_check_status(lt_last_status(), "st_view");
    lt_tensor_free(v);
  }
  FUZZ_ASSERT(lt_st_info(f, n) == NULL && lt_st_data(f, -1) == NULL, "out of range");
  const int nm = lt_st_metadata_count(f);
  const char **keys = calloc((size_t)nm + 1, sizeof *keys), **vals = calloc((size_t)nm + 1, sizeof *vals);
  FUZZ_ASSERT(keys && vals, "out of memory");
  for (int i = 0; i < nm; i++) {
    keys[i] = lt_st_metadata_key(f, i), vals[i] = lt_st_metadata_value(f, i);
    FUZZ_ASSERT(keys[i] && vals[i] && lt_st_metadata_get(f, keys[i]) == vals[i], "metadata %d", i);
  }

  /* Save what was read and open it again. */
  bool all = true;
  for (int i = 0; i < n; i++) all = all && loaded[i];
  if (all) {
    char path2[600];
    snprintf(path2, sizeof path2, "%s.out", path);
    lt_status s = lt_st_save(path2, n, names, (const lt_tensor *const *)loaded, nm, keys, vals);
    if (s == LT_OK) {
      lt_st_file *g = lt_st_open(path2);
      FUZZ_ASSERT(g, "a saved file does not open: %s", lt_last_error());
      FUZZ_ASSERT(lt_st_count(g) == n && lt_st_metadata_count(g) == nm, "counts after a round trip");
      for (int i = 0; i < n; i++) {
        int j = lt_st_find(g, names[i]);
        FUZZ_ASSERT(j >= 0, "'%s' lost in a round trip", names[i]);
        lt_tensor *t = lt_st_tensor(g, j, loaded[i]->dtype);
        FUZZ_ASSERT(t && t->numel == loaded[i]->numel, "'%s' after a round trip", names[i]);
        FUZZ_ASSERT(memcmp(t->data, loaded[i]->data, (size_t)t->numel * lt_dtype_size(t->dtype)) == 0,
                    "'%s' differs after a round trip", names[i]);
        lt_tensor_free(t);
      }
      for (int i = 0; i < nm; i++)
        FUZZ_ASSERT(strcmp(lt_st_metadata_get(g, keys[i]), vals[i]) == 0, "metadata '%s' after a round trip", keys[i]);
      lt_st_close(g);
    } else {
      fuzz_check_status(s, "st_save"); /* e.g. a metadata key that is not valid UTF-8 for the writer */
    }
    remove(path2);
  }
  for (int i = 0; i < n; i++) lt_tensor_free(loaded[i]);
  free(loaded);
  free(names);
  free(keys);
  free(vals);
  lt_st_close(f);
  remove(path);
  return 0;
}
