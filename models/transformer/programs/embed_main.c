/*
 * models/transformer/programs/embed_main.c: the embed program: sentence embeddings
 * of texts with a Hugging Face encoder directory (BERT's layout, e.g.
 * all-MiniLM-L6-v2), as sentence-transformers' encode() gives them: the
 * directory's tokenizer.json (lt_tokenizer_load_hf), its modules.json
 * pipeline (mean pooling, Normalize) and max_seq_length
 * (lt_hf_read_sentence_config), lt_hf_embed_texts. docs/interop.md.
 *
 *   embed --model DIR "a sentence" "another one"       JSON Lines on stdout
 *   embed --model DIR --input texts.txt --format safetensors --out emb.safetensors
 *
 * What this is not: a server, or a reader of other model kinds (a
 * decoder-only directory is refused).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "libtensor_transformer.h"

#define PROG "embed"
#define PATH_MAX_LEN 4000
#define MAX_INPUT_BYTES ((size_t)1 << 30) /* --input: 1 GiB of text */

typedef struct options {
  const char *model, *input, *out;
  int format, weights; /* weights: an lt_qformat */
  int64_t batch, max_length, max_memory;
  bool normalize_on, time;
} options;

enum { FORMAT_JSONL, FORMAT_SAFETENSORS, FORMAT_COUNT };
static const char *format_name(int i) { return i == FORMAT_JSONL ? "jsonl" : i == FORMAT_SAFETENSORS ? "safetensors" : "unknown"; }

static const char *weights_name(int i) { return lt_qformat_name((lt_qformat)i); }

static const lt_cli_opt OPTS[] = {
  LT_CLI_OPT_STRING(options, "model", model, "DIR", PATH_MAX_LEN,
                    "the encoder directory (config.json, model.safetensors or its shards, tokenizer.json; "
                    "modules.json and sentence_bert_config.json when sentence-transformers wrote it); required"),
  LT_CLI_OPT_STRING(options, "input", input, "FILE", PATH_MAX_LEN,
                    "the texts, one per line (UTF-8; '-' reads stdin); without it the operands are the texts"),
  LT_CLI_OPT_ENUM(options, "format", format, format_name, FORMAT_COUNT,
                  "jsonl: one line per text, {\"text\": ..., \"embedding\": [...]}, on stdout or --out; "
                  "safetensors: one tensor \"embeddings\" [N, C] f32 in --out"),
  LT_CLI_OPT_STRING(options, "out", out, "FILE", PATH_MAX_LEN, "write there instead of stdout (required for "
                    "safetensors)"),
  LT_CLI_OPT_INT(options, "batch", batch, "N", 1, 65536, "texts per forward pass (of similar lengths)"),
  LT_CLI_OPT_INT(options, "max-length", max_length, "N", 1, 1048576, "tokens per text, special tokens included",
                 .default_text = "sentence_bert_config.json's max_seq_length, else the model's max_len"),
  LT_CLI_OPT_BOOL(options, "normalize", normalize_on, "L2-normalise each embedding (--no-normalize: the mean as "
                  "it is)", .default_text = "as modules.json says (a Normalize module)"),
  LT_CLI_OPT_INT(options, "max-memory", max_memory, "MIB", 0, INT64_MAX >> 20, "refuse a model that needs more "
                 "memory (0: no cap)", .default_text = "half of physical memory"),
  LT_CLI_OPT_ENUM(options, "weights", weights, weights_name, LT_QFORMAT_COUNT,
                  "the weights of every Linear and the embeddings: f32, bf16, or ggml's 8-bit and 4-bit blocks "
                  "q8_0 and q4_0, loaded straight into that format (docs/decoding.md)", .default_text = "f32"),
  LT_CLI_OPT_BOOL(options, "time", time, "print the texts, tokens and seconds of the embedding (load excluded) to "
                  "stderr"),
};
enum { N_OPTS = (int)(sizeof OPTS / sizeof OPTS[0]) };

