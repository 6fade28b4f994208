/*
 * tools/tokenize_main.c: the `tokenize` program: how a tokenizer cuts a
 * text, one line at a time (docs/datasets.md "The tokenize program").
 *
 *   tokenize --tokenizer-file tokenizer.json --print-ids < lines
 *   tokenize --tokenizer-file tokenizer.json --offsets < lines
 *   tokenize --tokenizer-file tokenizer.json --decode < id-lines
 *   tokenize --tokenizer-file tokenizer.json --whole < text   (one text, many lines)
 *
 * and, with --out, texts into token shards (docs/datasets.md "Token shards"):
 *
 *   tokenize --tokenizer byte|char --out DIR FILE...
 *   tokenize --tokenizer-file tokenizer.json [--jsonl-field text] --out DIR FILE...
 *
 * Shard mode cuts the input into units (a JSON Lines record, or a piece of a
 * text file of about --chunk-bytes ending at a line break), encodes the
 * units of a round on --threads threads (each with its own copy of the
 * tokenizer; the results are written in input order, so the shards do not
 * depend on the thread count), sends every 1/--val-fraction-th unit to the
 * validation shards, and writes the shards through lt_shard_writer (each
 * whole and atomic).
 *
 * What this is not: a tokenizer; the work is the library's
 * (lt_tokenizer_load_hf, lt_tokenizer_encode_ex, lt_tokenizer_decode,
 * lt_shard_writer); this file reads, cuts, and prints.
 */
#include "cli/cli.h" /* defines: lt_cli_parse_or_exit, lt_cli_die, lt_cli_write */
#include "libtensor.h"      /* defines: lt_tokenizer_*, lt_shard_writer_*, lt_trainer_make_dir */

#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <jansson.h> /* JSON Lines records */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  const char *tokenizer_file;
  bool print_ids, decode, offsets, special, whole;
  /* shard mode */
  const char *out, *jsonl_field, *doc_token;
  int tokenizer; /* LT_TOKENIZER_BYTE or _CHAR; -1: not given */
  double val_fraction;
  int64_t shard_tokens, chunk_bytes, threads;
  bool progress;
} options;

static const char *kind_name(int i) { return lt_tokenizer_kind_name((lt_tokenizer_kind)i); }

static const lt_cli_opt OPTS[] = {
  LT_CLI_OPT_STRING(options, "tokenizer-file", tokenizer_file, "FILE", 4096,
                    "the tokenizer.json (Hugging Face tokenizers) to use (this or --tokenizer)"),
  LT_CLI_OPT_ENUM(options, "tokenizer", tokenizer, kind_name, 2,
                  "shard mode: libtensor's byte or char tokenizer instead of --tokenizer-file (char learns its "
                  "vocabulary from the input in a first pass); DIR/tokenizer.json gets a copy for train",
                  .default_text = "(none)"),
  LT_CLI_OPT_BOOL(options, "whole", whole, "line mode: standard input is one text (newlines included), "
                  "giving one output line"),
  LT_CLI_OPT_BOOL(options, "print-ids", print_ids, "print each input line's ids, space-separated (the default mode)"),
  LT_CLI_OPT_BOOL(options, "offsets", offsets, "print each input line's tokens as id:start:end, with start and end "
                  "BYTE offsets into the line as given (the tokenizers library gives character offsets)"),
  LT_CLI_OPT_BOOL(options, "decode", decode, "read lines of space-separated ids and print each decoded text "
                  "(special tokens skipped, as decode(ids) does; --no-special keeps them)"),
  LT_CLI_OPT_BOOL(options, "special", special, "add the post-processor's special tokens ([CLS], <s>, ...) as "
                  "encode(text) does; --no-special leaves them out (and with --decode writes special tokens out)"),
  LT_CLI_GROUP_TITLE("Shard mode (--out DIR FILE...)"),
  LT_CLI_OPT_STRING(options, "out", out, "DIR", 4000,
                    "write token shards DIR/train_000000.bin, ... and DIR/val_000000.bin, ... (created if missing; "
                    "it must hold no shards yet)"),
  LT_CLI_OPT_STRING(options, "jsonl-field", jsonl_field, "NAME", 256,
                    "the inputs are JSON Lines: each line a JSON object whose string field NAME is one document"),
  LT_CLI_OPT_DOUBLE(options, "val-fraction", val_fraction, "F", 0.0, 0.5,
                    "every 1/F-th unit (record, or text piece) goes to the validation shards (0: none)"),
  LT_CLI_OPT_INT(options, "shard-tokens", shard_tokens, "N", 1, INT32_MAX, "tokens per shard (the last is shorter)"),
  LT_CLI_OPT_INT(options, "chunk-bytes", chunk_bytes, "N", 0, (int64_t)1 << 30,
                 "text files are cut into units of about N bytes, each ending at a line break between two "
                 "non-space characters (0: a file is one unit)"),
  LT_CLI_OPT_INT(options, "threads", threads, "N", 1, 64, "encoder threads"),
  LT_CLI_OPT_STRING(options, "doc-token", doc_token, "TOKEN", 256,
                    "the token put before each document (a text file, a JSON Lines record), as llm.c puts "
                    "<|endoftext|>; \"none\": no token", .default_text = "<|endoftext|> if the vocabulary has it, "
                    "else none (hf); <bos> (byte, char)"),
  LT_CLI_OPT_BOOL(options, "progress", progress, "draw the progress bar (bytes, tokens/s, ETA) on standard error "
                  "even when it is not a terminal"),
};

