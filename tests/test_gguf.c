/*
 * tests/test_gguf.c: checkpoint/gguf.h and models/transformer/gguf_model.h.
 * The container: every value type written and read back, tensors F32 and
 * BF16 (bits as written, shapes reversed into ggml's ne), the alignment;
 * crafted files, each refused with the status and the words of its rule
 * (magic, version, counts, string and array lengths, value types, nested
 * arrays, duplicates, n_dims, tensor types, blocks, offsets, overlaps,
 * alignment, bools, a FIFO), and every truncation of a valid file refused
 * without a crash. The model: GPT-2 and Llama (GQA, tied and untied)
 * exported in F32 and read back bit-identical (parameters and logits), in
 * BF16 equal to the bf16-rounded parameters; Llama's q/k rows permuted as
 * convert_hf_to_gguf.py permutes them; the tokenizer keys of a byte-level
 * BPE and its round trip; refusals (another architecture, a missing or
 * extra tensor, a wrong shape, a non-finite weight). The llama.cpp checks
 * are tests/reference/test_gguf_llama.py.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libtensor_transformer.h"
#include "tensor/quant.h"
#include "test_util.h"

static char tmp[] = "/tmp/lt_gguf_XXXXXX";

static void tmp_make(void) {
  strcpy(tmp, "/tmp/lt_gguf_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp));
}
static void tmp_remove(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  ck_assert_int_eq(system(cmd), 0);
}

/* ---- a byte builder for crafted files ---------------------------------------- */

typedef struct buf {
  unsigned char b[4096];
  size_t n;
} buf;

static void b_raw(buf *b, const void *p, size_t n) {
  ck_assert(b->n + n <= sizeof b->b);
  memcpy(b->b + b->n, p, n);
  b->n += n;
}
static void b_u32(buf *b, uint32_t v) {
  unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
  b_raw(b, x, 4);
}
static void b_u64(buf *b, uint64_t v) {
  b_u32(b, (uint32_t)v);
  b_u32(b, (uint32_t)(v >> 32));
}
static void b_str(buf *b, const char *s) {
  b_u64(b, strlen(s));
  b_raw(b, s, strlen(s));
}
static void b_pad(buf *b, size_t a) {
  while (b->n % a) b->b[b->n++] = 0;
}

/* What a crafted file may change from the valid one. */
typedef struct craft {
  const char *magic;
  uint32_t version, align_type, align;
  uint64_t n_kv_extra, str_len; /* added to the counts; a string length override */
  uint32_t kv_type, elem_type, bool_value;
  bool dup_key, dup_tensor;
  uint32_t ndim, ggml_type;
  uint64_t ne0, offset1, pad_fix;
} craft;

static craft valid(void) {
  return (craft){.magic = "GGUF", .version = 3, .align_type = LT_GGUF_UINT32, .align = 32, .kv_type = LT_GGUF_ARRAY,
                 .elem_type = LT_GGUF_STRING, .bool_value = 1, .ndim = 2, .ggml_type = LT_GGML_F32, .ne0 = 4,
                 .offset1 = 32};
}

/* A file with 4 pairs (alignment, a string, an array, a bool) and two
 * tensors: "a" [3, 4] f32 at offset 0 (48 bytes, padded to 64) and "b" [2]
 * f32 at offset1 + 32 (64 when valid). */
static size_t craft_file(const craft *c, unsigned char *out) {
  buf b = {.n = 0};
  b_raw(&b, c->magic, 4);
  b_u32(&b, c->version);
  b_u64(&b, 2);
  b_u64(&b, 4 + c->n_kv_extra);
  b_str(&b, "general.alignment");
  b_u32(&b, c->align_type);
  if (c->align_type == LT_GGUF_UINT64) b_u64(&b, c->align);
  else b_u32(&b, c->align);
  b_str(&b, c->dup_key ? "general.alignment" : "general.name");
  b_u32(&b, LT_GGUF_STRING);
  if (c->str_len) b_u64(&b, c->str_len), b_raw(&b, "tiny", 4);
  else b_str(&b, "tiny");
  b_str(&b, "tokenizer.ggml.tokens");
  b_u32(&b, c->kv_type);
  b_u32(&b, c->elem_type);
  b_u64(&b, 2);
  b_str(&b, "ab");
  b_str(&b, "c");
  b_str(&b, "flag");
  b_u32(&b, LT_GGUF_BOOL);
  b_raw(&b, &(unsigned char){(unsigned char)c->bool_value}, 1);
  b_str(&b, "a");
  b_u32(&b, c->ndim);
  for (uint32_t k = 0; k < c->ndim && k < 8; k++) b_u64(&b, k == 0 ? c->ne0 : 3);
  b_u32(&b, c->ggml_type);
  b_u64(&b, 0);
  b_str(&b, c->dup_tensor ? "a" : "b");
  b_u32(&b, 1);
  b_u64(&b, 2);
  b_u32(&b, LT_GGML_F32);
  b_u64(&b, c->offset1 + 32);
  b_pad(&b, 32);
  for (int k = 0; k < 12; k++) b_raw(&b, &(float){(float)k}, 4);
  b_pad(&b, 32);
  for (int k = 0; k < 8 + (int)c->pad_fix; k++) b_raw(&b, &(float){(float)(100 + k)}, 4);
  memcpy(out, b.b, b.n);
  return b.n;
}

