/*
 * models/transformer/programs/evaluate_main.c: the evaluate program: how well
 * any decoder-only model that lt_tf_load reads (a checkpoint of train, a
 * Hugging Face directory, a GGUF file) predicts held-out text, with the
 * model's own tokenizer (docs/train.md, "Evaluating a model"):
 *
 *   evaluate --model DIR --text FILE [--window N --stride N]   perplexity (lm_eval.h)
 *   evaluate --model DIR --data 'DIR/val_*.bin'                 loss on token shards, over the ranks
 *   evaluate --model DIR --multiple-choice hellaswag.jsonl      accuracy (HellaSwag's format)
 *
 * --json prints one JSON object instead of the sentence.
 *
 * What this is not: a training run's validation (train does it on its own
 * split) or a benchmark suite.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_ckpt.h"
#include "libtensor_transformer.h"

#define PROG "evaluate"
#define PATH_MAX_LEN 4000

typedef struct options {
  const char *model, *text, *data, *mc;
  int64_t window, stride, batch, max_memory, threads;
  bool json, allow_unchecksummed;
} options;

static const lt_cli_opt OPTS[] = {
  LT_CLI_OPT_STRING(options, "model", model, "PATH", PATH_MAX_LEN,
                    "the model: a checkpoint of train or its run directory, a Hugging Face directory (config.json, "
                    "safetensors, tokenizer.json) or a GGUF file; required"),
  LT_CLI_OPT_STRING(options, "text", text, "FILE", PATH_MAX_LEN,
                    "perplexity of this text file (UTF-8), tokenized with the model's tokenizer (its special tokens "
                    "added, as the tokenizers library's encode)"),
  LT_CLI_OPT_STRING(options, "data", data, "GLOB", PATH_MAX_LEN,
                    "loss and perplexity on token shards (the tokenize program's, e.g. 'DIR/val_*.bin'), windows of "
                    "--window tokens, split over the ranks under mpirun"),
  LT_CLI_OPT_STRING(options, "multiple-choice", mc, "FILE", PATH_MAX_LEN,
                    "accuracy on a HellaSwag-format JSON Lines file (ctx or context, endings, label): the ending of "
                    "the lowest mean token loss wins"),
  LT_CLI_OPT_INT(options, "window", window, "N", 0, 1 << 20,
                 "--text: tokens per window (HF's max_length; at most max_len + 1); --data: the targets per window "
                 "(at most max_len)", .default_text = "0: the model's max_len"),
  LT_CLI_OPT_INT(options, "stride", stride, "N", 0, 1 << 20,
                 "--text: how far each window moves (HF's stride; < --window scores each token with more context)",
                 .default_text = "0: --window"),
  LT_CLI_OPT_INT(options, "batch", batch, "N", 1, 65536, "--data: windows per forward pass"),
  LT_CLI_OPT_BOOL(options, "json", json, "print one JSON object (multiple choice: with every item's scores)"),
  LT_CLI_OPT_INT(options, "max-memory", max_memory, "MIB", 0, INT64_MAX >> 20,
                 "refuse a model that needs more memory (0: no cap)", .default_text = "half of physical memory"),
  LT_CLI_OPT_INT(options, "threads", threads, "N", 0, 1024, "threads for BLIS and libtensor's kernels",
                 .default_text = "0: LT_NUM_THREADS, else all cores"),
  LT_CLI_OPT_BOOL(options, "allow-unchecksummed", allow_unchecksummed,
                  "accept an HDF5 checkpoint without object header checksums (trusted sources only)"),
};
enum { N_OPTS = (int)(sizeof OPTS / sizeof OPTS[0]) };

static const options DEFAULTS = {.batch = 8, .max_memory = -1};

static const lt_cli CLI = {
    .prog = PROG,
    .synopsis = "Usage: " PROG " --model PATH --text FILE [--window N] [--stride N] [--json]\n"
                "       " PROG " --model PATH --data GLOB [--window N] [--batch N] [--json]\n"
                "       " PROG " --model PATH --multiple-choice FILE [--json]\n"
                "\n"
                "How well a decoder-only model predicts held-out text: the perplexity of a text file (as Hugging\n"
                "Face's strided recipe), the loss on token shards, or the accuracy on a multiple-choice file in\n"
                "HellaSwag's format (docs/train.md, \"Evaluating a model\").\n"
                "\n"
                "Options (--flag VALUE or --flag=VALUE):\n",
    .epilogue = LT_CLI_EXIT_HELP,
    .opts = OPTS,
    .n_opts = N_OPTS,
    .defaults = &DEFAULTS,
};

static void print_json(json_t *o) {
  if (!o) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory");
  if (json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(17)) != 0) lt_cli_die(LT_CLI_EXIT_FAILURE, "writing stdout");
  fputc('\n', stdout);
  json_decref(o);
}

/* --text: the file's perplexity. */
static void eval_text(const options *o, const lt_transformer *m, const lt_tokenizer *tok) {
  char *text;
  size_t len;
  if (lt_text_file_read(o->text, &text, &len) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "--text: %s", lt_last_error());
  int64_t *ids, n;
  if (lt_tokenizer_encode_ex(tok, text, len, LT_ENCODE_ADD_SPECIAL, &ids, NULL, &n) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "--text %s: tokenizing: %s", o->text, lt_last_error());
  free(text);
  lt_tf_ppl_opts po = {o->window, o->stride};
  lt_tf_ppl_result r;
  if (lt_tf_perplexity(m, ids, n, &po, &r) != LT_OK)
    lt_cli_die(n < 2 ? LT_CLI_EXIT_FAILURE : LT_CLI_EXIT_USAGE, "--text %s: %s", o->text, lt_last_error());
  const int64_t W = o->window ? o->window : lt_transformer_config(m)->max_len, S = o->stride ? o->stride : W;
  free(ids);
  if (o->json)
    print_json(json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "model", o->model, "text", o->text,
                         "tokens", (json_int_t)n, "scored", (json_int_t)r.n_scored, "windows",
                         (json_int_t)r.n_windows, "window", (json_int_t)W, "stride", (json_int_t)S, "nll_sum",
                         r.nll_sum, "loss", r.loss, "perplexity", r.perplexity));
  else
    printf("%s: %lld tokens, %lld scored in %lld windows of %lld (stride %lld): loss %.6f, perplexity %.4f\n",
           o->text, (long long)n, (long long)r.n_scored, (long long)r.n_windows, (long long)W, (long long)S, r.loss,
           r.perplexity);
}