static const lt_cli CLI = {
  .prog = "tokenize",
  .synopsis = "Usage: tokenize --tokenizer-file FILE [--print-ids | --offsets | --decode] [--no-special] [--whole] "
              "< lines\n"
              "       tokenize (--tokenizer byte|char | --tokenizer-file FILE) --out DIR [--jsonl-field NAME] FILE...\n"
              "Reads standard input line by line (the newline is not part of the line) and writes one line per\n"
              "line read: the ids, the id:start:end triples, or the decoded text. An empty line gives an empty\n"
              "line. Lines are raw bytes: an ill-formed UTF-8 sequence is read as U+FFFD, one per maximal\n"
              "subpart, as Python's bytes.decode(errors=\"replace\") does, and its offsets span its bytes. The\n"
              "file's truncation and padding apply, as in the tokenizers library's encode.\n",
  .epilogue = "Decoding skips special tokens (decode(ids, skip_special_tokens=True)); with --no-special it keeps\n"
              "them. A decoded text holding a newline is printed as it is.\n" LT_CLI_EXIT_HELP,
  .opts = OPTS,
  .n_opts = (int)(sizeof OPTS / sizeof OPTS[0]),
  .defaults = &(options){.special = true, .tokenizer = -1, .val_fraction = 0.1, .shard_tokens = 100000000,
                         .chunk_bytes = 1 << 20, .threads = 2},
  .positional = true,
};

static int shard_mode(const options *o, const char **files, int n_files);

static void put(const char *s, size_t n) { lt_cli_write(stdout, s, n, "standard output"); }

/* --whole: all of f into *buf (grown as getline's is); its length, or -1 at a
 * read error. */
