/*
 * datasets/hf_normalizers.c: the normalizers of tokenizer.json
 * (tokenizers/src/normalizers): BertNormalizer, Lowercase, StripAccents,
 * NFC/NFD/NFKC/NFKD (libutf8proc), Strip, Replace (a string or a regex, PCRE2),
 * Prepend, Sequence. Each rewrites the text and keeps its alignment to the
 * original bytes.
 *
 * Unicode normalization follows the library's algorithm step for step (see
 * "Unicode normal forms" below), with libutf8proc's character data less the
 * code points the library's tables do not know, so the text and its alignment
 * are the library's.
 *
 * What this is not: Precompiled (SentencePiece's charsmap), Nmt or ByteLevel
 * normalizers; those are refused at load.
 */
#include "datasets/hf_tokenizer_internal.h"
#include "tensor/error_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

enum { N_BERT, N_LOWER, N_STRIP_ACCENTS, N_NFC, N_NFD, N_NFKC, N_NFKD, N_STRIP, N_REPLACE, N_PREPEND, N_SEQ };

struct lt__hf_norm {
  int type;
  bool clean_text, chinese, strip_accents, lowercase; /* BertNormalizer */
  bool left, right;                                    /* Strip */
  char *a, *b;                                         /* Replace: pattern (string), content; Prepend: a */
  size_t na, nb;
  pcre2_code *re;                                      /* Replace with a regex */
  lt__hf_norm **kids;
  size_t nkids;
};

