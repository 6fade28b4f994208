/*
 * models/transformer/generate_main.c: the `generate` program: load a
 * checkpoint written by `train` (the model, its configuration and its
 * tokenizer, all from the one file) and turn inputs into outputs, one output
 * line per input:
 *   encoder-decoder  a source sentence  -> its translation (decoded text)
 *   decoder-only     a prompt           -> its continuation
 *   encoder-only     a text             -> its label (the class name)
 * Inputs come from the command line (one per argument), a file or standard
 * input (--input FILE or -, one per line; with neither, standard input).
 * Decoding is lt_transformer_generate (generate.h): greedy, beam search or sampling, with
 * the KV cache unless --no-cache. docs/decoding.md is the manual.
 *
 * Inputs are checked before anything is decoded (empty inputs, text the
 * tokenizer cannot read, inputs longer than the model's positions), so a bad
 * input fails the run with a message naming it and no partial output.
 * Characters missing from a character-level vocabulary are encoded as <unk>
 * (a warning says how many); the byte and BPE tokenizers read any bytes.
 *
 * What this is not: a server (each run loads the model once and reads its
 * inputs to the end), nor a trainer (models/transformer/train).
 *
 * Exit status: 0 on success, 1 for data errors (checkpoint, input), 2 for
 * usage errors (flags).
 */
#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "models/transformer/config.h"
#include "models/transformer/generate.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "generate"
enum { EXIT_DATA = 1, EXIT_USAGE = 2 };

static _Noreturn void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (code == EXIT_USAGE) fprintf(stderr, "Try '" PROG " --help'.\n");
  exit(code);
}

/* Dies with the library's pending error after "what: ". */
static _Noreturn void die_lt(const char *what) { die(EXIT_DATA, "%s: %s", what, lt_last_error()); }

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die(EXIT_DATA, "out of memory");
  return p;
}

/* ======================================================================== */
/* Options                                                                  */
/* ======================================================================== */

typedef struct options {
  const char *checkpoint;
  lt_generate_strategy strategy;
  int64_t beam, top_k, max_len, context, batch, threads;
  double length_penalty, temperature, top_p;
  uint64_t seed;
  bool no_cache, scores, max_len_given, context_given;
  const char *input; /* file, "-" or NULL */
  char **texts;      /* inputs given as arguments */
  int n_texts;
} options;

static const char *const USAGE =
    "Usage: " PROG " --checkpoint FILE [options] [TEXT...]\n"
    "\n"
    "Loads a checkpoint written by train (model, configuration and tokenizer) and writes one line per input:\n"
    "  encoder-decoder: the output sequence for each source (e.g. a translation);\n"
    "  decoder-only:    the continuation of each prompt;\n"
    "  encoder-only:    the predicted label of each text.\n"
    "Inputs are the TEXT arguments, else the lines of --input, else the lines of standard input.\n"
    "An encoder-only checkpoint ignores the decoding flags (--strategy to --context, --no-cache).\n"
    "\n"
    "Options:\n"
    "  --checkpoint FILE     the checkpoint (a ckpt-*.h5 file that train wrote in its run directory); required\n"
    "  --strategy S          greedy (default), beam or sample\n"
    "  --beam N              beam search: hypotheses kept per input (default 4; 1 = greedy)\n"
    "  --length-penalty A    beam search: rank hypotheses by sum(log p) / length^A (default 0.6)\n"
    "  --temperature T       sample: divide the logits by T > 0 (default 1)\n"
    "  --top-k K             sample: only the K most likely tokens (default 0: all)\n"
    "  --top-p P             sample: only the most likely tokens whose probability sums to P, 0 < P <= 1\n"
    "                        (default 1: all); applied after --top-k\n"
    "  --seed S              sample: the generator's seed (default 1234); the same seed, inputs and\n"
    "                        --batch give the same output\n"
    "  --max-len N           most tokens generated per input, <eos> included (default 64; an\n"
    "                        encoder-decoder allows at most its max_len positions)\n"
    "  --context N           decoder-only: positions the model sees (default: the checkpoint's training\n"
    "                        --seq-len, else max_len); longer outputs slide a window over the last N tokens\n"
    "  --no-cache            recompute the whole prefix at each step (the reference path; slow)\n"
    "  --batch N             inputs decoded together (default 32)\n"
    "  --input FILE          read inputs from FILE, one per line ('-': standard input)\n"
    "  --scores              append a tab and the score to each line: the sum of log-probabilities of the\n"
    "                        generated tokens (beam: divided by length^A; encoder-only: the label's\n"
    "                        probability)\n"
    "  --threads N           threads for BLIS and libtensor's kernels (default: LT_NUM_THREADS or all)\n"
    "  --help                this text\n"
    "\n"
    "Input handling: an empty input, text the tokenizer cannot read (invalid UTF-8 for a character\n"
    "tokenizer) or an input longer than the model's positions is an error naming the input (exit 1,\n"
    "nothing decoded). Characters missing from a character vocabulary become <unk> (with a warning).\n"
    "A newline inside an output is written as \\n, so each input gives exactly one line.\n"
    "Exit status: 0 success, 1 data error, 2 usage error.\n";

