/*
 * bench/hf_encode.c: the C side of bench/tokenize_bench.py --batch: one call
 * of lt_tokenizer_encode_batch over a corpus's lines, timed alone, as the
 * Rust side times Tokenizer.encode_batch alone.
 *
 *   bench_hf_encode TOKENIZER_JSON CORPUS
 *
 * reads CORPUS whole, cuts it into lines (the newline not included), loads
 * the tokenizer, then times lt_tokenizer_encode_batch(..., LT_ENCODE_ADD_SPECIAL)
 * on lt_get_num_threads() threads (LT_NUM_THREADS) and prints "SECONDS
 * TOKENS" (wall clock, the ids' count). What it is not: a tokenizer program
 * (that is tools/tokenize_main.c); loading and reading are not timed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "libtensor.h"

int main(int argc, char **argv) {
  char *pos[2];
  int npos = 2;
  const char *usage = "bench_hf_encode TOKENIZER_JSON CORPUS";
  const int bad = lt_bench_parse(argc, argv, NULL, 0, usage, pos, &npos);
  if (bad) return bad;
  if (npos != 2) return fprintf(stderr, "usage: %s\n", usage), 2;
  lt_tokenizer *tok = lt_tokenizer_load_hf(pos[0]);
  if (!tok) {
    fprintf(stderr, "bench_hf_encode: %s\n", lt_last_error());
    return 1;
  }
  FILE *f = fopen(pos[1], "rb");
  if (!f) {
    perror(pos[1]);
    return 1;
  }
  size_t cap = 1 << 20, n = 0;
  char *text = malloc(cap);
  for (size_t got; text && (got = fread(text + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) text = realloc(text, cap *= 2);
  }
  fclose(f);
  int64_t lines = 0, capl = 1024;
  const char **texts = malloc((size_t)capl * sizeof *texts);
  size_t *lens = malloc((size_t)capl * sizeof *lens);
  if (!text || !texts || !lens) {
    fprintf(stderr, "bench_hf_encode: out of memory\n");
    return 1;
  }
  for (size_t at = 0; at < n;) {
    const char *nl = memchr(text + at, '\n', n - at);
    size_t end = nl ? (size_t)(nl - text) : n;
    if (lines == capl) {
      capl *= 2;
      texts = realloc(texts, (size_t)capl * sizeof *texts);
      lens = realloc(lens, (size_t)capl * sizeof *lens);
      if (!texts || !lens) {
        fprintf(stderr, "bench_hf_encode: out of memory\n");
        return 1;
      }
    }
    texts[lines] = text + at, lens[lines] = end - at, lines++;
    at = end + 1;
  }
  int64_t *starts = malloc((size_t)(lines + 1) * sizeof *starts), *ids = NULL;
  if (!starts) return 1;
  double t0 = lt_monotonic_seconds();
  if (lt_tokenizer_encode_batch(tok, texts, lens, lines, LT_ENCODE_ADD_SPECIAL, &ids, starts) != LT_OK) {
    fprintf(stderr, "bench_hf_encode: %s\n", lt_last_error());
    return 1;
  }
  double dt = lt_monotonic_seconds() - t0;
  printf("%.6f %lld\n", dt, (long long)starts[lines]);
  free(ids), free(starts), free(texts), free(lens), free(text);
  lt_tokenizer_free(tok);
  return 0;
}