static char *write_file(const char *name, const void *p, size_t n) {
  char *path = lt_test_join(tmp, name);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fwrite(p, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
  return path;
}

static void expect_refused(const craft *c, lt_status st, const char *words) {
  unsigned char bytes[4096];
  size_t n = craft_file(c, bytes);
  LT_EXPECT_NULLP_ERR(lt_gguf_open(write_file("bad.gguf", bytes, n)), st, words);
}

START_TEST(container_round_trip) {
  lt_gguf_writer *w = LT_NNP(lt_gguf_writer_new());
  LT_OK_OR_FAIL(lt_gguf_set_u32(w, "general.alignment", 64));
  LT_OK_OR_FAIL(lt_gguf_set_u32(w, "u32", 4000000000u));
  LT_OK_OR_FAIL(lt_gguf_set_i32(w, "i32", -7));
  LT_OK_OR_FAIL(lt_gguf_set_u64(w, "u64", (uint64_t)1 << 40));
  LT_OK_OR_FAIL(lt_gguf_set_f32(w, "f32", 0.25f));
  LT_OK_OR_FAIL(lt_gguf_set_bool(w, "yes", true));
  LT_OK_OR_FAIL(lt_gguf_set_str(w, "s", "héllo"));
  LT_OK_OR_FAIL(lt_gguf_set_arr_str(w, "strs", 3, (const char *[]){"a", "", "ccc"}, NULL));
  LT_OK_OR_FAIL(lt_gguf_set_arr_i32(w, "ints", 2, (const int32_t[]){-1, 5}));
  LT_OK_OR_FAIL(lt_gguf_set_arr_f32(w, "reals", 2, (const float[]){1.5f, -2.0f}));
  LT_EXPECT_ERR(lt_gguf_set_u32(w, "u32", 1), LT_ERR_INVALID, "given twice");
  LT_EXPECT_ERR(lt_gguf_set_u32(w, "", 1), LT_ERR_INVALID, "bytes");
  const double v[6] = {1, -2, 3.14159, 1e-3, 65504, -0.0};
  lt_tensor *t = LT_NN(lt_test_from_f64(LT_DTYPE_F32, 2, (int64_t[]){2, 3}, v));
  LT_OK_OR_FAIL(lt_gguf_add_tensor(w, "t.f32", LT_GGML_F32, 2, (int64_t[]){2, 3}, t));
  LT_OK_OR_FAIL(lt_gguf_add_tensor(w, "t.bf16", LT_GGML_BF16, 1, (int64_t[]){6}, t));
  LT_EXPECT_ERR(lt_gguf_add_tensor(w, "t.f32", LT_GGML_F32, 2, (int64_t[]){2, 3}, t), LT_ERR_INVALID, "twice");
  LT_EXPECT_ERR(lt_gguf_add_tensor(w, "bad", LT_GGML_F32, 2, (int64_t[]){3, 3}, t), LT_ERR_SHAPE, "shape");
  LT_EXPECT_ERR(lt_gguf_add_tensor(w, "q", LT_GGML_Q8_0, 2, (int64_t[]){2, 3}, t), LT_ERR_FORMAT, "multiple");
  const char *path = lt_test_join(tmp, "c.gguf");
  LT_OK_OR_FAIL(lt_gguf_write(w, path));
  lt_gguf_writer_free(w);

  lt_gguf_file *f = lt_gguf_open(path);
  ck_assert_msg(f != NULL, "%s", lt_last_error());
  ck_assert_int_eq(lt_gguf_version(f), 3);
  ck_assert_int_eq(lt_gguf_alignment(f), 64);
  ck_assert_int_eq(lt_gguf_kv_count(f), 10);
  int64_t iv;
  double rv;
  bool bv;
  const char *sv;
  size_t sl;
  LT_OK_OR_FAIL(lt_gguf_get_int(f, "u32", &iv));
  ck_assert_int_eq(iv, 4000000000LL);
  LT_OK_OR_FAIL(lt_gguf_get_int(f, "i32", &iv));
  ck_assert_int_eq(iv, -7);
  LT_OK_OR_FAIL(lt_gguf_get_int(f, "u64", &iv));
  ck_assert_int_eq(iv, (int64_t)1 << 40);
  LT_OK_OR_FAIL(lt_gguf_get_real(f, "f32", &rv));
  ck_assert(rv == 0.25);
  LT_OK_OR_FAIL(lt_gguf_get_bool(f, "yes", &bv));
  ck_assert(bv);
  LT_OK_OR_FAIL(lt_gguf_get_str(f, "s", &sv, &sl));
  ck_assert(sl == strlen("héllo") && memcmp(sv, "héllo", sl) == 0);
  LT_EXPECT_ERR(lt_gguf_get_str(f, "u32", &sv, &sl), LT_ERR_FORMAT, "uint32 (string expected)");
  LT_EXPECT_ERR(lt_gguf_get_int(f, "nope", &iv), LT_ERR_INVALID, "missing");
  const int ks = lt_gguf_find_key(f, "strs");
  lt_gguf_type elem;
  uint64_t n;
  ck_assert_int_eq(lt_gguf_kv_type(f, ks, &elem, &n), LT_GGUF_ARRAY);
  ck_assert(elem == LT_GGUF_STRING && n == 3);
  LT_OK_OR_FAIL(lt_gguf_arr_str(f, ks, 2, &sv, &sl));
  ck_assert(sl == 3 && memcmp(sv, "ccc", 3) == 0);
  LT_OK_OR_FAIL(lt_gguf_arr_str(f, ks, 1, &sv, &sl));
  ck_assert_int_eq(sl, 0);
  LT_EXPECT_ERR(lt_gguf_arr_str(f, ks, 3, &sv, &sl), LT_ERR_INDEX, "element 3 of 3");
  LT_OK_OR_FAIL(lt_gguf_arr_int(f, lt_gguf_find_key(f, "ints"), 0, &iv));
  ck_assert_int_eq(iv, -1);
  LT_OK_OR_FAIL(lt_gguf_arr_real(f, lt_gguf_find_key(f, "reals"), 1, &rv));
  ck_assert(rv == -2.0);
  LT_EXPECT_ERR(lt_gguf_arr_int(f, lt_gguf_find_key(f, "reals"), 0, &iv), LT_ERR_FORMAT, "array of float32");
  ck_assert_int_eq(lt_gguf_tensor_count(f), 2);
  const lt_gguf_tensor_info *a = lt_gguf_tensor(f, lt_gguf_find_tensor(f, "t.f32"));
  ck_assert(a->ndim == 2 && a->ne[0] == 3 && a->ne[1] == 2 && a->shape[0] == 2 && a->shape[1] == 3);
  ck_assert(a->offset % 64 == 0 && a->nbytes == 24);
  ck_assert_int_eq((uintptr_t)lt_gguf_tensor_data(f, lt_gguf_find_tensor(f, "t.bf16")) % 64, 0);
  float got[6];
  LT_OK_OR_FAIL(lt_gguf_read_f32(f, lt_gguf_find_tensor(f, "t.f32"), got));
  ck_assert(memcmp(got, t->data, sizeof got) == 0);
  LT_OK_OR_FAIL(lt_gguf_read_f32(f, lt_gguf_find_tensor(f, "t.bf16"), got));
  for (int k = 0; k < 6; k++) {
    const float want = lt_f32_from_bf16(lt_bf16_from_f32(((float *)t->data)[k]));
    ck_assert_msg(memcmp(&got[k], &want, 4) == 0, "bf16 element %d: %g, want %g", k, got[k], want);
  }
  lt_gguf_close(f);
  lt_tensor_free(t);
}
END_TEST

START_TEST(crafted_files) {
  unsigned char bytes[4096];
  craft c = valid();
  size_t n = craft_file(&c, bytes);
  lt_gguf_file *f = lt_gguf_open(write_file("ok.gguf", bytes, n));
  ck_assert_msg(f != NULL, "the valid crafted file: %s", lt_last_error());
  float b[2];
  LT_OK_OR_FAIL(lt_gguf_read_f32(f, lt_gguf_find_tensor(f, "b"), b));
  ck_assert(b[0] == 100 && b[1] == 101);
  lt_gguf_close(f);
  /* every truncation is refused, none crashes */
  for (size_t k = 0; k < n; k++) {
    lt_gguf_file *g = lt_gguf_open(write_file("cut.gguf", bytes, k));
    ck_assert_msg(g == NULL || k >= n - 24, "a file cut at %zu of %zu bytes opened", k, n);
    lt_gguf_close(g);
  }
  c = valid(), c.magic = "GGUG";
  expect_refused(&c, LT_ERR_FORMAT, "not a GGUF file");
  c = valid(), c.version = 1;
  expect_refused(&c, LT_ERR_FORMAT, "version 1");
  c = valid(), c.n_kv_extra = (uint64_t)1 << 40;
  expect_refused(&c, LT_ERR_FORMAT, "cannot fit");
  c = valid(), c.str_len = (uint64_t)1 << 62;
  expect_refused(&c, LT_ERR_FORMAT, "needs");
  c = valid(), c.kv_type = 13;
  expect_refused(&c, LT_ERR_FORMAT, "value type 13");
  c = valid(), c.elem_type = LT_GGUF_ARRAY;
  expect_refused(&c, LT_ERR_FORMAT, "array of arrays");
  c = valid(), c.dup_key = true;
  expect_refused(&c, LT_ERR_FORMAT, "given twice");
  c = valid(), c.dup_tensor = true;
  expect_refused(&c, LT_ERR_FORMAT, "tensor name 'a' is given twice");
  c = valid(), c.ndim = 0;
  expect_refused(&c, LT_ERR_FORMAT, "n_dims 0");
  c = valid(), c.ndim = 5;
  expect_refused(&c, LT_ERR_FORMAT, "n_dims 5");
  c = valid(), c.ggml_type = 12; /* Q4_K */
  expect_refused(&c, LT_ERR_DTYPE, "ggml type 12");
  c = valid(), c.ggml_type = LT_GGML_Q8_0;
  expect_refused(&c, LT_ERR_FORMAT, "multiple of its block");
  c = valid(), c.ne0 = (uint64_t)1 << 62;
  expect_refused(&c, LT_ERR_OVERFLOW, "overflow");
  c = valid(), c.offset1 = 8;
  expect_refused(&c, LT_ERR_FORMAT, "not a multiple of the alignment");
  c = valid(), c.offset1 = 4096;
  expect_refused(&c, LT_ERR_FORMAT, "past the data section");
  c = valid(), c.offset1 = 0;
  expect_refused(&c, LT_ERR_FORMAT, "overlaps");
  c = valid(), c.align = 24;
  expect_refused(&c, LT_ERR_FORMAT, "power of two");
  c = valid(), c.align_type = LT_GGUF_UINT64;
  expect_refused(&c, LT_ERR_FORMAT, "uint32 expected");
  c = valid(), c.bool_value = 2;
  expect_refused(&c, LT_ERR_FORMAT, "a bool holds 2");
  /* a FIFO is refused without blocking */
  char *fifo = lt_test_join(tmp, "fifo.gguf");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  LT_EXPECT_NULLP_ERR(lt_gguf_open(fifo), LT_ERR_FORMAT, "FIFO");
  LT_EXPECT_NULLP_ERR(lt_gguf_open(lt_test_join(tmp, "absent.gguf")), LT_ERR_IO, "cannot open");
}
END_TEST

/* ---- the model ------------------------------------------------------------------ */

static lt_tf_config gpt2_config(void) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 280, c.d_model = 32, c.n_heads = 2, c.n_kv_heads = 2, c.n_dec_layers = 2, c.d_ff = 64;
  c.max_len = 16, c.act = LT_ACT_GELU_TANH, c.dropout = 0.0, c.pad_id = -1;
  return c;
}

