/*
 * tensor/byteorder_internal.h: little-endian integers in byte buffers, for
 * the library's file formats (checkpoint seals, serialised tokenizers, GGUF). Not
 * installed.
 */
#ifndef LT_TENSOR_BYTEORDER_INTERNAL_H
#define LT_TENSOR_BYTEORDER_INTERNAL_H


#include <stdint.h>

/* Checkpoint headers and serialised tokenizers store integers little-endian
 * whatever the host's byte order. */
static inline void lt__put_le16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
}
static inline uint16_t lt__get_le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline void lt__put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void lt__put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t lt__get_le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t lt__get_le64(const unsigned char *p) {
  return (uint64_t)lt__get_le32(p) | (uint64_t)lt__get_le32(p + 4) << 32;
}

#endif /* LT_TENSOR_BYTEORDER_INTERNAL_H */
