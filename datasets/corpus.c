/*
 * datasets/corpus.c: text sources: a text file as one token stream (language
 * modelling), pairs of texts (a TSV parallel corpus), their train/validation
 * split by hash, and token-id pairs for seq2seq; writing
 * pairs back as TSV (so that generated task data can be reused with --tsv).
 *
 * Files are input from outside: they are read by text_file.c (regular files
 * only, at most LT_TEXT_MAX_BYTES), every bad line is reported with the
 * file name and line number, and nothing here can crash on any byte sequence.
 *
 * What this is not: a CSV parser (no quoting: a TSV field ends at the next tab
 * or line end) or a streaming reader (a corpus is read whole into memory).
 */
#include "datasets/datasets.h"
#include "tensor/error_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* A text file as tokens                                                    */
/* ======================================================================== */

lt_tensor *lt_text_file_tokens(const lt_tokenizer *tok, const char *path) {
  if (!tok) return lt__err_null("text_file_tokens", "tok"), NULL;
  char *text;
  size_t len;
  if (lt_text_file_read(path, &text, &len) != LT_OK) return NULL;
  if (len == 0) {
    free(text);
    return lt__err(LT_ERR_FORMAT, "text_file_tokens: %s is empty: no tokens", path), NULL;
  }
  lt_tensor *t = lt_tokenizer_encode_tensor(tok, text, len);
  free(text);
  return t;
}

/* ======================================================================== */
/* Text pairs                                                               */
/* ======================================================================== */

typedef struct {
  size_t src, src_len, tgt, tgt_len; /* offsets into blob */
} text_pair;

struct lt_text_pairs {
  char *blob; /* every string, each NUL-terminated */
  size_t nblob, capblob;
  text_pair *pairs;
  int64_t count, cap;
};

lt_text_pairs *lt_text_pairs_new(void) {
  lt_text_pairs *p = calloc(1, sizeof *p);
  if (!p) lt__err(LT_ERR_NOMEM, "text_pairs_new: out of memory");
  return p;
}

void lt_text_pairs_free(lt_text_pairs *p) {
  if (!p) return;
  free(p->blob);
  free(p->pairs);
  free(p);
}

int64_t lt_text_pairs_count(const lt_text_pairs *p) { return p ? p->count : 0; }

static bool blob_reserve(lt_text_pairs *p, size_t extra) {
  if (extra <= p->capblob - p->nblob) return true;
  if (p->nblob > SIZE_MAX - extra) return false;
  size_t need = p->nblob + extra, cap = p->capblob ? p->capblob : 256;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) return false;
    cap *= 2;
  }
  char *b = realloc(p->blob, cap);
  if (!b) return false;
  p->blob = b;
  p->capblob = cap;
  return true;
}

lt_status lt_text_pairs_add(lt_text_pairs *p, const char *src, size_t src_len, const char *tgt,
                            size_t tgt_len) {
  const char *op = "text_pairs_add";
  if (!p) return lt__err(LT_ERR_NULL, "%s: p is NULL", op);
  if ((!src && src_len) || (!tgt && tgt_len)) return lt__err(LT_ERR_NULL, "%s: src or tgt is NULL", op);
  if (src_len > SIZE_MAX / 4 || tgt_len > SIZE_MAX / 4)
    return lt__err(LT_ERR_OVERFLOW, "%s: strings of %zu and %zu bytes are too long", op, src_len, tgt_len);
  if (p->count == p->cap) {
    int64_t cap = p->cap ? p->cap * 2 : 64;
    text_pair *np = realloc(p->pairs, (size_t)cap * sizeof *np);
    if (!np) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    p->pairs = np;
    p->cap = cap;
  }
  if (!blob_reserve(p, src_len + tgt_len + 2)) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  text_pair tp = {p->nblob, src_len, p->nblob + src_len + 1, tgt_len};
  if (src_len) memcpy(p->blob + tp.src, src, src_len);
  p->blob[tp.src + src_len] = '\0';
  if (tgt_len) memcpy(p->blob + tp.tgt, tgt, tgt_len);
  p->blob[tp.tgt + tgt_len] = '\0';
  p->nblob += src_len + tgt_len + 2;
  p->pairs[p->count++] = tp;
  return LT_OK;
}