static ssize_t read_all(FILE *f, char **buf, size_t *cap) {
  size_t n = 0;
  for (;;) {
    if (*cap - n < 65536) {
      *cap = *cap ? 2 * *cap : 1 << 20;
      char *b = realloc(*buf, *cap);
      if (!b) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory (%zu bytes)", *cap);
      *buf = b;
    }
    size_t got = fread(*buf + n, 1, *cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) return -1;
  (*buf)[n] = 0;
  return (ssize_t)n;
}

int main(int argc, char **argv) {
  lt_cli_init("tokenize", NULL);
  options o = *(const options *)CLI.defaults;
  bool given[sizeof OPTS / sizeof OPTS[0]] = {0};
  const char **files = lt_cli_xmalloc(sizeof *files * (size_t)(argc > 0 ? argc : 1));
  int n_files = 0;
  lt_cli_parse_or_exit(&CLI, argc, argv, &o, given, files, &n_files);
  if (o.out) {
    if (o.print_ids || o.offsets || o.decode || o.whole)
      lt_cli_die(LT_CLI_EXIT_USAGE, "--out (shard mode) takes no --print-ids, --offsets, --decode or --whole");
    int rc = shard_mode(&o, files, n_files);
    free(files);
    return rc;
  }
  if (n_files) lt_cli_die(LT_CLI_EXIT_USAGE, "'%s': input files are for shard mode (--out DIR); line mode reads "
                          "standard input", files[0]);
  free(files);
  if (o.tokenizer >= 0) lt_cli_die(LT_CLI_EXIT_USAGE, "--tokenizer is for shard mode (--out DIR); line mode takes "
                                   "--tokenizer-file");
  if (!o.tokenizer_file) lt_cli_die(LT_CLI_EXIT_USAGE, "--tokenizer-file is required");
  if ((int)o.decode + (int)o.offsets + (int)o.print_ids > 1)
    lt_cli_die(LT_CLI_EXIT_USAGE, "--print-ids, --offsets and --decode are one mode each: give one");
  lt_tokenizer *tok = lt_tokenizer_load_hf(o.tokenizer_file);
  if (!tok) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
  unsigned flags = LT_ENCODE_PAD_TRUNCATE | (o.special ? LT_ENCODE_ADD_SPECIAL : 0);

  char *line = NULL;
  size_t cap = 0;
  ssize_t got;
  int64_t lineno = 0;
  char buf[64];
  int64_t *ids = NULL, nids = 0;
  bool done = false;
  while (!done && (got = o.whole ? read_all(stdin, &line, &cap) : getline(&line, &cap, stdin)) >= 0) {
    lineno++;
    done = o.whole;
    size_t n = (size_t)got;
    if (!o.whole && n && line[n - 1] == '\n') n--;
    if (o.decode) {
      free(ids);
      ids = NULL;
      if (lt_tokenizer_parse_ids(line, n, &ids, &nids) != LT_OK)
        lt_cli_die(LT_CLI_EXIT_FAILURE, "line %" PRId64 ": %s", lineno, lt_last_error());
      char *text;
      size_t len;
      if (lt_tokenizer_decode(tok, ids, nids, o.special ? 0 : LT_DECODE_SHOW_SPECIAL, &text, &len) != LT_OK)
        lt_cli_die(LT_CLI_EXIT_FAILURE, "line %" PRId64 ": %s", lineno, lt_last_error());
      put(text, len);
      put("\n", 1);
      free(text);
      continue;
    }
    int64_t *out, *off = NULL, m;
    if (lt_tokenizer_encode_ex(tok, line, n, flags, &out, o.offsets ? &off : NULL, &m) != LT_OK)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "line %" PRId64 ": %s", lineno, lt_last_error());
    for (int64_t i = 0; i < m; i++) {
      int k = o.offsets ? snprintf(buf, sizeof buf, "%s%" PRId64 ":%" PRId64 ":%" PRId64, i ? " " : "", out[i],
                                   off[2 * i], off[2 * i + 1])
                        : snprintf(buf, sizeof buf, "%s%" PRId64, i ? " " : "", out[i]);
      put(buf, (size_t)k);
    }
    put("\n", 1);
    free(out);
    free(off);
  }
  if (ferror(stdin)) lt_cli_die(LT_CLI_EXIT_FAILURE, "reading standard input: %s", strerror(errno));
  free(line);
  free(ids);
  lt_tokenizer_free(tok);
  lt_cli_flush(stdout, "standard output");
  return LT_CLI_EXIT_OK;
}

/* ======================================================================== */
/* Shard mode                                                               */
/* ======================================================================== */

/* One unit of input: a JSON Lines record's text, or a piece of a text file. */
typedef struct {
  char *text;
  size_t len;
  bool doc_start;   /* the first unit of a document: the document token goes before it */
  const char *file; /* for messages */
  int64_t where;    /* the record's line (JSON Lines) or the piece's byte offset (text) */
  int64_t *ids, n;
  char err[512];    /* the encoder's message, "" if none */
} unit;

/* The inputs, read one unit at a time. */
typedef struct {
  const options *o;
  const char **files;
  int n_files, fi;
  FILE *f;
  char *buf;        /* text: bytes read but not yet cut into units */
  size_t len, cap;
  bool eof;
  int64_t offset, line; /* text: the offset of buf[0]; JSON Lines: the line number */
  int64_t bytes_read, bytes_total; /* progress: bytes so far, and of every input file */
} reader;

static bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static void reader_open_next(reader *r) {
  if (r->f && r->f != stdin) fclose(r->f);
  r->f = NULL;
  if (r->fi == r->n_files) return;
  const char *path = r->files[r->fi];
  struct stat st;
  if (stat(path, &st) != 0) lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s': %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s' is a directory, not a text file", path);
  if (!(r->f = fopen(path, "rb"))) lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s': %s", path, strerror(errno));
  r->eof = false, r->len = 0, r->offset = 0, r->line = 0;
}

