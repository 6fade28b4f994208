/*
 * datasets/hf_text.c: the containers and helpers of the Hugging Face
 * tokenizer (hf_tokenizer_internal.h): text with alignment, splits, token and
 * string lists, a byte-string -> id map, Unicode properties from libutf8proc,
 * JSON field readers whose errors name the field, PCRE2 compilation.
 *
 * What this is not: a Unicode database. Categories, case and normalization
 * come from libutf8proc; the only list written here is Unicode's White_Space
 * property (25 code points, fixed since Unicode 6.3), which libutf8proc does
 * not expose.
 */
#include "datasets/hf_tokenizer_internal.h"
#include "datasets/utf8_internal.h"
#include "tensor/error_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

bool lt__hf_grow(void *pp, size_t *cap, size_t need, size_t sz) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap : 16;
  while (c < need) {
    if (c > SIZE_MAX / 2) return false;
    c *= 2;
  }
  if (c > SIZE_MAX / sz) return false;
  void *p;
  memcpy(&p, pp, sizeof p);
  void *q = realloc(p, c * sz);
  if (!q) return false;
  memcpy(pp, &q, sizeof q);
  *cap = c;
  return true;
}

/* ---- text with alignment ---------------------------------------------------- */

void lt__ntext_free(lt__ntext *t) {
  free(t->s);
  free(t->os);
  free(t->oe);
  memset(t, 0, sizeof *t);
}

static bool nt_reserve(lt__ntext *t, size_t extra) {
  if (extra > SIZE_MAX / (4 * sizeof(size_t)) - t->n - 1) return false;
  size_t need = t->n + extra + 1; /* and the NUL */
  if (need <= t->cap) return true;
  size_t c = t->cap ? t->cap : 16;
  while (c < need) c *= 2;
  char *s = realloc(t->s, c);
  if (!s) return false;
  t->s = s;
  size_t *a = realloc(t->os, c * sizeof *a);
  if (!a) return false;
  t->os = a;
  size_t *b = realloc(t->oe, c * sizeof *b);
  if (!b) return false;
  t->oe = b;
  t->cap = c;
  return true;
}

bool lt__ntext_put(lt__ntext *t, const char *b, size_t k, size_t os, size_t oe) {
  if (!nt_reserve(t, k)) return false;
  for (size_t i = 0; i < k; i++) {
    t->s[t->n + i] = b[i];
    t->os[t->n + i] = os;
    t->oe[t->n + i] = oe;
  }
  t->n += k;
  t->s[t->n] = '\0';
  return true;
}

bool lt__ntext_put_cp(lt__ntext *t, uint32_t cp, size_t os, size_t oe) {
  char u[4];
  return lt__ntext_put(t, u, (size_t)lt__utf8_encode(cp, u), os, oe);
}

bool lt__ntext_put_range(lt__ntext *t, const lt__ntext *src, size_t a, size_t b) {
  size_t k = b - a;
  if (!nt_reserve(t, k)) return false;
  if (k == 0) return true;
  memcpy(t->s + t->n, src->s + a, k);
  memcpy(t->os + t->n, src->os + a, k * sizeof(size_t));
  memcpy(t->oe + t->n, src->oe + a, k * sizeof(size_t));
  t->n += k;
  t->s[t->n] = '\0';
  return true;
}

uint32_t lt__ntext_cp(const lt__ntext *t, size_t i, int *len) {
  uint32_t cp = 0xFFFD;
  int k = lt__utf8_decode((const unsigned char *)t->s, t->n, i, &cp);
  LT_CHECK(k > 0); /* every ntext is valid UTF-8 */
  *len = k;
  return cp;
}

/* Length of the maximal subpart of an ill-formed sequence at s[i] (Unicode
 * 15, 3.9 "U+FFFD Substitution of Maximal Subparts"; what Python's
 * errors="replace" does): a lead byte and the continuation bytes that could
 * still belong to it, at least 1. */
static size_t bad_len(const unsigned char *s, size_t n, size_t i) {
  unsigned c = s[i];
  int len;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 1;
  size_t k = 1;
  for (; k < (size_t)len && i + k < n; k++) {
    unsigned b = s[i + k];
    if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) break;
  }
  return k;
}

bool lt__ntext_from_raw(lt__ntext *t, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  if (!nt_reserve(t, n)) return false;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k = lt__utf8_decode(u, n, i, &cp);
    if (k > 0) {
      if (!lt__ntext_put(t, s + i, (size_t)k, i, i + (size_t)k)) return false;
      i += (size_t)k;
    } else {
      size_t b = bad_len(u, n, i);
      if (!lt__ntext_put(t, "\xEF\xBF\xBD", 3, i, i + b)) return false;
      i += b;
    }
  }
  return true;
}