lt_status lt_text_pairs_get(const lt_text_pairs *p, int64_t i, const char **src, size_t *src_len,
                            const char **tgt, size_t *tgt_len) {
  if (!p) return lt__err(LT_ERR_NULL, "text_pairs_get: p is NULL");
  if (i < 0 || i >= p->count)
    return lt__err(LT_ERR_INDEX, "text_pairs_get: pair %lld is outside [0, %lld)", (long long)i,
                   (long long)p->count);
  const text_pair *tp = &p->pairs[i];
  if (src) *src = p->blob + tp->src;
  if (src_len) *src_len = tp->src_len;
  if (tgt) *tgt = p->blob + tp->tgt;
  if (tgt_len) *tgt_len = tp->tgt_len;
  return LT_OK;
}

lt_status lt_text_pairs_concat(const lt_text_pairs *p, char **text, size_t *len) {
  const char *op = "text_pairs_concat";
  if (!p) return lt__err(LT_ERR_NULL, "%s: p is NULL", op);
  if (!text || !len) return lt__err(LT_ERR_NULL, "%s: text and len must not be NULL", op);
  /* Each string plus '\n' is exactly its NUL-terminated size in the blob. */
  char *out = malloc(p->nblob + 1);
  if (!out) return lt__err(LT_ERR_NOMEM, "%s: out of memory for %zu bytes", op, p->nblob + 1);
  size_t n = 0;
  for (int64_t i = 0; i < p->count; i++) {
    const text_pair *tp = &p->pairs[i];
    memcpy(out + n, p->blob + tp->src, tp->src_len);
    n += tp->src_len;
    out[n++] = '\n';
    memcpy(out + n, p->blob + tp->tgt, tp->tgt_len);
    n += tp->tgt_len;
    out[n++] = '\n';
  }
  out[n] = '\0';
  *text = out;
  *len = n;
  return LT_OK;
}

/* ---- TSV ------------------------------------------------------------------ */

lt_text_pairs *lt_text_pairs_parse_tsv(const char *data, size_t len, const char *name,
                                       const lt_tsv_opts *opts, int64_t *n_skipped) {
  const char *op = "text_pairs_parse_tsv";
  if (!data && len) return lt__err(LT_ERR_NULL, "%s: data is NULL", op), NULL;
  if (!name) name = "<buffer>";
  bool skip = opts && opts->skip_bad_lines;
  lt_text_pairs *p = lt_text_pairs_new();
  if (!p) return NULL;
  int64_t skipped = 0, line = 0;
  size_t i = 0;
  if (len >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0) i = 3; /* UTF-8 byte-order mark */
  while (i < len) {
    line++;
    const char *s = data + i;
    const char *nl = memchr(s, '\n', len - i);
    size_t n = nl ? (size_t)(nl - s) : len - i;
    i += n + (nl ? 1 : 0);
    if (n > 0 && s[n - 1] == '\r') n--;
    if (n == 0) continue; /* blank line */
    const char *why = NULL;
    char detail[96] = "";
    const char *tab = memchr(s, '\t', n);
    size_t src_len = 0, tgt_len = 0, bad;
    const char *tgt = NULL;
    if (memchr(s, '\0', n)) {
      why = "contains a NUL byte";
    } else if (!tab) {
      why = "has no tab (expected source<TAB>target)";
    } else {
      src_len = (size_t)(tab - s);
      tgt = tab + 1;
      const char *tab2 = memchr(tgt, '\t', n - src_len - 1);
      tgt_len = tab2 ? (size_t)(tab2 - tgt) : n - src_len - 1;
      if (src_len == 0)
        why = "has an empty source";
      else if (tgt_len == 0)
        why = "has an empty target";
      else if (!lt_utf8_valid(s, src_len, &bad)) {
        snprintf(detail, sizeof detail, "has invalid UTF-8 in the source at byte %zu", bad);
        why = detail;
      } else if (!lt_utf8_valid(tgt, tgt_len, &bad)) {
        snprintf(detail, sizeof detail, "has invalid UTF-8 in the target at byte %zu", bad);
        why = detail;
      }
    }
    if (why) {
      if (skip) {
        skipped++;
        continue;
      }
      lt__err(LT_ERR_FORMAT, "%s: %s line %lld %s", op, name, (long long)line, why);
      lt_text_pairs_free(p);
      return NULL;
    }
    if (lt_text_pairs_add(p, s, src_len, tgt, tgt_len) != LT_OK) {
      lt_text_pairs_free(p);
      return NULL;
    }
  }
  if (p->count == 0) {
    if (len == 0)
      lt__err(LT_ERR_FORMAT, "%s: %s is empty: no examples", op, name);
    else
      lt__err(LT_ERR_FORMAT, "%s: %s has no examples (%lld lines, %lld of them bad)", op, name, (long long)line,
              (long long)skipped);
    lt_text_pairs_free(p);
    return NULL;
  }
  if (n_skipped) *n_skipped = skipped;
  return p;
}