/* Fills buf to at least want bytes (or the end of the file). */
static void reader_fill(reader *r, size_t want) {
  while (!r->eof && r->len < want) {
    if (r->cap - r->len < 65536 || r->cap < want + 1) {
      size_t c = r->cap ? 2 * r->cap : 1 << 20;
      while (c < want + 65536) c *= 2;
      char *b = realloc(r->buf, c);
      if (!b) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory (%zu bytes)", c);
      r->buf = b, r->cap = c;
    }
    size_t got = fread(r->buf + r->len, 1, r->cap - r->len - 1, r->f);
    if (got == 0) {
      if (ferror(r->f)) lt_cli_die(LT_CLI_EXIT_FAILURE, "reading '%s': %s", r->files[r->fi], strerror(errno));
      r->eof = true;
    }
    r->len += got;
    r->bytes_read += (int64_t)got;
  }
}

/* Where a text unit may end: after a '\n' between two non-space bytes, so
 * that no whitespace run is cut (a pre-tokenizer sees the same pieces as in
 * the whole text). The last such cut in buf[lo, hi], or 0. */
static size_t find_cut(const char *b, size_t lo, size_t hi) {
  for (size_t p = hi; p >= lo && p >= 2; p--)
    if (b[p - 1] == '\n' && !is_space((unsigned char)b[p]) && !is_space((unsigned char)b[p - 2])) return p;
  return 0;
}

/* The next unit into *u (text owned by u); false at the end of the inputs. */
static bool reader_next(reader *r, unit *u) {
  const options *o = r->o;
  for (;;) {
    if (!r->f) {
      if (r->fi == r->n_files) return false;
      reader_open_next(r);
    }
    const char *path = r->files[r->fi];
    if (o->jsonl_field) {
      char *line = NULL;
      size_t cap = 0;
      ssize_t got = getline(&line, &cap, r->f);
      if (got < 0) {
        free(line);
        if (ferror(r->f)) lt_cli_die(LT_CLI_EXIT_FAILURE, "reading '%s': %s", path, strerror(errno));
        r->fi++, reader_open_next(r);
        continue;
      }
      r->line++;
      r->bytes_read += got;
      size_t n = (size_t)got;
      while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
      size_t k = 0;
      while (k < n && is_space((unsigned char)line[k])) k++;
      if (k == n) { /* a blank line */
        free(line);
        continue;
      }
      json_error_t jerr;
      json_t *rec = json_loadb(line, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
      free(line);
      if (!rec) lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s' line %" PRId64 ": not JSON: %s", path, r->line, jerr.text);
      json_t *v = json_is_object(rec) ? json_object_get(rec, o->jsonl_field) : NULL;
      if (!json_is_object(rec) || !v || !json_is_string(v))
        lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s' line %" PRId64 ": %s", path, r->line,
                   !json_is_object(rec) ? "not a JSON object"
                   : !v ? "no field named by --jsonl-field"
                        : "the --jsonl-field field is not a string");
      size_t len = json_string_length(v);
      *u = (unit){.text = lt_cli_xmalloc(len + 1), .len = len, .doc_start = true, .file = path, .where = r->line};
      memcpy(u->text, json_string_value(v), len);
      u->text[len] = 0;
      json_decref(rec);
      return true;
    }
    /* A text file: pieces of about --chunk-bytes (0: the whole file). */
    size_t want = o->chunk_bytes > 0 ? (size_t)o->chunk_bytes : (size_t)LT_TEXT_MAX_BYTES + 1;
    size_t cut = 0;
    for (;;) {
      reader_fill(r, want + 1);
      if (r->eof && r->len <= want) {
        if (o->chunk_bytes == 0 && r->len > (size_t)LT_TEXT_MAX_BYTES)
          lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s' is larger than %lld bytes: give --chunk-bytes", path,
                     (long long)LT_TEXT_MAX_BYTES);
        cut = r->len;
        break;
      }
      if ((cut = find_cut(r->buf, want / 2 > 2 ? want / 2 : 2, want))) break;
      if (want > ((size_t)1 << 31))
        lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s' at byte %" PRId64 ": no line break between non-space characters in "
                   "2 GiB: cannot cut it into units", path, r->offset);
      want *= 2; /* no cut here: a longer unit */
    }
    if (cut == 0 && r->offset > 0) { /* the file's end, nothing left */
      r->fi++, reader_open_next(r);
      continue;
    }
    *u = (unit){.text = lt_cli_xmalloc(cut + 1), .len = cut, .doc_start = r->offset == 0, .file = path,
                .where = r->offset};
    memcpy(u->text, r->buf, cut);
    u->text[cut] = 0;
    memmove(r->buf, r->buf + cut, r->len - cut);
    r->len -= cut;
    r->offset += (int64_t)cut;
    if (r->eof && r->len == 0) r->fi++, reader_open_next(r);
    return true;
  }
}

