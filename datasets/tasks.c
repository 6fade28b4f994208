/*
 * datasets/tasks.c: built-in seq2seq tasks generated from a seed, so that the
 * default Transformer run needs no download: copy, reverse, sort, numbers
 * written out in words, and dates rewritten between formats.
 *
 * Randomness comes from splitmix64 (Steele, Lea, Flood 2014; the seeding
 * generator of xoshiro), integer-only, so every platform makes the same
 * examples. Train and validation are separated by a hash of the split key
 * (lt_text_in_valid_split): an example is drawn, kept if its key falls in the
 * requested split, and dropped otherwise, so the two splits can never share a
 * key whatever the seeds.
 *
 * What this is not: a benchmark suite with fixed files. Examples may repeat
 * within a split (sampling with replacement); lengths are the caller's choice.
 */
#include "datasets/datasets.h"
#include "tensor/error_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t sm_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform in [0, n), n >= 1, exactly unbiased (rejection of the short tail). */
static uint64_t sm_below(uint64_t *s, uint64_t n) {
  uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
  for (;;) {
    uint64_t r = sm_next(s);
    if (r >= threshold) return r % n;
  }
}

static const char *const task_names[LT_TASK_COUNT] = {"copy", "reverse", "sort", "number_words", "date",
                                                      "date_normalize"};

const char *lt_task_name(lt_task_kind kind) { return lt_enum_name(task_names, LT_TASK_COUNT, (int)kind); }

LT_ENUM_PARSER(lt_task_parse, lt_task_kind, "task", task_names, LT_TASK_COUNT, NULL, 0)

/* ---- numbers in words ---------------------------------------------------- */