lt_status lt_text_pairs_save_tsv(const lt_text_pairs *p, const char *path) {
  const char *op = "text_pairs_save_tsv";
  if (!p || !path) return lt__err(LT_ERR_NULL, "%s: %s is NULL", op, !p ? "p" : "path");
  for (int64_t i = 0; i < p->count; i++) { /* check everything before creating the file */
    const char *f[2];
    size_t n[2];
    lt_text_pairs_get(p, i, &f[0], &n[0], &f[1], &n[1]);
    for (int k = 0; k < 2; k++) {
      const char *side = k ? "target" : "source";
      if (n[k] == 0) return lt__err(LT_ERR_INVALID, "%s: pair %lld has an empty %s", op, (long long)i, side);
      if (strcspn(f[k], "\t\n\r") < n[k] || strlen(f[k]) != n[k])
        return lt__err(LT_ERR_INVALID, "%s: pair %lld's %s contains a tab, a line break or a NUL byte, which TSV "
                       "cannot hold", op, (long long)i, side);
    }
  }
  FILE *fp = fopen(path, "wb");
  if (!fp) return lt__err(LT_ERR_IO, "%s: cannot create '%s': %s", op, path, strerror(errno));
  bool ok = true;
  for (int64_t i = 0; i < p->count && ok; i++) {
    const char *src, *tgt;
    size_t ns, nt;
    lt_text_pairs_get(p, i, &src, &ns, &tgt, &nt);
    ok = fwrite(src, 1, ns, fp) == ns && fputc('\t', fp) != EOF && fwrite(tgt, 1, nt, fp) == nt &&
         fputc('\n', fp) != EOF;
  }
  int err = ok ? 0 : errno;
  if (fclose(fp) != 0 && ok) ok = false, err = errno;
  if (!ok) {
    remove(path);
    return lt__err(LT_ERR_IO, "%s: writing '%s': %s", op, path, strerror(err));
  }
  return LT_OK;
}

lt_text_pairs *lt_text_pairs_load_tsv(const char *path, const lt_tsv_opts *opts, int64_t *n_skipped) {
  char *data;
  size_t len;
  if (lt_text_file_read(path, &data, &len) != LT_OK) return NULL;
  lt_text_pairs *p = lt_text_pairs_parse_tsv(data, len, path, opts, n_skipped);
  free(data);
  return p;
}

/* ---- split by hash ------------------------------------------------------- */

/* u in [0, 1) from the source text: FNV-1a 64, then the splitmix64/murmur3
 * finaliser (FNV's low bits mix poorly), top 53 bits. */