/* ---- tokens, splits, strings ---------------------------------------------------- */

bool lt__tokens_push(lt__tokens *t, int64_t id, int64_t start, int64_t end) {
  if (!lt__hf_grow(&t->v, &t->cap, t->n + 1, sizeof *t->v)) return false;
  t->v[t->n++] = (lt__token){id, start, end, -1, -1};
  return true;
}

void lt__splits_free(lt__splits *s) {
  for (size_t i = 0; i < s->n; i++) lt__ntext_free(&s->v[i].t);
  free(s->v);
  memset(s, 0, sizeof *s);
}

bool lt__splits_push_take(lt__splits *s, lt__ntext *t, int64_t added_id) {
  if (!lt__hf_grow(&s->v, &s->cap, s->n + 1, sizeof *s->v)) return false;
  s->v[s->n].t = *t;
  s->v[s->n].added_id = added_id;
  s->n++;
  memset(t, 0, sizeof *t);
  return true;
}

bool lt__splits_push_range(lt__splits *s, const lt__ntext *src, size_t a, size_t b, int64_t added_id) {
  lt__ntext t = {0};
  if (!lt__ntext_put_range(&t, src, a, b) || !lt__splits_push_take(s, &t, added_id)) {
    lt__ntext_free(&t);
    return false;
  }
  return true;
}

void lt__strs_free(lt__strs *l) {
  for (size_t i = 0; i < l->count; i++) free(l->s[i]);
  free(l->s);
  free(l->n);
  memset(l, 0, sizeof *l);
}

bool lt__strs_push_take(lt__strs *l, char *owned, size_t n) {
  size_t c1 = l->cap, c2 = l->cap;
  if (!lt__hf_grow(&l->s, &c1, l->count + 1, sizeof(char *)) ||
      !lt__hf_grow(&l->n, &c2, l->count + 1, sizeof(size_t))) {
    free(owned);
    return false;
  }
  l->cap = c1 < c2 ? c1 : c2;
  l->s[l->count] = owned;
  l->n[l->count++] = n;
  return true;
}

bool lt__strs_push(lt__strs *l, const char *s, size_t n) {
  char *c = lt__hf_strdup(s, n);
  return c && lt__strs_push_take(l, c, n);
}

const char *lt__hf_memmem(const char *hay, size_t nh, const char *needle, size_t nn) {
  if (nn == 0 || nn > nh) return NULL;
  for (const char *p = hay, *end = hay + (nh - nn); p <= end;) {
    const char *q = memchr(p, needle[0], (size_t)(end - p) + 1);
    if (!q) return NULL;
    if (memcmp(q, needle, nn) == 0) return q;
    p = q + 1;
  }
  return NULL;
}

char *lt__hf_strdup(const char *s, size_t n) {
  char *c = malloc(n + 1);
  if (!c) return NULL;
  if (n) memcpy(c, s, n);
  c[n] = '\0';
  return c;
}

/* ---- the string map -------------------------------------------------------------- */

static uint64_t str_hash(const char *k, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ULL;
  h ^= h >> 29;
  return h;
}