static int64_t parse_int(const char *flag, const char *v, int64_t lo, int64_t hi) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    die(EXIT_USAGE, "%s '%s': need an integer in [%lld, %lld]", flag, v, (long long)lo, (long long)hi);
  return x;
}

static double parse_double(const char *flag, const char *v) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x)) die(EXIT_USAGE, "%s '%s': need a finite number", flag, v);
  return x;
}

static options parse_args(int argc, char **argv) {
  options o = {.strategy = LT_GENERATE_GREEDY, .beam = 4, .top_k = 0, .max_len = 64, .context = 0, .batch = 32,
               .length_penalty = 0.6, .temperature = 1.0, .top_p = 1.0, .seed = 1234};
  o.texts = xmalloc(sizeof *o.texts * (size_t)argc);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(USAGE, stdout);
      exit(0);
    }
    if (!strcmp(a, "--")) {
      while (++i < argc) o.texts[o.n_texts++] = argv[i];
      break;
    }
    if (strncmp(a, "--", 2) != 0) {
      o.texts[o.n_texts++] = argv[i];
      continue;
    }
    if (!strcmp(a, "--no-cache")) {
      o.no_cache = true;
      continue;
    }
    if (!strcmp(a, "--scores")) {
      o.scores = true;
      continue;
    }
    static const char *const with_value[] = {"--checkpoint", "--strategy", "--beam", "--length-penalty",
                                             "--temperature", "--top-k", "--top-p", "--seed", "--max-len",
                                             "--context", "--batch", "--input", "--threads"};
    bool known = false;
    for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) known = known || !strcmp(a, with_value[k]);
    if (!known) die(EXIT_USAGE, "unknown option %s", a);
    if (i + 1 >= argc) die(EXIT_USAGE, "%s needs a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--checkpoint")) o.checkpoint = v;
    else if (!strcmp(a, "--strategy")) {
      if (lt_generate_strategy_parse(v, &o.strategy) != LT_OK)
        die(EXIT_USAGE, "--strategy '%s': one of greedy, beam, sample", v);
    } else if (!strcmp(a, "--beam")) o.beam = parse_int(a, v, 1, 1024);
    else if (!strcmp(a, "--length-penalty")) {
      o.length_penalty = parse_double(a, v);
      if (o.length_penalty < 0) die(EXIT_USAGE, "--length-penalty %s: must be >= 0", v);
    } else if (!strcmp(a, "--temperature")) {
      o.temperature = parse_double(a, v);
      if (!(o.temperature > 0)) die(EXIT_USAGE, "--temperature %s: must be > 0 (use --strategy greedy for 0)", v);
    } else if (!strcmp(a, "--top-k")) o.top_k = parse_int(a, v, 0, INT64_MAX);
    else if (!strcmp(a, "--top-p")) {
      o.top_p = parse_double(a, v);
      if (!(o.top_p > 0 && o.top_p <= 1)) die(EXIT_USAGE, "--top-p %s: must be in (0, 1]", v);
    } else if (!strcmp(a, "--seed")) o.seed = (uint64_t)parse_int(a, v, 0, INT64_MAX);
    else if (!strcmp(a, "--max-len")) o.max_len = parse_int(a, v, 0, 1 << 24), o.max_len_given = true;
    else if (!strcmp(a, "--context")) o.context = parse_int(a, v, 1, 1 << 24), o.context_given = true;
    else if (!strcmp(a, "--batch")) o.batch = parse_int(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--threads")) o.threads = parse_int(a, v, 1, 1024);
    else if (!strcmp(a, "--input")) o.input = v;
  }
  if (!o.checkpoint) die(EXIT_USAGE, "--checkpoint FILE is required");
  if (o.input && o.n_texts > 0) die(EXIT_USAGE, "give inputs as arguments or with --input, not both");
  return o;
}

