/*
 * fuzz/fuzz_checkpoint.c: the checkpoint loader behind the integrity header,
 * libhdf5 included. The input is the HDF5 part of a checkpoint (the file
 * after its 512-byte user block). The harness puts a user block in front,
 * seals it in memory with the library's seal (lt__ckpt_seal_buffer: size and
 * CRC-32 then match, so the fuzzer gets past the integrity check into HDF5
 * and the layout checks), writes the file (to /dev/shm when it can) and loads
 * it the way generate and train --resume do:
 *   1. a non-strict training load into an empty store (the configuration and
 *      the extra values), else a model-only load;
 *   2. the tokenizer blob, deserialised and used once;
 *   3. the Transformer rebuilt from the configuration (only when it is small:
 *      see MAX_* below, a limit of this harness, not of the library), then
 *      one strict load: a training load with the AdamW optimizer, schedule and
 *      "dropout" generator of tests/util_tfckpt.c (hyperparameter changes
 *      allowed) for a training checkpoint, a parameter load for a model-only
 *      one; and one optimizer update from a loaded training state;
 *   4. its description (lt_ckpt_describe, as export --list) when step 3 did
 *      not run: it walks /optim without a model.
 * At most three HDF5 opens an input (two on the deep path); the metadata
 * rules themselves are fuzzed apart from libhdf5, much faster, by
 * fuzz/fuzz_ckpt_meta.c.
 * Seeds (fuzz/corpus/checkpoint/) are real checkpoints of the three
 * architectures made by fuzz/make_ckpt_seeds.c.
 *
 * Checked promises (checkpoint.h): a failed load has a message and leaves
 * *info NULL and the model's values unchanged; a successful strict load fills
 * every parameter; rules.c's descriptions of the file types are libhdf5's.
 */
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/internal.h" /* lt__ckpt_seal_buffer, LT__CKPT_UB */
#include "datasets/datasets.h"
#include "fuzz_util.h"
#include "models/transformer/config.h"
#include "models/transformer/transformer.h"
#include "util_tfckpt.h"

/* The largest model the harness builds from a fuzzed configuration. */
enum { MAX_VOCAB = 1024, MAX_D = 64, MAX_FF = 256, MAX_LAYERS = 4, MAX_LEN = 256, MAX_CLASSES = 256 };

/* Copies of every parameter's bytes. Returns new (free with snap_free). */
static void **snap(const lt_params *p) {
  int n = lt_params_count(p);
  void **v = calloc((size_t)n + 1, sizeof *v);
  FUZZ_ASSERT(v != NULL, "out of memory");
  for (int i = 0; i < n; i++) {
    const lt_tensor *t = lt_params_at(p, i)->value;
    size_t b = (size_t)t->numel * lt_dtype_size(t->dtype);
    v[i] = malloc(b ? b : 1);
    FUZZ_ASSERT(v[i] != NULL, "out of memory");
    memcpy(v[i], t->data, b);
  }
  return v;
}
static bool snap_same(const lt_params *p, void **v) {
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_tensor *t = lt_params_at(p, i)->value;
    if (memcmp(v[i], t->data, (size_t)t->numel * lt_dtype_size(t->dtype))) return false;
  }
  return true;
}
static void snap_free(const lt_params *p, void **v) {
  for (int i = 0; i < lt_params_count(p); i++) free(v[i]);
  free(v);
}

/* Checks a load's status and what the contract says of info (call it after
 * the load, not with the load as an argument: info must be read after it). */
static lt_status loaded(lt_status s, const lt_ckpt_info *info, const char *what) {
  fuzz_check_status(s, what);
  if (s) FUZZ_ASSERT(info == NULL, "%s failed but set *info", what);
  else FUZZ_ASSERT(info != NULL && info->config && info->extra, "%s succeeded without info", what);
  return s;
}

static void use_tokenizer(const lt_ckpt_meta *extra) {
  const void *blob;
  size_t n;
  if (lt_ckpt_meta_get_bytes(extra, "tokenizer", &blob, &n) != LT_OK) return;
  lt_tokenizer *tok = lt_tokenizer_deserialize(blob, n);
  if (!tok) {
    fuzz_check_status(lt_last_status(), "tokenizer_deserialize");
    return;
  }
  int64_t *ids = NULL, nid = 0;
  if (lt_tokenizer_encode(tok, "abc 123", 7, &ids, &nid) == LT_OK) {
    char *text = NULL;
    size_t len = 0;
    FUZZ_ASSERT(lt_tokenizer_decode(tok, ids, nid, 0, &text, &len) == LT_OK, "decode: %s", lt_last_error());
    free(text);
  }
  free(ids);
  lt_tokenizer_free(tok);
}

static bool small(const lt_tf_config *c) {
  return c->vocab_size <= MAX_VOCAB && c->d_model <= MAX_D && c->d_ff <= MAX_FF &&
         c->n_enc_layers + c->n_dec_layers <= MAX_LAYERS && c->max_len <= MAX_LEN && c->n_classes <= MAX_CLASSES;
}

