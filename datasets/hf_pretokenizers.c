/*
 * datasets/hf_pretokenizers.c: the pre-tokenizers of tokenizer.json
 * (tokenizers/src/pre_tokenizers): ByteLevel (GPT-2's regex, add_prefix_space,
 * use_regex, the byte alphabet), Split (a string or a regex, the five
 * behaviours, invert), Metaspace, Whitespace, WhitespaceSplit,
 * BertPreTokenizer, Punctuation, Digits, Sequence.
 *
 * Every pre-tokenizer cuts each split into pieces the way
 * NormalizedString::split does: the text is covered by matches and the gaps
 * between them, then the behaviour decides what is kept, merged or removed,
 * and empty pieces are dropped. Regexes run on PCRE2 with its JIT; after an
 * empty match the search resumes one character later, as Oniguruma's does.
 *
 * What this is not: UnicodeScripts, CharDelimiterSplit, FixedLength or a
 * Metaspace without its replacement; those are refused at load.
 */
#include "datasets/hf_tokenizer_internal.h"
#include "tensor/error_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P_BYTELEVEL, P_SPLIT, P_METASPACE, P_WHITESPACE, P_WSSPLIT, P_BERT, P_PUNCT, P_DIGITS, P_SEQ };
enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

/* GPT-2's pre-tokenizer regex (tokenizers/src/pre_tokenizers/byte_level.rs). */
static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct lt__hf_pre {
  int type;
  int behavior;
  bool invert, add_prefix_space, use_regex, individual_digits, split;
  int prepend;
  pcre2_code *re;      /* Split (regex), ByteLevel (use_regex) */
  char *str;           /* Split with a String pattern; Metaspace's replacement (UTF-8) */
  size_t nstr;
  uint32_t repl;       /* Metaspace's replacement character */
  lt__hf_pre **kids;
  size_t nkids;
};

void lt__hf_pre_free(lt__hf_pre *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nkids; i++) lt__hf_pre_free(p->kids[i]);
  free(p->kids);
  if (p->re) pcre2_code_free(p->re);
  free(p->str);
  free(p);
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

static lt_status parse_behavior(json_t *j, const char *where, int *out) {
  const char *b = NULL;
  lt_status st = lt__hf_str_opt(j, where, "behavior", &b, NULL);
  if (st != LT_OK || !b) return st;
  static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  for (int i = 0; i < 5; i++)
    if (strcmp(b, names[i]) == 0) return *out = i, LT_OK;
  return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.behavior is \"%s\": not one of Removed, Isolated, "
                 "MergedWithPrevious, MergedWithNext, Contiguous", where, b);
}