/* ======================================================================== */
/* Inputs                                                                   */
/* ======================================================================== */

typedef struct input {
  char *text;      /* owned */
  int64_t *ids, n; /* token ids (owned) */
  int64_t order;   /* position among the inputs */
} input;

/* The lines of f (without '\n' and a trailing '\r'). */
static input *read_lines(FILE *f, const char *name, int64_t *count) {
  input *in = NULL;
  int64_t n = 0, cap = 0;
  char *line = NULL;
  size_t lcap = 0;
  ssize_t len;
  while ((len = getline(&line, &lcap, f)) >= 0) {
    if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
    if (len > 0 && line[len - 1] == '\r') line[--len] = 0;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      in = realloc(in, sizeof *in * (size_t)cap);
      if (!in) die(EXIT_DATA, "out of memory");
    }
    in[n] = (input){.text = strdup(line), .order = n};
    if (!in[n].text) die(EXIT_DATA, "out of memory");
    n++;
  }
  if (ferror(f)) die(EXIT_DATA, "reading %s: %s", name, strerror(errno));
  free(line);
  *count = n;
  return in;
}

/* ======================================================================== */
/* Output                                                                   */
/* ======================================================================== */

/* Writes text with '\n' as "\\n" and '\r' as "\\r" (one line per input). */
static void put_text(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\n') fputs("\\n", stdout);
    else if (s[i] == '\r') fputs("\\r", stdout);
    else putchar(s[i]);
  }
}

/* ======================================================================== */
/* main                                                                     */
/* ======================================================================== */

static int cmp_len(const void *a, const void *b) {
  const input *x = a, *y = b;
  return x->n != y->n ? (x->n < y->n ? -1 : 1) : (x->order > y->order) - (x->order < y->order);
}
static int cmp_order(const void *a, const void *b) {
  const input *x = a, *y = b;
  return (x->order > y->order) - (x->order < y->order);
}