/* --data: every window of the shards once, each rank its rows. */
static lt_tensor *decode_logits(void *model, const lt_tensor *x) {
  return lt_transformer_decode(model, x, NULL, NULL, NULL, 0, NULL);
}

static void eval_shards(const options *o, lt_transformer *m) {
  const lt_tf_config *c = lt_transformer_config(m);
  const int64_t T = o->window ? o->window : c->max_len;
  if (T > c->max_len)
    lt_cli_die(LT_CLI_EXIT_USAGE, "--window %lld: over the model's max_len %lld", (long long)T, (long long)c->max_len);
  lt_shard_loader_opts so = LT_SHARD_LOADER_DEFAULTS(o->batch, T);
  so.vocab = c->vocab_size, so.shuffle = false, so.drop_last = false;
  so.rank = lt_dist_rank(), so.world = lt_dist_size();
  lt_shard_loader *L = lt_shard_loader_open(o->data, &so);
  if (!L) lt_cli_die(LT_CLI_EXIT_FAILURE, "--data: %s", lt_last_error());
  lt_trainer_lm_eval ev;
  if (lt_trainer_lm_evaluate(L, decode_logits, m, &ev) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "--data %s: %s", o->data, lt_last_error());
  const int64_t shards = lt_shard_loader_num_shards(L), windows = lt_shard_loader_num_windows(L);
  lt_shard_loader_free(L);
  if (lt_dist_rank() != 0) return;
  if (o->json)
    print_json(json_pack("{s:s, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:i}", "model", o->model, "data", o->data,
                         "shards", (json_int_t)shards, "windows", (json_int_t)windows, "window", (json_int_t)T,
                         "tokens", ev.tokens, "loss", ev.loss, "perplexity", ev.perplexity, "token_accuracy",
                         ev.token_acc, "ranks", lt_dist_size()));
  else
    printf("%s: %lld shards, %lld windows of %lld, %.0f targets on %d rank(s): loss %.6f, perplexity %.4f, token "
           "accuracy %.2f%%\n", o->data, (long long)shards, (long long)windows, (long long)T, ev.tokens,
           lt_dist_size(), ev.loss, ev.perplexity, 100 * ev.token_acc);
}

