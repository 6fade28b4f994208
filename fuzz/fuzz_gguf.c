/*
 * fuzz/fuzz_gguf.c: the GGUF reader of checkpoint/gguf.c, and the model
 * import of models/transformer/gguf_model.c, on arbitrary bytes. The whole
 * input is the file (no mode byte: the magic comes first, as in a real
 * file).
 *
 * Checked promises (checkpoint/gguf.h, gguf_model.h): a refusal has a
 * message; an opened file's tensors lie inside the data section at offsets
 * that are multiples of the alignment, do not overlap, have a type libtensor
 * reads and the bytes its blocks say; names and keys are unique and found
 * by their name; every pair's value is readable through the getter of its
 * type (and refused by the others, with a message); every array element is
 * readable, one past the end is LT_ERR_INDEX; every tensor of at most 2^20
 * elements reads as f32 or is refused with a message; a file written back
 * from what was read (every pair and every tensor's bytes) opens again with
 * the same keys, values and bytes; the model import either builds a model
 * or is refused with a message (its own size checks bound the work).
 */
#include <string.h>

#include "fuzz_util.h"
#include "libtensor_transformer.h"

static void check_kv(const lt_gguf_file *f, int i) {
  const char *k = lt_gguf_kv_key(f, i);
  FUZZ_ASSERT(k && lt_gguf_find_key(f, k) == i, "key %d is not unique", i);
  lt_gguf_type elem;
  uint64_t n;
  const lt_gguf_type t = lt_gguf_kv_type(f, i, &elem, &n);
  int64_t iv;
  double rv;
  bool bv;
  const char *sv;
  size_t sl;
  const bool is_int = t <= LT_GGUF_INT32 || t == LT_GGUF_UINT64 || t == LT_GGUF_INT64;
  lt_status s = lt_gguf_get_int(f, k, &iv);
  FUZZ_ASSERT(is_int ? (s == LT_OK || s == LT_ERR_FORMAT) : s == LT_ERR_FORMAT, "'%s': get_int %s", k, lt_status_name(s));
  if (s != LT_OK) fuzz_check_status(s, "get_int");
  s = lt_gguf_get_real(f, k, &rv);
  FUZZ_ASSERT((s == LT_OK) == (t == LT_GGUF_FLOAT32 || t == LT_GGUF_FLOAT64), "'%s': get_real", k);
  s = lt_gguf_get_bool(f, k, &bv);
  FUZZ_ASSERT((s == LT_OK) == (t == LT_GGUF_BOOL), "'%s': get_bool", k);
  s = lt_gguf_get_str(f, k, &sv, &sl);
  FUZZ_ASSERT((s == LT_OK) == (t == LT_GGUF_STRING), "'%s': get_str", k);
  if (t != LT_GGUF_ARRAY) return;
  const uint64_t lim = n < 4096 ? n : 4096;
  for (uint64_t j = 0; j < lim; j++) {
    if (elem == LT_GGUF_STRING) s = lt_gguf_arr_str(f, i, j, &sv, &sl);
    else if (elem == LT_GGUF_FLOAT32 || elem == LT_GGUF_FLOAT64) s = lt_gguf_arr_real(f, i, j, &rv);
    else if (elem == LT_GGUF_BOOL) s = LT_OK;
    else if ((s = lt_gguf_arr_int(f, i, j, &iv)) != LT_OK) s = fuzz_check_status(s, "arr_int") == LT_ERR_FORMAT ? LT_OK : s;
    FUZZ_ASSERT(s == LT_OK, "'%s'[%llu]: %s", k, (unsigned long long)j, lt_last_error());
  }
  if (elem == LT_GGUF_STRING) FUZZ_ASSERT(lt_gguf_arr_str(f, i, n, &sv, &sl) == LT_ERR_INDEX, "'%s': past the end", k);
}