static lt_tf_config llama_config(bool tied) {
  lt_tf_config c = gpt2_config();
  c.d_model = 64, c.n_heads = 4, c.n_kv_heads = 2, c.d_ff = 96, c.norm = LT_TF_RMS_NORM, c.act = LT_ACT_SILU;
  c.swiglu = true, c.pos = LT_TF_POS_ROPE, c.bias = false, c.tie_embeddings = tied, c.norm_eps = 1e-6;
  c.rope_base = 500.0;
  return c;
}

static lt_transformer *random_model(const lt_tf_config *c) {
  lt_generator *g = lt_generator_new(11);
  lt_transformer *m = LT_NNP(lt_transformer_new(c, g));
  lt_params *P = lt_transformer_params(m);
  for (int i = 0; i < lt_params_count(P); i++) LT_OK_OR_FAIL(lt_init_normal_(g, lt_params_at(P, i)->value, 0.1, 0.5));
  lt_generator_free(g);
  return m;
}

static lt_tensor *logits(const lt_transformer *m) {
  const int64_t ids[] = {1, 5, 2, 270, 0, 7, 3, 4, 4, 9, 11, 6, 10, 2};
  lt_tensor *x = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){2, 7}, ids));
  lt_tensor *y = LT_NN(lt_transformer_decode(m, x, NULL, NULL, NULL, 0, NULL));
  lt_tensor_free(x);
  return y;
}