lt__hf_pre *lt__hf_pre_parse(json_t *j, const char *where, int depth) {
  const char *type;
  if (depth > LT__HF_MAX_DEPTH)
    return lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: Sequence nested deeper than %d", where, LT__HF_MAX_DEPTH), NULL;
  if (lt__hf_type(j, where, &type) != LT_OK) return NULL;
  lt__hf_pre *p = calloc(1, sizeof *p);
  if (!p) return lt__err(LT_ERR_NOMEM, "tokenizer.json: %s: out of memory", where), NULL;
  lt_status st = LT_OK;
  if (strcmp(type, "ByteLevel") == 0) {
    p->type = P_BYTELEVEL;
    p->add_prefix_space = true;
    p->use_regex = true;
    bool trim = true;
    st = lt__hf_known_keys(j, where, type, KEYS("add_prefix_space", "trim_offsets", "use_regex"));
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "add_prefix_space", &p->add_prefix_space);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "use_regex", &p->use_regex);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "trim_offsets", &trim); /* used by the post-processor only */
    if (st == LT_OK && p->use_regex && !(p->re = lt__hf_regex(GPT2_RE, sizeof GPT2_RE - 1, where)))
      st = lt_last_status();
  } else if (strcmp(type, "Split") == 0) {
    p->type = P_SPLIT;
    p->behavior = B_REMOVED;
    st = lt__hf_known_keys(j, where, type, KEYS("pattern", "behavior", "invert"));
    if (st == LT_OK) st = parse_behavior(j, where, &p->behavior);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "invert", &p->invert);
    if (st == LT_OK && !json_object_get(j, "behavior"))
      st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s has no field \"behavior\"", where);
    json_t *pat = json_object_get(j, "pattern");
    char w[256];
    snprintf(w, sizeof w, "%s.pattern", where);
    const char *s;
    size_t n;
    if (st == LT_OK && (!json_is_object(pat) || json_object_size(pat) != 1))
      st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s must be {\"String\": s} or {\"Regex\": r}", w);
    if (st == LT_OK) {
      if (json_object_get(pat, "String")) {
        st = lt__hf_str(pat, w, "String", &s, &n);
        if (st == LT_OK && !(p->str = lt__hf_strdup(s, n))) st = lt__err(LT_ERR_NOMEM, "out of memory");
        p->nstr = n;
      } else if (json_object_get(pat, "Regex")) {
        st = lt__hf_str(pat, w, "Regex", &s, &n);
        if (st == LT_OK && !(p->re = lt__hf_regex(s, n, w))) st = lt_last_status();
      } else {
        st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s must be {\"String\": s} or {\"Regex\": r}", w);
      }
    }
  } else if (strcmp(type, "Metaspace") == 0) {
    p->type = P_METASPACE;
    p->split = true;
    p->prepend = PREPEND_ALWAYS;
    const char *r = NULL, *scheme = NULL;
    size_t nr = 0;
    bool aps = true, aps_set = json_object_get(j, "add_prefix_space") != NULL;
    st = lt__hf_known_keys(j, where, type, KEYS("replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"));
    if (st == LT_OK) st = lt__hf_str(j, where, "replacement", &r, &nr);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "split", &p->split);
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "add_prefix_space", &aps);
    if (st == LT_OK) st = lt__hf_str_opt(j, where, "prepend_scheme", &scheme, NULL);
    if (st == LT_OK) {
      lt__ntext t = {0};
      int k = 0;
      if (!lt__ntext_from_raw(&t, r, nr)) st = lt__err(LT_ERR_NOMEM, "out of memory");
      else if (t.n == 0 || (p->repl = lt__ntext_cp(&t, 0, &k), (size_t)k != t.n))
        st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.replacement must be one character", where);
      lt__ntext_free(&t);
      if (st == LT_OK && !(p->str = lt__hf_strdup(r, nr))) st = lt__err(LT_ERR_NOMEM, "out of memory");
      p->nstr = nr;
    }
    if (st == LT_OK && scheme) {
      if (strcmp(scheme, "always") == 0) p->prepend = PREPEND_ALWAYS;
      else if (strcmp(scheme, "first") == 0) p->prepend = PREPEND_FIRST;
      else if (strcmp(scheme, "never") == 0) p->prepend = PREPEND_NEVER;
      else st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.prepend_scheme is \"%s\": not always, first or never",
                        where, scheme);
    } else if (st == LT_OK && aps_set) {
      p->prepend = aps ? PREPEND_ALWAYS : PREPEND_NEVER;
    }
  } else if (strcmp(type, "Whitespace") == 0 || strcmp(type, "WhitespaceSplit") == 0 ||
             strcmp(type, "BertPreTokenizer") == 0) {
    p->type = type[0] == 'B' ? P_BERT : strcmp(type, "Whitespace") == 0 ? P_WHITESPACE : P_WSSPLIT;
    st = lt__hf_known_keys(j, where, type, KEYS("type"));
  } else if (strcmp(type, "Punctuation") == 0) {
    p->type = P_PUNCT;
    p->behavior = B_ISOLATED;
    st = lt__hf_known_keys(j, where, type, KEYS("behavior"));
    if (st == LT_OK) st = parse_behavior(j, where, &p->behavior);
  } else if (strcmp(type, "Digits") == 0) {
    p->type = P_DIGITS;
    st = lt__hf_known_keys(j, where, type, KEYS("individual_digits"));
    if (st == LT_OK) st = lt__hf_bool_opt(j, where, "individual_digits", &p->individual_digits);
  } else if (strcmp(type, "Sequence") == 0) {
    p->type = P_SEQ;
    json_t *arr = json_object_get(j, "pretokenizers");
    st = lt__hf_known_keys(j, where, type, KEYS("pretokenizers"));
    if (st == LT_OK && !json_is_array(arr))
      st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s.pretokenizers must be an array", where);
    if (st == LT_OK && !(p->kids = calloc(json_array_size(arr) + 1, sizeof *p->kids)))
      st = lt__err(LT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LT_OK && i < json_array_size(arr); i++) {
      char w[256];
      snprintf(w, sizeof w, "%s.pretokenizers[%zu]", where, i);
      if (!(p->kids[i] = lt__hf_pre_parse(json_array_get(arr, i), w, depth + 1))) st = lt_last_status();
      else p->nkids++;
    }
  } else {
    st = lt__err(LT_ERR_FORMAT, "tokenizer.json: %s: the pre-tokenizer \"%s\" is not supported (supported: ByteLevel, "
                 "Split, Metaspace, Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation, Digits, Sequence)",
                 where, type);
  }
  if (st != LT_OK) {
    lt__hf_pre_free(p);
    return NULL;
  }
  return p;
}

