/*
 * datasets/datasets.h: getting training data from files into tensors.
 *
 * What this is: loaders that read standard dataset files, check them
 * thoroughly (a file is input from outside: every size is overflow-checked and
 * capped, and a truncated or corrupt file is an error naming the file and what
 * is wrong with it), and return plain tensors ready for a model. Sections:
 *   - Images: IDX files (the format of MNIST and Fashion-MNIST, gzip-compressed
 *     or raw) and the MNIST / Fashion-MNIST loader (images [N, H*W] f32,
 *     labels [N] i64);
 *   - Text: tokenizers, corpora, built-in seq2seq tasks, batching.
 *
 * Conventions are those of tensor/tensor.h: a status (or NULL) plus
 * lt_last_error() on failure, with no output created; "returns new" tensors are
 * owned by the caller (or by the innermost open scope). Loaders read files
 * only where told: paths are arguments, never environment variables.
 */
#ifndef LT_DATASETS_H
#define LT_DATASETS_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Images: IDX files, MNIST and Fashion-MNIST ==== */
/* datasets/idx.c. A dataset here fits in memory; batching is lt_randperm +
 * lt_index_select (examples/fashion_mnist_mlp.c, docs/tutorial.md). */

/* ---- IDX files ---------------------------------------------------------- */
/* The IDX format (http://yann.lecun.com/exdb/mnist/, "FILE FORMATS"): a
 * 4-byte magic 0x00 0x00 <type> <ndim>, then ndim big-endian u32 sizes, then
 * the elements in row-major order, big-endian. Types: 0x08 u8, 0x09 i8,
 * 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64. So MNIST images (u8, 3 dims) have
 * magic 0x00000803 and labels (u8, 1 dim) 0x00000801.
 *
 * Files are read through zlib: a gzip-compressed file (".gz", as Debian's
 * dataset packages ship them) is decompressed on the fly and an uncompressed
 * one is read as it is. */

/* The largest payload (elements times element size) an IDX file may declare.
 * A header claiming more is rejected before anything is allocated. Memory for
 * the payload grows as data actually arrives, so a short file with a large
 * header fails as truncated without allocating what the header claims. */
#define LT_IDX_MAX_BYTES ((int64_t)1 << 32)

#define LT_IDX_MAGIC_IMAGES 0x00000803u /* u8, 3 dims: [N, rows, cols] */
#define LT_IDX_MAGIC_LABELS 0x00000801u /* u8, 1 dim: [N] */

/* What an IDX header says. */
typedef struct lt_idx_header {
  uint32_t magic;               /* the 4 magic bytes as a big-endian number */
  int type;                     /* element type code (0x08 ... 0x0E) */
  int ndim;                     /* 1..LT_MAX_DIMS */
  int64_t shape[LT_MAX_DIMS];   /* sizes; entries past ndim are 0 */
  int64_t numel;                /* product of shape */
} lt_idx_header;

/* Reads and checks only the header of the IDX file at path into *out. Errors:
 * LT_ERR_IO (cannot open or read; not a regular file: a FIFO, device or
 * directory is refused at once), LT_ERR_FORMAT (not IDX, unknown type, 0 or
 * more than LT_MAX_DIMS dims, truncated header), LT_ERR_OVERFLOW (payload
 * larger than LT_IDX_MAX_BYTES). */
LT_API lt_status lt_idx_read_header(const char *path, lt_idx_header *out);

/* Reads the whole IDX file at path into a new tensor of the file's shape,
 * converting the elements to dtype (f32, f64, i32 or i64; any file type).
 * Errors as lt_idx_read_header, plus LT_ERR_FORMAT when the data is shorter
 * than the header says, longer (trailing bytes), or the gzip stream is
 * corrupt, LT_ERR_DTYPE for an unsupported dtype, LT_ERR_NOMEM. Returns new. */
LT_API lt_tensor *lt_idx_load(const char *path, lt_dtype dtype);

/* ---- MNIST and Fashion-MNIST -------------------------------------------- */
/* Both use the same four files and names:
 *   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz   (60000 examples)
 *   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz    (10000 examples)
 * Fashion-MNIST (Xiao, Rasul, Vollgraf 2017, https://github.com/zalandoresearch/
 * fashion-mnist) has 10 classes of clothing: 0 T-shirt/top, 1 Trouser,
 * 2 Pullover, 3 Dress, 4 Coat, 5 Sandal, 6 Shirt, 7 Sneaker, 8 Bag, 9 Ankle boot. */

/* Where Debian's dataset-fashion-mnist package installs the files
 * (apt-get install dataset-fashion-mnist). */
#define LT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Per-pixel mean and standard deviation of the Fashion-MNIST training images
 * scaled to [0, 1] (the usual constants, as in torchvision examples), and of MNIST. */
#define LT_FASHION_MNIST_MEAN 0.2860
#define LT_FASHION_MNIST_STD 0.3530
#define LT_MNIST_MEAN 0.1307
#define LT_MNIST_STD 0.3081

typedef enum { LT_DATASET_TRAIN, LT_DATASET_TEST } lt_dataset_split;

typedef struct lt_mnist_opts {
  int64_t max_examples; /* load only the first max_examples (0: all) */
  bool normalize;       /* after scaling to [0, 1]: x = (x - mean) / std */
  double mean, std;     /* used when normalize (std > 0) */
} lt_mnist_opts;
/* All examples, scaled to [0, 1], not normalised. */
#define LT_MNIST_DEFAULTS ((lt_mnist_opts){.std = 1.0})

/* Loads one split from dir (e.g. LT_FASHION_MNIST_DIR): stores new tensors in
 * *images ([N, rows*cols] f32, pixel / 255, then normalised if asked) and
 * *labels ([N] i64, each in 0..9). opts NULL means LT_MNIST_DEFAULTS.
 * The image file must have magic 0x00000803 and the label file 0x00000801,
 * with the same N; a label above 9 is an error naming its index. On failure
 * both outputs are set to NULL and the error names the file. */
LT_API lt_status lt_mnist_load(const char *dir, lt_dataset_split split, const lt_mnist_opts *opts, lt_tensor **images,
                        lt_tensor **labels);
/* The same from two explicit file paths. */
LT_API lt_status lt_mnist_load_files(const char *images_path, const char *labels_path, const lt_mnist_opts *opts,
                              lt_tensor **images, lt_tensor **labels);

/* The class name of a Fashion-MNIST label ("T-shirt/top", ...); "?" outside 0..9. Static. */
LT_API const char *lt_fashion_mnist_class_name(int64_t label);

/* ==== End of Images ==== */

