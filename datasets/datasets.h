/*
 * datasets/datasets.h: getting training data from files into tensors.
 *
 * What this is: loaders that read standard dataset files, check them
 * thoroughly (a file is input from outside: every size is overflow-checked and
 * capped, and a truncated or corrupt file is an error naming the file and what
 * is wrong with it), and return plain tensors ready for a model. Sections:
 *   - IDX files: the format of MNIST and Fashion-MNIST (gzip-compressed or raw);
 *   - MNIST / Fashion-MNIST: images [N, H*W] f32 and labels [N] i64.
 * Later sections will add tokenizers and text corpora.
 *
 * What this is not: a data-loading pipeline (no worker threads, no
 * augmentation, no iterators). A dataset here fits in memory; batching is
 * lt_randperm + lt_index_select (see examples/fashion_mnist_mlp.c and
 * docs/tutorial.md).
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

/* ======================================================================== */
/* IDX files                                                                */
/* ======================================================================== */
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
 * LT_ERR_IO (cannot open or read), LT_ERR_FORMAT (not IDX, unknown type, 0 or
 * more than LT_MAX_DIMS dims, truncated header), LT_ERR_OVERFLOW (payload
 * larger than LT_IDX_MAX_BYTES). */
lt_status lt_idx_read_header(const char *path, lt_idx_header *out);

/* Reads the whole IDX file at path into a new tensor of the file's shape,
 * converting the elements to dtype (f32, f64, i32 or i64; any file type).
 * Errors as lt_idx_read_header, plus LT_ERR_FORMAT when the data is shorter
 * than the header says, longer (trailing bytes), or the gzip stream is
 * corrupt, LT_ERR_DTYPE for an unsupported dtype, LT_ERR_NOMEM. Returns new. */
lt_tensor *lt_idx_load(const char *path, lt_dtype dtype);

/* ======================================================================== */
/* MNIST and Fashion-MNIST                                                  */
/* ======================================================================== */
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
#define LT_MNIST_DEFAULTS ((lt_mnist_opts){0, false, 0.0, 1.0})

/* Loads one split from dir (e.g. LT_FASHION_MNIST_DIR): stores new tensors in
 * *images ([N, rows*cols] f32, pixel / 255, then normalised if asked) and
 * *labels ([N] i64, each in 0..9). opts NULL means LT_MNIST_DEFAULTS.
 * The image file must have magic 0x00000803 and the label file 0x00000801,
 * with the same N; a label above 9 is an error naming its index. On failure
 * both outputs are set to NULL and the error names the file. */
lt_status lt_mnist_load(const char *dir, lt_dataset_split split, const lt_mnist_opts *opts, lt_tensor **images,
                        lt_tensor **labels);
/* The same from two explicit file paths. */
lt_status lt_mnist_load_files(const char *images_path, const char *labels_path, const lt_mnist_opts *opts,
                              lt_tensor **images, lt_tensor **labels);

/* The class name of a Fashion-MNIST label ("T-shirt/top", ...); "?" outside 0..9. Static. */
const char *lt_fashion_mnist_class_name(int64_t label);

#ifdef __cplusplus
}
#endif
#endif /* LT_DATASETS_H */