void lt__hf_norm_free(lt__hf_norm *n) {
  if (!n) return;
  for (size_t i = 0; i < n->nkids; i++) lt__hf_norm_free(n->kids[i]);
  free(n->kids);
  free(n->a);
  free(n->b);
  if (n->re) pcre2_code_free(n->re);
  free(n);
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

lt__hf_norm *lt__hf_norm_parse(json_t *j, const char *where, int depth) {
  const char *type;
  if (depth > LT__HF_MAX_DEPTH)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: Sequence nested deeper than %d", where, LT__HF_MAX_DEPTH), NULL;
  if (lt__hf_type(j, where, &type) != LT_OK) return NULL;
  lt__hf_norm *n = calloc(1, sizeof *n);
  if (!n) return lt__err(LT_ERR_NOMEM, "tokenizer.json: %s: out of memory", where), NULL;
  lt_status st = LT_OK;
  if (strcmp(type, "BertNormalizer") == 0) {
    n->type = N_BERT;
    n->clean_text = n->chinese = n->lowercase = true;
    bool strip_set = false;
    st = lt__hf_known_keys(j, where, type, KEYS("clean_text", "handle_chinese_chars", "strip_accents", "lowercase"));
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "clean_text", &n->clean_text);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "handle_chinese_chars", &n->chinese);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "lowercase", &n->lowercase);
    json_t *sa = json_object_get(j, "strip_accents");
    if (st == LT_OK && sa && !json_is_null(sa)) {
      st = lt__hf_bool_opt(j, where, "strip_accents", &n->strip_accents);
      strip_set = true;
    }
    if (!strip_set) n->strip_accents = n->lowercase; /* null follows lowercase */
  } else if (strcmp(type, "Lowercase") == 0 || strcmp(type, "StripAccents") == 0 || strcmp(type, "NFC") == 0 ||
             strcmp(type, "NFD") == 0 || strcmp(type, "NFKC") == 0 || strcmp(type, "NFKD") == 0) {
    n->type = type[0] == 'L' ? N_LOWER : type[0] == 'S' ? N_STRIP_ACCENTS
              : strcmp(type, "NFC") == 0 ? N_NFC : strcmp(type, "NFD") == 0 ? N_NFD
              : strcmp(type, "NFKC") == 0 ? N_NFKC : N_NFKD;
    st = lt__hf_known_keys(j, where, type, KEYS("type"));
  } else if (strcmp(type, "Strip") == 0) {
    n->type = N_STRIP;
    n->left = n->right = true;
    st = lt__hf_known_keys(j, where, type, KEYS("strip_left", "strip_right"));
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "strip_left", &n->left);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "strip_right", &n->right);
  } else if (strcmp(type, "Prepend") == 0) {
    n->type = N_PREPEND;
    const char *p;
    size_t np = 0;
    st = lt__hf_known_keys(j, where, type, KEYS("prepend"));
    if (st == LT_OK) st = lt__hf_str(j, where, "prepend", &p, &np);
    if (st == LT_OK && !(n->a = lt__hf_strdup(p, np))) st = lt__err(LT_ERR_NOMEM, "out of memory");
    n->na = np;
  } else if (strcmp(type, "Replace") == 0) {
    n->type = N_REPLACE;
    const char *c = NULL, *p = NULL;
    size_t nc = 0, np = 0;
    st = lt__hf_known_keys(j, where, type, KEYS("pattern", "content"));
    if (st == LT_OK) st = lt__hf_str(j, where, "content", &c, &nc);
    json_t *pat = json_object_get(j, "pattern");
    char w[256];
    snprintf(w, sizeof w, "%s.pattern", where);
    if (st == LT_OK && (!json_is_object(pat) || json_object_size(pat) != 1))
      st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s must be {\"String\": s} or {\"Regex\": r}", w);
    if (st == LT_OK) {
      if (json_object_get(pat, "String")) {
        st = lt__hf_str(pat, w, "String", &p, &np);
        if (st == LT_OK && np == 0) st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.String is empty", w);
        if (st == LT_OK && !(n->a = lt__hf_strdup(p, np))) st = lt__err(LT_ERR_NOMEM, "out of memory");
        n->na = np;
      } else if (json_object_get(pat, "Regex")) {
        st = lt__hf_str(pat, w, "Regex", &p, &np);
        if (st == LT_OK && !(n->re = lt__hf_regex(p, np, w))) st = lt_last_status();
      } else {
        st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s must be {\"String\": s} or {\"Regex\": r}", w);
      }
    }
    if (st == LT_OK && !(n->b = lt__hf_strdup(c, nc))) st = lt__err(LT_ERR_NOMEM, "out of memory");
    n->nb = nc;
  } else if (strcmp(type, "Sequence") == 0) {
    n->type = N_SEQ;
    json_t *arr = json_object_get(j, "normalizers");
    st = lt__hf_known_keys(j, where, type, KEYS("normalizers"));
    if (st == LT_OK && !json_is_array(arr))
      st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.normalizers must be an array", where);
    if (st == LT_OK) {
      n->kids = calloc(json_array_size(arr) + 1, sizeof *n->kids);
      if (!n->kids) st = lt__err(LT_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; st == LT_OK && i < json_array_size(arr); i++) {
      char w[256];
      snprintf(w, sizeof w, "%s.normalizers[%zu]", where, i);
      if (!(n->kids[i] = lt__hf_norm_parse(json_array_get(arr, i), w, depth + 1))) st = lt_last_status();
      else n->nkids++;
    }
  } else {
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: the normalizer \"%s\" is not supported (supported: BertNormalizer, "
                 "Lowercase, StripAccents, NFC, NFD, NFKC, NFKD, Strip, Replace, Prepend, Sequence)", where, type);
  }
  if (st != LT_OK) {
    lt__hf_norm_free(n);
    return NULL;
  }
  return n;
}

/* ---- applying ------------------------------------------------------------------ */