/* ==== Text: tokenizers, corpora, tasks, batching ==== */
/*
 * The text side of datasets/ (datasets/tokenizer.c, bpe_train.c, hf_*.c,
 * corpus.c, tasks.c, batch.c; docs/datasets.md has the formats and the tasks
 * in full):
 *   - tokenizers: byte-level, character-level (UTF-8 code points) and byte-level
 *     BPE, all sharing four special tokens with fixed ids, and any Hugging Face
 *     tokenizer.json (its own ids), serialised to and from a byte buffer (for
 *     checkpoints);
 *   - sources: a plain text file as one token stream (language modelling), a
 *     parallel corpus as TSV, and built-in seq2seq tasks generated from a seed
 *     (copy, reverse, sort, numbers in words, dates), with a train/validation
 *     split that never shares an example;
 *   - batching: [B, T] i64 batches with <pad> padding, bool key-padding masks,
 *     teacher-forcing shift and -100 labels, length bucketing, shuffling from a
 *     seeded lt_generator, and a loader position that a checkpoint saves and
 *     restores for a bit-exact resume.
 *
 *   - token shards (datasets/shards.c): llm.c's shard files, written whole
 *     and atomically, and a loader that memory-maps them, streams windows
 *     in a shuffled, resumable order with one prefetch thread, and lets
 *     each rank read its own rows: corpora larger than memory.
 *
 * What this is not: a general text-processing library (Unicode normalisation
 * and regexes live only inside the Hugging Face tokenizers, on libutf8proc and
 * PCRE2). The in-memory loaders are not multi-threaded (they are cheap next
 * to a training step); only the shard loader has a thread, which copies.
 *
 * Ownership words as in tensor.h. Objects of this section (lt_tokenizer,
 * lt_text_pairs, lt_seq_pairs, the loaders) are opaque, made by a _new / _load
 * / _train function ("returns new") and released by their _free, which accepts
 * NULL. Arrays and strings documented as "returns new (free with free())" are
 * plain malloc() buffers. Objects are not shared between threads concurrently.
 */

/* ---- Special tokens: the same fixed ids in every tokenizer ------------- */
#define LT_TOKEN_PAD 0          /* "<pad>": padding, never a real token */
#define LT_TOKEN_BOS 1          /* "<bos>" (also called <sos>): start of sequence */
#define LT_TOKEN_EOS 2          /* "<eos>": end of sequence */
#define LT_TOKEN_UNK 3          /* "<unk>": a character the vocabulary lacks */
#define LT_TOKEN_NUM_SPECIAL 4  /* ordinary tokens start at this id */
/* Labels at padding positions (nn.h's lt_cross_entropy ignore_index default). */
#define LT_IGNORE_INDEX (-100)

/* ---- UTF-8 -------------------------------------------------------------- */

/* True if s[0..len) is well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF). When it is not and bad_offset is not
 * NULL, *bad_offset receives the byte offset of the first bad sequence. */
LT_API bool lt_utf8_valid(const char *s, size_t len, size_t *bad_offset);

/* ---- Tokenizers ----------------------------------------------------------- */
/* Vocabularies (ids):
 *   byte: 0..3 specials, 4 + b for byte b (vocab size 260). Every input is
 *         encodable (any bytes, UTF-8 or not).
 *   char: 0..3 specials, then the distinct code points of the text it was built
 *         from in increasing code-point order. Input must be valid UTF-8; a
 *         code point not in the vocabulary encodes as <unk>.
 *   bpe:  0..3 specials, 4 + b for byte b, then one id per learned merge in the
 *         order learned (merge i makes id 260 + i). Byte-level, so every input
 *         is encodable (no <unk>) and decode(encode(x)) == x for any bytes.
 * Special tokens are never produced from text: a literal "<pad>" in the input
 * is five ordinary characters.
 *   hf:   a Hugging Face tokenizer.json (lt_tokenizer_load_hf): the file's own
 *         ids, vocabulary and special tokens (LT_TOKEN_* do not apply; ask
 *         lt_tokenizer_token_id), encoded exactly as the `tokenizers` library
 *         does (docs/datasets.md "Hugging Face tokenizers"). */
typedef struct lt_tokenizer lt_tokenizer;
typedef enum { LT_TOKENIZER_BYTE, LT_TOKENIZER_CHAR, LT_TOKENIZER_BPE, LT_TOKENIZER_HF } lt_tokenizer_kind;

/* BPE training options. Exactly one of num_merges and vocab_size is > 0
 * (vocab_size counts everything: 4 specials + 256 bytes + merges, so it must
 * be >= 261). Learning stops early when no pair of adjacent tokens occurs at
 * least min_frequency times (>= 1; 2 by default). */
typedef struct lt_bpe_opts {
  int64_t num_merges;
  int64_t vocab_size;
  int64_t min_frequency;
} lt_bpe_opts;
#define LT_BPE_DEFAULTS ((lt_bpe_opts){.vocab_size = 1024, .min_frequency = 2})
/* Longest piece (bytes) the BPE pre-tokenizer makes, hence longest BPE token. */
#define LT_BPE_MAX_PIECE 128
/* Limits a tokenizer buffer may declare (checked before allocating). */
#define LT_BPE_MAX_MERGES ((int64_t)1 << 20)

/* Returns new (free with lt_tokenizer_free) or NULL on failure. */
LT_API lt_tokenizer *lt_tokenizer_new_byte(void);
/* The vocabulary is the distinct code points of text[0..len), which must be
 * non-empty valid UTF-8 (LT_ERR_INVALID if empty, LT_ERR_FORMAT naming the byte
 * offset if not UTF-8). Returns new. */
LT_API lt_tokenizer *lt_tokenizer_new_char(const char *text, size_t len);
/* Learns byte-level BPE merges from text[0..len) (non-empty). The text is first
 * cut into pieces (see docs/datasets.md: an optional leading space plus a run
 * of letters, of digits, or of other symbols; runs of other whitespace; at
 * most LT_BPE_MAX_PIECE bytes), and merges never cross a piece boundary. Each
 * step merges the most frequent adjacent pair; ties go to the pair with the
 * smallest (left id, right id), so training is deterministic. opts NULL means
 * LT_BPE_DEFAULTS. Returns new. */
LT_API lt_tokenizer *lt_tokenizer_train_bpe(const char *text, size_t len, const lt_bpe_opts *opts);
/* The same, reading the text from the file at path (see lt_text_file_read). */
LT_API lt_tokenizer *lt_tokenizer_train_bpe_file(const char *path, const lt_bpe_opts *opts);
LT_API void lt_tokenizer_free(lt_tokenizer *tok);  /* NULL is a no-op */