static const char *const ones[20] = {"zero",    "one",     "two",       "three",    "four",
                                     "five",    "six",     "seven",     "eight",    "nine",
                                     "ten",     "eleven",  "twelve",    "thirteen", "fourteen",
                                     "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
static const char *const tens[10] = {"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
                                     "ninety"};
static const char *const scales[5] = {"", "thousand", "million", "billion", "trillion"};

#define NUMBER_LIMIT 1000000000000000LL /* 10^15 */

typedef struct {
  char *p;
  size_t n, size;
  bool overflow;
} strbuf;

static void sb_word(strbuf *b, const char *w) {
  size_t k = strlen(w), sep = b->n ? 1 : 0;
  if (b->n + sep + k + 1 > b->size) {
    b->overflow = true;
    return;
  }
  if (sep) b->p[b->n++] = ' ';
  memcpy(b->p + b->n, w, k);
  b->n += k;
  b->p[b->n] = '\0';
}

lt_status lt_number_to_words(int64_t n, char *buf, size_t size) {
  if (!buf || size == 0) return lt__err(LT_ERR_NULL, "number_to_words: buf is NULL or empty");
  if (n < 0 || n >= NUMBER_LIMIT)
    return lt__err(LT_ERR_INVALID, "number_to_words: %lld is outside [0, 10^15)", (long long)n);
  strbuf b = {buf, 0, size, false};
  buf[0] = '\0';
  if (n == 0) sb_word(&b, ones[0]);
  for (int g = 4; g >= 0; g--) {
    int64_t unit = 1;
    for (int k = 0; k < g; k++) unit *= 1000;
    int v = (int)((n / unit) % 1000);
    if (v == 0) continue;
    if (v >= 100) {
      sb_word(&b, ones[v / 100]);
      sb_word(&b, "hundred");
    }
    int r = v % 100;
    if (r >= 20) {
      sb_word(&b, tens[r / 10]);
      if (r % 10) sb_word(&b, ones[r % 10]);
    } else if (r > 0) {
      sb_word(&b, ones[r]);
    }
    if (g > 0) sb_word(&b, scales[g]);
  }
  if (b.overflow) {
    buf[0] = '\0';
    return lt__err(LT_ERR_INVALID, "number_to_words: a buffer of %zu bytes is too small for %lld", size,
                   (long long)n);
  }
  return LT_OK;
}

/* ---- dates --------------------------------------------------------------- */

static const char *const month_names[12] = {"January", "February", "March",     "April",   "May",      "June",
                                            "July",    "August",   "September", "October", "November", "December"};

/* Days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant,
 * "chrono-Compatible Low-Level Date Algorithms"). */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  *d = (int)(doy - (153 * mp + 2) / 5 + 1);
  *m = (int)(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

/* ---- one example ----------------------------------------------------------- */

static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";

static int cmp_char(const void *a, const void *b) {
  return (int)*(const unsigned char *)a - (int)*(const unsigned char *)b;
}

/* Draws one example into src / tgt (NUL-terminated, each of 256 bytes, enough
 * for every task: symbol tasks cap max_len at 200) and says which of the two
 * is the split key. */
static void make_example(const lt_task_opts *o, uint64_t *rng, char *src, char *tgt, const char **key) {
  *key = src;
  switch (o->kind) {
    case LT_TASK_COPY:
    case LT_TASK_REVERSE:
    case LT_TASK_SORT: {
      int64_t len = o->min_len + (int64_t)sm_below(rng, (uint64_t)(o->max_len - o->min_len + 1));
      for (int64_t i = 0; i < len; i++) src[i] = alphabet[sm_below(rng, (uint64_t)o->num_symbols)];
      src[len] = '\0';
      for (int64_t i = 0; i < len; i++) tgt[i] = o->kind == LT_TASK_REVERSE ? src[len - 1 - i] : src[i];
      tgt[len] = '\0';
      if (o->kind == LT_TASK_SORT) qsort(tgt, (size_t)len, 1, cmp_char);
      break;
    }
    case LT_TASK_NUMBER_WORDS: {
      int64_t digits = o->min_len + (int64_t)sm_below(rng, (uint64_t)(o->max_len - o->min_len + 1));
      int64_t lo = 1;
      for (int64_t k = 1; k < digits; k++) lo *= 10;
      int64_t hi = lo * 10; /* [lo, hi): numbers with exactly `digits` digits */
      if (digits == 1) lo = 0;
      int64_t n = lo + (int64_t)sm_below(rng, (uint64_t)(hi - lo));
      snprintf(src, 256, "%lld", (long long)n);
      lt_status st = lt_number_to_words(n, tgt, 256);
      LT_CHECK(st == LT_OK);
      break;
    }
    case LT_TASK_DATE:
    case LT_TASK_DATE_NORMALIZE: {
      int64_t d0 = days_from_civil(1900, 1, 1), d1 = days_from_civil(2099, 12, 31);
      int64_t y;
      int m, d;
      civil_from_days(d0 + (int64_t)sm_below(rng, (uint64_t)(d1 - d0 + 1)), &y, &m, &d);
      if (o->kind == LT_TASK_DATE) {
        snprintf(src, 256, "%04lld-%02d-%02d", (long long)y, m, d);
        snprintf(tgt, 256, "%d %s %lld", d, month_names[m - 1], (long long)y);
        break;
      }
      switch (sm_below(rng, 4)) {
        case 0: snprintf(src, 256, "%s %d, %lld", month_names[m - 1], d, (long long)y); break;
        case 1: snprintf(src, 256, "%02d/%02d/%lld", d, m, (long long)y); break;
        case 2: snprintf(src, 256, "%d %.3s %lld", d, month_names[m - 1], (long long)y); break;
        default: snprintf(src, 256, "%04lld-%02d-%02d", (long long)y, m, d); break;
      }
      snprintf(tgt, 256, "%04lld-%02d-%02d", (long long)y, m, d);
      *key = tgt; /* hold out whole dates, whatever the format */
      break;
    }
    default:
      LT_CHECK(0);
  }
}

#define MAX_SYMBOL_LEN 200

lt_text_pairs *lt_task_generate(const lt_task_opts *opts, lt_task_split split) {
  const char *op = "task_generate";
  if (!opts) return lt__err(LT_ERR_NULL, "%s: opts is NULL", op), NULL;
  lt_task_opts o = *opts;
  if ((int)o.kind < 0 || o.kind >= LT_TASK_COUNT)
    return lt__err(LT_ERR_INVALID, "%s: unknown task kind %d", op, (int)o.kind), NULL;
  const char *name = task_names[o.kind];
  if (split != LT_SPLIT_TRAIN && split != LT_SPLIT_VALID)
    return lt__err(LT_ERR_INVALID, "%s (%s): unknown split %d", op, name, (int)split), NULL;
  if (o.num_examples < 1 || o.num_examples > ((int64_t)1 << 32))
    return lt__err(LT_ERR_INVALID, "%s (%s): num_examples is %lld, must be in [1, 2^32]", op, name,
                   (long long)o.num_examples), NULL;
  if (!(o.valid_fraction > 0.0 && o.valid_fraction < 1.0))
    return lt__err(LT_ERR_INVALID, "%s (%s): valid_fraction is %g, must be in (0, 1)", op, name,
                   o.valid_fraction), NULL;
  if (o.kind <= LT_TASK_SORT) {
    if (o.num_symbols < 2 || o.num_symbols > 36)
      return lt__err(LT_ERR_INVALID, "%s (%s): num_symbols is %d, must be in [2, 36]", op, name, o.num_symbols),
             NULL;
    if (o.min_len < 1 || o.max_len < o.min_len || o.max_len > MAX_SYMBOL_LEN)
      return lt__err(LT_ERR_INVALID, "%s (%s): lengths [%lld, %lld]: need 1 <= min_len <= max_len <= %d", op, name,
                     (long long)o.min_len, (long long)o.max_len, MAX_SYMBOL_LEN), NULL;
  } else if (o.kind == LT_TASK_NUMBER_WORDS) {
    if (o.min_len < 1 || o.max_len < o.min_len || o.max_len > 15)
      return lt__err(LT_ERR_INVALID, "%s (%s): digit counts [%lld, %lld]: need 1 <= min_len <= max_len <= 15", op,
                     name, (long long)o.min_len, (long long)o.max_len), NULL;
  }
  lt_text_pairs *p = lt_text_pairs_new();
  if (!p) return NULL;
  bool want_valid = split == LT_SPLIT_VALID;
  double share = want_valid ? o.valid_fraction : 1.0 - o.valid_fraction;
  double limit_d = 20.0 / share * (double)o.num_examples + 100000.0;
  int64_t limit = limit_d > 9e18 ? INT64_MAX : (int64_t)limit_d;
  uint64_t rng = o.seed;
  char src[256], tgt[256];
  int64_t draws = 0;
  while (lt_text_pairs_count(p) < o.num_examples) {
    if (draws++ >= limit) {
      lt__err(LT_ERR_STATE,
              "%s (%s): only %lld of %lld %s examples after %lld draws: the task's source space is too small "
              "for valid_fraction %g (raise max_len or num_symbols)",
              op, name, (long long)lt_text_pairs_count(p), (long long)o.num_examples,
              want_valid ? "validation" : "training", (long long)limit, o.valid_fraction);
      lt_text_pairs_free(p);
      return NULL;
    }
    const char *key;
    make_example(&o, &rng, src, tgt, &key);
    if (lt_text_in_valid_split(key, strlen(key), o.valid_fraction) != want_valid) continue;
    if (lt_text_pairs_add(p, src, strlen(src), tgt, strlen(tgt)) != LT_OK) {
      lt_text_pairs_free(p);
      return NULL;
    }
  }
  return p;
}
