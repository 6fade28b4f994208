/*
 * models/transformer/programs/generate_main.c: the `generate` program: load a
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
 * Exit status (cli/cli.h): 0 on success, 1 for data errors (checkpoint,
 * input, a failed write), 2 for usage errors (flags). Every flag is bounded
 * (the table OPTS, read by cli/cli.h), --input must be a regular file and
 * inputs are at most INPUT_LIMIT bytes, and every write to stdout is checked.
 */
#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/cli_ckpt.h"
#include "models/transformer/hf.h"
#include "models/transformer/gguf_model.h"
#include "datasets/datasets.h"
#include "models/transformer/config.h"
#include "models/transformer/load.h"
#include "models/transformer/generate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROG "generate"

/* Dies with the library's pending error after "what: ". */
static _Noreturn void die_lt(const char *what) { lt_cli_die(LT_CLI_EXIT_FAILURE, "%s: %s", what, lt_last_error()); }

/* The most input read from --input or standard input. */
#define INPUT_LIMIT ((int64_t)64 << 20)
#define INPUT_LIMIT_TEXT "64 MiB"

/* ======================================================================== */
/* Options: one table (cli/cli.h) drives parsing, ranges and --help         */
/* ======================================================================== */

typedef struct options {
  const char *checkpoint;
  int strategy; /* lt_generate_strategy */
  int64_t beam, top_k, max_len, context, batch, threads, seed;
  int precision; /* LT_CLI_PRECISION_* */
  int weights;   /* lt_qformat */
  double length_penalty, temperature, top_p;
  bool no_cache, scores, allow_unchecksummed;
  const char *input; /* file, "-" or NULL */
  const char *write_tokenizer; /* tokenizer.json to write instead of decoding, or NULL */
  int64_t max_memory; /* MiB; -1: lt_ckpt_default_memory_cap(); 0: no cap */
} options;

static const char *strategy_name(int i) { return lt_generate_strategy_name((lt_generate_strategy)i); }
static const char *weights_name(int i) { return lt_qformat_name((lt_qformat)i); }