/* A Hugging Face tokenizer from the text of a tokenizer.json (json[0..len),
 * copied) or from the file at path (at most 1 GiB). Models BPE, WordPiece,
 * WordLevel, Unigram; the normalizers, pre-tokenizers, post-processors and
 * decoders listed in docs/datasets.md. A component or field this reader does
 * not support is LT_ERR_FORMAT naming it and where it is (never approximated);
 * so are bad JSON, wrong types, ids outside [0, 2^24), merges naming unknown
 * tokens and nesting deeper than 16. LT_ERR_IO for a file that cannot be read.
 * Returns new (free with lt_tokenizer_free). */
LT_API lt_tokenizer *lt_tokenizer_from_hf_json(const char *json, size_t len);
LT_API lt_tokenizer *lt_tokenizer_load_hf(const char *path);

LT_API lt_tokenizer_kind lt_tokenizer_get_kind(const lt_tokenizer *tok);  /* byte for NULL */
/* Names of the kinds, the one table for files and command lines: "byte",
 * "char", "bpe", "hf" (an hf tokenizer is loaded, never built from a name). _name returns a static string ("unknown" out of range);
 * _parse sets *out from a name or fails with LT_ERR_INVALID listing the names
 * (LT_ERR_NULL for a NULL s), *out untouched. */
LT_API const char *lt_tokenizer_kind_name(lt_tokenizer_kind kind);
LT_API lt_status lt_tokenizer_kind_parse(const char *s, lt_tokenizer_kind *out);
/* Number of ids (specials included); 0 for NULL. */
LT_API int64_t lt_tokenizer_vocab_size(const lt_tokenizer *tok);
/* Number of BPE merges (0 for byte and char). */
LT_API int64_t lt_tokenizer_num_merges(const lt_tokenizer *tok);
/* Merge i (0-based) of a BPE tokenizer: the ids of its left and right parts
 * (it makes id 260 + i). LT_ERR_INDEX if i is out of range. */
LT_API lt_status lt_tokenizer_merge(const lt_tokenizer *tok, int64_t i, int64_t *left, int64_t *right);

/* Encodes text[0..len) into *ids (returns new, free with free(); non-NULL even
 * for an empty text) and its length into *n. No <bos>/<eos> are added. Errors:
 * LT_ERR_FORMAT for invalid UTF-8 given to a char tokenizer (naming the byte
 * offset), LT_ERR_NOMEM. On failure *ids and *n are untouched. */
LT_API lt_status lt_tokenizer_encode(const lt_tokenizer *tok, const char *text, size_t len,
                              int64_t **ids, int64_t *n);
/* Encoding flags (lt_tokenizer_encode_ex). LT_ENCODE_ADD_SPECIAL: add the
 * post-processor's special tokens (an hf tokenizer's [CLS]/[SEP], <s>, ...;
 * what the `tokenizers` library's encode(text) does by default).
 * LT_ENCODE_PAD_TRUNCATE: apply the tokenizer.json's truncation and padding
 * settings as the library does. Byte, char and BPE tokenizers have neither:
 * the flags change nothing for them. */
#define LT_ENCODE_ADD_SPECIAL 1u
#define LT_ENCODE_PAD_TRUNCATE 2u
/* Encodes like lt_tokenizer_encode (which is this with flags 0), and when
 * offsets is not NULL stores in *offsets (returns new, free with free(); 2 *n
 * values) each token's [start, end) byte offsets into text (0, 0 for added
 * special and padding tokens). An hf tokenizer reads text as UTF-8 with each
 * ill-formed sequence taken as U+FFFD (its maximal subpart, as Python's
 * bytes.decode(errors="replace")). Errors as lt_tokenizer_encode. */
LT_API lt_status lt_tokenizer_encode_ex(const lt_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                 int64_t **ids, int64_t **offsets, int64_t *n);
/* The id of the token spelled s[0..n) in an hf tokenizer's vocabulary (added
 * tokens included), e.g. "</s>" or "<|endoftext|>"; for the other kinds the
 * special names "<pad>", "<bos>", "<eos>", "<unk>". -1 when there is none. */
LT_API int64_t lt_tokenizer_token_id(const lt_tokenizer *tok, const char *s, size_t n);
/* Encodes the n texts texts[i] (lens[i] bytes each) as lt_tokenizer_encode_ex
 * does with flags (offsets are not kept), on lt_get_num_threads() threads:
 * the texts are shared out in chunks, each encoded whole by one thread, and
 * the result does not depend on the thread count. *ids (returns new, free
 * with free(); NULL when there are none) holds every text's ids back to
 * back, text i's at ids[starts[i] .. starts[i + 1]) (starts: the caller's
 * array of n + 1). Errors: those of lt_tokenizer_encode_ex for the first text
 * (lowest index) that fails, with its index in the message; LT_ERR_NULL,
 * LT_ERR_INVALID (n < 0). On failure *ids and starts are untouched. */
LT_API lt_status lt_tokenizer_encode_batch(const lt_tokenizer *tok, const char *const *texts, const size_t *lens, int64_t n,
                                    unsigned flags, int64_t **ids, int64_t *starts);
/* The start, end and padding ids of a tokenizer, for the seq2seq batches
 * (<bos> target <eos>), generation and its stopping. */
typedef struct lt_special_ids {
  int64_t bos, eos, pad;
} lt_special_ids;
/* libtensor's kinds: LT_TOKEN_BOS, LT_TOKEN_EOS, LT_TOKEN_PAD. An hf tokenizer:
 * for each, the first of the usual names its vocabulary has (bos: <s>,
 * <|begin_of_text|>, <|startoftext|>, <bos>, [CLS], <|endoftext|>; eos: </s>,
 * <|endoftext|>, <|end_of_text|>, <|eot_id|>, <eos>, [SEP]; pad: <pad>,
 * [PAD], <|pad|>, <|finetune_right_pad_id|>), a missing pad then being the
 * eos and a missing bos the eos; -1 when none is there (a Hugging Face
 * directory's config.json says more: lt_hf_read_gen_ids). NULL tok: the
 * libtensor ids. */
LT_API lt_special_ids lt_tokenizer_special_ids(const lt_tokenizer *tok);
/* Reads a line of decimal ids separated by spaces, tabs, \r or \n (what
 * `tokenize --decode` reads) into *ids (returns new, free with free(); NULL
 * when *n is 0). LT_ERR_FORMAT when a word is not a decimal integer in the
 * int64 range, quoting the whole word (at most 40 bytes of it): "\"nan\" is
 * not an id"; ids are not checked against a vocabulary (lt_tokenizer_decode
 * does that). *ids untouched on failure. */
LT_API lt_status lt_tokenizer_parse_ids(const char *line, size_t len, int64_t **ids, int64_t *n);
/* The same as a 1-d i64 tensor [n] (returns new). */
LT_API lt_tensor *lt_tokenizer_encode_tensor(const lt_tokenizer *tok, const char *text, size_t len);

