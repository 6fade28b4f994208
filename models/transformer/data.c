/*
 * models/transformer/data.c: the data of a Transformer training run
 * (data.h): text, TSV pairs or a generated task into tokens, a validation
 * part and a loader. Moved out of train's program so that another program
 * (or a test) prepares the same data through library calls.
 *
 * What this is not: a reader of files (datasets/ reads TSV and text) or a
 * place that prints: the counts of what was skipped go back in lt_tf_data.
 */
#include "models/transformer/data.h"

#include "dist/dist.h"
#include "models/transformer/internal.h"
#include "models/transformer/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const FROM_NAMES[] = {"both", "source", "target"};
const char *lt_tf_tokenizer_from_name(int i) { return lt_enum_name(FROM_NAMES, LT_TF_TOKENIZER_FROM_COUNT, i); }



static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static lt_status build_tokenizer(const lt_tf_data_opts *o, const char *text, size_t len, const char *what,
                                 lt_tokenizer **out) {
  lt_tokenizer *t = NULL;
  if (o->tokenizer == LT_TOKENIZER_BYTE) t = lt_tokenizer_new_byte();
  else if (o->tokenizer == LT_TOKENIZER_CHAR) t = lt_tokenizer_new_char(text, len);
  else t = lt_tokenizer_train_bpe(text, len, &(lt_bpe_opts){0, o->bpe_vocab, 2});
  if (!t)
    return lt_error_set(lt_last_status(), "building the %s tokenizer from %s: %s",
                        lt_tokenizer_kind_name(o->tokenizer), what, lt_last_error());
  *out = t;
  return LT_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Classification: the class id of each label (sorted distinct training labels). */
static lt_status build_classes(lt_tf_data *D) {
  int64_t n = lt_text_pairs_count(D->train_text);
  char **v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
  if (!v) return lt_error_set(LT_ERR_NOMEM, "'%s': out of memory for %lld labels", D->name, (long long)n);
  for (int64_t i = 0; i < n; i++) {
    const char *tgt;
    lt_text_pairs_get(D->train_text, i, NULL, NULL, &tgt, NULL);
    v[i] = (char *)tgt;
  }
  qsort(v, (size_t)n, sizeof *v, cmp_str);
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    if (k == 0 || strcmp(v[k - 1], v[i])) v[k++] = v[i];
  if (k < 2) {
    free(v);
    return lt_error_set(LT_ERR_FORMAT, "'%s': encoder-only classification needs at least 2 distinct labels, found %lld",
                        D->name, (long long)k);
  }
  D->classes = calloc((size_t)k, sizeof *D->classes);
  for (int64_t i = 0; D->classes && i < k; i++) {
    if (!(D->classes[i] = strdup(v[i]))) break;
    D->n_classes = i + 1;
  }
  free(v);
  if (D->n_classes != k) return lt_error_set(LT_ERR_NOMEM, "'%s': out of memory for the class labels", D->name);
  return LT_OK;
}

int64_t lt_tf_data_class_of(const lt_tf_data *D, const char *label) {
  int64_t lo = 0, hi = D->n_classes - 1;
  while (lo <= hi) {
    int64_t mid = (lo + hi) / 2;
    int c = strcmp(D->classes[mid], label);
    if (!c) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* Classification pairs: source ids, target = [class id]. Unknown validation
 * labels are counted and skipped. */
static lt_status encode_classes(const lt_tf_data_opts *o, const lt_tf_data *D, const lt_text_pairs *tp,
                                lt_seq_pairs **out, int64_t *n_aff) {
  lt_seq_pairs *sp = lt_seq_pairs_new();
  if (!sp) return lt__tf_fail("encoding");
  lt_special_ids si = lt_tokenizer_special_ids(D->tok); /* the source padding (the class ids are the target) */
  if (si.bos >= 0 && si.eos >= 0 && si.pad >= 0) (void)lt_seq_pairs_set_special_ids(sp, si);
  *n_aff = 0;
  lt_status s = LT_OK;
  for (int64_t i = 0; i < lt_text_pairs_count(tp) && s == LT_OK; i++) {
    const char *src, *tgt;
    size_t sl;
    lt_text_pairs_get(tp, i, &src, &sl, &tgt, NULL);
    int64_t c = lt_tf_data_class_of(D, tgt);
    int64_t *ids, n;
    /* with the post-processor's special tokens ([CLS] ... [SEP] of a BERT tokenizer.json: its pooler reads
     * [CLS]), as the tokenizers library's encode and generate's classification (no change for the others) */
    if (lt_tokenizer_encode_ex(D->tok, src, sl, LT_ENCODE_ADD_SPECIAL, &ids, NULL, &n) != LT_OK) {
      s = lt__tf_fail("encoding a text");
      break;
    }
    if (c < 0 || n == 0 || (n > o->seq_len && o->overlong == LT_OVERLONG_SKIP)) {
      (*n_aff)++;
    } else if (n > o->seq_len && o->overlong == LT_OVERLONG_ERROR) {
      s = lt_error_set(LT_ERR_FORMAT,
                       "'%s': example %lld has %lld tokens, more than --seq-len %lld (--overlong skip or truncate)",
                       D->name, (long long)i + 1, (long long)n, (long long)o->seq_len);
    } else if (lt_seq_pairs_add(sp, ids, n > o->seq_len ? o->seq_len : n, &c, 1) != LT_OK) {
      s = lt__tf_fail("encoding");
    }
    free(ids);
  }
  if (s == LT_OK && lt_seq_pairs_count(sp) == 0) s = lt_error_set(LT_ERR_FORMAT, "'%s': no usable example left", D->name);
  if (s != LT_OK) lt_seq_pairs_free(sp);
  else *out = sp;
  return s;
}

/* Language modelling: the text file, tokenized whole, its last valid_fraction held out. */
static lt_status prepare_lm(const lt_tf_data_opts *o, lt_tf_data *D) {
  char *text;
  size_t len;
  LT__TF_TRY(lt_text_file_read(o->text, &text, &len), "reading --text");
  lt_status s = LT_OK;
  size_t bad;
  if (len == 0) s = lt_error_set(LT_ERR_FORMAT, "--text '%s' is empty", o->text);
  else if (o->tokenizer == LT_TOKENIZER_CHAR && !lt_utf8_valid(text, len, &bad))
    s = lt_error_set(LT_ERR_FORMAT, "--text '%s': invalid UTF-8 at byte %zu (use --tokenizer byte for arbitrary bytes)",
                     o->text, bad);
  else if (!D->tok) s = build_tokenizer(o, text, len, o->text, &D->tok);
  lt_tensor *all = s == LT_OK ? lt_tokenizer_encode_tensor(D->tok, text, len) : NULL;
  free(text);
  if (s != LT_OK) return s;
  if (!all) return lt__tf_fail("tokenizing --text");
  int64_t N = all->numel, nv = (int64_t)((double)N * o->valid_fraction);
  if (nv < o->seq_len + 1 || N - nv < o->seq_len + 1) {
    lt_tensor_free(all);
    return lt_error_set(LT_ERR_FORMAT,
                        "--text '%s' has %lld tokens: too few for --seq-len %lld with --valid-fraction %g (each part "
                        "needs at least seq-len + 1 tokens)",
                        o->text, (long long)N, (long long)o->seq_len, o->valid_fraction);
  }
  lt_scope *split = lt_scope_begin(); /* frees the narrow views */
  D->train_tokens = lt_tensor_keep(lt_contiguous(lt_narrow(all, 0, 0, N - nv)));
  D->valid_tokens = lt_tensor_keep(lt_contiguous(lt_narrow(all, 0, N - nv, nv)));
  lt_scope_end(split);
  lt_tensor_free(all);
  if (!D->train_tokens || !D->valid_tokens) return lt__tf_fail("splitting --text");
  /* With N ranks (mpirun) every rank draws the global batch of N x --batch
   * chunks in the same order and trains on its slice (lt_dist_shard). */
  lt_batch_opts bo = LT_BATCH_DEFAULTS(o->batch * lt_dist_size());
  bo.seed = o->seed + 2;
  bo.shuffle = !o->in_order;
  D->ll = lt_lm_loader_new(D->train_tokens, o->seq_len, &bo);
  if (!D->ll) return lt__tf_fail("the text loader");
  return LT_OK;
}

/* Language modelling on token shards: both globs memory-mapped and checked
 * against the tokenizer's vocabulary. Each rank reads its own rows of every
 * global batch of N x --batch windows (the same batches as one process with
 * N x --batch), and its own rows of the validation batches. */
static lt_status prepare_shards(const lt_tf_data_opts *o, lt_tf_data *D) {
  if (!D->tok && o->tokenizer != LT_TOKENIZER_BYTE)
    return lt_error_set(LT_ERR_INVALID,
                        "--data: shards hold the ids of the tokenizer tokenize used: give --tokenizer byte, or "
                        "--tokenizer-file (DIR/tokenizer.json for tokenize --tokenizer byte|char)");
  if (!D->tok && !(D->tok = lt_tokenizer_new_byte())) return lt__tf_fail("the byte tokenizer");
  if (!o->val_data) return lt_error_set(LT_ERR_INVALID, "--data needs --val-data (a glob of validation shards)");
  lt_shard_loader_opts so = LT_SHARD_LOADER_DEFAULTS(o->batch, o->seq_len);
  so.vocab = lt_tokenizer_vocab_size(D->tok);
  so.seed = o->seed + 2;
  so.shuffle = !o->in_order;
  so.rank = lt_dist_rank(), so.world = lt_dist_size();
  if (!(D->shards = lt_shard_loader_open(o->data, &so))) return lt__tf_fail("--data");
  so.batch = o->eval_batch > 0 ? o->eval_batch : o->batch;
  so.shuffle = false, so.drop_last = false;
  if (!(D->val_shards = lt_shard_loader_open(o->val_data, &so))) return lt__tf_fail("--val-data");
  /* The final sample's prompt: the first validation window (every rank reads
   * it: one batch of batch 1 on a loader of its own). */
  lt_shard_loader_opts po = LT_SHARD_LOADER_DEFAULTS(1, o->seq_len);
  po.shuffle = false, po.drop_last = false, po.prefetch = false;
  lt_shard_loader *P = lt_shard_loader_open(o->val_data, &po);
  lt_tensor *x = NULL, *y = NULL;
  lt_status s = P ? lt_shard_loader_next(P, &x, &y) : lt_last_status();
  lt_shard_loader_free(P);
  if (s != LT_OK) return lt__tf_fail("--val-data: the first window");
  D->valid_tokens = lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){x->numel}, x->data);
  lt_tensor_free(x), lt_tensor_free(y);
  return D->valid_tokens ? LT_OK : lt__tf_fail("--val-data: the first window");
}

lt_status lt_tf_data_read(const lt_tf_data_opts *o, lt_tf_data *D, bool *bad_config) {
  bool bad_config_ = false;
  if (!bad_config) bad_config = &bad_config_;
  *bad_config = false;
  memset(D, 0, sizeof *D);
  D->seq_len = o->seq_len;
  if (o->text || o->data) { /* language modelling: lt_tf_data_prepare reads the file or opens the shards */
    D->kind = LT_TF_DATA_LM;
    snprintf(D->name, sizeof D->name, "%s", base_name(o->text ? o->text : o->data));
    return LT_OK;
  }
  D->kind = o->classify ? LT_TF_DATA_CLASSIFY : LT_TF_DATA_SEQ2SEQ;
  if (o->tsv) {
    snprintf(D->name, sizeof D->name, "%s", base_name(o->tsv));
    lt_tsv_opts to = {o->skip_bad_lines};
    lt_text_pairs *all = lt_text_pairs_load_tsv(o->tsv, &to, &D->skipped_lines);
    if (!all) return lt__tf_fail("reading --tsv");
    if (o->valid_tsv) {
      D->train_text = all;
      int64_t skipped = 0;
      D->valid_text = lt_text_pairs_load_tsv(o->valid_tsv, &to, &skipped);
      if (!D->valid_text) return lt__tf_fail("reading --valid-tsv");
      return LT_OK;
    }
    lt_status s = lt_text_pairs_split(all, o->valid_fraction, &D->train_text, &D->valid_text);
    lt_text_pairs_free(all);
    if (s != LT_OK) return lt__tf_fail("splitting --tsv");
    if (lt_text_pairs_count(D->valid_text) == 0)
      return lt_error_set(LT_ERR_FORMAT,
                          "--tsv '%s': no example fell into the validation part (raise --valid-fraction or give "
                          "--valid-tsv)",
                          o->tsv);
    if (lt_text_pairs_count(D->train_text) == 0)
      return lt_error_set(LT_ERR_FORMAT,
                          "--tsv '%s': no training example left after the split (lower --valid-fraction)", o->tsv);
    return LT_OK;
  }
  snprintf(D->name, sizeof D->name, "%s", lt_task_name(o->task));
  lt_task_opts to = LT_TASK_DEFAULTS(o->task);
  to.num_examples = o->task_train;
  to.min_len = o->task_min_len, to.max_len = o->task_max_len;
  to.num_symbols = (int)o->task_symbols;
  to.valid_fraction = o->valid_fraction;
  to.seed = o->data_seed;
  *bad_config = true; /* the generator fails only on its options */
  D->train_text = lt_task_generate(&to, LT_SPLIT_TRAIN);
  if (!D->train_text) return lt__tf_fail("generating the task");
  to.num_examples = o->task_valid;
  to.seed = o->data_seed + 1;
  D->valid_text = lt_task_generate(&to, LT_SPLIT_VALID);
  if (!D->valid_text) return lt__tf_fail("generating the task's validation examples");
  *bad_config = false;
  return LT_OK;
}

/* The training text the tokenizer learns from: "src\ntgt\n..." of every
 * training pair, or one side's lines only. */
static lt_status learn_tokenizer(const lt_tf_data_opts *o, lt_tf_data *D) {
  char *text;
  size_t len;
  LT__TF_TRY(lt_text_pairs_concat(D->train_text, &text, &len), "collecting the training text");
  if (o->tokenizer_from != LT_TF_TOKENIZER_FROM_BOTH) { /* one side only: keep every other line */
    size_t k = 0;
    int line = 0;
    for (size_t i = 0; i < len; i++) {
      bool keep = (line % 2 == 0) == (o->tokenizer_from == LT_TF_TOKENIZER_FROM_SOURCE);
      if (keep) text[k++] = text[i];
      if (text[i] == '\n') line++;
    }
    len = k;
    text[len] = '\0';
  }
  lt_status s = build_tokenizer(o, text, len,
                                o->tokenizer_from == LT_TF_TOKENIZER_FROM_BOTH ? "the training text"
                                                                               : "one side of the training text",
                                &D->tok);
  free(text);
  return s;
}

lt_status lt_tf_data_prepare(const lt_tf_data_opts *o, lt_tf_data *D, lt_tokenizer *tok) {
  D->tok = tok;
  if (D->kind == LT_TF_DATA_LM) return o->data ? prepare_shards(o, D) : prepare_lm(o, D);
  if (!D->tok && learn_tokenizer(o, D) != LT_OK) return lt_last_status();
  if (D->kind == LT_TF_DATA_CLASSIFY) {
    lt_status s = build_classes(D);
    if (s == LT_OK) s = encode_classes(o, D, D->train_text, &D->train, &D->affected_train);
    if (s == LT_OK) s = encode_classes(o, D, D->valid_text, &D->valid, &D->affected_valid);
    if (s != LT_OK) return s;
  } else {
    lt_seq_opts so = {o->seq_len, o->seq_len, o->overlong};
    D->train = lt_seq_pairs_encode(D->train_text, D->tok, D->tok, &so, &D->affected_train);
    if (!D->train) return lt__tf_fail("encoding the training examples (see --seq-len, --overlong)");
    D->valid = lt_seq_pairs_encode(D->valid_text, D->tok, D->tok, &so, &D->affected_valid);
    if (!D->valid) return lt__tf_fail("encoding the validation examples (see --seq-len, --overlong)");
  }
  /* With N ranks, as for language modelling: the global batch of N x --batch
   * pairs, the same on every rank; each trains on its rows (programs/train_main.c). */
  lt_batch_opts bo = LT_BATCH_DEFAULTS(o->batch * lt_dist_size());
  bo.bucket_batches = o->bucket;
  bo.seed = o->seed + 2;
  bo.shuffle = !o->in_order;
  D->sl = lt_seq2seq_loader_new(D->train, &bo);
  if (!D->sl) return lt__tf_fail("the batch loader");
  return LT_OK;
}

void lt_tf_data_free(lt_tf_data *D) {
  if (!D) return;
  lt_seq2seq_loader_free(D->sl);
  lt_lm_loader_free(D->ll);
  lt_shard_loader_free(D->shards);
  lt_shard_loader_free(D->val_shards);
  lt_seq_pairs_free(D->train);
  lt_seq_pairs_free(D->valid);
  lt_text_pairs_free(D->train_text);
  lt_text_pairs_free(D->valid_text);
  lt_tensor_free(D->train_tokens);
  lt_tensor_free(D->valid_tokens);
  for (int64_t i = 0; i < D->n_classes; i++) free(D->classes[i]);
  free(D->classes);
  lt_tokenizer_free(D->tok);
  memset(D, 0, sizeof *D);
}

int64_t lt_tf_data_batches_per_epoch(const lt_tf_data *D) {
  if (D->shards) return lt_shard_loader_batches_per_epoch(D->shards);
  return D->kind == LT_TF_DATA_LM ? lt_lm_loader_batches_per_epoch(D->ll) : lt_seq2seq_loader_batches_per_epoch(D->sl);
}

lt_loader_position lt_tf_data_get_position(const lt_tf_data *D) {
  if (D->shards) return lt_shard_loader_get_position(D->shards);
  return D->kind == LT_TF_DATA_LM ? lt_lm_loader_get_position(D->ll) : lt_seq2seq_loader_get_position(D->sl);
}

lt_status lt_tf_data_set_position(lt_tf_data *D, lt_loader_position pos) {
  if (D->shards) return lt_shard_loader_set_position(D->shards, pos);
  return D->kind == LT_TF_DATA_LM ? lt_lm_loader_set_position(D->ll, pos) : lt_seq2seq_loader_set_position(D->sl, pos);
}

char *lt_tf_ids_text(const lt_tokenizer *tok, const int64_t *ids, int64_t n) {
  int64_t k = 0;
  const int64_t eos = lt_tokenizer_special_ids(tok).eos;
  while (k < n && ids[k] != eos) k++;
  char *s;
  size_t len;
  if (lt_tokenizer_decode(tok, ids, k, 0, &s, &len) != LT_OK) return strdup("<undecodable>");
  for (size_t i = 0; i < len; i++)
    if (s[i] == '\n' || s[i] == '\t' || s[i] == '\r') s[i] = ' ';
  return s;
}

char *lt_tf_data_describe(const lt_tf_data *D, char *buf, size_t size) {
  const char *tok = lt_tokenizer_kind_name(lt_tokenizer_get_kind(D->tok));
  long long vocab = (long long)lt_tokenizer_vocab_size(D->tok);
  if (D->shards)
    snprintf(buf, size, "%s, %lld training tokens in %lld shards / %lld validation tokens in %lld, %s tokenizer (vocab "
             "%lld), context %lld", D->name, (long long)lt_shard_loader_num_tokens(D->shards),
             (long long)lt_shard_loader_num_shards(D->shards), (long long)lt_shard_loader_num_tokens(D->val_shards),
             (long long)lt_shard_loader_num_shards(D->val_shards), tok, vocab, (long long)D->seq_len);
  else if (D->kind == LT_TF_DATA_LM)
    snprintf(buf, size, "%s, %lld training / %lld validation tokens, %s tokenizer (vocab %lld), context %lld", D->name,
             (long long)D->train_tokens->numel, (long long)D->valid_tokens->numel, tok, vocab, (long long)D->seq_len);
  else
    snprintf(buf, size, "%s, %lld training / %lld validation examples, %s tokenizer (vocab %lld)%s", D->name,
             (long long)lt_seq_pairs_count(D->train), (long long)lt_seq_pairs_count(D->valid), tok, vocab,
             D->kind == LT_TF_DATA_CLASSIFY ? ", classes" : "");
  return buf;
}

lt_status lt_tf_data_save_extra(const lt_tf_data *D, lt_ckpt_meta *extra) {
  void *blob;
  size_t size;
  LT__TF_TRY(lt_tokenizer_serialize(D->tok, &blob, &size), "saving the tokenizer");
  lt_status s = lt_ckpt_meta_set_bytes(extra, LT_TF_CKPT_TOKENIZER, blob, size);
  free(blob);
  if (s != LT_OK || D->kind != LT_TF_DATA_CLASSIFY) return s;
  size_t total = 1;
  for (int64_t i = 0; i < D->n_classes; i++) total += strlen(D->classes[i]) + 1;
  char *c = malloc(total), *p = c;
  if (!c) return lt_error_set(LT_ERR_NOMEM, "saving the class labels: out of memory (%zu bytes)", total);
  for (int64_t i = 0; i < D->n_classes; i++) p += sprintf(p, "%s\n", D->classes[i]);
  s = lt_ckpt_meta_set_bytes(extra, LT_TF_CKPT_CLASSES, c, (size_t)(p - c));
  free(c);
  return s;
}