#define PATH_MAX_LEN 4095
#define I(...) LT_CLI_OPT_INT(options, __VA_ARGS__)
#define D(...) LT_CLI_OPT_DOUBLE(options, __VA_ARGS__)
static const lt_cli_opt OPTS[] = {
  LT_CLI_OPT_STRING(options, "checkpoint", checkpoint, "FILE", PATH_MAX_LEN,
                    "the checkpoint (a ckpt-*.h5 file that train wrote, or its run directory for the newest valid one; a "
                    "Hugging Face directory; or a GGUF file); required"),
  LT_CLI_OPT_ENUM(options, "strategy", strategy, strategy_name, 3, "decoding strategy"),
  I("beam", beam, "N", 1, 1024, "beam search: hypotheses kept per input (1 = greedy)"),
  D("length-penalty", length_penalty, "A", 0, 100, "beam search: rank hypotheses by sum(log p) / length^A"),
  D("temperature", temperature, "T", 0, 100, "sample: divide the logits by T (use --strategy greedy for 0)",
    .flags = LT_CLI_MIN_OPEN),
  I("top-k", top_k, "K", 0, (int64_t)1 << 24, "sample: only the K most likely tokens (0: all)"),
  D("top-p", top_p, "P", 0, 1, "sample: only the most likely tokens whose probability sums to P (1: all); "
    "applied after --top-k", .flags = LT_CLI_MIN_OPEN),
  I("seed", seed, "S", 0, INT64_MAX, "sample: the generator's seed; the same seed, inputs and --batch give the "
    "same output"),
  I("max-len", max_len, "N", 1, (int64_t)1 << 24, "most tokens generated per input, <eos> included (an "
    "encoder-decoder allows at most its max_len positions)"),
  I("context", context, "N", 1, (int64_t)1 << 24, "decoder-only: positions the model sees; longer outputs slide a "
    "window over the last N tokens", .default_text = "the checkpoint's training --seq-len, else max_len"),
  LT_CLI_OPT_BOOL(options, "no-cache", no_cache, "recompute the whole prefix at each step (the reference path; slow)"),
  I("batch", batch, "N", 1, (int64_t)1 << 20, "inputs decoded together (with --strategy beam, N x --beam "
    "hypotheses: at most 2^20)"),
  LT_CLI_OPT_STRING(options, "input", input, "FILE", PATH_MAX_LEN, "read inputs from FILE, one per line ('-': "
                    "standard input); a regular file of at most " INPUT_LIMIT_TEXT),
  LT_CLI_OPT_BOOL(options, "scores", scores, "append a tab and the score to each line: the sum of log-probabilities "
                  "of the generated tokens (beam: divided by length^A; encoder-only: the label's probability)"),
  I("threads", threads, "N", 1, 1024, "threads for BLIS and libtensor's kernels",
    .default_text = "LT_NUM_THREADS, else all"),
  LT_CLI_OPT_ENUM(options, "precision", precision, lt_cli_precision_name, LT_CLI_PRECISION_COUNT,
                  "matrix products in f32, or bf16 with f32 accumulation (autocast; docs/mixed-precision.md)",
                  .default_text = "f32"),
  LT_CLI_OPT_ENUM(options, "weights", weights, weights_name, LT_QFORMAT_COUNT,
                  "the weights of every Linear, the output head and the embeddings: f32, bf16, or "
                  "ggml's 8-bit and 4-bit blocks q8_0 and q4_0, loaded straight into that format (docs/decoding.md)",
                  .default_text = "f32"),
  I("max-memory", max_memory, "MIB", 0, INT64_MAX >> 20, "refuse a checkpoint whose model needs more memory (0: no "
    "cap; docs/security.md)", .default_text = "half of physical memory"),
  LT_CLI_OPT_STRING(options, "write-tokenizer", write_tokenizer, "FILE", PATH_MAX_LEN, "write the checkpoint's "
                    "tokenizer as FILE (tokenizer.json of Hugging Face tokenizers; docs/datasets.md) and exit "
                    "without decoding"),
  LT_CLI_OPT_BOOL(options, "allow-unchecksummed", allow_unchecksummed, "accept an HDF5 file without object header "
                  "checksums (h5py's default layout; only from a trusted source, docs/security.md)"),
};
#undef I
#undef D
enum { N_OPTS = (int)(sizeof OPTS / sizeof OPTS[0]) };

static const options DEFAULTS = {.strategy = LT_GENERATE_GREEDY, .beam = 4, .top_k = 0, .max_len = 64, .context = 0,
                                 .batch = 32, .length_penalty = 0.6, .temperature = 1.0, .top_p = 1.0,
                                 .seed = 1234, .max_memory = -1};

static const lt_cli CLI = {
    .prog = PROG,
    .synopsis =
        "Usage: " PROG " --checkpoint FILE [options] [TEXT...]\n"
        "\n"
        "Loads a checkpoint written by train (model, configuration and tokenizer) and writes one line per input:\n"
        "  encoder-decoder: the output sequence for each source (e.g. a translation);\n"
        "  decoder-only:    the continuation of each prompt;\n"
        "  encoder-only:    the predicted label of each text.\n"
        "Inputs are the TEXT arguments (all arguments after '--' too), else the lines of --input, else the\n"
        "lines of standard input (at most " INPUT_LIMIT_TEXT ").\n"
        "An encoder-only checkpoint ignores the decoding flags (--strategy to --context, --no-cache).\n"
        "\n"
        "Options (--flag VALUE or --flag=VALUE):\n",
    .epilogue =
        "Input handling: an empty input, text the tokenizer cannot read (invalid UTF-8 for a character\n"
        "tokenizer) or an input longer than the model's positions is an error naming the input (exit 1,\n"
        "nothing decoded). Characters missing from a character vocabulary become <unk> (with a warning).\n"
        "A newline inside an output is written as \\n, so each input gives exactly one line. A failed write\n"
        "(a full disk, a closed pipe) is an error (exit 1).\n" LT_CLI_EXIT_HELP,
    .opts = OPTS,
    .n_opts = N_OPTS,
    .defaults = &DEFAULTS,
    .positional = true,
};