static double split_u(const char *s, size_t len) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return (double)(h >> 11) * 0x1.0p-53;
}

bool lt_text_in_valid_split(const char *s, size_t len, double valid_fraction) {
  if (!s && len) return false;
  return split_u(s, len) < valid_fraction;
}

lt_status lt_text_pairs_split(const lt_text_pairs *p, double valid_fraction, lt_text_pairs **train,
                              lt_text_pairs **valid) {
  const char *op = "text_pairs_split";
  if (!p) return lt__err(LT_ERR_NULL, "%s: p is NULL", op);
  if (!train || !valid) return lt__err(LT_ERR_NULL, "%s: train and valid must not be NULL", op);
  if (!(valid_fraction >= 0.0 && valid_fraction <= 1.0))
    return lt__err(LT_ERR_INVALID, "%s: valid_fraction is %g, must be in [0, 1]", op, valid_fraction);
  lt_text_pairs *tr = lt_text_pairs_new(), *va = lt_text_pairs_new();
  lt_status st = tr && va ? LT_OK : LT_ERR_NOMEM;
  for (int64_t i = 0; i < p->count && st == LT_OK; i++) {
    const text_pair *tp = &p->pairs[i];
    lt_text_pairs *dst = lt_text_in_valid_split(p->blob + tp->src, tp->src_len, valid_fraction) ? va : tr;
    st = lt_text_pairs_add(dst, p->blob + tp->src, tp->src_len, p->blob + tp->tgt, tp->tgt_len);
  }
  if (st != LT_OK) {
    lt_text_pairs_free(tr);
    lt_text_pairs_free(va);
    return st;
  }
  *train = tr;
  *valid = va;
  return LT_OK;
}

/* ======================================================================== */
/* Token-id pairs                                                           */
/* ======================================================================== */

typedef struct {
  int64_t src, src_len, tgt, tgt_len; /* offsets into ids */
} seq_pair;

struct lt_seq_pairs {
  int64_t *ids;
  int64_t nids, capids;
  seq_pair *pairs;
  int64_t count, cap;
  lt_special_ids sp; /* <bos>, <eos>, <pad> of the batches (lt_seq2seq_collate) */
};

static const char *const overlong_names[] = {"error", "truncate", "skip"};

const char *lt_overlong_name(lt_overlong policy) { return lt_enum_name(overlong_names, 3, (int)policy); }

LT_ENUM_PARSER(lt_overlong_parse, lt_overlong, "overlong policy", overlong_names, 3, NULL, 0)

lt_seq_pairs *lt_seq_pairs_new(void) {
  lt_seq_pairs *p = calloc(1, sizeof *p);
  if (!p) return lt__err(LT_ERR_NOMEM, "seq_pairs_new: out of memory"), NULL;
  p->sp = lt_tokenizer_special_ids(NULL);
  return p;
}

lt_status lt_seq_pairs_set_special_ids(lt_seq_pairs *p, lt_special_ids sp) {
  if (!p) return lt__err(LT_ERR_NULL, "seq_pairs_set_special_ids: p is NULL");
  if (sp.bos < 0 || sp.eos < 0 || sp.pad < 0)
    return lt__err(LT_ERR_INVALID, "seq_pairs_set_special_ids: bos %lld, eos %lld, pad %lld: each must be an id >= 0 "
                   "(the target tokenizer has no start, end or padding token)", (long long)sp.bos, (long long)sp.eos,
                   (long long)sp.pad);
  p->sp = sp;
  return LT_OK;
}

lt_special_ids lt_seq_pairs_special_ids(const lt_seq_pairs *p) { return p ? p->sp : lt_tokenizer_special_ids(NULL); }

void lt_seq_pairs_free(lt_seq_pairs *p) {
  if (!p) return;
  free(p->ids);
  free(p->pairs);
  free(p);
}

int64_t lt_seq_pairs_count(const lt_seq_pairs *p) { return p ? p->count : 0; }