static const options DEFAULTS = {.format = FORMAT_JSONL, .batch = 32, .max_length = 0, .max_memory = -1};

static const lt_cli CLI = {
    .prog = PROG,
    .synopsis = "Usage: " PROG " --model DIR [options] TEXT...\n"
                "       " PROG " --model DIR --input FILE [options]\n"
                "\n"
                "Prints the sentence embedding of each text, as sentence-transformers' encode() computes it with\n"
                "the same directory: its tokenizer.json, mean pooling over the tokens, L2 normalisation when\n"
                "modules.json has Normalize (docs/interop.md).\n"
                "\n"
                "Options (--flag VALUE or --flag=VALUE):\n",
    .epilogue = LT_CLI_EXIT_HELP,
    .opts = OPTS,
    .n_opts = N_OPTS,
    .defaults = &DEFAULTS,
    .positional = true,
};

/* The lines of f (without their '\n'; a final line without one counts), into a
 * buffer that the texts point into. */
static char *read_lines(FILE *f, const char *name, char ***texts, size_t **lens, int64_t *n) {
  size_t cap = 1 << 16, size = 0;
  char *buf = lt_cli_xmalloc(cap);
  for (size_t got; (got = fread(buf + size, 1, cap - size, f)) > 0;) {
    size += got;
    if (size > MAX_INPUT_BYTES) lt_cli_die(LT_CLI_EXIT_USAGE, "--input %s: over %zu bytes", name, MAX_INPUT_BYTES);
    if (size == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory reading %s", name);
      buf = nb;
    }
  }
  if (ferror(f)) lt_cli_die(LT_CLI_EXIT_FAILURE, "--input %s: %s", name, strerror(errno));
  int64_t count = 0;
  for (size_t i = 0; i < size; i++) count += buf[i] == '\n';
  if (size && buf[size - 1] != '\n') count++;
  *texts = lt_cli_xcalloc((size_t)count + 1, sizeof **texts);
  *lens = lt_cli_xcalloc((size_t)count + 1, sizeof **lens);
  int64_t k = 0;
  for (size_t i = 0, start = 0; i <= size && k < count; i++)
    if (i == size || buf[i] == '\n') {
      (*texts)[k] = buf + start, (*lens)[k] = i - start, k++;
      start = i + 1;
    }
  *n = count;
  return buf;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  lt_cli_init(PROG, NULL);
  options o = DEFAULTS;
  bool given[N_OPTS] = {0};
  const char **pos = lt_cli_xcalloc((size_t)argc + 1, sizeof *pos);
  int n_pos = 0;
  lt_cli_parse_or_exit(&CLI, argc, argv, &o, given, pos, &n_pos);
  if (!o.model) lt_cli_die(LT_CLI_EXIT_USAGE, "--model DIR is required");
  if (o.input && n_pos) lt_cli_die(LT_CLI_EXIT_USAGE, "give the texts as operands or --input FILE, not both");
  if (!o.input && !n_pos) lt_cli_die(LT_CLI_EXIT_USAGE, "no texts: give them as operands or --input FILE");
  if (o.format == FORMAT_SAFETENSORS && !o.out) lt_cli_die(LT_CLI_EXIT_USAGE, "--format safetensors needs --out FILE");
  if (!lt_hf_is_dir(o.model)) lt_cli_die(LT_CLI_EXIT_USAGE, "--model '%s' is not a directory with config.json", o.model);

  uint64_t cap = o.max_memory < 0 ? lt_ckpt_default_memory_cap() : (uint64_t)o.max_memory << 20;
  lt_tf_load_opts lo = LT_TF_LOAD_DEFAULTS; /* load.h: here a Hugging Face directory only (checked above) */
  lo.ckpt.max_bytes = cap;
  lo.weights = (lt_qformat)o.weights;
  lt_tf_loaded src;
  if (lt_tf_load(o.model, &lo, &src) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "--model %s: %s", o.model, lt_last_error());
  lt_transformer *m = src.model;
  lt_tokenizer *tok = src.tok;
  const lt_tf_config *c = lt_transformer_config(m);
  if (c->arch == LT_TF_DECODER_ONLY)
    lt_cli_die(LT_CLI_EXIT_USAGE, "--model %s is a decoder-only model (%s): embed needs an encoder (BERT's layout)",
               o.model, lt_tf_arch_name(c->arch));
  lt_hf_sentence_config sc;
  if (lt_hf_read_sentence_config(o.model, c, &sc) != LT_OK)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "--model %s: %s", o.model, lt_last_error());
  if (given[lt_cli_find(&CLI, "max-length")]) {
    if (o.max_length > c->max_len)
      lt_cli_die(LT_CLI_EXIT_USAGE, "--max-length %lld: over the model's max_len %lld", (long long)o.max_length,
                 (long long)c->max_len);
    sc.max_seq_length = o.max_length;
  }
  if (given[lt_cli_find(&CLI, "normalize")]) sc.normalize = o.normalize_on;
  if (!tok) lt_cli_die(LT_CLI_EXIT_FAILURE, "--model %s: its tokenizer: the directory has no tokenizer.json", o.model);

  char **texts = NULL, *buf = NULL;
  size_t *lens = NULL;
  int64_t n = 0;
  if (o.input) {
    FILE *f = strcmp(o.input, "-") == 0 ? stdin : fopen(o.input, "rb");
    if (!f) lt_cli_die(LT_CLI_EXIT_FAILURE, "--input %s: %s", o.input, strerror(errno));
    buf = read_lines(f, o.input, &texts, &lens, &n);
    if (f != stdin) fclose(f);
  } else {
    n = n_pos;
    texts = lt_cli_xcalloc((size_t)n, sizeof *texts);
    lens = lt_cli_xcalloc((size_t)n, sizeof *lens);
    for (int64_t i = 0; i < n; i++) texts[i] = (char *)pos[i], lens[i] = strlen(pos[i]);
  }
  const double t0 = now();
  lt_tensor *e = lt_hf_embed_texts(m, tok, &sc, n, (const char *const *)texts, lens, o.batch);
  if (!e) lt_cli_die(LT_CLI_EXIT_FAILURE, "embedding: %s", lt_last_error());
  const double t1 = now();
  if (o.time) fprintf(stderr, PROG ": %lld texts in %.3f s (batch %lld)\n", (long long)n, t1 - t0, (long long)o.batch);

  const int64_t C = c->d_model;
  if (o.format == FORMAT_SAFETENSORS) {
    const char *names[] = {"embeddings"};
    const lt_tensor *ts[] = {e};
    if (lt_st_save(o.out, 1, names, ts, 0, NULL, NULL) != LT_OK)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "--out %s: %s", o.out, lt_last_error());
  } else {
    FILE *f = o.out ? fopen(o.out, "w") : stdout;
    if (!f) lt_cli_die(LT_CLI_EXIT_FAILURE, "--out %s: %s", o.out, strerror(errno));
    const float *v = e->data;
    for (int64_t i = 0; i < n; i++) {
      json_t *t = json_stringn(texts[i], lens[i]); /* NULL for invalid UTF-8: the text is then written as null */
      char *js = json_dumps(t ? t : json_null(), JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
      if (!js) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory");
      fprintf(f, "{\"text\": %s, \"embedding\": [", js);
      for (int64_t k = 0; k < C; k++) fprintf(f, "%s%.9g", k ? ", " : "", (double)v[i * C + k]);
      fputs("]}\n", f);
      free(js);
      json_decref(t);
    }
    lt_cli_flush(f, o.out ? o.out : "stdout");
    if (f != stdout && fclose(f) != 0) lt_cli_die(LT_CLI_EXIT_FAILURE, "--out %s: %s", o.out, strerror(errno));
  }
  lt_tensor_free(e);
  lt_tokenizer_free(tok);
  lt_transformer_free(m);
  free(texts), free(lens), free(buf), free(pos);
  return LT_CLI_EXIT_OK;
}