/* Decoding flags. By default <pad>, <bos> and <eos> decode to nothing and
 * <unk> to U+FFFD (the replacement character, bytes EF BF BD).
 * LT_DECODE_SHOW_SPECIAL writes every special token as its name ("<pad>",
 * "<bos>", "<eos>", "<unk>"). An hf tokenizer decodes as the library's
 * decode(ids, skip_special_tokens=True), and with LT_DECODE_SHOW_SPECIAL as
 * skip_special_tokens=False. */
#define LT_DECODE_SHOW_SPECIAL 1u
/* Decodes ids[0..n) into *text (returns new, free with free(); NUL-terminated,
 * and the NUL is not counted in *len). Byte-level tokenizers may produce
 * bytes that are not valid UTF-8 from an arbitrary id sequence. Errors:
 * LT_ERR_INDEX for an id outside [0, vocab size), naming the id and its
 * position (e.g. a -100 label left in), LT_ERR_INVALID for n < 0. */
LT_API lt_status lt_tokenizer_decode(const lt_tokenizer *tok, const int64_t *ids, int64_t n,
                              unsigned flags, char **text, size_t *len);
/* The same for a 1-d (or any-shape, read in row-major order) integer tensor. */
LT_API lt_status lt_tokenizer_decode_tensor(const lt_tokenizer *tok, const lt_tensor *ids,
                                     unsigned flags, char **text, size_t *len);

/* Serialises the tokenizer (kind, vocabulary, merges) into *buf (returns new,
 * free with free()) of *size bytes; the format (little-endian, versioned, with
 * a CRC-32) is in docs/datasets.md. */
LT_API lt_status lt_tokenizer_serialize(const lt_tokenizer *tok, void **buf, size_t *size);
/* Rebuilds a tokenizer from a buffer made by lt_tokenizer_serialize. The buffer
 * is checked, not trusted: a wrong magic, version, kind or size, a bad
 * checksum, counts beyond the limits, unordered or invalid code points, and
 * merges that refer to ids not yet defined all fail with LT_ERR_FORMAT.
 * Returns new. */
LT_API lt_tokenizer *lt_tokenizer_deserialize(const void *buf, size_t size);

/* The tokenizer as tokenizer.json, the format of Hugging Face tokenizers
 * (docs/datasets.md "tokenizer.json"): byte and BPE as a byte-level BPE model
 * (libtensor's piece rule as a Split regex, lt_tokenizer_piece_regex), char
 * as a WordLevel model with one piece per character; the special tokens as
 * added tokens with their ids. A BPE vocabulary in which two ids spell the
 * same bytes cannot be written that way: it is written as libtensor's own
 * JSON ("format": "libtensor-tokenizer", with the reason in "why").
 * *json returns new (free with free()), NUL-terminated, ASCII (other
 * characters escaped), *len bytes without the NUL. Errors: LT_ERR_NULL,
 * LT_ERR_NOMEM. On failure *json and *len are untouched. */
LT_API lt_status lt_tokenizer_to_json(const lt_tokenizer *tok, char **json, size_t *len);
/* The same written to path (replaced if it exists), with a final newline.
 * Errors: those of lt_tokenizer_to_json, LT_ERR_IO naming the path. */
LT_API lt_status lt_tokenizer_save_json(const lt_tokenizer *tok, const char *path);
/* libtensor's BPE pieces as a regular expression (Oniguruma and Python re
 * syntax; static string): the same pieces as the tokenizer cuts for every
 * text whose runs of whitespace, and whose runs of letters with non-ASCII
 * characters, are at most 128 bytes (docs/datasets.md). */
LT_API const char *lt_tokenizer_piece_regex(void);

/* ---- Text sources ------------------------------------------------------- */

/* Largest file the text readers accept (bytes). */
#define LT_TEXT_MAX_BYTES ((int64_t)1 << 32)

/* Reads the whole file at path into *data (returns new, free with free();
 * NUL-terminated, the NUL not counted in *len). Only a regular file is read:
 * a FIFO, device or directory is refused at once. Errors: LT_ERR_IO (not a
 * regular file, naming the path and what it is; cannot open or read, naming
 * the path and the system's reason), LT_ERR_OVERFLOW (larger than
 * LT_TEXT_MAX_BYTES, checked before reading and while reading). An empty file
 * is not an error here. */
LT_API lt_status lt_text_file_read(const char *path, char **data, size_t *len);

/* Language modelling: the whole file at path as one token stream, a 1-d i64
 * tensor [N] (returns new; no <bos>/<eos> added). Errors as lt_text_file_read
 * and lt_tokenizer_encode, plus LT_ERR_FORMAT for an empty file. Batch it with
 * lt_lm_loader. */
LT_API lt_tensor *lt_text_file_tokens(const lt_tokenizer *tok, const char *path);

/* Pairs of texts (source, target) for seq2seq, e.g. a parallel corpus. */
typedef struct lt_text_pairs lt_text_pairs;

LT_API lt_text_pairs *lt_text_pairs_new(void);  /* empty; returns new */
LT_API void lt_text_pairs_free(lt_text_pairs *p); /* NULL is a no-op */
/* Appends a copy of (src[0..src_len), tgt[0..tgt_len)). */
LT_API lt_status lt_text_pairs_add(lt_text_pairs *p, const char *src, size_t src_len,
                            const char *tgt, size_t tgt_len);
LT_API int64_t lt_text_pairs_count(const lt_text_pairs *p);  /* 0 for NULL */
/* Pair i: borrowed pointers (valid until p changes or is freed) to
 * NUL-terminated strings, and their lengths (either length pointer may be
 * NULL). LT_ERR_INDEX if i is out of range. */
LT_API lt_status lt_text_pairs_get(const lt_text_pairs *p, int64_t i, const char **src, size_t *src_len,
                            const char **tgt, size_t *tgt_len);
/* Every source and target, each followed by '\n', as one text to build a
 * vocabulary from (returns new, free with free(); NUL-terminated). */
LT_API lt_status lt_text_pairs_concat(const lt_text_pairs *p, char **text, size_t *len);

/* TSV parallel corpus: one example per line, "source<TAB>target", lines ended
 * by "\n" or "\r\n". Fields after a second tab (e.g. the attribution column of
 * Tatoeba exports) are ignored; blank lines are skipped. A bad line (no tab,
 * an empty source or target, invalid UTF-8) is an LT_ERR_FORMAT naming the
 * file and line, unless skip_bad_lines: then it is skipped and counted in
 * *n_skipped. A corpus with no example at all is LT_ERR_FORMAT. */
