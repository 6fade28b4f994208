/*
 * fuzz/fuzz_corpus.c: the text sources of datasets/corpus.c and the batching
 * of datasets/batch.c on arbitrary bytes. The first input byte chooses:
 *   bit 0  the payload is a TSV parallel corpus (lt_text_pairs_parse_tsv,
 *          and lt_text_pairs_load_tsv on the same bytes written to a file),
 *          else a plain text file (lt_text_file_read, lt_text_file_tokens);
 *   bit 1  skip bad TSV lines.
 * The sizes (validation fraction, maximum lengths and overlong policy, batch
 * size and loader options; the LM loader's batch and sequence length) come
 * from the payload's first bytes, which are also part of the text.
 * What parses is carried through the pipeline a training run uses: split,
 * concat, tokenized pairs (byte tokenizer), a seq2seq loader (a few batches,
 * position saved and restored), or an LM loader over the token stream.
 *
 * Checked promises: failures have a message; the in-memory and file TSV
 * parsers agree; every pair has a non-empty source and target without tab or
 * line break; the split keeps every pair exactly once; batches have the
 * documented shapes and masks; restoring a loader position gives the same
 * next batch.
 */
#include <string.h>

#include "datasets/datasets.h"
#include "fuzz_util.h"

static void same_tensor(const lt_tensor *a, const lt_tensor *b, const char *what) {
  FUZZ_ASSERT(a && b && a->numel == b->numel && a->dtype == b->dtype &&
                  !memcmp(a->data, b->data, (size_t)a->numel * lt_dtype_size(a->dtype)),
              "%s differs after restoring the loader position", what);
}

static void check_batch(const lt_seq2seq_batch *b) {
  const lt_tensor *t[] = {b->src, b->src_mask, b->tgt_in, b->tgt_mask, b->labels};
  for (int i = 0; i < 5; i++) FUZZ_ASSERT(t[i] && t[i]->ndim == 2, "batch tensor %d is not 2-d", i);
  FUZZ_ASSERT(b->src->shape[0] == b->tgt_in->shape[0] && b->labels->shape[1] == b->tgt_in->shape[1] &&
                  b->src_mask->shape[1] == b->src->shape[1],
              "batch shapes disagree");
  const int64_t *lab = b->labels->data;
  const bool *tm = b->tgt_mask->data;
  int64_t n = 0;
  for (int64_t i = 0; i < b->labels->numel; i++) {
    n += lab[i] != LT_IGNORE_INDEX;
    FUZZ_ASSERT(tm[i] == (lab[i] == LT_IGNORE_INDEX), "target mask and labels disagree at %lld", (long long)i);
  }
  FUZZ_ASSERT(n == b->n_tokens, "n_tokens %lld, labels say %lld", (long long)b->n_tokens, (long long)n);
}

static void run_pairs(const lt_text_pairs *p, fuzz_input *in) {
  int64_t np = lt_text_pairs_count(p);
  for (int64_t i = 0; i < np; i++) {
    const char *s, *t;
    size_t sl, tl;
    FUZZ_ASSERT(lt_text_pairs_get(p, i, &s, &sl, &t, &tl) == LT_OK, "get %lld", (long long)i);
    FUZZ_ASSERT(sl > 0 && tl > 0 && strlen(s) == sl && strlen(t) == tl, "pair %lld has an empty or cut field",
                (long long)i);
    FUZZ_ASSERT(!memchr(s, '\t', sl) && !memchr(s, '\n', sl) && !memchr(t, '\n', tl), "pair %lld keeps a separator",
                (long long)i);
  }
  char *cat = NULL;
  size_t clen = 0;
  FUZZ_ASSERT(lt_text_pairs_concat(p, &cat, &clen) == LT_OK && cat[clen] == '\0', "concat");
  free(cat);

  double frac = (fuzz_u8(in) % 5) / 4.0;
  lt_text_pairs *tr = NULL, *va = NULL;
  FUZZ_ASSERT(lt_text_pairs_split(p, frac, &tr, &va) == LT_OK, "split: %s", lt_last_error());
  FUZZ_ASSERT(lt_text_pairs_count(tr) + lt_text_pairs_count(va) == np, "the split lost or made pairs");
  for (int64_t i = 0; i < lt_text_pairs_count(va); i++) {
    const char *s;
    size_t sl;
    lt_text_pairs_get(va, i, &s, &sl, NULL, NULL);
    FUZZ_ASSERT(lt_text_in_valid_split(s, sl, frac), "a validation pair is not in the validation split");
  }
  lt_text_pairs_free(tr), lt_text_pairs_free(va);

  lt_tokenizer *tok = lt_tokenizer_new_byte();
  uint8_t o = fuzz_u8(in);
  lt_seq_opts so = {o % 8, (o >> 3) % 8, (lt_overlong)((o >> 6) % 3)};
  int64_t affected = -1;
  lt_seq_pairs *sp = lt_seq_pairs_encode(p, tok, tok, &so, &affected);
  if (!sp) {
    fuzz_check_status(lt_last_status(), "seq_pairs_encode");
  } else {
    uint8_t b = fuzz_u8(in);
    lt_batch_opts bo = LT_BATCH_DEFAULTS(1 + b % 4);
    bo.shuffle = b & 16, bo.drop_last = b & 32, bo.bucket_batches = (b >> 6) % 3, bo.seed = b;
    lt_seq2seq_loader *L = lt_seq2seq_loader_new(sp, &bo);
    if (!L) {
      fuzz_check_status(lt_last_status(), "seq2seq_loader_new");
    } else {
      lt_loader_position pos = {0};
      lt_seq2seq_batch keep = {0};
      for (int k = 0; k < 5; k++) {
        if (k == 2) pos = lt_seq2seq_loader_get_position(L);
        lt_seq2seq_batch bt = {0};
        if (fuzz_check_status(lt_seq2seq_loader_next(L, &bt), "seq2seq_loader_next")) break;
        check_batch(&bt);
        if (k == 2) keep = bt;
        else lt_seq2seq_batch_free(&bt);
      }
      if (keep.src) {
        FUZZ_ASSERT(lt_seq2seq_loader_set_position(L, pos) == LT_OK, "set_position: %s", lt_last_error());
        lt_seq2seq_batch again = {0};
        FUZZ_ASSERT(lt_seq2seq_loader_next(L, &again) == LT_OK, "next after restore: %s", lt_last_error());
        same_tensor(keep.src, again.src, "src");
        same_tensor(keep.labels, again.labels, "labels");
        lt_seq2seq_batch_free(&again);
        lt_seq2seq_batch_free(&keep);
      }
      lt_seq2seq_loader_free(L);
    }
    lt_seq_pairs_free(sp);
  }
  lt_tokenizer_free(tok);
}