lt_status lt_seq_pairs_add(lt_seq_pairs *p, const int64_t *src, int64_t src_len, const int64_t *tgt,
                           int64_t tgt_len) {
  const char *op = "seq_pairs_add";
  if (!p) return lt__err(LT_ERR_NULL, "%s: p is NULL", op);
  if (src_len < 1 || tgt_len < 0)
    return lt__err(LT_ERR_INVALID, "%s: source length %lld (must be >= 1), target length %lld (>= 0)", op,
                   (long long)src_len, (long long)tgt_len);
  if (!src || (!tgt && tgt_len)) return lt__err(LT_ERR_NULL, "%s: src or tgt is NULL", op);
  if (src_len > INT64_MAX / 32 || tgt_len > INT64_MAX / 32 || p->nids > INT64_MAX / 4)
    return lt__err(LT_ERR_OVERFLOW, "%s: sequences too long", op);
  for (int64_t i = 0; i < src_len; i++)
    if (src[i] < 0) return lt__err(LT_ERR_INVALID, "%s: source id %lld at %lld is negative", op, (long long)src[i], (long long)i);
  for (int64_t i = 0; i < tgt_len; i++)
    if (tgt[i] < 0) return lt__err(LT_ERR_INVALID, "%s: target id %lld at %lld is negative", op, (long long)tgt[i], (long long)i);
  if (p->count == p->cap) {
    int64_t cap = p->cap ? p->cap * 2 : 64;
    seq_pair *np = realloc(p->pairs, (size_t)cap * sizeof *np);
    if (!np) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    p->pairs = np;
    p->cap = cap;
  }
  int64_t need = p->nids + src_len + tgt_len;
  if (need > p->capids) {
    int64_t cap = p->capids ? p->capids : 1024;
    while (cap < need) cap *= 2;
    if ((uint64_t)cap > SIZE_MAX / sizeof(int64_t)) return lt__err(LT_ERR_OVERFLOW, "%s: too many ids", op);
    int64_t *ni = realloc(p->ids, (size_t)cap * sizeof *ni);
    if (!ni) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    p->ids = ni;
    p->capids = cap;
  }
  seq_pair sp = {p->nids, src_len, p->nids + src_len, tgt_len};
  memcpy(p->ids + sp.src, src, (size_t)src_len * sizeof *src);
  if (tgt_len) memcpy(p->ids + sp.tgt, tgt, (size_t)tgt_len * sizeof *tgt);
  p->nids = need;
  p->pairs[p->count++] = sp;
  return LT_OK;
}

lt_status lt_seq_pairs_get(const lt_seq_pairs *p, int64_t i, const int64_t **src, int64_t *src_len,
                           const int64_t **tgt, int64_t *tgt_len) {
  if (!p) return lt__err(LT_ERR_NULL, "seq_pairs_get: p is NULL");
  if (i < 0 || i >= p->count)
    return lt__err(LT_ERR_INDEX, "seq_pairs_get: example %lld is outside [0, %lld)", (long long)i,
                   (long long)p->count);
  const seq_pair *sp = &p->pairs[i];
  if (src) *src = p->ids + sp->src;
  if (src_len) *src_len = sp->src_len;
  if (tgt) *tgt = p->ids + sp->tgt;
  if (tgt_len) *tgt_len = sp->tgt_len;
  return LT_OK;
}