/* Copies pair i of f into w (the same type). */
static lt_status copy_kv(const lt_gguf_file *f, int i, lt_gguf_writer *w) {
  const char *k = lt_gguf_kv_key(f, i);
  int64_t iv;
  double rv;
  bool bv;
  const char *sv;
  size_t sl;
  switch (lt_gguf_kv_type(f, i, NULL, NULL)) {
    case LT_GGUF_UINT32: lt_gguf_get_int(f, k, &iv); return lt_gguf_set_u32(w, k, (uint32_t)iv);
    case LT_GGUF_INT32: lt_gguf_get_int(f, k, &iv); return lt_gguf_set_i32(w, k, (int32_t)iv);
    case LT_GGUF_UINT64:
      if (lt_gguf_get_int(f, k, &iv) != LT_OK) return LT_ERR_FORMAT;
      return lt_gguf_set_u64(w, k, (uint64_t)iv);
    case LT_GGUF_FLOAT32: lt_gguf_get_real(f, k, &rv); return lt_gguf_set_f32(w, k, (float)rv);
    case LT_GGUF_BOOL: lt_gguf_get_bool(f, k, &bv); return lt_gguf_set_bool(w, k, bv);
    case LT_GGUF_STRING: lt_gguf_get_str(f, k, &sv, &sl); return lt_gguf_set_str_n(w, k, sv, sl);
    default: return LT_ERR_FORMAT; /* other types are not written back */
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  const char *path = fuzz_temp_path("gguf");
  fuzz_write_file(path, "", 0, data, size);
  lt_gguf_file *f = lt_gguf_open(path);
  if (!f) {
    fuzz_check_status(lt_last_status(), "gguf_open");
    remove(path);
    return 0;
  }
  const int nk = lt_gguf_kv_count(f), nt = lt_gguf_tensor_count(f);
  const uint32_t A = lt_gguf_alignment(f);
  fuzz_log("gguf: version %u, %d pairs, %d tensors, alignment %u\n", lt_gguf_version(f), nk, nt, A);
  FUZZ_ASSERT(A && (A & (A - 1)) == 0, "alignment %u", A);
  for (int i = 0; i < nk; i++) check_kv(f, i);
  FUZZ_ASSERT(lt_gguf_kv_key(f, nk) == NULL && lt_gguf_tensor(f, nt) == NULL, "out of range");
  bool copyable = true;
  for (int i = 0; i < nt; i++) {
    const lt_gguf_tensor_info *ti = lt_gguf_tensor(f, i);
    FUZZ_ASSERT(lt_gguf_find_tensor(f, ti->name) == i, "tensor '%s' is not unique", ti->name);
    int64_t block;
    size_t bb;
    FUZZ_ASSERT(lt_ggml_type_block(ti->type, &block, &bb), "'%s': type %d", ti->name, ti->type);
    FUZZ_ASSERT(ti->ne[0] % block == 0 && ti->nbytes == (uint64_t)(ti->numel / block) * bb, "'%s': bytes", ti->name);
    FUZZ_ASSERT(ti->offset % A == 0, "'%s': offset %llu", ti->name, (unsigned long long)ti->offset);
    for (int j = 0; j < i; j++) {
      const lt_gguf_tensor_info *o = lt_gguf_tensor(f, j);
      FUZZ_ASSERT(ti->nbytes == 0 || o->nbytes == 0 || ti->offset >= o->offset + o->nbytes ||
                      o->offset >= ti->offset + ti->nbytes, "'%s' overlaps '%s'", ti->name, o->name);
    }
    if (ti->numel <= (1 << 20)) {
      float *v = malloc((size_t)(ti->numel ? ti->numel : 1) * sizeof *v);
      FUZZ_ASSERT(v, "out of memory");
      const lt_status s = lt_gguf_read_f32(f, i, v);
      if (s != LT_OK) fuzz_check_status(s, "read_f32");
      free(v);
    }
    copyable = copyable && ti->nbytes <= (1u << 22);
  }
  /* write back what was read and open it again */
  if (copyable) {
    lt_gguf_writer *w = lt_gguf_writer_new();
    FUZZ_ASSERT(w, "writer");
    bool all = true;
    for (int i = 0; i < nk && all; i++) all = copy_kv(f, i, w) == LT_OK;
    for (int i = 0; i < nt && all; i++) {
      const lt_gguf_tensor_info *ti = lt_gguf_tensor(f, i);
      all = lt_gguf_add_tensor_bytes(w, ti->name, ti->type, ti->ndim, ti->shape, lt_gguf_tensor_data(f, i),
                                     (size_t)ti->nbytes) == LT_OK;
    }
    char path2[600];
    snprintf(path2, sizeof path2, "%s.out", path);
    if (all && lt_gguf_write(w, path2) == LT_OK) {
      lt_gguf_file *g = lt_gguf_open(path2);
      FUZZ_ASSERT(g, "a written file does not open: %s", lt_last_error());
      FUZZ_ASSERT(lt_gguf_kv_count(g) == nk && lt_gguf_tensor_count(g) == nt, "counts after a round trip");
      for (int i = 0; i < nt; i++) {
        const lt_gguf_tensor_info *a = lt_gguf_tensor(f, i), *b = lt_gguf_tensor(g, i);
        FUZZ_ASSERT(strcmp(a->name, b->name) == 0 && a->nbytes == b->nbytes && a->type == b->type &&
                        memcmp(lt_gguf_tensor_data(f, i), lt_gguf_tensor_data(g, i), (size_t)a->nbytes) == 0,
                    "tensor '%s' after a round trip", a->name);
      }
      for (int i = 0; i < nk; i++) {
        const char *sa, *sb;
        size_t la, lb;
        const char *k = lt_gguf_kv_key(f, i);
        FUZZ_ASSERT(lt_gguf_find_key(g, k) == i, "key '%s' after a round trip", k);
        if (lt_gguf_get_str(f, k, &sa, &la) == LT_OK)
          FUZZ_ASSERT(lt_gguf_get_str(g, k, &sb, &lb) == LT_OK && la == lb && memcmp(sa, sb, la) == 0, "'%s'", k);
      }
      lt_gguf_close(g);
    }
    remove(path2);
    lt_gguf_writer_free(w);
  }
  lt_gguf_close(f);
  /* the model import: built, or refused with a message; capped at 64 MiB */
  lt_tokenizer *tok = NULL;
  lt_transformer *m = lt_tf_gguf_load(path, (uint64_t)64 << 20, &tok);
  if (!m) fuzz_check_status(lt_last_status(), "tf_gguf_load");
  FUZZ_ASSERT(m || !tok, "a refused load returned a tokenizer");
  lt_tokenizer_free(tok);
  lt_transformer_free(m);
  remove(path);
  return 0;
}