/* The strict load of step 3: a training state (then one update), or the parameters of a model-only file. */
static void load_model(const char *path, const lt_tf_config *cfg, bool training) {
  lt_generator *init = lt_generator_new(1);
  FUZZ_ASSERT(init != NULL, "out of memory");
  lt_transformer *m = lt_transformer_new(cfg, init);
  lt_generator_free(init);
  if (!m) {
    fuzz_check_status(lt_last_status(), "transformer_new");
    return;
  }
  lt_params *p = lt_transformer_params(m);
  void **before = snap(p);
  lt_ckpt_info *info = (lt_ckpt_info *)&info;
  if (!training) {
    lt_status s = lt_ckpt_load_params(path, p, NULL, &info);
    loaded(s, info, "load_params (strict)");
    fuzz_log("checkpoint: strict load_params: %s", s ? lt_last_error() : "ok");
    if (s) FUZZ_ASSERT(snap_same(p, before), "a failed load_params changed the model");
    lt_ckpt_info_free(info);
    snap_free(p, before);
    lt_transformer_free(m);
    return;
  }
  lt_optim_config oc = tfckpt_optim_config();
  lt_optimizer *opt = lt_optimizer_new(p, &oc);
  lt_generator *drop = lt_generator_new(2);
  FUZZ_ASSERT(opt && drop, "optimizer or generator: %s", lt_last_error());
  lt_schedule sc = tfckpt_schedule();
  lt_train_state st = {.params = p, .optim = opt, .optim_config = &oc, .schedule = &sc,
                       .n_generators = TFCKPT_N_GENERATORS, .generator_names = tfckpt_generator_names,
                       .generators = &drop};
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.allow_hparam_change = true;
  lt_status s = lt_ckpt_load_training(path, &st, &lo, &info);
  loaded(s, info, "load_training (strict)");
  fuzz_log("checkpoint: strict load_training: %s", s ? lt_last_error() : "ok");
  if (s) FUZZ_ASSERT(snap_same(p, before) && st.step == 0, "a failed load_training changed the state");
  if (s == LT_OK) {
    /* The loaded state is usable: one update with zero gradients. */
    for (int i = 0; i < lt_params_count(p); i++) {
      lt_tensor *v = lt_params_at(p, i)->value;
      if (v->requires_grad && !v->grad) v->grad = lt_zeros_like(v);
    }
    fuzz_check_status(lt_optimizer_step(opt), "optimizer_step after a load");
    lt_params_zero_grad(p);
  }
  lt_ckpt_info_free(info);
  snap_free(p, before);
  lt_optimizer_free(opt);
  lt_generator_free(drop);
  lt_transformer_free(m);
}

static void describe(const char *path) {
  lt_ckpt_desc *desc = (lt_ckpt_desc *)&desc;
  lt_status ds = lt_ckpt_describe(path, NULL, &desc);
  fuzz_check_status(ds, "describe");
  fuzz_log("checkpoint: describe: %s", ds ? lt_last_error() : "ok");
  FUZZ_ASSERT(ds == LT_OK ? desc != NULL : desc == NULL, "describe: *desc after %s", lt_status_name(ds));
  for (int i = 0; ds == LT_OK && i < desc->n_tensors; i++)
    FUZZ_ASSERT(desc->tensors[i].ndim >= 0 && desc->tensors[i].ndim <= LT_MAX_DIMS && desc->tensors[i].numel >= 0,
                "describe: tensor %d has rank %d, %lld elements", i, desc->tensors[i].ndim,
                (long long)desc->tensors[i].numel);
  lt_ckpt_desc_free(desc);
}

/* rules.c judges types by its own descriptions of our file types: they must be libhdf5's. */
static void check_type_descs(void) {
  static bool done;
  if (done) return;
  done = true;
  char buf[200];
  for (int d = 0; d < LT_DTYPE_COUNT; d++) {
    hid_t t = lt__h5_file_type((lt_dtype)d);
    const char *mine = lt__ckpt_type_desc((lt_dtype)d, LT__RAW_NONE);
    FUZZ_ASSERT((t < 0) == (mine == NULL), "dtype %d: a file type in one place only", d);
    if (t >= 0) FUZZ_ASSERT(!strcmp(lt__h5_type_desc(t, buf, sizeof buf), mine), "'%s' != '%s'", buf, mine);
    if (t >= 0) H5Tclose(t);
  }
  FUZZ_ASSERT(!strcmp(lt__h5_type_desc(H5T_STD_U8LE, buf, sizeof buf), lt__ckpt_type_desc(LT_DTYPE_COUNT, LT__RAW_U8)),
              "u8: '%s'", buf);
  FUZZ_ASSERT(!strcmp(lt__h5_type_desc(H5T_STD_U64LE, buf, sizeof buf), lt__ckpt_type_desc(LT_DTYPE_COUNT, LT__RAW_U64)),
              "u64: '%s'", buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  unsigned char *file = calloc(LT__CKPT_UB + size, 1);
  FUZZ_ASSERT(file != NULL, "out of memory");
  memcpy(file + LT__CKPT_UB, data, size);
  lt__ckpt_seal_buffer(file, LT__CKPT_UB + size);
  char path[600];
  snprintf(path, sizeof path, "%s.h5", fuzz_temp_path("ckpt"));
  fuzz_write_file(path, file, LT__CKPT_UB + size, "", 0);
  free(file);
  check_type_descs();

  /* 1. configuration and extra values, as generate and train --resume read them */
  lt_ckpt_info *info = (lt_ckpt_info *)&info;
  lt_status s = tfckpt_read_info(path, true, &info);
  loaded(s, info, "reading the configuration");
  fuzz_log("checkpoint: configuration: %s", s ? lt_last_error() : "ok");
  bool deep = false;
  if (s == LT_OK) {
    /* 2. the tokenizer; 3. the model */
    use_tokenizer(info->extra);
    lt_tf_config cfg;
    if (fuzz_check_status(lt_tf_config_from_meta(info->config, &cfg), "tf_config_from_meta") == LT_OK &&
        small(&cfg)) {
      load_model(path, &cfg, info->training);
      deep = true;
    }
  }
  /* 4. the description, where step 3 did not walk the file */
  if (!deep) describe(path);
  lt_ckpt_info_free(info);
  remove(path);
  return 0;
}