/* A byte-level BPE (4 specials, 256 bytes, the merges of a short text). */
static lt_tokenizer *bpe_tokenizer(void) {
  const char *text = "the cat sat on the mat; the cat ate the rat. then the cat sat again on the mat.";
  lt_bpe_opts o = LT_BPE_DEFAULTS;
  o.vocab_size = 300, o.min_frequency = 1;
  return LT_NNP(lt_tokenizer_train_bpe(text, strlen(text), &o));
}

static void model_round_trip(const lt_tf_config *cfg, const char *name) {
  lt_tokenizer *tok = bpe_tokenizer();
  lt_tf_config cv = *cfg;
  cv.vocab_size = lt_tokenizer_vocab_size(tok);
  const lt_tf_config *c = &cv;
  lt_transformer *m = random_model(c);
  char *json = NULL;
  size_t len = 0;
  LT_OK_OR_FAIL(lt_tokenizer_to_json(tok, &json, &len));
  char file[64];
  snprintf(file, sizeof file, "%s.f32.gguf", name);
  const char *path = lt_test_join(tmp, file);
  LT_OK_OR_FAIL(lt_tf_gguf_export(m, path, LT_GGML_F32, json, len));
  ck_assert(lt_tf_gguf_is_file(path));
  lt_tokenizer *tok2 = NULL;
  lt_transformer *m2 = lt_tf_gguf_load(path, 0, &tok2);
  ck_assert_msg(m2 != NULL, "%s", lt_last_error());
  ck_assert_ptr_nonnull(tok2);
  const lt_tf_config *c2 = lt_transformer_config(m2);
  ck_assert(c2->n_kv_heads == c->n_kv_heads && c2->tie_embeddings == c->tie_embeddings && c2->d_ff == c->d_ff);
  ck_assert(c2->norm_eps == (double)(float)c->norm_eps);
  lt_params *P = lt_transformer_params(m), *P2 = lt_transformer_params(m2);
  ck_assert_int_eq(lt_params_count(P2), lt_params_count(P));
  for (int i = 0; i < lt_params_count(P); i++) {
    const lt_param *a = lt_params_at(P, i);
    const lt_tensor *b = LT_NN((lt_tensor *)lt_params_find(P2, a->name));
    ck_assert_msg(memcmp(a->value->data, b->data, (size_t)b->numel * 4) == 0, "%s differs", a->name);
  }
  if (c->norm_eps == (double)(float)c->norm_eps) {
    lt_tensor *y = logits(m), *y2 = logits(m2);
    ck_assert(memcmp(y->data, y2->data, (size_t)y->numel * 4) == 0);
    LT_FREE_ALL(y, y2);
  }
  const char *s = "the cat sat on the mat again";
  int64_t *ids, *ids2, n1, n2;
  LT_OK_OR_FAIL(lt_tokenizer_encode(tok, s, strlen(s), &ids, &n1));
  LT_OK_OR_FAIL(lt_tokenizer_encode(tok2, s, strlen(s), &ids2, &n2));
  ck_assert(n1 == n2 && memcmp(ids, ids2, (size_t)n1 * 8) == 0);
  free(ids), free(ids2);

  /* the keys llama.cpp reads */
  lt_gguf_file *f = LT_NNP(lt_gguf_open(path));
  const char *sv;
  size_t sl;
  int64_t iv;
  LT_OK_OR_FAIL(lt_gguf_get_str(f, "general.architecture", &sv, &sl));
  ck_assert(sl == strlen(name) && memcmp(sv, name, sl) == 0);
  LT_OK_OR_FAIL(lt_gguf_get_str(f, "tokenizer.ggml.model", &sv, &sl));
  ck_assert(sl == 4 && memcmp(sv, "gpt2", 4) == 0);
  LT_OK_OR_FAIL(lt_gguf_get_int(f, "tokenizer.ggml.eos_token_id", &iv));
  ck_assert_int_eq(iv, LT_TOKEN_EOS);
  uint64_t nt, nm;
  lt_gguf_kv_type(f, lt_gguf_find_key(f, "tokenizer.ggml.tokens"), NULL, &nt);
  lt_gguf_kv_type(f, lt_gguf_find_key(f, "tokenizer.ggml.merges"), NULL, &nm);
  ck_assert(nt == (uint64_t)c->vocab_size && nm == (uint64_t)c->vocab_size - 260);
  LT_OK_OR_FAIL(lt_gguf_arr_str(f, lt_gguf_find_key(f, "tokenizer.ggml.tokens"), 4 + ' ', &sv, &sl));
  ck_assert(sl == 2 && memcmp(sv, "\xc4\xa0", 2) == 0); /* the space byte is 'Ġ' in GPT-2's alphabet */
  if (c->pos == LT_TF_POS_ROPE) {
    /* attn_q rows (h, i, j) are q_proj's rows h*HS + j*HS/2 + i: ggml's interleaved pairs */
    const int64_t C = c->d_model, HS = C / c->n_heads;
    const lt_gguf_tensor_info *q = lt_gguf_tensor(f, lt_gguf_find_tensor(f, "blk.1.attn_q.weight"));
    const float *fq = lt_gguf_tensor_data(f, lt_gguf_find_tensor(f, "blk.1.attn_q.weight"));
    const float *pq = lt_params_find(P, "decoder.layers.1.self_attn.q_proj.weight")->data;
    ck_assert(q->shape[0] == C && q->shape[1] == C);
    for (int64_t h = 0; h < c->n_heads; h++)
      for (int64_t i = 0; i < HS / 2; i++)
        for (int64_t j = 0; j < 2; j++)
          ck_assert(memcmp(fq + (h * HS + 2 * i + j) * C, pq + (h * HS + j * HS / 2 + i) * C, 4 * (size_t)C) == 0);
    ck_assert_int_eq(lt_gguf_find_tensor(f, "output.weight") >= 0, !c->tie_embeddings);
  } else {
    ck_assert_int_lt(lt_gguf_find_tensor(f, "output.weight"), 0);
    const lt_gguf_tensor_info *qkv = lt_gguf_tensor(f, lt_gguf_find_tensor(f, "blk.0.attn_qkv.weight"));
    ck_assert(qkv->ne[0] == c->d_model && qkv->ne[1] == 3 * c->d_model);
  }
  lt_gguf_close(f);

  /* BF16: the matrices are the bf16-rounded parameters, the vectors exact */
  snprintf(file, sizeof file, "%s.bf16.gguf", name);
  path = lt_test_join(tmp, file);
  LT_OK_OR_FAIL(lt_tf_gguf_export(m, path, LT_GGML_BF16, json, len));
  lt_transformer *m3 = lt_tf_gguf_load(path, 0, NULL);
  ck_assert_msg(m3 != NULL, "%s", lt_last_error());
  lt_params *P3 = lt_transformer_params(m3);
  for (int i = 0; i < lt_params_count(P); i++) {
    const lt_param *a = lt_params_at(P, i);
    const lt_tensor *b = lt_params_find(P3, a->name);
    const float *x = a->value->data, *y = b->data;
    for (int64_t k = 0; k < b->numel; k++) {
      const float want = a->value->ndim == 2 ? lt_f32_from_bf16(lt_bf16_from_f32(x[k])) : x[k];
      ck_assert_msg(memcmp(&y[k], &want, 4) == 0, "%s[%lld]: %g, want %g", a->name, (long long)k, y[k], want);
    }
  }
  /* Q8_0 and Q4_0: the matrices are tensor/quant.h's round trip of the parameters, bit for bit */
  for (int qi = 0; qi < 2; qi++) {
    const int type = qi ? LT_GGML_Q4_0 : LT_GGML_Q8_0;
    const lt_qformat q = qi ? LT_QFORMAT_Q4_0 : LT_QFORMAT_Q8_0;
    snprintf(file, sizeof file, "%s.%s.gguf", name, qi ? "q4_0" : "q8_0");
    path = lt_test_join(tmp, file);
    LT_OK_OR_FAIL(lt_tf_gguf_export(m, path, type, json, len));
    lt_gguf_file *gf = LT_NNP(lt_gguf_open(path));
    ck_assert_int_eq(lt_gguf_tensor(gf, lt_gguf_find_tensor(gf, "token_embd.weight"))->type, type);
    lt_gguf_close(gf);
    lt_transformer *mq = lt_tf_gguf_load(path, 0, NULL);
    ck_assert_msg(mq != NULL, "%s", lt_last_error());
    lt_params *PQ = lt_transformer_params(mq);
    for (int i = 0; i < lt_params_count(P); i++) {
      const lt_param *a = lt_params_at(P, i);
      const lt_tensor *b = lt_params_find(PQ, a->name);
      const int64_t K = a->value->shape[a->value->ndim - 1];
      const bool quantized = a->value->ndim == 2 && K % 32 == 0 && !strstr(a->name, "q_proj") && !strstr(a->name, "k_proj");
      if (!quantized) continue; /* vectors stay F32; q/k rows are permuted before quantizing (checked by llama.cpp) */
      float *want = malloc((size_t)a->value->numel * 4);
      unsigned char *blocks = malloc((size_t)a->value->numel * 2);
      for (int64_t r = 0; r < a->value->numel / K; r++) {
        LT_OK_OR_FAIL(lt_quantize_row(q, (const float *)a->value->data + r * K, K, blocks));
        LT_OK_OR_FAIL(lt_dequantize_row(q, blocks, K, want + r * K));
      }
      ck_assert_msg(memcmp(want, b->data, (size_t)b->numel * 4) == 0, "%s: %s round trip differs", a->name,
                    lt_ggml_type_name(type));
      free(want);
      free(blocks);
    }
    lt_transformer_free(mq);
  }
  printf("gguf %s: %d tensors bit-identical in F32 (logits too), bf16-rounded in BF16, quant.h's round trip in Q8_0 "
         "and Q4_0; tokenizer round trip\n", name, lt_params_count(P));
  lt_transformer_free(m3);
  lt_transformer_free(m2);
  lt_transformer_free(m);
  lt_tokenizer_free(tok);
  lt_tokenizer_free(tok2);
  free(json);
}