/* The options, and the inputs given as arguments (texts borrows argv; free it). */
static options parse_args(int argc, char **argv, bool *given, const char ***texts, int *n_texts) {
  options o = DEFAULTS;
  *texts = lt_cli_xmalloc_n((size_t)argc, sizeof **texts);
  lt_cli_parse_or_exit(&CLI, argc, argv, &o, given, *texts, n_texts);
  if (!o.checkpoint) lt_cli_die(LT_CLI_EXIT_USAGE, "--checkpoint FILE is required");
  if (o.input && *n_texts > 0) lt_cli_die(LT_CLI_EXIT_USAGE, "give inputs as arguments or with --input, not both");
  if (o.write_tokenizer && (o.input || *n_texts > 0))
    lt_cli_die(LT_CLI_EXIT_USAGE, "--write-tokenizer writes the tokenizer only: give no inputs");
  int64_t hyp;
  if (o.strategy == LT_GENERATE_BEAM && (__builtin_mul_overflow(o.batch, o.beam, &hyp) || hyp > ((int64_t)1 << 20)))
    lt_cli_die(LT_CLI_EXIT_USAGE, "--batch %lld x --beam %lld: at most 2^20 (1048576) hypotheses are decoded together",
        (long long)o.batch, (long long)o.beam);
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

/* Reads all of fd, at most INPUT_LIMIT bytes (more is an error naming what
 * and the limit); returns a new buffer (free it) of *size bytes plus a '\0'. */
static char *read_all(int fd, const char *what, size_t *size) {
  size_t cap = 1 << 16, n = 0;
  char *buf = lt_cli_xmalloc(cap);
  for (;;) {
    if (n + 1 >= cap) { /* room for one more byte than the limit, and the '\0' */
      cap = cap * 2 > (size_t)INPUT_LIMIT + 2 ? (size_t)INPUT_LIMIT + 2 : cap * 2;
      char *p = realloc(buf, cap);
      if (!p) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory reading %s (%zu bytes)", what, cap);
      buf = p;
    }
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { /* a non-blocking stdin: wait for data */
      struct pollfd pfd = {fd, POLLIN, 0};
      if (poll(&pfd, 1, -1) >= 0 || errno == EINTR) continue;
    }
    if (r < 0) lt_cli_die(LT_CLI_EXIT_FAILURE, "reading %s: %s", what, strerror(errno));
    if (r == 0) break;
    n += (size_t)r;
    if (n > (size_t)INPUT_LIMIT)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "%s is longer than the input limit of " INPUT_LIMIT_TEXT " (%lld bytes)", what,
          (long long)INPUT_LIMIT);
  }
  buf[n] = '\0';
  *size = n;
  return buf;
}

/* Opens --input FILE without blocking (a FIFO must not hang) and checks that
 * it is a regular file within the input limit; returns its descriptor. */
static int open_input(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) lt_cli_die(LT_CLI_EXIT_FAILURE, "--input '%s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) lt_cli_die(LT_CLI_EXIT_FAILURE, "--input '%s': %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    lt_cli_die(LT_CLI_EXIT_USAGE, "--input '%s' is %s, not a regular file: give a file of at most " INPUT_LIMIT_TEXT
        ", or '-' to read standard input", path, S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO"
        : S_ISCHR(sb.st_mode) ? "a character device" : S_ISBLK(sb.st_mode) ? "a block device" : S_ISSOCK(sb.st_mode)
        ? "a socket" : "not a regular file");
  if (sb.st_size > INPUT_LIMIT)
    lt_cli_die(LT_CLI_EXIT_USAGE, "--input '%s' is %lld bytes, more than the input limit of " INPUT_LIMIT_TEXT, path,
        (long long)sb.st_size);
  return fd;
}

/* The lines of text (without '\n' and a trailing '\r'); *count of them. */
static input *split_lines(char *text, size_t size, int64_t *count) {
  int64_t n = 0;
  for (size_t i = 0; i < size; i++) n += text[i] == '\n';
  if (size > 0 && text[size - 1] != '\n') n++; /* a last line without its newline */
  input *in = lt_cli_xmalloc_n((size_t)n, sizeof *in);
  char *p = text, *end = text + size;
  for (int64_t i = 0; i < n; i++) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
    if (len > 0 && p[len - 1] == '\r') len--;
    char *line = lt_cli_xmalloc(len + 1);
    memcpy(line, p, len);
    line[len] = '\0';
    in[i] = (input){.text = line, .order = i};
    p = nl ? nl + 1 : end;
  }
  *count = n;
  return in;
}