void lt__strmap_free(lt__strmap *m) {
  free(m->blob);
  free(m->koff);
  free(m->klen);
  free(m->val);
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static size_t sm_find(const lt__strmap *m, const char *k, size_t n) {
  size_t mask = m->nslots - 1, i = (size_t)str_hash(k, n) & mask;
  for (;;) {
    size_t e = m->slots[i];
    if (!e) return i;
    e--;
    if (m->klen[e] == n && memcmp(m->blob + m->koff[e], k, n) == 0) return i;
    i = (i + 1) & mask;
  }
}

static bool sm_rehash(lt__strmap *m, size_t nslots) {
  size_t *ns = calloc(nslots, sizeof *ns);
  if (!ns) return false;
  free(m->slots);
  m->slots = ns;
  m->nslots = nslots;
  for (size_t e = 0; e < m->count; e++) m->slots[sm_find(m, m->blob + m->koff[e], m->klen[e])] = e + 1;
  return true;
}

bool lt__strmap_set(lt__strmap *m, const char *k, size_t n, int64_t v, bool *replaced) {
  *replaced = false;
  if ((m->count + 1) * 2 > m->nslots && !sm_rehash(m, m->nslots ? m->nslots * 2 : 64)) return false;
  size_t i = sm_find(m, k, n);
  if (m->slots[i]) {
    m->val[m->slots[i] - 1] = v;
    *replaced = true;
    return true;
  }
  if (m->nblob > SIZE_MAX - n) return false;
  size_t c0 = m->capblob, c1 = m->capent, c2 = m->capent, c3 = m->capent;
  if (!lt__hf_grow(&m->blob, &c0, m->nblob + n + 1, 1)) return false;
  m->capblob = c0;
  if (!lt__hf_grow(&m->koff, &c1, m->count + 1, sizeof(size_t)) ||
      !lt__hf_grow(&m->klen, &c2, m->count + 1, sizeof(size_t)) ||
      !lt__hf_grow(&m->val, &c3, m->count + 1, sizeof(int64_t)))
    return false;
  m->capent = c1 < c2 ? (c1 < c3 ? c1 : c3) : (c2 < c3 ? c2 : c3);
  if (n) memcpy(m->blob + m->nblob, k, n);
  m->blob[m->nblob + n] = '\0';
  m->koff[m->count] = m->nblob;
  m->klen[m->count] = n;
  m->val[m->count] = v;
  m->nblob += n + 1;
  m->slots[i] = ++m->count;
  return true;
}

int64_t lt__strmap_get(const lt__strmap *m, const char *k, size_t n) {
  if (!m->nslots) return -1;
  size_t i = sm_find(m, k, n);
  return m->slots[i] ? m->val[m->slots[i] - 1] : -1;
}

/* ---- the byte trie ---------------------------------------------------------------- */

static bool trie_node(lt__trie *t, int64_t *out) {
  if (!lt__hf_grow(&t->val, &t->cap, t->n + 1, sizeof(int64_t))) return false;
  t->val[t->n] = -1;
  *out = (int64_t)t->n++;
  return true;
}

bool lt__trie_init(lt__trie *t, size_t hint) {
  memset(t, 0, sizeof *t);
  int64_t root;
  if (!lt__pm_init(&t->edges, hint + 16) || !trie_node(t, &root)) {
    lt__trie_free(t);
    return false;
  }
  return true;
}

void lt__trie_free(lt__trie *t) {
  lt__pm_free(&t->edges);
  free(t->val);
  memset(t, 0, sizeof *t);
}

bool lt__trie_add(lt__trie *t, const char *s, size_t n, int64_t v) {
  int64_t node = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t key = ((uint64_t)node << 8) | (unsigned char)s[i];
    int64_t child;
    if (!lt__pm_get(&t->edges, key, &child)) {
      bool found;
      if (!trie_node(t, &child) || !lt__pm_insert(&t->edges, key, child, &found, &child)) return false;
    }
    node = child;
  }
  if (t->val[node] < 0) t->val[node] = v;
  return true;
}

/* ---- Unicode ------------------------------------------------------------------ */

bool lt__uc_is_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

static utf8proc_category_t cat(uint32_t c) { return utf8proc_category((utf8proc_int32_t)c); }

bool lt__uc_is_other(uint32_t c) {
  utf8proc_category_t k = cat(c);
  /* Not Cn: the library's category tables (unicode_categories) leave
   * unassigned code points out of is_other, so BertNormalizer keeps them. */
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO ||
         k == UTF8PROC_CATEGORY_CS;
}

bool lt__uc_is_punct(uint32_t c) {
  utf8proc_category_t k = cat(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool lt__uc_is_bert_punct(uint32_t c) {
  bool ascii = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return ascii || lt__uc_is_punct(c);
}

bool lt__uc_is_mn(uint32_t c) { return cat(c) == UTF8PROC_CATEGORY_MN; }

bool lt__uc_is_numeric(uint32_t c) {
  utf8proc_category_t k = cat(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

static bool is_letter(uint32_t c) {
  utf8proc_category_t k = cat(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

bool lt__uc_is_alnum(uint32_t c) { return is_letter(c) || lt__uc_is_numeric(c); }

bool lt__uc_is_word(uint32_t c) {
  utf8proc_category_t k = cat(c);
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '_';
  return is_letter(c) || k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME ||
         k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC ||
         c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
         (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189); /* Other_Alphabetic symbols */
}

bool lt__uc_lower(lt__ntext *out, uint32_t c, size_t os, size_t oe) {
  if (c == 0x0130) /* the one unconditional multi-character lowercase (SpecialCasing.txt) */
    return lt__ntext_put(out, "i\xCC\x87", 3, os, oe);
  return lt__ntext_put_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)c), os, oe);
}

/* ---- JSON fields ------------------------------------------------------------------ */

static const char *jtype(json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
  }
}

lt_status lt__hf_str_opt(json_t *obj, const char *where, const char *key, const char **out, size_t *len) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return LT_OK;
  if (!json_is_string(v))
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.%s is %s, must be a string", where, key, jtype(v));
  *out = json_string_value(v);
  if (len) *len = json_string_length(v);
  return LT_OK;
}

lt_status lt__hf_str(json_t *obj, const char *where, const char *key, const char **out, size_t *len) {
  json_t *v = json_object_get(obj, key);
  if (!v) return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s has no field \"%s\"", where, key);
  if (!json_is_string(v))
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.%s is %s, must be a string", where, key, jtype(v));
  *out = json_string_value(v);
  if (len) *len = json_string_length(v);
  return LT_OK;
}