START_TEST(gpt2_round_trip) {
  lt_tf_config c = gpt2_config();
  model_round_trip(&c, "gpt2");
}
END_TEST

START_TEST(llama_round_trip) {
  lt_tf_config c = llama_config(false);
  model_round_trip(&c, "llama");
  c = llama_config(true);
  model_round_trip(&c, "llama");
}
END_TEST

/* Rewrites src to dst with the tensor `name` dropped, renamed to `rename`, or given one NaN. */
static void rewrite(const char *src, const char *dst, const char *name, const char *rename, bool nan, const char *arch) {
  lt_gguf_file *f = LT_NNP(lt_gguf_open(src));
  lt_gguf_writer *w = LT_NNP(lt_gguf_writer_new());
  for (int i = 0; i < lt_gguf_kv_count(f); i++) {
    const char *k = lt_gguf_kv_key(f, i);
    int64_t iv;
    double rv;
    const char *sv;
    size_t sl;
    if (lt_gguf_get_int(f, k, &iv) == LT_OK) LT_OK_OR_FAIL(lt_gguf_set_u32(w, k, (uint32_t)iv));
    else if (lt_gguf_get_real(f, k, &rv) == LT_OK) LT_OK_OR_FAIL(lt_gguf_set_f32(w, k, (float)rv));
    else if (lt_gguf_get_str(f, k, &sv, &sl) == LT_OK) {
      if (arch && strcmp(k, "general.architecture") == 0) sv = arch, sl = strlen(arch);
      LT_OK_OR_FAIL(lt_gguf_set_str_n(w, k, sv, sl));
    }
  }
  for (int i = 0; i < lt_gguf_tensor_count(f); i++) {
    const lt_gguf_tensor_info *ti = lt_gguf_tensor(f, i);
    if (name && strcmp(ti->name, name) == 0 && !rename && !nan) continue;
    const char *nm = name && rename && strcmp(ti->name, name) == 0 ? rename : ti->name;
    unsigned char *b = malloc(ti->nbytes);
    memcpy(b, lt_gguf_tensor_data(f, i), ti->nbytes);
    if (nan && name && strcmp(ti->name, name) == 0) memcpy(b + 4, &(float){NAN}, 4);
    LT_OK_OR_FAIL(lt_gguf_add_tensor_bytes(w, nm, ti->type, ti->ndim, ti->shape, b, ti->nbytes));
    free(b);
  }
  LT_OK_OR_FAIL(lt_gguf_write(w, dst));
  lt_gguf_writer_free(w);
  lt_gguf_close(f);
}