/* ---- matching ---------------------------------------------------------------- */

typedef struct {
  size_t a, b;
  bool m;
} span;

typedef struct {
  span *v;
  size_t n, cap;
} spans;

static bool sp_push(spans *s, size_t a, size_t b, bool m) {
  if (!lt__hf_grow(&s->v, &s->cap, s->n + 1, sizeof *s->v)) return false;
  s->v[s->n++] = (span){a, b, m};
  return true;
}

typedef bool (*char_pred)(uint32_t c);

static bool is_ws(uint32_t c) { return lt__uc_is_whitespace(c); }

/* Matches of a per-character predicate: each matching character alone, the
 * runs between them as gaps. */
static bool find_pred(const lt__ntext *t, char_pred f, uint32_t only, spans *out) {
  size_t last = 0;
  for (size_t i = 0; i < t->n;) {
    int k;
    uint32_t c = lt__ntext_cp(t, i, &k);
    if (f ? f(c) : c == only) {
      if (last < i && !sp_push(out, last, i, false)) return false;
      if (!sp_push(out, i, i + (size_t)k, true)) return false;
      last = i + (size_t)k;
    }
    i += (size_t)k;
  }
  return last >= t->n || sp_push(out, last, t->n, false);
}

/* Matches of a regex (re) or of a literal string: find_iter, gaps between. */
static lt_status find_re(const lt__ntext *t, const pcre2_code *re, const char *lit, size_t nlit, spans *out) {
  size_t prev = 0, at = 0;
  pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
  if (re && !md) return lt__err(LT_ERR_NOMEM, "tokenizer: out of memory");
  lt_status st = LT_OK;
  while (at <= t->n) {
    size_t ms, me;
    if (re) {
      int rc = pcre2_match(re, (PCRE2_SPTR)t->s, t->n, at, PCRE2_NO_UTF_CHECK, md, NULL);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(rc, msg, sizeof msg);
        st = lt__err(LT_ERR_INVALID, "tokenizer: regex match failed: %s", (const char *)msg);
        break;
      }
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
      ms = ov[0], me = ov[1];
    } else {
      const char *p = nlit && nlit <= t->n - at ? lt__hf_memmem(t->s + at, t->n - at, lit, nlit) : NULL;
      if (!p) break;
      ms = (size_t)(p - t->s), me = ms + nlit;
    }
    if (prev != ms && !sp_push(out, prev, ms, false)) goto nomem;
    if (!sp_push(out, ms, me, true)) goto nomem;
    prev = me;
    if (me > ms) {
      at = me;
    } else { /* an empty match: go on one character later */
      if (me >= t->n) break;
      int k;
      lt__ntext_cp(t, me, &k);
      at = me + (size_t)k;
    }
  }
  if (md) pcre2_match_data_free(md);
  if (st == LT_OK && prev != t->n && !sp_push(out, prev, t->n, false)) return lt__err(LT_ERR_NOMEM, "tokenizer: out of memory");
  return st;
nomem:
  if (md) pcre2_match_data_free(md);
  return lt__err(LT_ERR_NOMEM, "tokenizer: out of memory");
}

/* Whitespace's \w+|[^\w\s]+ kept, everything else removed. */
static bool find_whitespace(const lt__ntext *t, spans *out) {
  for (size_t i = 0; i < t->n;) {
    int k;
    uint32_t c = lt__ntext_cp(t, i, &k);
    if (lt__uc_is_whitespace(c)) {
      i += (size_t)k;
      continue;
    }
    bool word = lt__uc_is_word(c);
    size_t j = i + (size_t)k;
    while (j < t->n) {
      uint32_t d = lt__ntext_cp(t, j, &k);
      if (word ? !lt__uc_is_word(d) : (lt__uc_is_word(d) || lt__uc_is_whitespace(d))) break;
      j += (size_t)k;
    }
    if (!sp_push(out, i, j, false)) return false;
    i = j;
  }
  return true;
}