/* A round of units encoded by the threads: each takes the next unit left. */
typedef struct {
  unit *u;
  int64_t n;
  atomic_llong next;
  lt_tokenizer **toks; /* one per thread */
} enc_round;

typedef struct {
  enc_round *rd;
  int t;
} worker;

static void *encode_units(void *arg) {
  worker *w = arg;
  enc_round *rd = w->rd;
  for (long long i; (i = atomic_fetch_add(&rd->next, 1)) < rd->n;) {
    unit *u = &rd->u[i];
    if (lt_tokenizer_encode_ex(rd->toks[w->t], u->text, u->len, 0, &u->ids, NULL, &u->n) != LT_OK)
      snprintf(u->err, sizeof u->err, "%s", lt_last_error());
  }
  return NULL;
}

/* The progress bar on stderr (a terminal, or --progress). */
typedef struct {
  bool on;
  double t0, last;
} bar;

static void bar_draw(bar *b, const reader *r, int64_t tokens, bool final) {
  if (!b->on) return;
  double now = lt_monotonic_seconds();
  if (!final && now - b->last < 0.25) return;
  b->last = now;
  double el = now - b->t0, mb = (double)r->bytes_read / 1e6, tps = el > 0 ? (double)tokens / el : 0;
  char eta[32] = "?";
  if (r->bytes_total > 0 && r->bytes_read > 0 && el > 0)
    lt_trainer_fmt_duration(el * (double)(r->bytes_total - r->bytes_read) / (double)r->bytes_read, eta, sizeof eta);
  int pct = r->bytes_total > 0 ? (int)(100.0 * (double)r->bytes_read / (double)r->bytes_total) : 0;
  char fill[21];
  for (int i = 0; i < 20; i++) fill[i] = i < pct / 5 ? '#' : '.';
  fill[20] = 0;
  if (r->bytes_total > 0)
    fprintf(stderr, "\rtokenize: [%s] %3d%% %.1f/%.1f MB, %.0f tokens/s, ETA %s   ", fill, pct, mb,
            (double)r->bytes_total / 1e6, tps, final ? "0s" : eta);
  else
    fprintf(stderr, "\rtokenize: %.1f MB, %.0f tokens/s   ", mb, tps);
  if (final) fputc('\n', stderr);
  fflush(stderr);
}

/* The vocabulary of a char tokenizer: the distinct code points of every unit
 * (a first pass over the inputs). */
static lt_tokenizer *learn_char(const options *o, const char **files, int n_files) {
  reader r = {.o = o, .files = files, .n_files = n_files};
  char *alpha = NULL;
  size_t alen = 0;
  unit u;
  while (reader_next(&r, &u)) {
    char *all = lt_cli_xmalloc(alen + u.len + 1);
    if (alen) memcpy(all, alpha, alen);
    memcpy(all + alen, u.text, u.len);
    lt_tokenizer *t = u.len + alen ? lt_tokenizer_new_char(all, alen + u.len) : NULL;
    if (!t && u.len + alen)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s' %s %" PRId64 ": --tokenizer char: %s", u.file,
                 o->jsonl_field ? "line" : "piece at byte", u.where, lt_last_error());
    free(all), free(u.text);
    if (!t) continue;
    /* The alphabet so far: ids 4.. decode to the code points in order. */
    int64_t V = lt_tokenizer_vocab_size(t);
    int64_t *ids = lt_cli_xmalloc_n((size_t)(V > 0 ? V : 1), sizeof *ids);
    for (int64_t i = LT_TOKEN_NUM_SPECIAL; i < V; i++) ids[i - LT_TOKEN_NUM_SPECIAL] = i;
    free(alpha);
    if (lt_tokenizer_decode(t, ids, V - LT_TOKEN_NUM_SPECIAL, 0, &alpha, &alen) != LT_OK)
      lt_cli_die(LT_CLI_EXIT_FAILURE, "--tokenizer char: %s", lt_last_error());
    free(ids);
    lt_tokenizer_free(t);
  }
  free(r.buf);
  if (!alen) lt_cli_die(LT_CLI_EXIT_FAILURE, "--tokenizer char: the inputs hold no text to learn a vocabulary from");
  lt_tokenizer *t = lt_tokenizer_new_char(alpha, alen);
  free(alpha);
  if (!t) lt_cli_die(LT_CLI_EXIT_FAILURE, "--tokenizer char: %s", lt_last_error());
  return t;
}