/* --multiple-choice: the accuracy, and with --json every item's scores. */
static void eval_mc(const options *o, const lt_transformer *m, const lt_tokenizer *tok) {
  lt_tf_mc_set *s;
  if (lt_tf_mc_read(o->mc, &s) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "--multiple-choice: %s", lt_last_error());
  int64_t total = 0;
  for (int64_t i = 0; i < s->n; i++) total += s->items[i].n_endings;
  double *scores = lt_cli_xcalloc((size_t)total, sizeof *scores);
  int64_t *choices = lt_cli_xcalloc((size_t)s->n, sizeof *choices);
  lt_tf_mc_result r;
  if (lt_tf_mc_evaluate(m, tok, s, choices, scores, &r) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "--multiple-choice %s: %s", o->mc, lt_last_error());
  if (o->json) {
    json_t *items = json_array();
    for (int64_t i = 0, at = 0; i < s->n && items; i++) {
      json_t *sc = json_array();
      for (int64_t k = 0; k < s->items[i].n_endings && sc; k++) json_array_append_new(sc, json_real(scores[at++]));
      json_array_append_new(items, json_pack("{s:I, s:I, s:I, s:o}", "line", (json_int_t)s->items[i].line, "label",
                                             (json_int_t)s->items[i].label, "choice", (json_int_t)choices[i],
                                             "scores", sc));
    }
    print_json(json_pack("{s:s, s:s, s:I, s:I, s:I, s:f, s:o}", "model", o->model, "multiple_choice", o->mc, "items",
                         (json_int_t)r.n, "correct", (json_int_t)r.correct, "correct_sum", (json_int_t)r.correct_sum,
                         "accuracy", r.accuracy, "scores", items));
  } else {
    printf("%s: %lld items: accuracy %.4f (%lld/%lld) by mean token loss; %.4f by summed loss\n", o->mc,
           (long long)r.n, r.accuracy, (long long)r.correct, (long long)r.n, (double)r.correct_sum / (double)r.n);
  }
  free(scores), free(choices);
  lt_tf_mc_set_free(s);
}

int main(int argc, char **argv) {
  lt_cli_init(PROG, NULL);
  if (lt_dist_init(&argc, &argv) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "starting MPI: %s", lt_last_error());
  options o = DEFAULTS;
  bool given[N_OPTS] = {0};
  lt_cli_parse_or_exit(&CLI, argc, argv, &o, given, NULL, NULL);
  if (!o.model) lt_cli_die(LT_CLI_EXIT_USAGE, "--model PATH is required");
  if ((o.text != NULL) + (o.data != NULL) + (o.mc != NULL) != 1)
    lt_cli_die(LT_CLI_EXIT_USAGE, "give one of --text FILE, --data GLOB and --multiple-choice FILE");
  if (o.stride && !o.text) lt_cli_die(LT_CLI_EXIT_USAGE, "--stride is for --text");
  if (o.window && o.mc) lt_cli_die(LT_CLI_EXIT_USAGE, "--window is for --text and --data");
  if (o.stride && o.window && o.stride > o.window)
    lt_cli_die(LT_CLI_EXIT_USAGE, "--stride %lld: over --window %lld", (long long)o.stride, (long long)o.window);
  if (o.threads > 0 && lt_set_num_threads((int)o.threads) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_USAGE, "--threads: %s", lt_last_error());

  lt_tf_load_opts lo = LT_TF_LOAD_DEFAULTS; /* every origin (load.h) */
  lo.ckpt.max_bytes = lt_cli_memory_cap(o.max_memory);
  lo.ckpt.allow_unchecksummed = o.allow_unchecksummed;
  lt_tf_loaded src;
  if (lt_tf_load(o.model, &lo, &src) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "--model: %s", lt_last_error());
  const lt_tf_config *c = lt_transformer_config(src.model);
  if (c->arch != LT_TF_DECODER_ONLY)
    lt_cli_die(LT_CLI_EXIT_USAGE, "--model %s: a %s model: evaluate scores the next token of decoder-only models",
               src.path, lt_tf_arch_name(c->arch));
  if (!src.tok && !o.data)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "--model %s: the source holds no tokenizer (a checkpoint without one, a "
               "directory without tokenizer.json): --text and --multiple-choice need one", src.path);

  if (o.text) eval_text(&o, src.model, src.tok);
  else if (o.data) eval_shards(&o, src.model);
  else eval_mc(&o, src.model, src.tok);
  lt_cli_flush(stdout, "stdout");
  lt_tf_loaded_free(&src);
  lt_dist_finalize();
  return LT_CLI_EXIT_OK;
}