/* ======================================================================== */
/* Output: every write is checked (a full disk or a closed pipe: exit 1)    */
/* ======================================================================== */

static void put(const char *s, size_t n) { lt_cli_write(stdout, s, n, "the output"); }

/* Writes text with '\n' as "\\n" and '\r' as "\\r" (one line per input). */
static void put_text(const char *s, size_t n) {
  size_t run = 0; /* bytes before s[i] not yet written */
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '\n' && s[i] != '\r') continue;
    put(s + run, i - run);
    put(s[i] == '\n' ? "\\n" : "\\r", 2);
    run = i + 1;
  }
  put(s + run, n - run);
}

/* ======================================================================== */
/* main                                                                     */
/* ======================================================================== */

/* The most bytes of text one token of tok stands for when encoding, or 0
 * when unknown: a byte is one, a character at most 4 (UTF-8), a BPE token
 * never crosses a piece of at most LT_BPE_MAX_PIECE bytes. */
static size_t max_token_bytes(const lt_tokenizer *tok) {
  switch (lt_tokenizer_get_kind(tok)) {
    case LT_TOKENIZER_BYTE: return 1;
    case LT_TOKENIZER_CHAR: return 4;
    case LT_TOKENIZER_BPE: return LT_BPE_MAX_PIECE;
    case LT_TOKENIZER_HF: return 0; /* unbounded (an [UNK] may stand for a whole word); its encoding is
                                       linear in the input (docs/datasets.md) */
  }
  return 0;
}

/* A class name as it is printed: valid UTF-8 without control characters
 * as it is; otherwise every byte that is not printable text as \xNN (a
 * checkpoint's names reach the terminal; one line per input). Returns new. */
static char *printable_label(const char *p, size_t n) {
  size_t bad_at;
  bool clean = lt_utf8_valid(p, n, &bad_at);
  for (size_t i = 0; clean && i < n; i++) clean = (unsigned char)p[i] >= 0x20 && p[i] != 0x7f;
  if (clean) return strndup(p, n);
  char *out = malloc(4 * n + 1), *q = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') *q++ = (char)c;
    else q += sprintf(q, "\\x%02x", c);
  }
  *q = '\0';
  return out;
}

/* Where generation stops and starts: a Hugging Face directory's
 * generation_config.json / config.json (eos_token_id, every id of its list;
 * bos_token_id, pad_token_id, decoder_start_token_id) when they say, else the
 * tokenizer's own ids (lt_tokenizer_special_ids: libtensor's <bos>/<eos>/<pad>,
 * or the usual names of a tokenizer.json). eos -1: generation stops at
 * --max-len only. */
static void stop_ids(const lt_tokenizer *tok, const lt_hf_gen_ids *g, int64_t V, lt_generate_opts *d,
                     lt_tf_generate_opts *dt) {
  const lt_special_ids sp = lt_tokenizer_special_ids(tok);
  d->eos_id = sp.eos, d->n_also_eos = 0;
  dt->bos_id = sp.bos >= 0 ? sp.bos : LT_TOKEN_BOS;
  int64_t pad = sp.pad;
  if (g) {
    for (int i = 0; i < g->n_eos; i++) {
      if (g->eos[i] >= V)
        lt_cli_die(LT_CLI_EXIT_FAILURE, "the directory's eos_token_id %lld is outside the vocabulary of %lld",
                   (long long)g->eos[i], (long long)V);
      if (i == 0) d->eos_id = g->eos[0];
      else if (d->n_also_eos < LT_GENERATE_MAX_EOS) d->also_eos[d->n_also_eos++] = g->eos[i];
    }
    int64_t start = g->decoder_start >= 0 ? g->decoder_start : g->bos;
    if (start >= 0 && start < V) dt->bos_id = start;
    if (g->pad >= 0 && g->pad < V) pad = g->pad;
  }
  d->pad_id = pad >= 0 ? pad : d->eos_id >= 0 ? d->eos_id : LT_TOKEN_PAD;
}