START_TEST(model_refusals) {
  lt_tf_config c = llama_config(false);
  lt_transformer *m = random_model(&c);
  const char *ok = lt_test_join(tmp, "ok.gguf"), *bad = lt_test_join(tmp, "bad.gguf");
  LT_OK_OR_FAIL(lt_tf_gguf_export(m, ok, LT_GGML_F32, NULL, 0));
  lt_tokenizer *tok = (lt_tokenizer *)1;
  lt_transformer *m2 = LT_NNP(lt_tf_gguf_load(ok, 0, &tok));
  ck_assert_ptr_null(tok); /* tokenizer.ggml.model "none" */
  lt_transformer_free(m2);
  LT_EXPECT_NULLP_ERR(lt_tf_gguf_load(ok, 1000, NULL), LT_ERR_NOMEM, "memory cap");
  rewrite(ok, bad, "blk.1.ffn_up.weight", NULL, false, NULL); /* fewer elements than the configuration: refused first */
  LT_EXPECT_NULLP_ERR(lt_tf_gguf_load(bad, 0, NULL), LT_ERR_FORMAT, "the configuration describes");
  rewrite(ok, bad, "blk.1.ffn_up.weight", "blk.1.ffn_upp.weight", false, NULL);
  LT_EXPECT_NULLP_ERR(lt_tf_gguf_load(bad, 0, NULL), LT_ERR_INVALID,
                      "'blk.1.ffn_up.weight' (libtensor's decoder.layers.1.w3.weight) is missing");
  rewrite(ok, bad, "blk.0.attn_v.weight", NULL, true, NULL);
  LT_EXPECT_NULLP_ERR(lt_tf_gguf_load(bad, 0, NULL), LT_ERR_NUMERIC, "NaN at flat index 1");
  rewrite(ok, bad, NULL, NULL, false, "mamba");
  LT_EXPECT_NULLP_ERR(lt_tf_gguf_load(bad, 0, NULL), LT_ERR_INVALID, "\"mamba\"");
  rewrite(ok, bad, NULL, NULL, false, "gpt2");
  LT_EXPECT_NULLP_ERR(lt_tf_gguf_load(bad, 0, NULL), LT_ERR_FORMAT, "gpt2.embedding_length");
  /* GPT-2's shape checked against the configuration */
  lt_tf_config g = gpt2_config();
  lt_transformer *mg = random_model(&g);
  LT_OK_OR_FAIL(lt_tf_gguf_export(mg, ok, LT_GGML_F32, NULL, 0));
  rewrite(ok, bad, "blk.0.ffn_up.bias", "extra.bias", false, NULL);
  LT_EXPECT_NULLP_ERR(lt_tf_gguf_load(bad, 0, NULL), LT_ERR_INVALID, "missing");
  /* an encoder-only model has no GGUF layout here */
  lt_tf_config e = lt_tf_config_default(LT_TF_ENCODER_ONLY);
  e.vocab_size = 20, e.d_model = 8, e.n_heads = 2, e.n_kv_heads = 2, e.n_enc_layers = 1, e.d_ff = 16, e.max_len = 8;
  lt_generator *gen = lt_generator_new(1);
  lt_transformer *me = LT_NNP(lt_transformer_new(&e, gen));
  lt_generator_free(gen);
  ck_assert(lt_tf_gguf_export(me, bad, LT_GGML_F32, NULL, 0) != LT_OK);
  /* layouts llama.cpp's "llama" would run without a part of them: refused, never dropped */
  const char *want[3] = {"q/k/v biases (Qwen2's layout)", "sliding_window 4 (Mistral's layout)", "RoPE scaling (llama3)"};
  for (int i = 0; i < 3; i++) {
    lt_tf_config x = llama_config(false);
    if (i == 0) x.qkv_bias = true;
    if (i == 1) x.sliding_window = 4;
    if (i == 2) x.rope_type = LT_ROPE_LLAMA3, x.rope_factor = 8, x.rope_low_freq_factor = 1,
                x.rope_high_freq_factor = 4, x.rope_original_max_len = 4;
    lt_transformer *mx = random_model(&x);
    LT_EXPECT_ERR(lt_tf_gguf_export(mx, bad, LT_GGML_F32, NULL, 0), LT_ERR_INVALID, want[i]);
    lt_transformer_free(mx);
  }
  LT_EXPECT_ERR(lt_tf_gguf_export(m, bad, 12, NULL, 0), LT_ERR_DTYPE, "F32, BF16, Q8_0 or Q4_0");
  LT_EXPECT_ERR(lt_tf_gguf_export(m, bad, LT_GGML_F32, "{not json", 9), LT_ERR_FORMAT, "does not parse");
  lt_transformer_free(me);
  lt_transformer_free(mg);
  lt_transformer_free(m);
}
END_TEST

