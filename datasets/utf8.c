/*
 * datasets/utf8.c: UTF-8 code points (RFC 3629), one at a time, and the
 * public well-formedness check lt_utf8_valid.
 *
 * What this is not: a Unicode library (normalisation, case and categories come
 * from libutf8proc where the Hugging Face tokenizers need them).
 */
#include "datasets/datasets.h"
#include "datasets/utf8_internal.h"

int lt__utf8_decode(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
  unsigned c = s[i];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len;
  uint32_t v;
  unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;       /* overlong */
    if (c == 0xED) hi = 0x9F;       /* surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, v = c & 0x07;
    if (c == 0xF0) lo = 0x90;       /* overlong */
    if (c == 0xF4) hi = 0x8F;       /* above U+10FFFF */
  } else {
    return 0;
  }
  if (n - i < (size_t)len) return 0;
  for (int k = 1; k < len; k++) {
    unsigned b = s[i + (size_t)k];
    if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  return len;
}

int lt__utf8_encode(uint32_t cp, char out[4]) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

bool lt_utf8_valid(const char *s, size_t len, size_t *bad_offset) {
  if (!s) return len == 0;
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    if (u[i] < 0x80) { /* ASCII fast path */
      i++;
      continue;
    }
    uint32_t cp;
    int k = lt__utf8_decode(u, len, i, &cp);
    if (!k) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += (size_t)k;
  }
  return true;
}