static int cmp_len(const void *a, const void *b) {
  const input *x = a, *y = b;
  return x->n != y->n ? (x->n < y->n ? -1 : 1) : (x->order > y->order) - (x->order < y->order);
}
static int cmp_order(const void *a, const void *b) {
  const input *x = a, *y = b;
  return (x->order > y->order) - (x->order < y->order);
}

int main(int argc, char **argv) {
  lt_cli_init(PROG, NULL);
  signal(SIGPIPE, SIG_IGN); /* a closed pipe is a write error (EPIPE), reported like any other */
  bool given[N_OPTS] = {false};
  const char **texts;
  int n_texts = 0;
  options o = parse_args(argc, argv, given, &texts, &n_texts);
  const bool from_file = o.input && strcmp(o.input, "-");
  const int input_fd = from_file ? open_input(o.input) : STDIN_FILENO; /* checked before the model is loaded */
  if (o.threads > 0 && lt_set_num_threads((int)o.threads) != LT_OK) die_lt("--threads");
  if (o.precision == LT_CLI_PRECISION_BF16) lt_set_autocast(LT_DTYPE_BF16);

  /* ---- the checkpoint: configuration, tokenizer, then the model ---- */
  const uint64_t max_bytes = lt_cli_memory_cap(o.max_memory);
  lt_tf_config cfg;
  lt_tokenizer *tok = NULL;
  char **classes = NULL; /* encoder-only: class names, one per line of the "classes" blob */
  int64_t context = 0;
  lt_transformer *m = NULL;
  lt_hf_gen_ids gen_ids, *hf_gen = NULL; /* a Hugging Face directory's eos/bos/pad ids */
  lt_tf_load_opts lo = LT_TF_LOAD_DEFAULTS;
  lo.ckpt.allow_unchecksummed = o.allow_unchecksummed;
  lo.ckpt.max_bytes = max_bytes;
  lo.model_only = false; /* a model-only checkpoint has no tokenizer */
  lo.weights = (lt_qformat)o.weights; /* loaded straight into that format (load.h) */
  lt_tf_loaded src;      /* the model, its tokenizer, a checkpoint's metadata (load.h) */
  if (lt_tf_load(o.checkpoint, &lo, &src) != LT_OK) {
    if (strstr(lt_last_error(), "holds a model only"))
      lt_cli_die(LT_CLI_EXIT_FAILURE, "%s: generate needs a checkpoint written by train (runs/.../ckpt-*.h5)",
                 lt_last_error());
    lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
  }
  m = src.model, tok = src.tok;
  cfg = *lt_transformer_config(m);
  if (!tok && src.origin == LT_TF_FROM_HF)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s': a Hugging Face directory without a tokenizer (neither %s nor "
               "tokenizer.json)", src.path, LT_HF_TOKENIZER_FILE);
  if (!tok && src.origin == LT_TF_FROM_GGUF)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s': a GGUF file without a tokenizer libtensor reads (no "
               "tokenizer.huggingface.json, and tokenizer.ggml.model is not \"gpt2\")", src.path);
  if (!tok)
    lt_cli_die(LT_CLI_EXIT_FAILURE,
               "checkpoint '%s' is a training state without a tokenizer (the extra value 'tokenizer'): "
               "generate needs a checkpoint written by train",
               src.path);
  if (src.origin == LT_TF_FROM_HF) {
    /* A Hugging Face model's embedding may have more rows than its tokenizer has ids (padded). */
    int64_t tv = lt_tokenizer_vocab_size(tok), mv = cfg.vocab_size;
    if (lt_tokenizer_get_kind(tok) == LT_TOKENIZER_HF ? tv > mv : tv != mv)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s': the tokenizer has %lld ids, the model %lld", src.path, (long long)tv,
                 (long long)mv);
    if (lt_hf_read_gen_ids(src.path, &gen_ids) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
    hf_gen = &gen_ids;
  }
  context = cfg.max_len;
  if (src.origin != LT_TF_FROM_CHECKPOINT) {
    if (given[lt_cli_find(&CLI, "context")]) context = o.context;
    if (context > cfg.max_len)
      lt_cli_die(LT_CLI_EXIT_USAGE, "--context %lld: the model has max_len %lld positions", (long long)context,
          (long long)cfg.max_len);
  } else {
    const lt_ckpt_info *info = src.info;
    if (cfg.arch == LT_TF_ENCODER_ONLY) {
      classes = lt_cli_xcalloc((size_t)cfg.n_classes, sizeof *classes);
      const void *cb;
      size_t cs;
      if (lt_ckpt_meta_get_bytes(info->extra, LT_TF_CKPT_CLASSES, &cb, &cs) == LT_OK) {
        const char *p = cb, *end = p + cs;
        for (int64_t i = 0; i < cfg.n_classes && p < end; i++) {
          const char *nl = memchr(p, '\n', (size_t)(end - p));
          size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
          classes[i] = printable_label(p, n);
          p += n + 1;
        }
      }
    }
    if (cfg.arch == LT_TF_DECODER_ONLY) {
      int64_t sl;
      if (given[lt_cli_find(&CLI, "context")]) context = o.context;
      else if (lt_ckpt_meta_get_int(info->extra, "opt.seq-len", &sl) == LT_OK && sl >= 1) context = sl;
      if (context > cfg.max_len)
        lt_cli_die(LT_CLI_EXIT_USAGE, "--context %lld: the model has max_len %lld positions", (long long)context,
            (long long)cfg.max_len);
    }
  }
  lt_ckpt_info_free(src.info); /* the model and the tokenizer are this program's from here on */
  if (o.weights != LT_QFORMAT_F32) { /* weight-only quantization, done by the loader */
    size_t before = 0, after = 0;
    const lt_params *P = lt_transformer_params(m);
    for (int i = 0; i < lt_params_count(P); i++) {
      const lt_qmatrix *q = lt_tensor_qmatrix(lt_params_at(P, i)->value);
      if (q) before += (size_t)lt_params_at(P, i)->value->numel * sizeof(float), after += lt_qmatrix_bytes(q);
    }
    fprintf(stderr, PROG ": weights %s: %.2f MB of Linear and embedding weights (%.2f MB in f32), kernel %s\n",
            lt_qformat_name((lt_qformat)o.weights), (double)after / 1e6, (double)before / 1e6,
            lt_qmatrix_kernel((lt_qformat)o.weights));
  }
  if (o.write_tokenizer) { /* only the tokenizer, as tokenizer.json (docs/python.md) */
    if (lt_tokenizer_save_json(tok, o.write_tokenizer) != LT_OK) die_lt("--write-tokenizer");
    lt_tokenizer_free(tok);
    if (classes)
      for (int64_t i = 0; i < cfg.n_classes; i++) free(classes[i]);
    free(classes);
    lt_transformer_free(m);
    free(texts);
    return 0;
  }

  /* ---- generation limits ---- */
  if (cfg.arch == LT_TF_ENCODER_DECODER) {
    if (given[lt_cli_find(&CLI, "max-len")] && o.max_len > cfg.max_len)
      lt_cli_die(LT_CLI_EXIT_USAGE,
                 "--max-len %lld: this encoder-decoder has %lld decoder positions (<bos> + %lld tokens fed "
                 "back), so at most %lld",
                 (long long)o.max_len, (long long)cfg.max_len, (long long)(cfg.max_len - 1), (long long)cfg.max_len);
    if (o.max_len > cfg.max_len) o.max_len = cfg.max_len;
  }

  /* ---- inputs: read and check them all first ---- */
  int64_t n = 0;
  input *in = NULL;
  if (n_texts > 0) {
    n = n_texts;
    in = lt_cli_xmalloc_n((size_t)n, sizeof *in);
    for (int64_t i = 0; i < n; i++) in[i] = (input){.text = lt_cli_xstrdup(texts[i]), .order = i};
  } else {
    char name[64 + PATH_MAX_LEN] = "standard input";
    if (from_file) snprintf(name, sizeof name, "--input '%s'", o.input);
    size_t size;
    char *text = read_all(input_fd, name, &size);
    if (from_file) close(input_fd);
    in = split_lines(text, size, &n);
    free(text);
    if (n == 0)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "no input: %s is empty (give TEXT arguments, --input FILE, or lines on stdin)",
                 name);
  }
  const char *what = n_texts > 0 ? "input" : "input line";
  const int64_t limit = cfg.arch == LT_TF_DECODER_ONLY ? context : cfg.max_len;
  const size_t per_token = max_token_bytes(tok);
  for (int64_t i = 0; i < n; i++) {
    size_t len = strlen(in[i].text);
    if (len == 0)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "%s %lld is empty: there is nothing to condition on", what, (long long)i + 1);
    /* The length limit before the work: an input of more than limit x per_token bytes has more than limit
     * tokens whatever they are (BPE encoding costs about a millisecond per 100 bytes of one unbroken word). */
    if (per_token && len > (size_t)limit * per_token)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "%s %lld is %zu bytes long: more than the model's %s of %lld positions can hold "
                 "(a %s token stands for at most %zu bytes); refused before encoding", what, (long long)i + 1, len,
                 cfg.arch == LT_TF_DECODER_ONLY ? "context" : "max_len", (long long)limit,
                 lt_tokenizer_kind_name(lt_tokenizer_get_kind(tok)), per_token);
    /* A Hugging Face tokenizer encodes as transformers' tokenizer(text): with its special tokens. */
    bool hf = lt_tokenizer_get_kind(tok) == LT_TOKENIZER_HF;
    if (lt_tokenizer_encode_ex(tok, in[i].text, len, hf ? LT_ENCODE_ADD_SPECIAL : 0, &in[i].ids, NULL, &in[i].n) != LT_OK)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "%s %lld: %s", what, (long long)i + 1, lt_last_error());
    int64_t unk = 0;
    for (int64_t t = 0; t < in[i].n && !hf; t++) unk += in[i].ids[t] == LT_TOKEN_UNK;
    if (unk > 0)
      fprintf(stderr, PROG ": warning: %s %lld: %lld character%s not in the vocabulary became <unk>\n", what,
              (long long)i + 1, (long long)unk, unk > 1 ? "s" : "");
    if (in[i].n > limit)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "%s %lld is %lld tokens long, longer than the model's %s of %lld positions", what,
          (long long)i + 1, (long long)in[i].n, cfg.arch == LT_TF_DECODER_ONLY ? "context" : "max_len",
          (long long)limit);
  }

  /* ---- decode in batches of similar length (decoder-only: prompts of different lengths are left-padded
   * when prompt + output fit the context, docs/decoding.md; else a batch shares one length) ---- */
  qsort(in, (size_t)n, sizeof *in, cmp_len);
  char **out = lt_cli_xcalloc((size_t)n, sizeof *out);
  double *score = lt_cli_xcalloc((size_t)n, sizeof *score);
  lt_generator *gen = lt_generator_new((uint64_t)o.seed);
  if (!gen) die_lt("the sampling generator");
  lt_generate_opts d = lt_generate_defaults();
  d.strategy = (lt_generate_strategy)o.strategy, d.beam_width = o.beam, d.length_penalty = o.length_penalty;
  d.temperature = o.temperature, d.top_k = o.top_k, d.top_p = o.top_p, d.gen = gen;
  d.max_new = o.max_len;
  lt_tf_generate_opts dt = {.context = context, .no_cache = o.no_cache};
  stop_ids(tok, hf_gen, cfg.vocab_size, &d, &dt);
  for (int64_t b0 = 0; b0 < n;) {
    int64_t nb = 1, S = in[b0].n;
    while (b0 + nb < n && nb < o.batch &&
           (cfg.arch != LT_TF_DECODER_ONLY || in[b0 + nb].n == S || in[b0 + nb].n + o.max_len - 1 <= context)) {
      if (in[b0 + nb].n > S) S = in[b0 + nb].n;
      nb++;
    }
    lt_scope *s = lt_scope_begin();
    int64_t nbS; /* nb <= --batch and S <= the model's positions, both bounded; checked all the same */
    if (__builtin_mul_overflow(nb, S, &nbS))
      lt_cli_die(LT_CLI_EXIT_FAILURE, "a batch of %lld x %lld tokens is too large", (long long)nb, (long long)S);
    int64_t *ids = lt_cli_xmalloc_n((size_t)nbS, sizeof *ids);
    bool *pad = lt_cli_xmalloc_n((size_t)nbS, sizeof *pad);
    for (int64_t k = 0; k < nb; k++)
      for (int64_t t = 0; t < S; t++) {
        pad[k * S + t] = t >= in[b0 + k].n;
        ids[k * S + t] = pad[k * S + t] ? LT_TOKEN_PAD : in[b0 + k].ids[t];
      }
    lt_tensor *x = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){nb, S}, ids);
    lt_tensor *xp = lt_tensor_from_copy(LT_DTYPE_BOOL, 2, (int64_t[]){nb, S}, pad);
    free(ids), free(pad);
    if (!x || !xp) die_lt("input batch");
    lt_tensor *plens = NULL; /* decoder-only prompts of different lengths: left-padded instead */
    if (cfg.arch == LT_TF_DECODER_ONLY && in[b0].n != S) {
      const int64_t **rows = lt_cli_xmalloc_n((size_t)nb, sizeof *rows);
      int64_t *lens = lt_cli_xmalloc_n((size_t)nb, sizeof *lens);
      for (int64_t k = 0; k < nb; k++) rows[k] = in[b0 + k].ids, lens[k] = in[b0 + k].n;
      lt_tensor_free(x);
      if (lt_generate_left_pad(nb, rows, lens, LT_TOKEN_PAD, &x, &plens) != LT_OK) die_lt("input batch");
      free(rows), free(lens);
    }
    lt_tf_generate_opts dtb = dt;
    dtb.prompt_lens = plens;
    if (cfg.arch == LT_TF_ENCODER_ONLY) {
      bool prev = lt_set_grad_enabled(false);
      lt_tensor *logits = lt_transformer_classify(m, x, xp, NULL); /* [nb, n_classes] */
      lt_tensor *prob = logits ? lt_softmax(logits, -1) : NULL;
      lt_set_grad_enabled(prev);
      const int64_t NC = cfg.n_classes;
      double *p = lt_cli_xmalloc_n((size_t)nb, sizeof *p * (size_t)NC); /* NC: the checkpoint's, validated */
      if (!prob || lt_tensor_read(prob, LT_DTYPE_F64, p, nb * NC) != LT_OK) die_lt("classifying");
      for (int64_t k = 0; k < nb; k++) {
        int64_t best = 0;
        for (int64_t c = 1; c < NC; c++)
          if (p[k * NC + c] > p[k * NC + best]) best = c;
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)best);
        out[b0 + k] = lt_cli_xstrdup(classes[best] ? classes[best] : num);
        score[b0 + k] = p[k * NC + best];
      }
      free(p);
    } else {
      lt_generate_result r = {0};
      const bool encdec = cfg.arch == LT_TF_ENCODER_DECODER;
      if (lt_transformer_generate(m, encdec ? x : NULL, encdec ? xp : NULL, encdec ? NULL : x, &d, &dtb, &r) != LT_OK)
        die_lt("decoding");
      const int64_t L = r.tokens->shape[1];
      int64_t *y = lt_cli_xmalloc_n((size_t)nb, sizeof *y * (size_t)L),
              *len = lt_cli_xmalloc_n((size_t)nb, sizeof *len);
      double *sc = lt_cli_xmalloc_n((size_t)nb, sizeof *sc);
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
      if (!out[b0 + k]) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory");
    b0 += nb;
  }

  /* ---- outputs in input order ---- */
  for (int64_t i = 0; i < n; i++) in[i].text = (free(in[i].text), out[i]); /* the outputs follow the sort */
  for (int64_t i = 0; i < n; i++) in[i].n = i;                             /* index into score */
  qsort(in, (size_t)n, sizeof *in, cmp_order);
  for (int64_t i = 0; i < n; i++) {
    put_text(in[i].text, strlen(in[i].text));
    if (o.scores) {
      char num[64];
      put(num, (size_t)snprintf(num, sizeof num, "\t%.6f", score[in[i].n]));
    }
    put("\n", 1);
    free(in[i].text), free(in[i].ids);
  }
  lt_cli_flush(stdout, "the output");
  free(in), free(out), free(score), free(texts);
  if (classes)
    for (int64_t i = 0; i < cfg.n_classes; i++) free(classes[i]);
  free(classes);
  lt_generator_free(gen);
  lt_tokenizer_free(tok);
  lt_transformer_free(m);
  return 0;
}