typedef struct lt_tsv_opts {
  bool skip_bad_lines;
} lt_tsv_opts;
/* opts may be NULL (all false); n_skipped may be NULL. Returns new. */
LT_API lt_text_pairs *lt_text_pairs_load_tsv(const char *path, const lt_tsv_opts *opts, int64_t *n_skipped);
/* The same on a buffer in memory (name is used in messages; may be NULL). */
LT_API lt_text_pairs *lt_text_pairs_parse_tsv(const char *data, size_t len, const char *name,
                                       const lt_tsv_opts *opts, int64_t *n_skipped);

/* Writes p as a TSV corpus that lt_text_pairs_load_tsv reads back into the
 * same pairs, in order: "source<TAB>target\n" per pair, no header. Borrows p.
 * Refuses (LT_ERR_INVALID, naming the pair, nothing written) a pair that the
 * format cannot hold: an empty source or target, or one containing a tab,
 * '\n', '\r' or NUL. LT_ERR_IO (with errno's text) if the file cannot be
 * created or written; a partly written file is then removed. An existing
 * file is replaced. */
LT_API lt_status lt_text_pairs_save_tsv(const lt_text_pairs *p, const char *path);

/* Splits p into a training and a validation set that never share a source:
 * a pair goes to validation when a hash of its source text (FNV-1a 64, see
 * docs/datasets.md) falls in the lowest valid_fraction of the hash range, so
 * duplicates of a source land on the same side, and the split does not depend
 * on the order or on a seed. valid_fraction in [0, 1]. *train and *valid are
 * new (either may come out empty). */
LT_API lt_status lt_text_pairs_split(const lt_text_pairs *p, double valid_fraction,
                              lt_text_pairs **train, lt_text_pairs **valid);
/* True if the source text s falls in the validation part of that split. */
LT_API bool lt_text_in_valid_split(const char *s, size_t len, double valid_fraction);

/* ---- Built-in seq2seq tasks (no download) ------------------------------- */
/* Examples are generated from a seed (a splitmix64 stream, so identical on
 * every platform), with the hash split above applied to a split key (the
 * source; for DATE_NORMALIZE the date itself, i.e. the target, so that a
 * held-out date appears in training in no format): train and validation never
 * share a key, whatever the seeds, and the same source always has the same
 * target. Examples may repeat within a split (drawn with replacement).
 *   COPY      "hdcag" -> "hdcag"
 *   REVERSE   "hdcag" -> "gacdh"
 *   SORT      "hdcag" -> "acdgh"  (by byte value)
 *     symbols drawn uniformly from the first num_symbols of
 *     "abcdefghijklmnopqrstuvwxyz0123456789" (2..36), length uniform
 *     in [min_len, max_len] (1 <= min_len <= max_len <= 200).
 *   NUMBER_WORDS  "4127" -> "four thousand one hundred twenty seven"
 *     a number with a digit count uniform in [min_len, max_len] (1..15),
 *     then uniform among those numbers; short-scale words up to trillions,
 *     no "and", no hyphens; 0 is "zero".
 *   DATE      "2024-03-07" -> "7 March 2024"
 *     a day uniform in 1900-01-01 .. 2099-12-31 (lengths unused).
 *   DATE_NORMALIZE  "March 7, 2024" / "07/03/2024" / "7 Mar 2024" /
 *     "2024-03-07" -> "2024-03-07": one of four formats (uniform), written as
 *     ISO 8601; "07/03/2024" is day/month/year. */
typedef enum {
  LT_TASK_COPY,
  LT_TASK_REVERSE,
  LT_TASK_SORT,
  LT_TASK_NUMBER_WORDS,
  LT_TASK_DATE,
  LT_TASK_DATE_NORMALIZE,
  LT_TASK_COUNT
} lt_task_kind;

typedef enum { LT_SPLIT_TRAIN, LT_SPLIT_VALID } lt_task_split;

typedef struct lt_task_opts {
  lt_task_kind kind;
  int64_t num_examples;   /* examples to make for the requested split (>= 1) */
  int64_t min_len;        /* symbols (copy/reverse/sort) or digits (numbers) */
  int64_t max_len;
  int num_symbols;        /* copy/reverse/sort alphabet size */
  double valid_fraction;  /* share of the source space held out, in (0, 1) */
  uint64_t seed;
} lt_task_opts;
#define LT_TASK_DEFAULTS(kind_) ((lt_task_opts){.kind = (kind_), .num_examples = 10000, .min_len = 1, .max_len = 10, \
                                                .num_symbols = 10, .valid_fraction = 0.1, .seed = 1234})

/* "copy", "reverse", "sort", "number_words", "date", "date_normalize"
 * ("unknown" out of range; static). _parse sets *out from a name or fails
 * with LT_ERR_INVALID listing the names (LT_ERR_NULL for a NULL s), *out
 * untouched. */
LT_API const char *lt_task_name(lt_task_kind kind);
LT_API lt_status lt_task_parse(const char *s, lt_task_kind *out);
/* num_examples pairs of the split (returns new). Errors: LT_ERR_INVALID for
 * options out of range (naming the option), LT_ERR_STATE when the split's
 * share of the source space is too small to find distinct enough examples
 * (e.g. copy with max_len 1). Reproducible: the same options give the same
 * pairs in the same order. */
LT_API lt_text_pairs *lt_task_generate(const lt_task_opts *opts, lt_task_split split);
/* The words of n (0 <= n < 10^15) into buf (NUL-terminated); LT_ERR_INVALID
 * out of range or if buf is too small (256 bytes always suffice). */
LT_API lt_status lt_number_to_words(int64_t n, char *buf, size_t size);

/* ---- Tokenized pairs ---------------------------------------------------- */

/* What to do with a sequence longer than its maximum. */
typedef enum {
  LT_OVERLONG_ERROR,     /* LT_ERR_INVALID naming the example */
  LT_OVERLONG_TRUNCATE,  /* keep the first tokens */
  LT_OVERLONG_SKIP       /* drop the example */
} lt_overlong;
/* Names: "error", "truncate", "skip" (the one table for files and command
 * lines). _name returns a static string ("unknown" out of range); _parse sets
 * *out from a name or fails with LT_ERR_INVALID listing the names (LT_ERR_NULL
 * for a NULL s), *out untouched. */
LT_API const char *lt_overlong_name(lt_overlong policy);
LT_API lt_status lt_overlong_parse(const char *s, lt_overlong *out);

/* max_src_len: most source tokens (encoder positions). max_tgt_len: most
 * decoder positions, i.e. target tokens + 1 (for <bos> / <eos>), so a target is
 * cut to max_tgt_len - 1 tokens (and labels still end in <eos>). 0: no limit. */