/* The behaviour over the matches (NormalizedString::split); out gets kept spans (m = false). */
static bool apply_behavior(const spans *in, int behavior, spans *out) {
  bool prev = false;
  switch (behavior) {
    case B_ISOLATED:
      for (size_t i = 0; i < in->n; i++)
        if (!sp_push(out, in->v[i].a, in->v[i].b, false)) return false;
      return true;
    case B_REMOVED:
      for (size_t i = 0; i < in->n; i++)
        if (!in->v[i].m && !sp_push(out, in->v[i].a, in->v[i].b, false)) return false;
      return true;
    case B_CONTIGUOUS:
      for (size_t i = 0; i < in->n; i++) {
        if (in->v[i].m == prev && out->n) out->v[out->n - 1].b = in->v[i].b;
        else if (!sp_push(out, in->v[i].a, in->v[i].b, false)) return false;
        prev = in->v[i].m;
      }
      return true;
    case B_MERGED_PREV:
      for (size_t i = 0; i < in->n; i++) {
        if (in->v[i].m && !prev && out->n) out->v[out->n - 1].b = in->v[i].b;
        else if (!sp_push(out, in->v[i].a, in->v[i].b, false)) return false;
        prev = in->v[i].m;
      }
      return true;
    case B_MERGED_NEXT:
      for (size_t r = in->n; r-- > 0;) {
        if (in->v[r].m && !prev && out->n) out->v[out->n - 1].a = in->v[r].a;
        else if (!sp_push(out, in->v[r].a, in->v[r].b, false)) return false;
        prev = in->v[r].m;
      }
      for (size_t i = 0; i < out->n / 2; i++) {
        span x = out->v[i];
        out->v[i] = out->v[out->n - 1 - i];
        out->v[out->n - 1 - i] = x;
      }
      return true;
  }
  return false;
}

/* Cuts t by the spans kept, appending non-empty pieces to dst. */
static bool cut(const lt__ntext *t, const spans *keep, lt__splits *dst) {
  for (size_t i = 0; i < keep->n; i++)
    if (keep->v[i].b > keep->v[i].a && !lt__splits_push_range(dst, t, keep->v[i].a, keep->v[i].b, -1)) return false;
  return true;
}

/* GPT-2's bytes_to_unicode: the character standing for byte b. */
static uint32_t byte_char(unsigned b) {
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
  unsigned n = 0;
  for (unsigned c = 0; c < b; c++) n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
  return 256 + n;
}