static bool is_chinese(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static void swap_in(lt__ntext *t, lt__ntext *out) {
  lt__ntext_free(t);
  *t = *out;
}

static lt_status oom(void) { return lt__err(LT_ERR_NOMEM, "tokenizer: out of memory while normalizing"); }

/* ---- Unicode normal forms ----------------------------------------------------
 * The library's algorithm (unicode-normalization-alignments, decompose.rs and
 * recompose.rs, and NormalizedString::transform), step for step, so that the
 * alignment comes out as the library's: every character of the output carries
 * a change, 0 for the first character of an input character's decomposition
 * and 1 for the others; marks are reordered (a stable sort by combining class
 * of each run of non-starters) with their changes; a composition of k and ch
 * carries k's change + ch's change - 1. Then, in output order, a character of
 * change <= 0 takes the range of the next unconsumed input character and
 * consumes it and -change more; one of change 1 takes the range of the last
 * byte consumed. So a reordered mark keeps the range of the input position it
 * lands on, not of itself: the library aligns by position. The character data
 * (decompositions, combining classes, compositions) is libutf8proc's, less the
 * code points the library's tables do not know (lt__uc_norm_known). */
typedef struct {
  uint32_t c;
  int64_t change;
  int ccc;
  size_t seq; /* position before sorting: keeps the sort stable */
} nf_char;

static int nf_ccc(uint32_t c) {
  return lt__uc_norm_known(c) ? utf8proc_get_property((utf8proc_int32_t)c)->combining_class : 0;
}

static int nf_cmp(const void *x, const void *y) {
  const nf_char *a = x, *b = y;
  if (a->ccc != b->ccc) return a->ccc < b->ccc ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* The primary composite of a and b, or 0 (compose() of the library's crate). */
static uint32_t nf_compose(uint32_t a, uint32_t b) {
  if (!lt__uc_norm_known(a) || !lt__uc_norm_known(b)) return 0;
  utf8proc_int32_t buf[2] = {(utf8proc_int32_t)a, (utf8proc_int32_t)b};
  utf8proc_ssize_t n = utf8proc_normalize_utf32(buf, 2, (utf8proc_option_t)(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
  if (n != 1 || !lt__uc_norm_known((uint32_t)buf[0])) return 0;
  return (uint32_t)buf[0];
}

static bool nf_push(nf_char **v, size_t *n, size_t *cap, uint32_t c, int64_t change, int ccc) {
  if (!lt__hf_grow(v, cap, *n + 1, sizeof **v)) return false;
  (*v)[*n] = (nf_char){c, change, ccc, *n};
  (*n)++;
  return true;
}

/* Decomposes t (canonically, or with compat), reordered: new array in *out. */
static lt_status nf_decompose(const lt__ntext *t, bool compat, nf_char **out, size_t *nout) {
  nf_char *v = NULL;
  size_t n = 0, cap = 0;
  utf8proc_option_t opts = (utf8proc_option_t)(UTF8PROC_DECOMPOSE | UTF8PROC_STABLE | (compat ? UTF8PROC_COMPAT : 0));
  for (size_t i = 0; i < t->n;) {
    int k;
    uint32_t c = lt__ntext_cp(t, i, &k);
    i += (size_t)k;
    utf8proc_int32_t d[32]; /* the longest decomposition is 18 code points */
    utf8proc_ssize_t nd = 1;
    d[0] = (utf8proc_int32_t)c;
    if (lt__uc_norm_known(c)) {
      int bound = 0;
      nd = utf8proc_decompose_char((utf8proc_int32_t)c, d, 32, opts, &bound);
      if (nd < 1 || nd > 32) {
        free(v);
        return lt__err(LT_ERR_FORMAT, "tokenizer: normalization failed on U+%04X", (unsigned)c);
      }
    }
    for (utf8proc_ssize_t q = 0; q < nd; q++)
      if (!nf_push(&v, &n, &cap, (uint32_t)d[q], q == 0 ? 0 : 1, nf_ccc((uint32_t)d[q]))) {
        free(v);
        return oom();
      }
  }
  for (size_t i = 0; i < n;) { /* each run of non-starters, sorted by class, stably */
    if (v[i].ccc == 0) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < n && v[j].ccc != 0) j++;
    if (j - i > 1) qsort(v + i, j - i, sizeof *v, nf_cmp);
    i = j;
  }
  *out = v;
  *nout = n;
  return LT_OK;
}

/* Recomposes v[0..n) in place (recompose.rs's state machine); *n shrinks. */
static bool nf_recompose(nf_char *v, size_t *n) {
  nf_char *blocked = malloc((*n ? *n : 1) * sizeof *blocked);
  if (!blocked) return false;
  size_t w = 0, nb = 0;
  bool have = false;
  int last_ccc = -1; /* -1: none */
  nf_char k = {0};
#define EMIT(x) (v[w++] = (x))
  for (size_t r = 0; r < *n; r++) {
    nf_char ch = v[r];
    if (!have) {
      if (ch.ccc != 0) {
        EMIT(ch);
        continue;
      }
      k = ch, have = true;
      continue;
    }
    if (last_ccc < 0 || last_ccc < ch.ccc) {
      uint32_t comp = nf_compose(k.c, ch.c);
      if (comp) {
        k.c = comp, k.change = k.change + ch.change - 1;
        continue;
      }
      if (last_ccc < 0 && ch.ccc == 0) {
        EMIT(k);
        k = ch;
        continue;
      }
      blocked[nb++] = ch;
      last_ccc = ch.ccc;
      continue;
    }
    /* ch is blocked from k */
    if (ch.ccc == 0) {
      EMIT(k);
      for (size_t b = 0; b < nb; b++) EMIT(blocked[b]);
      nb = 0, last_ccc = -1;
      k = ch;
      continue;
    }
    blocked[nb++] = ch;
    last_ccc = ch.ccc;
  }
  if (have) EMIT(k);
  for (size_t b = 0; b < nb; b++) EMIT(blocked[b]);
#undef EMIT
  free(blocked);
  *n = w;
  return true;
}

/* Unicode normal form of t: NFD/NFKD (compose false), NFC/NFKC. */
static lt_status unicode_nf(lt__ntext *t, bool compat, bool compose) {
  if (t->n == 0) return LT_OK;
  nf_char *v = NULL;
  size_t n = 0;
  lt_status st = nf_decompose(t, compat, &v, &n);
  if (st != LT_OK) return st;
  if (compose && !nf_recompose(v, &n)) {
    free(v);
    return oom();
  }
  /* NormalizedString::transform: each output character's range. */
  lt__ntext out = {0};
  bool ok = true;
  size_t at = 0; /* the next unconsumed byte of t */
  for (size_t i = 0; ok && i < n; i++) {
    size_t os, oe;
    if (v[i].change > 0) {
      os = at ? t->os[at - 1] : t->os[0];
      oe = at ? t->oe[at - 1] : t->os[0];
    } else {
      LT_CHECK(at < t->n); /* the changes never consume more than the text */
      os = t->os[at], oe = t->oe[at];
      for (int64_t m = 0; m <= -v[i].change && at < t->n; m++) {
        int k;
        lt__ntext_cp(t, at, &k);
        at += (size_t)k;
      }
    }
    ok = lt__ntext_put_cp(&out, v[i].c, os, oe);
  }
  free(v);
  if (!ok) {
    lt__ntext_free(&out);
    return oom();
  }
  swap_in(t, &out);
  return LT_OK;
}

/* Replacing every match of the pattern with n->b. */
static lt_status replace(const lt__hf_norm *n, lt__ntext *t) {
  lt__ntext out = {0};
  size_t i = 0;
  bool ok = true;
  pcre2_match_data *md = n->re ? pcre2_match_data_create_from_pattern(n->re, NULL) : NULL;
  if (n->re && !md) return oom();
  while (ok && i <= t->n) {
    size_t ms, me;
    if (n->re) {
      int rc = pcre2_match(n->re, (PCRE2_SPTR)t->s, t->n, i, PCRE2_NO_UTF_CHECK, md, NULL);
      if (rc < 0) break;
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
      ms = ov[0], me = ov[1];
    } else {
      const char *p = n->na <= t->n - i ? lt__hf_memmem(t->s + i, t->n - i, n->a, n->na) : NULL;
      if (!p) break;
      ms = (size_t)(p - t->s), me = ms + n->na;
    }
    ok = lt__ntext_put_range(&out, t, i, ms);
    /* The content takes the alignment of the last byte replaced (of the byte
     * before an empty match; (0, 0) at the start), as NormalizedString::replace. */
    if (me > ms) {
      ok = ok && lt__ntext_put(&out, n->b, n->nb, t->os[me - 1], t->oe[me - 1]);
      i = me;
    } else { /* an empty match: the content goes in, the next character is kept */
      ok = ok && lt__ntext_put(&out, n->b, n->nb, ms ? t->os[ms - 1] : 0, ms ? t->oe[ms - 1] : 0);
      if (ms >= t->n) {
        i = t->n + 1;
        break;
      }
      int k;
      lt__ntext_cp(t, ms, &k);
      ok = ok && lt__ntext_put_range(&out, t, ms, ms + (size_t)k);
      i = ms + (size_t)k;
    }
  }
  if (i < t->n) ok = ok && lt__ntext_put_range(&out, t, i, t->n);
  if (md) pcre2_match_data_free(md);
  if (!ok) {
    lt__ntext_free(&out);
    return oom();
  }
  swap_in(t, &out);
  return LT_OK;
}

lt_status lt__hf_norm_apply(const lt__hf_norm *n, lt__ntext *t) {
  lt__ntext out = {0};
  bool ok = true;
  switch (n->type) {
    case N_SEQ:
      for (size_t i = 0; i < n->nkids; i++) {
        lt_status st = lt__hf_norm_apply(n->kids[i], t);
        if (st != LT_OK) return st;
      }
      return LT_OK;
    case N_NFC: return unicode_nf(t, false, true);
    case N_NFD: return unicode_nf(t, false, false);
    case N_NFKC: return unicode_nf(t, true, true);
    case N_NFKD: return unicode_nf(t, true, false);
    case N_REPLACE: return replace(n, t);
    case N_BERT: {
      if (n->clean_text || n->chinese) {
        for (size_t i = 0, nx = 0; i < t->n; i = nx) {
          int k;
          uint32_t c = lt__ntext_cp(t, i, &k);
          nx = i + (size_t)k;
          size_t os = t->os[i], oe = t->oe[i];
          if (n->clean_text && (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && lt__uc_is_other(c))))
            continue;
          if (n->clean_text && lt__uc_is_whitespace(c)) c = ' ';
          if (n->chinese && is_chinese(c))
            ok = ok && lt__ntext_put(&out, " ", 1, os, oe) && lt__ntext_put_cp(&out, c, os, oe) &&
                 lt__ntext_put(&out, " ", 1, os, oe);
          else if (c == ' ')
            ok = ok && lt__ntext_put(&out, " ", 1, os, oe);
          else
            ok = ok && lt__ntext_put_range(&out, t, i, i + (size_t)k);
        }
        if (!ok) break;
        swap_in(t, &out);
        memset(&out, 0, sizeof out);
      }
      if (n->strip_accents) {
        lt_status st = unicode_nf(t, false, false);
        if (st != LT_OK) return st;
        for (size_t i = 0, nx = 0; i < t->n; i = nx) {
          int k;
          uint32_t c = lt__ntext_cp(t, i, &k);
          nx = i + (size_t)k;
          if (!lt__uc_is_mn(c)) ok = ok && lt__ntext_put_range(&out, t, i, i + (size_t)k);
        }
        if (!ok) break;
        swap_in(t, &out);
        memset(&out, 0, sizeof out);
      }
      if (n->lowercase) {
        for (size_t i = 0, nx = 0; i < t->n; i = nx) {
          int k;
          uint32_t c = lt__ntext_cp(t, i, &k);
          nx = i + (size_t)k; ok = ok && lt__uc_lower(&out, c, t->os[i], t->oe[i]); }
        if (!ok) break;
        swap_in(t, &out);
      }
      return LT_OK;
    }
    case N_LOWER:
      for (size_t i = 0, nx = 0; i < t->n; i = nx) {
          int k;
          uint32_t c = lt__ntext_cp(t, i, &k);
          nx = i + (size_t)k; ok = ok && lt__uc_lower(&out, c, t->os[i], t->oe[i]); }
      break;
    case N_STRIP_ACCENTS:
      for (size_t i = 0, nx = 0; i < t->n; i = nx) {
          int k;
          uint32_t c = lt__ntext_cp(t, i, &k);
          nx = i + (size_t)k;
        if (!lt__uc_is_mark(c)) ok = ok && lt__ntext_put_range(&out, t, i, i + (size_t)k);
      }
      break;
    case N_STRIP: {
      size_t a = 0, b = t->n;
      int k;
      while (n->left && a < b && lt__uc_is_whitespace(lt__ntext_cp(t, a, &k))) a += (size_t)k;
      while (n->right && b > a) {
        size_t p = b - 1;
        while (p > a && ((unsigned char)t->s[p] & 0xC0) == 0x80) p--;
        if (!lt__uc_is_whitespace(lt__ntext_cp(t, p, &k))) break;
        b = p;
      }
      ok = lt__ntext_put_range(&out, t, a, b);
      break;
    }
    case N_PREPEND:
      if (t->n == 0) return LT_OK; /* tokenizers prepends nothing to an empty text */
      ok = lt__ntext_put(&out, n->a, n->na, t->os[0], t->oe[0]) && lt__ntext_put_range(&out, t, 0, t->n);
      break;
    default:
      LT_CHECK(0);
  }
  if (!ok) {
    lt__ntext_free(&out);
    return oom();
  }
  swap_in(t, &out);
  return LT_OK;
}