typedef struct lt_seq_opts {
  int64_t max_src_len;
  int64_t max_tgt_len;
  lt_overlong overlong;
} lt_seq_opts;

/* Token-id pairs, stored compactly. */
typedef struct lt_seq_pairs lt_seq_pairs;

LT_API lt_seq_pairs *lt_seq_pairs_new(void);  /* empty; returns new */
LT_API void lt_seq_pairs_free(lt_seq_pairs *p); /* NULL is a no-op */
/* Appends copies of src[0..src_len) and tgt[0..tgt_len) (ids >= 0; lengths
 * >= 0, the source at least 1). */
LT_API lt_status lt_seq_pairs_add(lt_seq_pairs *p, const int64_t *src, int64_t src_len,
                           const int64_t *tgt, int64_t tgt_len);
LT_API int64_t lt_seq_pairs_count(const lt_seq_pairs *p);  /* 0 for NULL */
/* Example i: borrowed pointers into p (valid until p changes or is freed). */
LT_API lt_status lt_seq_pairs_get(const lt_seq_pairs *p, int64_t i, const int64_t **src, int64_t *src_len,
                           const int64_t **tgt, int64_t *tgt_len);
/* The <bos>, <eos> and <pad> ids the batches of p use (lt_seq2seq_collate):
 * libtensor's LT_TOKEN_* for a new p, the target tokenizer's
 * (lt_tokenizer_special_ids) for one made by lt_seq_pairs_encode. The setter
 * fails (LT_ERR_INVALID) for a negative id; NULL p: the LT_TOKEN_* ids. */
LT_API lt_status lt_seq_pairs_set_special_ids(lt_seq_pairs *p, lt_special_ids sp);
LT_API lt_special_ids lt_seq_pairs_special_ids(const lt_seq_pairs *p);
/* Encodes every pair (sources with src_tok, targets with tgt_tok; they may be
 * the same tokenizer), applying opts (NULL: no limits), the batches then
 * using tgt_tok's special ids (LT_ERR_INVALID when it has none). n_affected (may be
 * NULL) receives how many examples were truncated or skipped. Returns new;
 * fails (LT_ERR_INVALID) if nothing is left. */
LT_API lt_seq_pairs *lt_seq_pairs_encode(const lt_text_pairs *text, const lt_tokenizer *src_tok,
                                  const lt_tokenizer *tgt_tok, const lt_seq_opts *opts,
                                  int64_t *n_affected);

/* ---- Batches ------------------------------------------------------------ */

/* A seq2seq batch for teacher forcing. All tensors new, [B, S] or [B, T],
 * padded to the longest sequence in the batch:
 * (<bos>, <eos>, <pad>: the ids of lt_seq_pairs_special_ids(data), libtensor's
 * LT_TOKEN_* unless the pairs were encoded with a tokenizer of other ids)
 *   src      i64  source ids, then LT_TOKEN_PAD
 *   src_mask bool true at padding (key_padding_mask for encoder attention
 *                 and cross-attention)
 *   tgt_in   i64  <bos> target...  then LT_TOKEN_PAD   (decoder input)
 *   tgt_mask bool true at padding (decoder key_padding_mask)
 *   labels   i64  target... <eos>  then LT_IGNORE_INDEX (-100)
 * so tgt_in is (<bos> target <eos>) without its last token and labels the same
 * without its first; T = longest target + 1. n_tokens counts the labels that
 * are not -100. */
typedef struct lt_seq2seq_batch {
  lt_tensor *src;       /* [B, S] i64 */
  lt_tensor *src_mask;  /* [B, S] bool */
  lt_tensor *tgt_in;    /* [B, T] i64 */
  lt_tensor *tgt_mask;  /* [B, T] bool */
  lt_tensor *labels;    /* [B, T] i64 */
  int64_t n_tokens;
} lt_seq2seq_batch;
/* Frees the tensors and sets the fields to NULL/0; NULL is a no-op. */
LT_API void lt_seq2seq_batch_free(lt_seq2seq_batch *b);

/* The batch of examples idx[0..n) of data, in that order (n >= 1). On failure
 * *out is untouched. */
LT_API lt_status lt_seq2seq_collate(const lt_seq_pairs *data, const int64_t *idx, int64_t n,
                             lt_seq2seq_batch *out);

/* Loader options. */
typedef struct lt_batch_opts {
  int64_t batch_size;     /* B >= 1 */
  bool shuffle;           /* a new order every epoch, from the loader's generator */
  bool drop_last;         /* leave out a last batch smaller than B */
  int64_t bucket_batches; /* seq2seq: sort by length within windows of this many
                             batches (then shuffle the batches); 0 or 1: off */
  uint64_t seed;          /* seed of the loader's lt_generator */
} lt_batch_opts;
#define LT_BATCH_DEFAULTS(B) ((lt_batch_opts){.batch_size = (B), .shuffle = true})

/* Where a loader is: enough to resume bit-exactly. gen is the state of the
 * loader's generator before the current epoch's order was drawn (the order
 * is drawn again from it on restore). fingerprint identifies the data and
 * options (a hash); restoring into a loader with a different fingerprint is
 * refused. */
typedef struct lt_loader_position {
  int64_t epoch;           /* 0-based current epoch */
  int64_t index;           /* batches already returned in this epoch */
  lt_generator_state gen;
  uint64_t fingerprint;
} lt_loader_position;

/* Seq2seq loader over data (borrowed: data must outlive the loader and not
 * change). Each epoch: a permutation (lt_randperm) if shuffle, else the data
 * order; with bucketing, each window of bucket_batches * B examples is sorted
 * by (source length, target length) (stable), cut into batches, and the
 * batches of the epoch are shuffled (a second lt_randperm). After the last
 * batch of an epoch, the next call starts the next epoch. Returns new. */
typedef struct lt_seq2seq_loader lt_seq2seq_loader;
LT_API lt_seq2seq_loader *lt_seq2seq_loader_new(const lt_seq_pairs *data, const lt_batch_opts *opts);
LT_API void lt_seq2seq_loader_free(lt_seq2seq_loader *L);  /* NULL is a no-op */
/* The next batch into *out. On failure *out and the position are unchanged. */
LT_API lt_status lt_seq2seq_loader_next(lt_seq2seq_loader *L, lt_seq2seq_batch *out);
LT_API int64_t lt_seq2seq_loader_batches_per_epoch(const lt_seq2seq_loader *L);
LT_API lt_loader_position lt_seq2seq_loader_get_position(const lt_seq2seq_loader *L);
/* LT_ERR_STATE if the fingerprint differs, LT_ERR_INVALID for a negative epoch
 * or an index outside [0, batches per epoch]. */
