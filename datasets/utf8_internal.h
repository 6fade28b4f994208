/*
 * datasets/utf8_internal.h: decoding and encoding one UTF-8 code point, for
 * the files of datasets/ (lt_utf8_valid, the public check, is in utf8.c too).
 * Not installed.
 *
 * What this is not: normalisation, case or categories (the Hugging Face
 * tokenizers take those from libutf8proc).
 */
#ifndef LT_DATASETS_UTF8_INTERNAL_H
#define LT_DATASETS_UTF8_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define LT__MAX_CODEPOINT 0x10FFFF

/* Decodes one code point at s[i..n) (i < n). Returns its byte length (1..4)
 * and stores the code point, or returns 0 for an ill-formed sequence
 * (RFC 3629 table 3-7: no overlongs, no surrogates, nothing above U+10FFFF,
 * no truncation). */
int lt__utf8_decode(const unsigned char *s, size_t n, size_t i, uint32_t *cp);
/* Writes the UTF-8 form of the scalar value cp into out; returns its length (1..4). */
int lt__utf8_encode(uint32_t cp, char out[4]);

#endif /* LT_DATASETS_UTF8_INTERNAL_H */
