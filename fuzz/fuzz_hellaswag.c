/*
 * fuzz/fuzz_hellaswag.c: the multiple-choice reader of
 * models/transformer/lm_eval.c (HellaSwag's JSON Lines) on arbitrary bytes:
 * the input is the file, parsed in memory (lt_tf_mc_parse) and read from a
 * temporary file (lt_tf_mc_read), which must agree.
 *
 * Checked promises (lm_eval.h): a refusal has a message naming the file and
 * leaves *out NULL; an accepted set has 1..LT_TF_MC_MAX_ITEMS items, each
 * with a non-empty context, 2..LT_TF_MC_MAX_ENDINGS non-empty endings, a
 * label among them and a line number that grows and stays within the
 * input's lines. The first two items are then scored by a tiny decoder (byte
 * tokenizer, 32 positions): scored with finite mean losses and a choice among
 * the endings, or refused with a message.
 */
#include <math.h>
#include <string.h>

#include "fuzz_util.h"
#include "models/transformer/lm_eval.h"

static lt_transformer *g_model;
static lt_tokenizer *g_tok;

static void build_model(void) {
  if (g_model) return;
  g_tok = lt_tokenizer_new_byte();
  FUZZ_ASSERT(g_tok, "byte tokenizer: %s", lt_last_error());
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = lt_tokenizer_vocab_size(g_tok), c.d_model = 8, c.n_heads = 2, c.n_kv_heads = 2, c.d_ff = 16;
  c.n_dec_layers = 1, c.max_len = 32, c.dropout = 0;
  lt_generator *g = lt_generator_new(1);
  g_model = g ? lt_transformer_new(&c, g) : NULL;
  lt_generator_free(g);
  FUZZ_ASSERT(g_model, "tiny model: %s", lt_last_error());
}

static void check_set(const lt_tf_mc_set *s, int64_t lines) {
  FUZZ_ASSERT(s->n >= 1 && s->n <= LT_TF_MC_MAX_ITEMS, "%lld items", (long long)s->n);
  int64_t prev = 0;
  for (int64_t i = 0; i < s->n; i++) {
    const lt_tf_mc_item *it = &s->items[i];
    FUZZ_ASSERT(it->ctx && it->ctx[0], "item %lld: empty context", (long long)i);
    FUZZ_ASSERT(it->n_endings >= 2 && it->n_endings <= LT_TF_MC_MAX_ENDINGS, "item %lld: %lld endings",
                (long long)i, (long long)it->n_endings);
    for (int64_t k = 0; k < it->n_endings; k++) FUZZ_ASSERT(it->endings[k] && it->endings[k][0], "empty ending");
    FUZZ_ASSERT(it->label >= 0 && it->label < it->n_endings, "label %lld", (long long)it->label);
    FUZZ_ASSERT(it->line > prev && it->line <= lines, "line %lld after %lld (of %lld)", (long long)it->line,
                (long long)prev, (long long)lines);
    prev = it->line;
  }
}

static bool same_sets(const lt_tf_mc_set *a, const lt_tf_mc_set *b) {
  if (a->n != b->n) return false;
  for (int64_t i = 0; i < a->n; i++) {
    const lt_tf_mc_item *x = &a->items[i], *y = &b->items[i];
    if (x->n_endings != y->n_endings || x->label != y->label || x->line != y->line || strcmp(x->ctx, y->ctx)) return false;
    for (int64_t k = 0; k < x->n_endings; k++)
      if (strcmp(x->endings[k], y->endings[k])) return false;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  const char *name = "fuzz.jsonl";
  int64_t lines = 1;
  for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
  lt_tf_mc_set *s = (lt_tf_mc_set *)&lines; /* must become NULL on failure */
  lt_status st = fuzz_check_status(lt_tf_mc_parse((const char *)data, size, name, &s), "mc_parse");
  if (st != LT_OK) {
    FUZZ_ASSERT(s == NULL, "a refusal left *out set");
    FUZZ_ASSERT(strstr(lt_last_error(), name), "the message does not name the file: %s", lt_last_error());
  } else {
    check_set(s, lines);
  }
  /* the same bytes from a file */
  const char *path = fuzz_temp_path("hellaswag");
  fuzz_write_file(path, "", 0, data, size);
  lt_tf_mc_set *f = NULL;
  lt_status fs = fuzz_check_status(lt_tf_mc_read(path, &f), "mc_read");
  FUZZ_ASSERT(fs == st, "memory %s, file %s", lt_status_name(st), lt_status_name(fs));
  FUZZ_ASSERT(st != LT_OK || same_sets(s, f), "the file and memory readers disagree");
  lt_tf_mc_set_free(f);
  remove(path);
  if (st != LT_OK) return 0;

  build_model();
  double scores[LT_TF_MC_MAX_ENDINGS];
  for (int64_t i = 0; i < s->n && i < 2; i++) {
    int64_t choice = -2;
    lt_status ss = fuzz_check_status(lt_tf_mc_score(g_model, g_tok, &s->items[i], scores, NULL, &choice), "mc_score");
    if (ss != LT_OK) continue;
    FUZZ_ASSERT(choice >= 0 && choice < s->items[i].n_endings, "choice %lld", (long long)choice);
    for (int64_t k = 0; k < s->items[i].n_endings; k++)
      FUZZ_ASSERT(isfinite(scores[k]) && scores[k] >= 0, "score %g", scores[k]);
  }
  lt_tf_mc_set_free(s);
  return 0;
}