lt_seq_pairs *lt_seq_pairs_encode(const lt_text_pairs *text, const lt_tokenizer *src_tok,
                                  const lt_tokenizer *tgt_tok, const lt_seq_opts *opts, int64_t *n_affected) {
  const char *op = "seq_pairs_encode";
  if (!text) return lt__err(LT_ERR_NULL, "%s: text is NULL", op), NULL;
  if (!src_tok) return lt__err_null(op, "src_tok"), NULL;
  if (!tgt_tok) return lt__err_null(op, "tgt_tok"), NULL;
  lt_seq_opts o = opts ? *opts : (lt_seq_opts){0, 0, LT_OVERLONG_ERROR};
  if (o.max_src_len < 0 || o.max_tgt_len < 0 || o.max_tgt_len == 1)
    return lt__err(LT_ERR_INVALID, "%s: max_src_len %lld, max_tgt_len %lld: must be 0 (no limit) or >= 1 (>= 2 for the target)",
                   op, (long long)o.max_src_len, (long long)o.max_tgt_len), NULL;
  if (o.overlong != LT_OVERLONG_ERROR && o.overlong != LT_OVERLONG_TRUNCATE && o.overlong != LT_OVERLONG_SKIP)
    return lt__err(LT_ERR_INVALID, "%s: unknown overlong policy %d", op, (int)o.overlong), NULL;
  lt_seq_pairs *p = lt_seq_pairs_new();
  if (!p) return NULL;
  if (lt_seq_pairs_set_special_ids(p, lt_tokenizer_special_ids(tgt_tok)) != LT_OK) {
    lt__err(LT_ERR_INVALID, "%s: the target tokenizer (%s) has no <bos>/<eos>/<pad> of any usual name", op,
            lt_tokenizer_kind_name(lt_tokenizer_get_kind(tgt_tok)));
    lt_seq_pairs_free(p);
    return NULL;
  }
  int64_t affected = 0;
  for (int64_t i = 0; i < text->count; i++) {
    const text_pair *tp = &text->pairs[i];
    int64_t *s = NULL, *t = NULL, ns = 0, nt = 0;
    if (lt_tokenizer_encode(src_tok, text->blob + tp->src, tp->src_len, &s, &ns) != LT_OK ||
        lt_tokenizer_encode(tgt_tok, text->blob + tp->tgt, tp->tgt_len, &t, &nt) != LT_OK) {
      /* Keep the tokenizer's message, adding which example it was. */
      char msg[512];
      snprintf(msg, sizeof msg, "%s", lt_last_error());
      lt__err(lt_last_status(), "%s: example %lld: %s", op, (long long)i, msg);
      free(s);
      lt_seq_pairs_free(p);
      return NULL;
    }
    if (ns == 0) { /* an empty source cannot be attended to */
      lt__err(LT_ERR_INVALID, "%s: example %lld has an empty source", op, (long long)i);
      free(s);
      free(t);
      lt_seq_pairs_free(p);
      return NULL;
    }
    bool src_long = o.max_src_len && ns > o.max_src_len;
    bool tgt_long = o.max_tgt_len && nt + 1 > o.max_tgt_len;
    bool add = true;
    if (src_long || tgt_long) {
      if (o.overlong == LT_OVERLONG_ERROR) {
        lt__err(LT_ERR_INVALID,
                "%s: example %lld has %lld source tokens (max_src_len %lld) and %lld target tokens + 1 (max_tgt_len %lld): too long",
                op, (long long)i, (long long)ns, (long long)o.max_src_len, (long long)nt,
                (long long)o.max_tgt_len);
        free(s);
        free(t);
        lt_seq_pairs_free(p);
        return NULL;
      }
      affected++;
      if (o.overlong == LT_OVERLONG_SKIP) {
        add = false;
      } else {
        if (src_long) ns = o.max_src_len;
        if (tgt_long) nt = o.max_tgt_len - 1;
      }
    }
    lt_status st = add ? lt_seq_pairs_add(p, s, ns, t, nt) : LT_OK;
    free(s);
    free(t);
    if (st != LT_OK) {
      lt_seq_pairs_free(p);
      return NULL;
    }
  }
  if (p->count == 0) {
    lt__err(LT_ERR_INVALID, "%s: no example left out of %lld (%lld too long)", op, (long long)text->count,
            (long long)affected);
    lt_seq_pairs_free(p);
    return NULL;
  }
  if (n_affected) *n_affected = affected;
  return p;
}
