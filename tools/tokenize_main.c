/*
 * tools/tokenize_main.c: the `tokenize` program: how a tokenizer cuts a
 * text, one line at a time (docs/datasets.md "The tokenize program").
 *
 *   tokenize --tokenizer-file tokenizer.json --print-ids < lines
 *   tokenize --tokenizer-file tokenizer.json --offsets < lines
 *   tokenize --tokenizer-file tokenizer.json --decode < id-lines
 *
 * What this is not: a shard writer (that will be another mode of this
 * program); the work is the library's (lt_tokenizer_load_hf,
 * lt_tokenizer_encode_ex, lt_tokenizer_decode), this file reads lines and
 * prints.
 */
#include "cli/cli.h" /* defines: lt_cli_parse_or_exit, lt_cli_die, lt_cli_write */
#include "libtensor.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *tokenizer_file;
  bool print_ids, decode, offsets, special;
} options;

static const lt_cli_opt OPTS[] = {
  LT_CLI_OPT_STRING(options, "tokenizer-file", tokenizer_file, "FILE", 4096,
                    "the tokenizer.json (Hugging Face tokenizers) to use (required)"),
  LT_CLI_OPT_BOOL(options, "print-ids", print_ids, "print each input line's ids, space-separated (the default mode)"),
  LT_CLI_OPT_BOOL(options, "offsets", offsets, "print each input line's tokens as id:start:end, with start and end "
                  "BYTE offsets into the line as given (the tokenizers library gives character offsets)"),
  LT_CLI_OPT_BOOL(options, "decode", decode, "read lines of space-separated ids and print each decoded text "
                  "(special tokens skipped, as decode(ids) does; --no-special keeps them)"),
  LT_CLI_OPT_BOOL(options, "special", special, "add the post-processor's special tokens ([CLS], <s>, ...) as "
                  "encode(text) does; --no-special leaves them out (and with --decode writes special tokens out)"),
};

static const lt_cli CLI = {
  .prog = "tokenize",
  .synopsis = "Usage: tokenize --tokenizer-file FILE [--print-ids | --offsets | --decode] [--no-special] < lines\n"
              "Reads standard input line by line (the newline is not part of the line) and writes one line per\n"
              "line read: the ids, the id:start:end triples, or the decoded text. An empty line gives an empty\n"
              "line. Lines are raw bytes: an ill-formed UTF-8 sequence is read as U+FFFD, one per maximal\n"
              "subpart, as Python's bytes.decode(errors=\"replace\") does, and its offsets span its bytes. The\n"
              "file's truncation and padding apply, as in the tokenizers library's encode.\n",
  .epilogue = "Decoding skips special tokens (decode(ids, skip_special_tokens=True)); with --no-special it keeps\n"
              "them. A decoded text holding a newline is printed as it is.\n" LT_CLI_EXIT_HELP,
  .opts = OPTS,
  .n_opts = (int)(sizeof OPTS / sizeof OPTS[0]),
  .defaults = &(options){.special = true},
};

static void put(const char *s, size_t n) { lt_cli_write(stdout, s, n, "standard output"); }

int main(int argc, char **argv) {
  lt_cli_init("tokenize", NULL);
  options o = {.special = true};
  bool given[sizeof OPTS / sizeof OPTS[0]] = {0};
  lt_cli_parse_or_exit(&CLI, argc, argv, &o, given, NULL, NULL);
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
  int64_t *ids = NULL, nids = 0, capids = 0;
  while ((got = getline(&line, &cap, stdin)) >= 0) {
    lineno++;
    size_t n = (size_t)got;
    if (n && line[n - 1] == '\n') n--;
    if (o.decode) {
      nids = 0;
      char *p = line, *end = line + n;
      while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
        if (p == end) break;
        char *q;
        errno = 0;
        long long v = strtoll(p, &q, 10);
        if (q == p || errno || (q < end && *q != ' ' && *q != '\t' && *q != '\r'))
          lt_cli_die(LT_CLI_EXIT_FAILURE, "line %" PRId64 ": \"%.*s\" is not an id", lineno, (int)(q > p ? q - p : 1), p);
        if (nids == capids) {
          capids = capids ? 2 * capids : 64;
          ids = realloc(ids, (size_t)capids * sizeof *ids);
          if (!ids) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory");
        }
        ids[nids++] = v;
        p = q;
      }
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