/* Another instance of tok for a thread (tokenizers are not shared between
 * threads): loaded again from the file (hf), or through serialize. */
static lt_tokenizer *tokenizer_copy(const options *o, const lt_tokenizer *tok) {
  if (o->tokenizer_file) return lt_tokenizer_load_hf(o->tokenizer_file);
  void *buf;
  size_t size;
  if (lt_tokenizer_serialize(tok, &buf, &size) != LT_OK) return NULL;
  lt_tokenizer *t = lt_tokenizer_deserialize(buf, size);
  free(buf);
  return t;
}

static bool dir_has_shards(const char *dir) {
  char pat[4200];
  bool any = false;
  for (int k = 0; k < 2 && !any; k++) {
    snprintf(pat, sizeof pat, "%s/%s_*.bin", dir, k ? "val" : "train");
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0) any = g.gl_pathc > 0;
    globfree(&g);
  }
  return any;
}

static int shard_mode(const options *o, const char **files, int n_files) {
  if ((o->tokenizer >= 0) == (o->tokenizer_file != NULL))
    lt_cli_die(LT_CLI_EXIT_USAGE, "shard mode needs one of --tokenizer byte|char and --tokenizer-file FILE");
  if (n_files == 0) lt_cli_die(LT_CLI_EXIT_USAGE, "shard mode needs input files (tokenize --out DIR FILE...)");
  if (lt_trainer_make_dir(o->out) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "--out: %s", lt_last_error());
  if (dir_has_shards(o->out))
    lt_cli_die(LT_CLI_EXIT_FAILURE, "--out '%s' already holds shards (train_*.bin or val_*.bin): remove them or "
               "choose another directory", o->out);
  reader r = {.o = o, .files = files, .n_files = n_files};
  for (int i = 0; i < n_files; i++) {
    struct stat st;
    if (stat(files[i], &st) != 0) lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s': %s", files[i], strerror(errno));
    if (!S_ISREG(st.st_mode)) /* a FIFO would block, a device never end, and --tokenizer char reads twice */
      lt_cli_die(LT_CLI_EXIT_USAGE, "'%s' is %s, not a regular file: shard mode reads its inputs from files "
                 "(write a stream to a file first)", files[i], S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode)
                 ? "a directory" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "not a regular file");
    r.bytes_total += (int64_t)st.st_size;
  }
  /* The tokenizer, and its copies for the other threads. */
  lt_tokenizer *tok = o->tokenizer_file            ? lt_tokenizer_load_hf(o->tokenizer_file)
                      : o->tokenizer == LT_TOKENIZER_BYTE ? lt_tokenizer_new_byte()
                                                  : learn_char(o, files, n_files);
  if (!tok) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
  const int nt = (int)o->threads;
  lt_tokenizer **toks = lt_cli_xcalloc((size_t)nt, sizeof *toks);
  toks[0] = tok;
  for (int t = 1; t < nt; t++)
    if (!(toks[t] = tokenizer_copy(o, tok))) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
  const int64_t V = lt_tokenizer_vocab_size(tok);
  if (!o->tokenizer_file) { /* the tokenizer train must use, beside the shards */
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", o->out);
    if (lt_tokenizer_save_json(tok, path) != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
  }
  /* The document token. */
  int64_t doc_id = -1;
  const char *doc = o->doc_token ? o->doc_token : o->tokenizer_file ? "<|endoftext|>" : "<bos>";
  if (strcmp(doc, "none") != 0) {
    doc_id = lt_tokenizer_token_id(tok, doc, strlen(doc));
    if (doc_id < 0 && o->doc_token)
      lt_cli_die(LT_CLI_EXIT_USAGE, "--doc-token '%s': no such token in the vocabulary (\"none\" for no token)", doc);
  }
  lt_shard_writer *wt = lt_shard_writer_new(o->out, "train", V, o->shard_tokens);
  lt_shard_writer *wv = o->val_fraction > 0 ? lt_shard_writer_new(o->out, "val", V, o->shard_tokens) : NULL;
  if (!wt || (o->val_fraction > 0 && !wv)) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());

  bar b = {.on = o->progress || isatty(2), .t0 = lt_monotonic_seconds()};
  const size_t round_bytes = (size_t)nt * ((size_t)4 << 20);
  const int64_t round_max = 4096;
  unit *us = lt_cli_xcalloc((size_t)round_max, sizeof *us);
  pthread_t *th = lt_cli_xcalloc((size_t)nt, sizeof *th);
  worker *wk = lt_cli_xcalloc((size_t)nt, sizeof *wk);
  int64_t n_units = 0, n_val_units = 0, tokens = 0, docs = 0;
  for (bool more = true; more;) {
    int64_t n = 0;
    size_t bytes = 0;
    while (n < round_max && bytes < round_bytes && (more = reader_next(&r, &us[n]))) bytes += us[n++].len;
    if (n == 0) break;
    enc_round rd = {.u = us, .n = n, .toks = toks};
    atomic_init(&rd.next, 0);
    for (int t = 0; t < nt; t++) wk[t] = (worker){&rd, t};
    for (int t = 1; t < nt; t++)
      if (pthread_create(&th[t], NULL, encode_units, &wk[t]) != 0)
        lt_cli_die(LT_CLI_EXIT_FAILURE, "cannot start encoder thread %d", t);
    encode_units(&wk[0]);
    for (int t = 1; t < nt; t++) pthread_join(th[t], NULL);
    for (int64_t i = 0; i < n; i++) { /* in input order */
      unit *u = &us[i];
      if (u->err[0])
        lt_cli_die(LT_CLI_EXIT_FAILURE, "'%s' %s %" PRId64 ": %s", u->file, o->jsonl_field ? "line" : "piece at byte",
                   u->where, u->err);
      bool val = o->val_fraction > 0 &&
                 floor((double)(n_units + 1) * o->val_fraction) > floor((double)n_units * o->val_fraction);
      lt_shard_writer *w = val ? wv : wt;
      lt_status s = LT_OK;
      if (u->doc_start) docs++;
      if (u->doc_start && doc_id >= 0) s = lt_shard_writer_add(w, &doc_id, 1);
      if (s == LT_OK) s = lt_shard_writer_add(w, u->ids, u->n);
      if (s != LT_OK) lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
      tokens += u->n + (u->doc_start && doc_id >= 0);
      n_units++, n_val_units += val;
      free(u->text), free(u->ids);
    }
    bar_draw(&b, &r, tokens, false);
  }
  bar_draw(&b, &r, tokens, true);
  free(r.buf);
  if (o->val_fraction > 0 && n_val_units == 0)
    lt_cli_die(LT_CLI_EXIT_FAILURE, "--val-fraction %g: the inputs make %" PRId64 " units, too few to hold one out "
               "(a smaller --chunk-bytes cuts text files finer; --val-fraction 0 writes no validation shard)",
               o->val_fraction, n_units);
  int64_t ts, tt, vs = 0, vt = 0;
  if (lt_shard_writer_close(wt, &ts, &tt) != LT_OK || (wv && lt_shard_writer_close(wv, &vs, &vt) != LT_OK))
    lt_cli_die(LT_CLI_EXIT_FAILURE, "%s", lt_last_error());
  int version = lt_shard_version_for_vocab(V);
  printf("tokenize: %d file%s, %" PRId64 " documents, %" PRId64 " units -> %s: train %" PRId64 " shard%s (%" PRId64
         " tokens), val %" PRId64 " shard%s (%" PRId64 " tokens); vocab %" PRId64 ", %s tokens (version %d)\n",
         n_files, n_files == 1 ? "" : "s", docs, n_units, o->out, ts, ts == 1 ? "" : "s", tt, vs, vs == 1 ? "" : "s",
         vt, V, version == LT_SHARD_VERSION_U16 ? "uint16" : "uint32", version);
  for (int t = 0; t < nt; t++) lt_tokenizer_free(toks[t]);
  free(toks), free(us), free(th), free(wk);
  lt_cli_flush(stdout, "standard output");
  return LT_CLI_EXIT_OK;
}