lt_status lt__hf_bool_opt(json_t *obj, const char *where, const char *key, bool *out) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return LT_OK;
  if (!json_is_boolean(v))
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.%s is %s, must be true or false", where, key, jtype(v));
  *out = json_is_true(v);
  return LT_OK;
}

lt_status lt__hf_int_opt(json_t *obj, const char *where, const char *key, int64_t lo, int64_t hi, int64_t *out) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return LT_OK;
  if (!json_is_integer(v))
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.%s is %s, must be an integer", where, key, jtype(v));
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.%s is %lld, must be in [%lld, %lld]", where, key,
                   (long long)x, (long long)lo, (long long)hi);
  *out = (int64_t)x;
  return LT_OK;
}

lt_status lt__hf_type(json_t *obj, const char *where, const char **type) {
  if (!json_is_object(obj))
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s is %s, must be an object with a \"type\"", where, jtype(obj));
  return lt__hf_str(obj, where, "type", type, NULL);
}

lt_status lt__hf_known_keys(json_t *obj, const char *where, const char *type, const char *const *known) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    bool ok = strcmp(key, "type") == 0;
    for (const char *const *k = known; *k && !ok; k++) ok = strcmp(key, *k) == 0;
    if (!ok)
      return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s (%s) has the field \"%s\", which this reader does not support",
                     where, type, key);
  }
  return LT_OK;
}

/* Oniguruma's \w (the tokenizers library's regex engine) is Letter, Mark,
 * Decimal_Number, Connector_Punctuation, Letter_Number, the circled and
 * squared letters (Other_Alphabetic symbols) and, below U+0100, the numbers
 * superscript 1-3 and the vulgar fractions (measured against tokenizers
 * 0.23.3); PCRE2 10.42's Unicode \w is letters, numbers and _. So \w and \W are spelled out as those classes (\W inside a class is
 * left as it is). Returns new (free with free()), or NULL. */
#define WORD_CLASS "\\p{L}\\p{M}\\p{Nd}\\p{Pc}\\p{Nl}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}\\x{24B6}-\\x{24E9}" \
  "\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}"
static char *onig_to_pcre2(const char *p, size_t n, size_t *out_n) {
  const size_t grow = sizeof "[^" WORD_CLASS "]"; /* the most one escape of two bytes becomes */
  if (n > SIZE_MAX / grow - 1) return NULL;
  size_t cap = n * grow + 1, k = 0;
  char *o = malloc(cap);
  if (!o) return NULL;
  bool in_class = false;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c == '\\' && i + 1 < n) {
      char d = p[++i];
      if (d == 'w') {
        const char *r = in_class ? WORD_CLASS : "[" WORD_CLASS "]";
        memcpy(o + k, r, strlen(r)), k += strlen(r);
      } else if (d == 'W' && !in_class) {
        const char *r = "[^" WORD_CLASS "]";
        memcpy(o + k, r, strlen(r)), k += strlen(r);
      } else {
        o[k++] = c, o[k++] = d;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      o[k++] = c;
      if (i + 1 < n && p[i + 1] == '^') o[k++] = p[++i];
      if (i + 1 < n && p[i + 1] == ']') o[k++] = p[++i]; /* a leading ] is literal */
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    o[k++] = c;
  }
  o[k] = '\0';
  *out_n = k;
  return o;
}

pcre2_code *lt__hf_regex(const char *pattern, size_t n, const char *where) {
  int err;
  PCRE2_SIZE off;
  size_t tn;
  char *t = onig_to_pcre2(pattern, n, &tn);
  if (!t) return lt__err(LT_ERR_NOMEM, "tokenizer.json: %s: out of memory", where), NULL;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)t, tn, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
  free(t);
  if (!re) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(err, msg, sizeof msg);
    lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: the regex does not compile at offset %zu: %s", where, (size_t)off,
            (const char *)msg);
    return NULL;
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter when JIT is unavailable */
  return re;
}
