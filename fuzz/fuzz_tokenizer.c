/*
 * fuzz/fuzz_tokenizer.c: the tokenizers of datasets/tokenizer.c on arbitrary
 * bytes. The first input byte chooses what the rest (the payload) is:
 *   0  a serialised tokenizer, as it is (lt_tokenizer_deserialize);
 *   1  the same with its CRC-32 recomputed, so that the checks behind the
 *      checksum are reached;
 *   2  text to train BPE on (merges and minimum frequency from the next
 *      bytes; at most 4 KB of text, so that an input stays fast);
 *   3  text to build a char tokenizer from (and a byte tokenizer).
 * Every tokenizer made is then exercised on the payload as text and as ids:
 * encode, decode, the tensor forms, the merges, serialise and deserialise.
 *
 * Checked promises (docs/datasets.md): a failure has a message; byte-level
 * tokenizers (byte, BPE) round-trip any bytes exactly; a char tokenizer
 * round-trips valid UTF-8 made of its vocabulary; a serialised tokenizer
 * deserialises to one that serialises to the same bytes and encodes the same;
 * decoding fails exactly when an id is outside [0, vocab size).
 */
#include <string.h>
#include <zlib.h>

#include "datasets/datasets.h"
#include "fuzz_util.h"

enum { MAX_TRAIN_TEXT = 4096 };