LT_API lt_status lt_seq2seq_loader_set_position(lt_seq2seq_loader *L, lt_loader_position pos);

/* Language-modelling loader over a token stream tokens [N] (any integer dtype,
 * copied: the tensor may be freed afterwards). The stream is cut into
 * (N - 1) / T chunks of T + 1 tokens, chunk c being tokens[c*T .. c*T + T]
 * (consecutive chunks share one token, so every token but the first is a
 * target once). A batch takes B chunks: x = chunk[0..T), y = chunk[1..T+1),
 * both [B, T] i64 (new). Needs N >= T + 1. bucket_batches is ignored.
 * Returns new. */
typedef struct lt_lm_loader lt_lm_loader;
LT_API lt_lm_loader *lt_lm_loader_new(const lt_tensor *tokens, int64_t T, const lt_batch_opts *opts);
LT_API void lt_lm_loader_free(lt_lm_loader *L);  /* NULL is a no-op */
LT_API lt_status lt_lm_loader_next(lt_lm_loader *L, lt_tensor **x, lt_tensor **y);
LT_API int64_t lt_lm_loader_batches_per_epoch(const lt_lm_loader *L);
LT_API lt_loader_position lt_lm_loader_get_position(const lt_lm_loader *L);
LT_API lt_status lt_lm_loader_set_position(lt_lm_loader *L, lt_loader_position pos);

/* Loader over the rows of in-memory tensors (images, features): x [N, ...]
 * and y [N, ...] (any dtypes; borrowed: they must outlive the loader and not
 * change). Each epoch: a permutation of [0, N) (lt_randperm) if shuffle,
 * else the data order; a batch is x and y at the next B indices
 * (lt_index_select along dim 0: new tensors, inside the open scope if there
 * is one). The fingerprint mixes N, the shapes, dtypes and options (not the
 * values). bucket_batches is ignored. Returns new (free with
 * lt_tensor_loader_free); NULL with LT_ERR_SHAPE if x and y differ in N or
 * are 0-d, LT_ERR_INVALID for N == 0. Used by train/classify.h; the same
 * shuffling and resume as the loaders above. */
typedef struct lt_tensor_loader lt_tensor_loader;
LT_API lt_tensor_loader *lt_tensor_loader_new(const lt_tensor *x, const lt_tensor *y, const lt_batch_opts *opts);
LT_API void lt_tensor_loader_free(lt_tensor_loader *L);  /* NULL is a no-op */
/* The next batch: *x [b, ...], *y [b, ...] (new), b = B except for a last
 * short batch without drop_last. On failure *x and *y are untouched and the
 * position is unchanged. */
LT_API lt_status lt_tensor_loader_next(lt_tensor_loader *L, lt_tensor **x, lt_tensor **y);
LT_API int64_t lt_tensor_loader_batches_per_epoch(const lt_tensor_loader *L);
LT_API lt_loader_position lt_tensor_loader_get_position(const lt_tensor_loader *L);
LT_API lt_status lt_tensor_loader_set_position(lt_tensor_loader *L, lt_loader_position pos);

/* ---- Token shards (datasets/shards.c; docs/datasets.md "Token shards") -- */
/* llm.c's shard format (karpathy/llm.c, llmc/dataloader.h and
 * dev/data/data_common.py write_datafile): a header of 256 little-endian
 * int32, then the tokens.
 *   header[0], header[1] = 20240520, 1 (LT_SHARD_MAGIC, LT_SHARD_VERSION_U16):
 *       uint16 tokens, llm.c's GPT-2 files (vocabularies below 65,536);
 *     or 20240801, 7 (LT_SHARD_MAGIC_U32, LT_SHARD_VERSION_U32): uint32
 *       tokens, the header data_common.py writes for Llama 3 (vocabularies of
 *       65,536 and more);
 *   header[2] = the number of tokens n (0 <= n <= INT32_MAX);
 *   header[3..255] = 0 (ignored when read);
 * then exactly n tokens: the file is 1024 + n * (2 or 4) bytes. A corpus
 * is a set of shards, DIR/train_000000.bin, ..., DIR/val_000000.bin, ... as
 * the tokenize program writes them (one token stream cut into shards of at
 * most --shard-tokens). */
#define LT_SHARD_MAGIC 20240520
#define LT_SHARD_VERSION_U16 1
#define LT_SHARD_MAGIC_U32 20240801
#define LT_SHARD_VERSION_U32 7
#define LT_SHARD_HEADER_INTS 256
#define LT_SHARD_HEADER_BYTES 1024
#define LT_SHARD_MAX_TOKENS ((int64_t)INT32_MAX)

/* What a shard header says. */
typedef struct lt_shard_info {
  int version;        /* LT_SHARD_VERSION_U16 or _U32 */
  int token_bytes;    /* 2 or 4 */
  int64_t n_tokens;   /* header[2] */
} lt_shard_info;

/* The version a vocabulary of vocab ids needs: U16 below 65,536, else U32
 * (each version has its magic). */
LT_API int lt_shard_version_for_vocab(int64_t vocab);

/* Checks the header of a shard whose first bytes are hdr[0..hdr_len) and
 * whose file is file_size bytes, into *out. Errors (LT_ERR_FORMAT, naming
 * name and the byte offset): shorter than the header, a wrong magic
 * (offset 0), a version that is not its magic's (offset 4), a negative count
 * (offset 8), a
 * count whose tokens run past the end of the file ("truncated": the offset
 * where they would end), bytes after the last token (their offset). name may
 * be NULL ("shard"). Borrows hdr. */
LT_API lt_status lt_shard_parse_header(const void *hdr, size_t hdr_len, uint64_t file_size, const char *name,
                                lt_shard_info *out);
/* Checks that the n tokens at data (packed as info says, the file's bytes
 * from byte offset byte_offset on: for messages) are all < vocab (vocab <= 0:
 * no bound). LT_ERR_FORMAT naming name, the token's byte offset in the file,
 * its index and its value. */
LT_API lt_status lt_shard_check_tokens(const void *data, int64_t n, const lt_shard_info *info, int64_t vocab,
                                uint64_t byte_offset, const char *name);
/* Both on a whole shard image buf[0..len) (a file in memory: the fuzz
 * harness's entry). */
LT_API lt_status lt_shard_validate(const void *buf, size_t len, int64_t vocab, const char *name, lt_shard_info *out);