/* A file with tokenizer.ggml.* and no tokenizer.huggingface.json (as llama.cpp's converter writes them):
 * the byte-level BPE rebuilt from its tokens and merges (fuzz/make_seeds.py's tiny Llama). */
START_TEST(tokenizer_from_ggml_keys) {
  lt_tokenizer *tok = NULL;
  lt_transformer *m = lt_tf_gguf_load(LT_TEST_DATA_DIR "/../../fuzz/corpus/gguf/llama-tiny", 0, &tok);
  ck_assert_msg(m != NULL, "%s", lt_last_error());
  ck_assert_ptr_nonnull(tok);
  ck_assert_int_eq(lt_tokenizer_vocab_size(tok), 16);
  int64_t *ids, n;
  LT_OK_OR_FAIL(lt_tokenizer_encode(tok, "abcdea", 6, &ids, &n));
  ck_assert(n == 4 && ids[0] == 14 && ids[1] == 15 && ids[2] == 4 && ids[3] == 0); /* ab, cd, e, a */
  free(ids);
  lt_tokenizer_free(tok);
  lt_transformer_free(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gguf");
  TCase *tc = LT_TEST_CASE(s, "gguf", 300, container_round_trip, crafted_files, gpt2_round_trip, llama_round_trip,
                           model_refusals, tokenizer_from_ggml_keys);
  tcase_add_checked_fixture(tc, tmp_make, tmp_remove);
  return lt_test_run(s);
}