static void exercise(const lt_tokenizer *tok, const uint8_t *text, size_t len) {
  const char *t = (const char *)text;
  int64_t vocab = lt_tokenizer_vocab_size(tok);
  lt_tokenizer_kind kind = lt_tokenizer_get_kind(tok);
  FUZZ_ASSERT(vocab >= LT_TOKEN_NUM_SPECIAL, "vocab size %lld", (long long)vocab);

  /* Text -> ids -> text. */
  int64_t *ids = NULL, n = -1;
  lt_status s = fuzz_check_status(lt_tokenizer_encode(tok, t, len, &ids, &n), "encode");
  bool utf8 = lt_utf8_valid(t, len, NULL);
  if (kind != LT_TOKENIZER_CHAR || utf8) FUZZ_ASSERT(s == LT_OK, "encode refused its input: %s", lt_last_error());
  if (s == LT_OK) {
    bool has_unk = false;
    for (int64_t i = 0; i < n; i++) {
      FUZZ_ASSERT((ids[i] >= LT_TOKEN_NUM_SPECIAL && ids[i] < vocab) || ids[i] == LT_TOKEN_UNK,
                  "encode made id %lld (vocab %lld)", (long long)ids[i], (long long)vocab);
      has_unk |= ids[i] == LT_TOKEN_UNK;
    }
    FUZZ_ASSERT(kind == LT_TOKENIZER_CHAR || !has_unk, "a byte-level tokenizer made <unk>");
    char *back = NULL;
    size_t blen = 0;
    fuzz_check_status(lt_tokenizer_decode(tok, ids, n, 0, &back, &blen), "decode");
    FUZZ_ASSERT(back != NULL, "decode of encode failed: %s", lt_last_error());
    FUZZ_ASSERT(back[blen] == '\0', "decode's text is not NUL-terminated");
    if (!has_unk)
      FUZZ_ASSERT(blen == len && !memcmp(back, t, len), "decode(encode(x)) != x (%zu vs %zu bytes)", blen, len);
    free(back);

    /* The tensor forms agree with the array forms. */
    lt_tensor *tt = lt_tokenizer_encode_tensor(tok, t, len);
    FUZZ_ASSERT(tt && tt->numel == n, "encode_tensor: %s", tt ? "length differs" : lt_last_error());
    FUZZ_ASSERT(n == 0 || !memcmp(tt->data, ids, (size_t)n * sizeof *ids), "encode_tensor differs from encode");
    char *back2 = NULL;
    size_t blen2 = 0;
    FUZZ_ASSERT(fuzz_check_status(lt_tokenizer_decode_tensor(tok, tt, LT_DECODE_SHOW_SPECIAL, &back2, &blen2),
                                  "decode_tensor") == LT_OK, "decode_tensor: %s", lt_last_error());
    free(back2);
    lt_tensor_free(tt);
  }

  /* Serialise -> deserialise -> the same bytes and the same encoding. */
  void *buf = NULL, *buf2 = NULL;
  size_t size = 0, size2 = 0;
  FUZZ_ASSERT(fuzz_check_status(lt_tokenizer_serialize(tok, &buf, &size), "serialize") == LT_OK, "serialize: %s",
              lt_last_error());
  lt_tokenizer *copy = lt_tokenizer_deserialize(buf, size);
  FUZZ_ASSERT(copy != NULL, "a serialised tokenizer does not deserialise: %s", lt_last_error());
  FUZZ_ASSERT(lt_tokenizer_serialize(copy, &buf2, &size2) == LT_OK && size2 == size && !memcmp(buf, buf2, size),
              "serialise(deserialise(b)) != b");
  if (s == LT_OK) {
    int64_t *ids2 = NULL, n2 = -1;
    FUZZ_ASSERT(lt_tokenizer_encode(copy, t, len, &ids2, &n2) == LT_OK && n2 == n &&
                    (n == 0 || !memcmp(ids, ids2, (size_t)n * sizeof *ids)),
                "the deserialised copy encodes differently");
    free(ids2);
  }
  free(buf), free(buf2);
  lt_tokenizer_free(copy);
  free(ids);

  /* The merges, in and out of range. */
  int64_t nm = lt_tokenizer_num_merges(tok), l, r;
  for (int64_t i = 0; i < nm && i < 64; i++)
    FUZZ_ASSERT(lt_tokenizer_merge(tok, i, &l, &r) == LT_OK && l >= LT_TOKEN_NUM_SPECIAL && r >= LT_TOKEN_NUM_SPECIAL &&
                    l < 260 + i && r < 260 + i, "merge %lld", (long long)i);
  FUZZ_ASSERT(fuzz_check_status(lt_tokenizer_merge(tok, nm, &l, &r), "merge past the end") == LT_ERR_INDEX,
              "merge %lld of %lld did not fail with LT_ERR_INDEX", (long long)nm, (long long)nm);

  /* The payload as ids (2 bytes each, around the vocabulary's ends):
   * decoding fails exactly when one is out of range. */
  int64_t nid = (int64_t)(len / 2);
  int64_t *raw = malloc((size_t)(nid ? nid : 1) * sizeof *raw);
  FUZZ_ASSERT(raw != NULL, "out of memory");
  bool bad = false;
  for (int64_t i = 0; i < nid; i++) {
    int v = text[2 * i] | text[2 * i + 1] << 8;
    raw[i] = v >= 0x8000 ? (int64_t)vocab - 0x8000 + (v - 0x8000) % 8 : (int64_t)(v % (vocab + 4)) - 2;
    if (v == 0xFFFF) raw[i] = INT64_MIN;
    if (v == 0xFFFE) raw[i] = INT64_MAX;
    bad |= raw[i] < 0 || raw[i] >= vocab;
  }
  char *out = NULL;
  size_t olen = 0;
  unsigned flags = len && (text[0] & 1) ? LT_DECODE_SHOW_SPECIAL : 0;
  s = fuzz_check_status(lt_tokenizer_decode(tok, raw, nid, flags, &out, &olen), "decode of the payload as ids");
  FUZZ_ASSERT(bad ? s == LT_ERR_INDEX : s == LT_OK, "decode of %s ids returned %s: %s", bad ? "bad" : "good",
              lt_status_name(s), lt_last_error());
  free(out);
  free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  fuzz_input in = {data, size};
  int mode = fuzz_u8(&in) % 4;
  lt_tokenizer *tok = NULL, *tok2 = NULL;
  if (mode == 0 || mode == 1) {
    uint8_t *b = malloc(in.n ? in.n : 1);
    FUZZ_ASSERT(b != NULL, "out of memory");
    memcpy(b, in.p, in.n);
    if (mode == 1 && in.n >= 4) {
      uint32_t crc = (uint32_t)crc32(0L, b, (uInt)(in.n - 4));
      for (int k = 0; k < 4; k++) b[in.n - 4 + k] = (uint8_t)(crc >> (8 * k));
    }
    tok = lt_tokenizer_deserialize(b, in.n);
    if (!tok) fuzz_check_status(lt_last_status(), "deserialize");
    free(b);
  } else if (mode == 2) {
    lt_bpe_opts o = LT_BPE_DEFAULTS;
    o.vocab_size = 0;
    o.num_merges = 1 + fuzz_u8(&in) % 96;
    o.min_frequency = 1 + fuzz_u8(&in) % 3;
    tok = lt_tokenizer_train_bpe((const char *)in.p, in.n < MAX_TRAIN_TEXT ? in.n : MAX_TRAIN_TEXT, &o);
    if (!tok) {
      fuzz_check_status(lt_last_status(), "train_bpe");
      FUZZ_ASSERT(in.n == 0, "train_bpe refused %zu bytes of text: %s", in.n, lt_last_error());
    } else {
      FUZZ_ASSERT(lt_tokenizer_num_merges(tok) <= o.num_merges, "more merges than asked");
    }
  } else {
    tok = lt_tokenizer_new_char((const char *)in.p, in.n);
    if (!tok) {
      fuzz_check_status(lt_last_status(), "new_char");
      FUZZ_ASSERT(in.n == 0 || !lt_utf8_valid((const char *)in.p, in.n, NULL),
                  "new_char refused valid UTF-8: %s", lt_last_error());
    }
    tok2 = lt_tokenizer_new_byte();
    FUZZ_ASSERT(tok2 != NULL, "new_byte: %s", lt_last_error());
  }
  if (tok) exercise(tok, in.p, in.n);
  if (tok2) exercise(tok2, in.p, in.n);
  lt_tokenizer_free(tok);
  lt_tokenizer_free(tok2);
  return 0;
}