int main(int argc, char **argv) {
  options o = parse_args(argc, argv);
  if (o.threads > 0 && lt_set_num_threads((int)o.threads) != LT_OK) die_lt("--threads");

  /* ---- the checkpoint: configuration, tokenizer, then the model ---- */
  lt_params *empty = lt_params_new();
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = true; /* only the configuration and the extra values here */
  lt_ckpt_info *info = NULL;
  lt_train_state st0 = {.params = empty};
  if (lt_ckpt_load_training(o.checkpoint, &st0, &lo, &info) != LT_OK) {
    /* a model-only checkpoint has no tokenizer; anything else: the loader's reason */
    char why[1024];
    snprintf(why, sizeof why, "%s", lt_last_error());
    if (lt_ckpt_load_params(o.checkpoint, empty, &lo, NULL) == LT_OK)
      die(EXIT_DATA, "checkpoint '%s' holds a model only, without the tokenizer: generate needs a checkpoint "
          "written by train (runs/.../ckpt-*.h5)", o.checkpoint);
    if (strstr(why, o.checkpoint)) die(EXIT_DATA, "%s", why); /* the loader's message names the file */
    die(EXIT_DATA, "checkpoint '%s': %s", o.checkpoint, why);
  }
  lt_params_free(empty);
  lt_tf_config cfg;
  if (lt_tf_config_from_meta(info->config, &cfg) != LT_OK)
    die(EXIT_DATA, "checkpoint '%s': not a Transformer checkpoint of train (its model configuration: %s)",
        o.checkpoint, lt_last_error());
  const void *blob;
  size_t blob_size;
  if (lt_ckpt_meta_get_bytes(info->extra, "tokenizer", &blob, &blob_size) != LT_OK)
    die(EXIT_DATA, "checkpoint '%s' has no tokenizer (a model-only checkpoint? generate needs one written by train)",
        o.checkpoint);
  lt_tokenizer *tok = lt_tokenizer_deserialize(blob, blob_size);
  if (!tok) die(EXIT_DATA, "checkpoint '%s': its tokenizer: %s", o.checkpoint, lt_last_error());
  if (lt_tokenizer_vocab_size(tok) != cfg.vocab_size)
    die(EXIT_DATA, "checkpoint '%s': the tokenizer has %lld ids, the model %lld", o.checkpoint,
        (long long)lt_tokenizer_vocab_size(tok), (long long)cfg.vocab_size);
  char **classes = NULL; /* encoder-only: class names, one per line of the "classes" blob */
  if (cfg.arch == LT_TF_ENCODER_ONLY) {
    classes = calloc((size_t)cfg.n_classes, sizeof *classes);
    if (!classes) die(EXIT_DATA, "out of memory");
    const void *cb;
    size_t cs;
    if (lt_ckpt_meta_get_bytes(info->extra, "classes", &cb, &cs) == LT_OK) {
      const char *p = cb, *end = p + cs;
      for (int64_t i = 0; i < cfg.n_classes && p < end; i++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        classes[i] = strndup(p, n);
        p += n + 1;
      }
    }
  }
  int64_t context = cfg.max_len;
  if (cfg.arch == LT_TF_DECODER_ONLY) {
    int64_t sl;
    if (o.context_given) context = o.context;
    else if (lt_ckpt_meta_get_int(info->extra, "opt.seq-len", &sl) == LT_OK && sl >= 1) context = sl;
    if (context > cfg.max_len)
      die(EXIT_USAGE, "--context %lld: the model has max_len %lld positions", (long long)context,
          (long long)cfg.max_len);
  }
  lt_ckpt_info_free(info);
  lt_generator *init = lt_generator_new(0); /* the values are replaced by the checkpoint's */
  lt_transformer *m = init ? lt_transformer_new(&cfg, init) : NULL;
  if (!m) die(EXIT_DATA, "checkpoint '%s': building its model: %s", o.checkpoint, lt_last_error());
  lt_generator_free(init);
  if (lt_ckpt_load_params(o.checkpoint, lt_transformer_params(m), NULL, NULL) != LT_OK)
    die(EXIT_DATA, "checkpoint '%s': %s", o.checkpoint, lt_last_error());

  /* ---- generation limits ---- */
  if (cfg.arch == LT_TF_ENCODER_DECODER) {
    if (o.max_len_given && o.max_len > cfg.max_len)
      die(EXIT_USAGE, "--max-len %lld: this encoder-decoder has %lld decoder positions (<bos> + %lld tokens fed "
          "back), so at most %lld", (long long)o.max_len, (long long)cfg.max_len, (long long)(cfg.max_len - 1),
          (long long)cfg.max_len);
    if (o.max_len > cfg.max_len) o.max_len = cfg.max_len;
  }

  /* ---- inputs: read and check them all first ---- */
  int64_t n = 0;
  input *in = NULL;
  if (o.n_texts > 0) {
    n = o.n_texts;
    in = xmalloc(sizeof *in * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      in[i] = (input){.text = strdup(o.texts[i]), .order = i};
      if (!in[i].text) die(EXIT_DATA, "out of memory");
    }
  } else {
    const char *name = o.input && strcmp(o.input, "-") ? o.input : "standard input";
    FILE *f = o.input && strcmp(o.input, "-") ? fopen(o.input, "r") : stdin;
    if (!f) die(EXIT_DATA, "--input '%s': %s", o.input, strerror(errno));
    in = read_lines(f, name, &n);
    if (f != stdin) fclose(f);
    if (n == 0) die(EXIT_DATA, "no input: %s is empty (give TEXT arguments, --input FILE, or lines on stdin)", name);
  }
  const char *what = o.n_texts > 0 ? "input" : "input line";
  const int64_t limit = cfg.arch == LT_TF_DECODER_ONLY ? context : cfg.max_len;
  for (int64_t i = 0; i < n; i++) {
    size_t len = strlen(in[i].text);
    if (len == 0) die(EXIT_DATA, "%s %lld is empty: there is nothing to condition on", what, (long long)i + 1);
    if (lt_tokenizer_encode(tok, in[i].text, len, &in[i].ids, &in[i].n) != LT_OK)
      die(EXIT_DATA, "%s %lld: %s", what, (long long)i + 1, lt_last_error());
    int64_t unk = 0;
    for (int64_t t = 0; t < in[i].n; t++) unk += in[i].ids[t] == LT_TOKEN_UNK;
    if (unk > 0)
      fprintf(stderr, PROG ": warning: %s %lld: %lld character%s not in the vocabulary became <unk>\n", what,
              (long long)i + 1, (long long)unk, unk > 1 ? "s" : "");
    if (in[i].n > limit)
      die(EXIT_DATA, "%s %lld is %lld tokens long, longer than the model's %s of %lld positions", what,
          (long long)i + 1, (long long)in[i].n, cfg.arch == LT_TF_DECODER_ONLY ? "context" : "max_len",
          (long long)limit);
  }

  /* ---- decode in batches of similar length (decoder-only: equal length) ---- */
  qsort(in, (size_t)n, sizeof *in, cmp_len);
  char **out = calloc((size_t)n, sizeof *out);
  double *score = calloc((size_t)n, sizeof *score);
  lt_generator *gen = lt_generator_new(o.seed);
  if (!out || !score || !gen) die(EXIT_DATA, "out of memory");
  lt_generate_opts d = lt_generate_defaults();
  d.strategy = o.strategy, d.beam_width = o.beam, d.length_penalty = o.length_penalty;
  d.temperature = o.temperature, d.top_k = o.top_k, d.top_p = o.top_p, d.gen = gen;
  d.max_new = o.max_len, d.eos_id = LT_TOKEN_EOS, d.pad_id = LT_TOKEN_PAD;
  const lt_tf_generate_opts dt = {.bos_id = LT_TOKEN_BOS, .context = context, .no_cache = o.no_cache};
  for (int64_t b0 = 0; b0 < n;) {
    int64_t nb = 1, S = in[b0].n;
    while (b0 + nb < n && nb < o.batch && (cfg.arch != LT_TF_DECODER_ONLY || in[b0 + nb].n == S)) {
      if (in[b0 + nb].n > S) S = in[b0 + nb].n;
      nb++;
    }
    lt_scope *s = lt_scope_begin();
    int64_t *ids = xmalloc(sizeof *ids * (size_t)(nb * S));
    bool *pad = xmalloc(sizeof *pad * (size_t)(nb * S));
    for (int64_t k = 0; k < nb; k++)
      for (int64_t t = 0; t < S; t++) {
        pad[k * S + t] = t >= in[b0 + k].n;
        ids[k * S + t] = pad[k * S + t] ? LT_TOKEN_PAD : in[b0 + k].ids[t];
      }
    lt_tensor *x = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){nb, S}, ids);
    lt_tensor *xp = lt_tensor_from_copy(LT_DTYPE_BOOL, 2, (int64_t[]){nb, S}, pad);
    free(ids), free(pad);
    if (!x || !xp) die_lt("input batch");
    if (cfg.arch == LT_TF_ENCODER_ONLY) {
      bool prev = lt_set_grad_enabled(false);
      lt_tensor *logits = lt_transformer_classify(m, x, xp, NULL); /* [nb, n_classes] */
      lt_tensor *prob = logits ? lt_softmax(logits, -1) : NULL;
      lt_set_grad_enabled(prev);
      const int64_t NC = cfg.n_classes;
      double *p = xmalloc(sizeof *p * (size_t)(nb * NC));
      if (!prob || lt_tensor_read(prob, LT_DTYPE_F64, p, nb * NC) != LT_OK) die_lt("classifying");
      for (int64_t k = 0; k < nb; k++) {
        int64_t best = 0;
        for (int64_t c = 1; c < NC; c++)
          if (p[k * NC + c] > p[k * NC + best]) best = c;
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)best);
        out[b0 + k] = strdup(classes[best] ? classes[best] : num);
        score[b0 + k] = p[k * NC + best];
      }
      free(p);
    } else {
      lt_generate_result r = {0};
      const bool encdec = cfg.arch == LT_TF_ENCODER_DECODER;
      if (lt_transformer_generate(m, encdec ? x : NULL, encdec ? xp : NULL, encdec ? NULL : x, &d, &dt, &r) != LT_OK)
        die_lt("decoding");
      const int64_t L = r.tokens->shape[1];
      int64_t *y = xmalloc(sizeof *y * (size_t)(nb * L + 1)), *len = xmalloc(sizeof *len * (size_t)nb);
      double *sc = xmalloc(sizeof *sc * (size_t)nb);
      if (lt_tensor_read(r.tokens, LT_DTYPE_I64, y, nb * L) != LT_OK ||
          lt_tensor_read(r.lengths, LT_DTYPE_I64, len, nb) != LT_OK ||
          lt_tensor_read(r.scores, LT_DTYPE_F64, sc, nb) != LT_OK)
        die_lt("reading the decoded ids");
      for (int64_t k = 0; k < nb; k++) {
        char *text;
        size_t tl;
        if (lt_tokenizer_decode(tok, y + k * L, len[k], 0, &text, &tl) != LT_OK) die_lt("decoding ids to text");
        out[b0 + k] = text;
        score[b0 + k] = sc[k];
      }
      free(y), free(len), free(sc);
      lt_generate_result_free(&r);
    }
    lt_scope_end(s);
    for (int64_t k = 0; k < nb; k++)
      if (!out[b0 + k]) die(EXIT_DATA, "out of memory");
    b0 += nb;
  }

  /* ---- outputs in input order ---- */
  for (int64_t i = 0; i < n; i++) in[i].text = (free(in[i].text), out[i]); /* the outputs follow the sort */
  for (int64_t i = 0; i < n; i++) in[i].n = i;                             /* index into score */
  qsort(in, (size_t)n, sizeof *in, cmp_order);
  for (int64_t i = 0; i < n; i++) {
    put_text(in[i].text, strlen(in[i].text));
    if (o.scores) printf("\t%.6f", score[in[i].n]);
    putchar('\n');
    free(in[i].text), free(in[i].ids);
  }
  if (fflush(stdout) != 0) die(EXIT_DATA, "writing the output: %s", strerror(errno));
  free(in), free(out), free(score), free(o.texts);
  if (classes)
    for (int64_t i = 0; i < cfg.n_classes; i++) free(classes[i]);
  free(classes);
  lt_generator_free(gen);
  lt_tokenizer_free(tok);
  lt_transformer_free(m);
  return 0;
}