/* One split through one (non-Sequence) pre-tokenizer, pieces into dst. */
static lt_status pre_one(const lt__hf_pre *p, lt__ntext *t, lt__splits *dst) {
  spans m = {0}, keep = {0};
  lt_status st = LT_OK;
  bool ok = true;
  lt__ntext tmp = {0};
  switch (p->type) {
    case P_BYTELEVEL:
      if (p->add_prefix_space && t->n && t->s[0] != ' ') {
        ok = lt__ntext_put(&tmp, " ", 1, t->os[0], t->oe[0]) && lt__ntext_put_range(&tmp, t, 0, t->n);
        if (!ok) break;
        lt__ntext_free(t);
        *t = tmp;
        memset(&tmp, 0, sizeof tmp);
      }
      if (p->use_regex) {
        st = find_re(t, p->re, NULL, 0, &m);
        ok = st == LT_OK && apply_behavior(&m, B_ISOLATED, &keep);
      } else {
        ok = sp_push(&keep, 0, t->n, false);
      }
      if (!ok) break;
      for (size_t i = 0; ok && i < keep.n; i++) { /* each piece in the byte alphabet */
        if (keep.v[i].b == keep.v[i].a) continue;
        lt__ntext piece = {0};
        for (size_t q = keep.v[i].a; ok && q < keep.v[i].b; q++)
          ok = lt__ntext_put_cp(&piece, byte_char((unsigned char)t->s[q]), t->os[q], t->oe[q]);
        ok = ok && lt__splits_push_take(dst, &piece, -1);
        lt__ntext_free(&piece);
      }
      break;
    case P_SPLIT:
      st = find_re(t, p->re, p->str, p->nstr, &m);
      if (st != LT_OK) break;
      if (p->invert)
        for (size_t i = 0; i < m.n; i++) m.v[i].m = !m.v[i].m;
      ok = apply_behavior(&m, p->behavior, &keep) && cut(t, &keep, dst);
      break;
    case P_METASPACE: {
      /* Spaces become the replacement, then maybe a leading one, then a cut
       * before each replacement (MergedWithNext). */
      for (size_t i = 0; ok && i < t->n; i++)
        ok = t->s[i] == ' ' ? lt__ntext_put(&tmp, p->str, p->nstr, t->os[i], t->oe[i])
                            : lt__ntext_put_range(&tmp, t, i, i + 1);
      if (!ok) break;
      bool starts = tmp.n >= p->nstr && memcmp(tmp.s, p->str, p->nstr) == 0;
      bool first = tmp.n > 0 && tmp.os[0] == 0;
      if (tmp.n && !starts && (p->prepend == PREPEND_ALWAYS || (p->prepend == PREPEND_FIRST && first))) {
        lt__ntext pre = {0};
        ok = lt__ntext_put(&pre, p->str, p->nstr, tmp.os[0], tmp.oe[0]) && lt__ntext_put_range(&pre, &tmp, 0, tmp.n);
        lt__ntext_free(&tmp);
        tmp = pre;
        if (!ok) break;
      }
      if (p->split) {
        ok = find_pred(&tmp, NULL, p->repl, &m) && apply_behavior(&m, B_MERGED_NEXT, &keep) && cut(&tmp, &keep, dst);
      } else if (tmp.n) {
        ok = lt__splits_push_take(dst, &tmp, -1);
      }
      break;
    }
    case P_WHITESPACE:
      ok = find_whitespace(t, &keep) && cut(t, &keep, dst);
      break;
    case P_WSSPLIT:
      ok = find_pred(t, is_ws, 0, &m) && apply_behavior(&m, B_REMOVED, &keep) && cut(t, &keep, dst);
      break;
    case P_BERT: {
      ok = find_pred(t, is_ws, 0, &m) && apply_behavior(&m, B_REMOVED, &keep);
      lt__splits mid = {0};
      ok = ok && cut(t, &keep, &mid);
      for (size_t i = 0; ok && i < mid.n; i++) {
        m.n = keep.n = 0;
        ok = find_pred(&mid.v[i].t, lt__uc_is_bert_punct, 0, &m) && apply_behavior(&m, B_ISOLATED, &keep) &&
             cut(&mid.v[i].t, &keep, dst);
      }
      lt__splits_free(&mid);
      break;
    }
    case P_PUNCT:
      ok = find_pred(t, lt__uc_is_bert_punct, 0, &m) && apply_behavior(&m, p->behavior, &keep) && cut(t, &keep, dst);
      break;
    case P_DIGITS:
      ok = find_pred(t, lt__uc_is_numeric, 0, &m) &&
           apply_behavior(&m, p->individual_digits ? B_ISOLATED : B_CONTIGUOUS, &keep) && cut(t, &keep, dst);
      break;
    default:
      LT_CHECK(0);
  }
  free(m.v);
  free(keep.v);
  lt__ntext_free(&tmp);
  if (st == LT_OK && !ok) st = lt__err(LT_ERR_NOMEM, "tokenizer: out of memory while pre-tokenizing");
  return st;
}

lt_status lt__hf_pre_apply(const lt__hf_pre *p, lt__splits *s) {
  if (p->type == P_SEQ) {
    for (size_t i = 0; i < p->nkids; i++) {
      lt_status st = lt__hf_pre_apply(p->kids[i], s);
      if (st != LT_OK) return st;
    }
    return LT_OK;
  }
  lt__splits out = {0};
  for (size_t i = 0; i < s->n; i++) {
    lt_status st = LT_OK;
    if (s->v[i].added_id >= 0) {
      if (!lt__splits_push_take(&out, &s->v[i].t, s->v[i].added_id))
        st = lt__err(LT_ERR_NOMEM, "tokenizer: out of memory while pre-tokenizing");
    } else {
      st = pre_one(p, &s->v[i].t, &out);
    }
    if (st != LT_OK) {
      lt__splits_free(&out);
      return st;
    }
  }
  lt__splits_free(s);
  *s = out;
  return LT_OK;
}