/* Writes shards of at most shard_tokens tokens, "<dir>/<prefix>_000000.bin",
 * "..._000001.bin", ... in the version lt_shard_version_for_vocab(vocab)
 * gives. Each shard is written whole and atomically (temporary file beside
 * it, fsync, rename, fsync of the directory: lt_ckpt_write_file), so a kill
 * leaves only whole shards. Memory: one shard's packed tokens. dir must
 * exist. Returns new (finish with lt_shard_writer_close, or drop with
 * lt_shard_writer_free). LT_ERR_INVALID for vocab < 1 or shard_tokens
 * outside [1, LT_SHARD_MAX_TOKENS]. */
typedef struct lt_shard_writer lt_shard_writer;
LT_API lt_shard_writer *lt_shard_writer_new(const char *dir, const char *prefix, int64_t vocab, int64_t shard_tokens);
/* Appends ids[0..n) (borrowed), writing every shard that fills. An id
 * outside [0, vocab) is LT_ERR_INVALID naming it and its position (nothing
 * of ids is added then); LT_ERR_IO from writing a shard. */
LT_API lt_status lt_shard_writer_add(lt_shard_writer *w, const int64_t *ids, int64_t n);
/* Writes the last, partial shard (if it holds a token) and frees w (also on
 * failure). *n_shards and *n_tokens (either may be NULL) get the totals. */
LT_API lt_status lt_shard_writer_close(lt_shard_writer *w, int64_t *n_shards, int64_t *n_tokens);
/* Frees w without writing what it holds; NULL is a no-op. */
LT_API void lt_shard_writer_free(lt_shard_writer *w);

/* Loader of windows of T + 1 tokens from a set of shards, the language-
 * modelling batches x = window[0..T), y = window[1..T+1) ([B, T] i64).
 *   - Files: the shards glob(3) finds for pattern, in sorted order; each is
 *     opened as a regular file (a FIFO, device or directory is refused),
 *     checked (lt_shard_parse_header, then every token against vocab, a
 *     chunk at a time) and memory-mapped read-only. Pages are given back to
 *     the kernel (madvise MADV_DONTNEED) after the check and after each
 *     window is copied, so resident memory does not grow with the corpus.
 *   - Windows: shard s with n tokens has (n - 1) / T windows, window w its
 *     tokens [w*T, w*T + T] (consecutive windows share a token, as
 *     lt_lm_loader's chunks do; no window crosses a shard).
 *   - Order (llm.c's two-level shuffle, whose memory is one shard's windows):
 *     each epoch visits the shards in a permutation and the windows of each
 *     shard in a permutation, both lt_randperm from generator states derived
 *     from (seed, epoch) (docs/datasets.md); without shuffle, in file order.
 *   - Batches: each global batch takes the next world * B windows of that
 *     order (it may span shards); this process keeps rows [rank * B,
 *     rank * B + B) and never reads the others. batches per epoch =
 *     windows / (world * B), the rest dropped (drop_last), or rounded up
 *     (!drop_last: the last global batch is short, and a rank's part of it
 *     may be short or empty).
 *   - Prefetch: a background thread copies the next batch's windows while
 *     the caller trains on this one (it only copies: the order is computed
 *     in the caller's thread, so batches are the same with it or without).
 * The loader is used from one thread (its own thread is internal). */
typedef struct lt_shard_loader_opts {
  int64_t batch;       /* B: windows per batch of this process, >= 1 */
  int64_t seq_len;     /* T >= 1 */
  int64_t vocab;       /* every token must be < vocab (a shard with a larger id is refused); <= 0: no check */
  bool shuffle;        /* the two-level shuffle above; false: file order */
  bool drop_last;      /* true: only whole global batches */
  bool prefetch;       /* prepare the next batch in a background thread */
  uint64_t seed;       /* the order's seed */
  int rank, world;     /* this process's part of each global batch (world <= 1: alone) */
} lt_shard_loader_opts;
#define LT_SHARD_LOADER_DEFAULTS(B, T) \
  ((lt_shard_loader_opts){.batch = (B), .seq_len = (T), .shuffle = true, .drop_last = true, .prefetch = true})

typedef struct lt_shard_loader lt_shard_loader;
/* Opens the shards pattern matches. Errors: LT_ERR_INVALID (options out of
 * range; no file matches, naming the pattern; fewer windows than one global
 * batch with drop_last), LT_ERR_IO / LT_ERR_FORMAT naming the shard (and the
 * offset) as above, LT_ERR_OVERFLOW. Returns new (free with
 * lt_shard_loader_free). */
LT_API lt_shard_loader *lt_shard_loader_open(const char *pattern, const lt_shard_loader_opts *opts);
LT_API void lt_shard_loader_free(lt_shard_loader *L); /* NULL is a no-op; stops the thread, unmaps */
/* The next batch: *x, *y [b, T] i64 (new), b = B except in a short last
 * batch (!drop_last), where b may be 0: then *x = *y = NULL and LT_OK (this
 * process has no row of it). After an epoch's last batch the next call
 * starts the next epoch. On failure *x, *y and the position are unchanged. */
LT_API lt_status lt_shard_loader_next(lt_shard_loader *L, lt_tensor **x, lt_tensor **y);
LT_API int64_t lt_shard_loader_batches_per_epoch(const lt_shard_loader *L);
LT_API int64_t lt_shard_loader_num_shards(const lt_shard_loader *L);
LT_API int64_t lt_shard_loader_num_tokens(const lt_shard_loader *L);  /* all shards */
LT_API int64_t lt_shard_loader_num_windows(const lt_shard_loader *L); /* per epoch, all ranks */
/* The path of shard i (borrowed, valid until free); NULL out of range. */
LT_API const char *lt_shard_loader_shard_path(const lt_shard_loader *L, int64_t i);
/* The position for a resume: epoch, global batches returned in it, the
 * generator state the epoch's order comes from, and a fingerprint of the
 * shards (their count and token counts), B * world, T, shuffle and
 * drop_last. */
LT_API lt_loader_position lt_shard_loader_get_position(const lt_shard_loader *L);
/* Where the next window is: the shard (its index in file order) and the
 * window's token offset in it. */
LT_API void lt_shard_loader_where(const lt_shard_loader *L, int64_t *shard, int64_t *offset);
/* Moves to pos (the shard and window are recomputed from the epoch's order:
 * O(shards + one shard's windows)). LT_ERR_STATE for a different
 * fingerprint or generator seed, LT_ERR_INVALID for a negative epoch or an
 * index outside [0, batches per epoch]. */
LT_API lt_status lt_shard_loader_set_position(lt_shard_loader *L, lt_loader_position pos);
/* Back to the first batch of epoch 0 (an evaluation loader, before each
 * pass over the validation shards). */
LT_API lt_status lt_shard_loader_rewind(lt_shard_loader *L);

/* ==== End of Text: tokenizers, corpora, tasks, batching ==== */

#ifdef __cplusplus
}
#endif
#endif /* LT_DATASETS_H */