static void run_text(const char *path, fuzz_input *in, size_t len) {
  char *data = NULL;
  size_t n = 0;
  FUZZ_ASSERT(lt_text_file_read(path, &data, &n) == LT_OK, "text_file_read: %s", lt_last_error());
  FUZZ_ASSERT(n == len && !memcmp(data, in->p, len) && data[n] == '\0', "text_file_read changed the bytes");
  free(data);
  lt_tokenizer *tok = lt_tokenizer_new_byte();
  lt_tensor *ids = lt_text_file_tokens(tok, path);
  if (!ids) {
    fuzz_check_status(lt_last_status(), "text_file_tokens");
    FUZZ_ASSERT(len == 0, "text_file_tokens refused %zu bytes: %s", len, lt_last_error());
  } else {
    FUZZ_ASSERT(ids->numel == (int64_t)len, "%lld tokens for %zu bytes", (long long)ids->numel, len);
    uint8_t b = fuzz_u8(in);
    lt_batch_opts bo = LT_BATCH_DEFAULTS(1 + b % 3);
    bo.shuffle = b & 4;
    lt_lm_loader *L = lt_lm_loader_new(ids, 1 + (b >> 3) % 8, &bo);
    if (!L) {
      fuzz_check_status(lt_last_status(), "lm_loader_new");
    } else {
      for (int k = 0; k < 3; k++) {
        lt_tensor *x = NULL, *y = NULL;
        if (fuzz_check_status(lt_lm_loader_next(L, &x, &y), "lm_loader_next")) break;
        FUZZ_ASSERT(x && y && x->numel == y->numel, "lm batch shapes");
        lt_tensor_free(x), lt_tensor_free(y);
      }
      lt_lm_loader_free(L);
    }
    lt_tensor_free(ids);
  }
  lt_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  fuzz_input in = {data, size};
  uint8_t mode = fuzz_u8(&in);
  fuzz_input opt = {data + 1, size > 1 ? (size - 1 < 4 ? size - 1 : 4) : 0}; /* sizes from the payload's start */
  const char *path = fuzz_temp_path("corpus");
  fuzz_write_file(path, "", 0, in.p, in.n);
  if (mode & 1) {
    lt_tsv_opts o = {mode & 2};
    int64_t skipped = -1, skipped2 = -1;
    lt_text_pairs *p = lt_text_pairs_parse_tsv((const char *)in.p, in.n, "fuzz.tsv", &o, &skipped);
    lt_status s = p ? LT_OK : fuzz_check_status(lt_last_status(), "parse_tsv");
    lt_text_pairs *q = lt_text_pairs_load_tsv(path, &o, &skipped2);
    lt_status s2 = q ? LT_OK : fuzz_check_status(lt_last_status(), "load_tsv");
    FUZZ_ASSERT(s == s2 && lt_text_pairs_count(p) == lt_text_pairs_count(q), "parse_tsv and load_tsv disagree");
    if (p) run_pairs(p, &opt);
    lt_text_pairs_free(p), lt_text_pairs_free(q);
  } else {
    run_text(path, &in, in.n);
  }
  remove(path);
  return 0;
}
