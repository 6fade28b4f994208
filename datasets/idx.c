/*
 * datasets/idx.c: the IDX file reader and the MNIST / Fashion-MNIST loader
 * (declared in datasets/datasets.h).
 *
 * A file is untrusted input. Only a regular file is opened (tensor/file.c:
 * a FIFO or device is refused at once). Every header field is checked before it is used:
 * the magic, the type code, the number of dims, each size (u32), their product
 * and the payload size in checked 64-bit arithmetic against LT_IDX_MAX_BYTES.
 * The payload buffer grows as bytes actually arrive (never to what the header
 * merely claims), so a tiny file with a huge header fails as "truncated"
 * without a huge allocation. Reading a whole file also checks that nothing
 * follows the declared data and, for gzip, that the stream's CRC holds (zlib
 * checks it at the end of the stream).
 *
 * What this is not: a streaming reader. The whole split is read into memory
 * (Fashion-MNIST's training images are 47 MB as u8, 188 MB as f32).
 */
#include "datasets/datasets.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tensor/error_internal.h"
#include "tensor/file_internal.h"
#include "tensor/storage_internal.h"

/* ---- reading bytes through zlib ---------------------------------------- */

typedef struct idx_reader {
  gzFile f;
  const char *op;    /* for messages: "idx_load", "mnist_load" */
  const char *path;
  lt_idx_header h;
  int esize;         /* bytes per element of h.type */
} idx_reader;

static void reader_close(idx_reader *r) {
  if (r->f) gzclose_r(r->f);
  r->f = NULL;
}

/* The file is not gzip-compressed (zlib reads it as it is): said in format
 * errors, because "bad magic" on a file that was meant to be .gz is confusing. */
static const char *raw_note(const idx_reader *r) {
  return gzdirect(r->f) ? " (the file is not gzip-compressed; it was read as raw IDX)" : "";
}

/* zlib's message, without the "path: " it puts in front (ours names the file). */
static const char *zlib_msg(const idx_reader *r, int *zerr) {
  const char *m = gzerror(r->f, zerr);
  if (!m) return "?";
  size_t n = strlen(r->path);
  if (strncmp(m, r->path, n) == 0 && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
  return m;
}

/* Reads up to n bytes into buf; *got is how many arrived. A read error or a
 * corrupt stream is an error; a short count at end of file is not (the
 * caller says what was expected). A gzip stream that ends early (truncated
 * .gz) is reported as truncated here. */
static lt_status read_some(idx_reader *r, void *buf, size_t n, size_t *got) {
  *got = 0;
  while (*got < n) {
    size_t want = n - *got;
    if (want > (1u << 30)) want = 1u << 30;
    errno = 0;
    int k = gzread(r->f, (unsigned char *)buf + *got, (unsigned)want);
    if (k < 0) {
      int zerr = 0;
      const char *zmsg = zlib_msg(r, &zerr);
      if (zerr == Z_ERRNO)
        return lt__err(LT_ERR_IO, "%s: %s: read failed: %s", r->op, r->path, strerror(errno ? errno : EIO));
      if (zerr == Z_MEM_ERROR) return lt__err(LT_ERR_NOMEM, "%s: %s: zlib is out of memory", r->op, r->path);
      return lt__err(LT_ERR_FORMAT, "%s: %s: corrupt gzip data: %s", r->op, r->path, zmsg);
    }
    if (k == 0) {
      int zerr = 0;
      const char *zmsg = zlib_msg(r, &zerr);
      if (zerr == Z_BUF_ERROR)
        return lt__err(LT_ERR_FORMAT, "%s: %s: truncated: the gzip stream ends early (%s)", r->op, r->path,
                       zmsg);
      if (zerr != Z_OK && zerr != Z_STREAM_END)
        return lt__err(LT_ERR_FORMAT, "%s: %s: corrupt gzip data: %s", r->op, r->path, zmsg);
      break; /* end of file */
    }
    *got += (size_t)k;
  }
  return LT_OK;
}

static uint32_t be32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static int type_size(int type) {
  switch (type) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
  }
}

static const char *type_name(int type) {
  switch (type) {
    case 0x08: return "u8";
    case 0x09: return "i8";
    case 0x0B: return "i16";
    case 0x0C: return "i32";
    case 0x0D: return "f32";
    case 0x0E: return "f64";
    default: return "unknown";
  }
}

/* Opens path and reads and checks its header into r->h. On failure nothing is
 * left open. */
static lt_status reader_open(idx_reader *r, const char *op, const char *path) {
  memset(r, 0, sizeof *r);
  r->op = op;
  r->path = path;
  /* Regular files only (a FIFO would block, /dev/zero never end): tensor/file.c. */
  int fd = lt__open_regular(path, op, (uint64_t)LT_IDX_MAX_BYTES, LT_ERR_IO, NULL);
  if (fd < 0) return lt_last_status();
  r->f = gzdopen(fd, "rb");
  if (!r->f) {
    close(fd);
    return lt__err(LT_ERR_NOMEM, "%s: %s: cannot open: zlib is out of memory", op, path);
  }
  gzbuffer(r->f, 1u << 17);

  unsigned char m[4];
  size_t got;
  lt_status st = read_some(r, m, 4, &got);
  if (st != LT_OK) goto fail;
  if (got < 4) {
    st = lt__err(LT_ERR_FORMAT, "%s: %s: truncated: %zu bytes, too short for the 4-byte IDX magic%s", op, path, got,
                 raw_note(r));
    goto fail;
  }
  r->h.magic = be32(m);
  r->h.type = m[2];
  r->h.ndim = m[3];
  r->esize = type_size(m[2]);
  if (m[0] != 0 || m[1] != 0 || r->esize == 0) {
    st = lt__err(LT_ERR_FORMAT,
                 "%s: %s: magic 0x%08x is not an IDX magic (bytes 0 and 1 must be 0, byte 2 a type code "
                 "0x08/0x09/0x0B/0x0C/0x0D/0x0E)%s",
                 op, path, (unsigned)r->h.magic, raw_note(r));
    goto fail;
  }
  if (r->h.ndim < 1 || r->h.ndim > LT_MAX_DIMS) {
    st = lt__err(LT_ERR_FORMAT, "%s: %s: magic 0x%08x declares %d dims; supported are 1..%d%s", op, path,
                 (unsigned)r->h.magic, r->h.ndim, LT_MAX_DIMS, raw_note(r));
    goto fail;
  }
  unsigned char d[4 * LT_MAX_DIMS];
  size_t need = 4 * (size_t)r->h.ndim;
  st = read_some(r, d, need, &got);
  if (st != LT_OK) goto fail;
  if (got < need) {
    st = lt__err(LT_ERR_FORMAT, "%s: %s: truncated: the header declares %d dims (%zu bytes of sizes) but the file "
                 "ends after %zu of them", op, path, r->h.ndim, need, got);
    goto fail;
  }
  /* Checked product against the cap. Zero sizes are skipped, so that even an
   * empty file's row size (the product of the other dims) is bounded; every
   * size is < 2^32 and the running product stays <= the cap, so nothing
   * overflows. */
  const int64_t max_elems = LT_IDX_MAX_BYTES / r->esize;
  int64_t numel = 1, nonzero = 1;
  bool over = false;
  for (int i = 0; i < r->h.ndim; i++) {
    int64_t s = (int64_t)be32(d + 4 * i);
    r->h.shape[i] = s;
    if (s == 0) numel = 0;
    else if (!over && nonzero > max_elems / s) over = true;
    else if (!over) nonzero *= s;
  }
  if (numel != 0) numel = nonzero;
  char shp[LT__DESC_SIZE];
  lt_shape_str(r->h.ndim, r->h.shape, shp, sizeof shp);
  if (over) {
    st = lt__err(LT_ERR_OVERFLOW, "%s: %s: header declares shape %s of %s, more than the %lld-byte limit "
                 "(LT_IDX_MAX_BYTES); the file is corrupt or not what it seems",
                 op, path, shp, type_name(r->h.type), (long long)LT_IDX_MAX_BYTES);
    goto fail;
  }
  r->h.numel = numel;
  return LT_OK;
fail:
  reader_close(r);
  return st;
}

/* Reads the next nbytes of payload into a new malloc'ed buffer (*out, free
 * with free; NULL when nbytes is 0). The buffer grows with the data. */
static lt_status read_payload(idx_reader *r, int64_t nbytes, const char *what, unsigned char **out) {
  *out = NULL;
  if (nbytes == 0) return LT_OK;
  const int64_t first = (int64_t)1 << 24;
  size_t cap = (size_t)(nbytes < first ? nbytes : first), have = 0;
  unsigned char *buf = malloc(cap);
  if (!buf) return lt__err(LT_ERR_NOMEM, "%s: %s: cannot allocate %zu bytes", r->op, r->path, cap);
  for (;;) {
    size_t got;
    lt_status st = read_some(r, buf + have, cap - have, &got);
    if (st != LT_OK) {
      free(buf);
      return st;
    }
    have += got;
    if (have < cap) {
      free(buf);
      return lt__err(LT_ERR_FORMAT, "%s: %s: truncated: the header declares %lld bytes of %s, the file ends after %zu",
                     r->op, r->path, (long long)nbytes, what, have);
    }
    if ((int64_t)have == nbytes) break;
    size_t ncap = cap * 2 < (size_t)nbytes ? cap * 2 : (size_t)nbytes;
    unsigned char *nb = realloc(buf, ncap);
    if (!nb) {
      free(buf);
      return lt__err(LT_ERR_NOMEM, "%s: %s: cannot allocate %zu bytes", r->op, r->path, ncap);
    }
    buf = nb;
    cap = ncap;
  }
  *out = buf;
  return LT_OK;
}

/* After the declared data: the file must end here (this read also makes zlib
 * check the gzip trailer's CRC and length). */
static lt_status check_end(idx_reader *r, int64_t nbytes) {
  unsigned char extra[64];
  size_t got;
  lt_status st = read_some(r, extra, sizeof extra, &got);
  if (st != LT_OK) return st;
  if (got > 0)
    return lt__err(LT_ERR_FORMAT, "%s: %s: data continues after the %lld payload bytes its header declares "
                   "(shape or magic is wrong)", r->op, r->path, (long long)nbytes);
  return LT_OK;
}

/* ---- element conversion: one plain loop per (file type, dtype) ----------- */

static inline uint32_t ld_u8(const unsigned char *p) { return p[0]; }
static inline int32_t ld_i8(const unsigned char *p) { return (int8_t)p[0]; }
static inline int32_t ld_i16(const unsigned char *p) { return (int16_t)(uint16_t)(((unsigned)p[0] << 8) | p[1]); }
static inline int32_t ld_i32(const unsigned char *p) { return (int32_t)be32(p); }
static inline float ld_f32(const unsigned char *p) {
  uint32_t u = be32(p);
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline double ld_f64(const unsigned char *p) {
  uint64_t u = ((uint64_t)be32(p) << 32) | be32(p + 4);
  double f;
  memcpy(&f, &u, 8);
  return f;
}

#define CONVERT_LOOP(CT, LD, ES)                                           \
  do {                                                                     \
    CT *o_ = (CT *)dst;                                                    \
    for (int64_t i_ = 0; i_ < n; i_++) o_[i_] = (CT)LD(src + (ES) * i_);   \
  } while (0)

#define CONVERT_TO(CT)                                      \
  switch (type) {                                           \
    case 0x08: CONVERT_LOOP(CT, ld_u8, 1); break;           \
    case 0x09: CONVERT_LOOP(CT, ld_i8, 1); break;           \
    case 0x0B: CONVERT_LOOP(CT, ld_i16, 2); break;          \
    case 0x0C: CONVERT_LOOP(CT, ld_i32, 4); break;          \
    case 0x0D: CONVERT_LOOP(CT, ld_f32, 4); break;          \
    case 0x0E: CONVERT_LOOP(CT, ld_f64, 8); break;          \
  }

/* Float file types go only to float dtypes (caller checks). */
static void convert(const unsigned char *src, int type, void *dst, lt_dtype dtype, int64_t n) {
  switch (dtype) {
    case LT_DTYPE_F32: CONVERT_TO(float); break;
    case LT_DTYPE_F64: CONVERT_TO(double); break;
    case LT_DTYPE_I32: CONVERT_TO(int32_t); break;
    case LT_DTYPE_I64: CONVERT_TO(int64_t); break;
    default: LT_CHECK(0);
  }
}

/* ---- public: IDX --------------------------------------------------------- */

lt_status lt_idx_read_header(const char *path, lt_idx_header *out) {
  if (!path) return lt__err_null("idx_read_header", "path");
  if (!out) return lt__err_null("idx_read_header", "out");
  idx_reader r;
  lt_status st = reader_open(&r, "idx_read_header", path);
  if (st != LT_OK) return st;
  *out = r.h;
  reader_close(&r);
  return LT_OK;
}

lt_tensor *lt_idx_load(const char *path, lt_dtype dtype) {
  if (!path) return lt__err_null("idx_load", "path"), NULL;
  if (dtype != LT_DTYPE_F32 && dtype != LT_DTYPE_F64 && dtype != LT_DTYPE_I32 && dtype != LT_DTYPE_I64) {
    lt__err(LT_ERR_DTYPE, "idx_load: %s: dtype %s is not supported (f32, f64, i32 or i64)", path,
            lt__valid_dtype(dtype) ? lt_dtype_name(dtype) : "(invalid)");
    return NULL;
  }
  idx_reader r;
  if (reader_open(&r, "idx_load", path) != LT_OK) return NULL;
  if ((r.h.type == 0x0D || r.h.type == 0x0E) && !lt_dtype_is_float(dtype)) {
    lt__err(LT_ERR_DTYPE, "idx_load: %s: the file holds %s elements; load them as f32 or f64, not %s", path,
            type_name(r.h.type), lt_dtype_name(dtype));
    reader_close(&r);
    return NULL;
  }
  int64_t nbytes = r.h.numel * r.esize;
  unsigned char *raw = NULL;
  lt_tensor *t = NULL;
  if (read_payload(&r, nbytes, "data", &raw) != LT_OK || check_end(&r, nbytes) != LT_OK) goto done;
  t = lt_empty(dtype, r.h.ndim, r.h.shape);
  if (t && r.h.numel > 0) convert(raw, r.h.type, t->data, dtype, r.h.numel);
done:
  free(raw);
  reader_close(&r);
  return t;
}

/* ---- public: MNIST / Fashion-MNIST --------------------------------------- */

static const char *const fashion_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

const char *lt_fashion_mnist_class_name(int64_t label) {
  return label >= 0 && label < 10 ? fashion_names[label] : "?";
}

/* "type u8, 1 dim" for messages about a wrong magic. */
static const char *header_words(const lt_idx_header *h, char *buf, size_t size) {
  snprintf(buf, size, "%s elements, %d dim%s", type_name(h->type), h->ndim, h->ndim == 1 ? "" : "s");
  return buf;
}

lt_status lt_mnist_load_files(const char *images_path, const char *labels_path, const lt_mnist_opts *opts,
                              lt_tensor **images, lt_tensor **labels) {
  static const char *op = "mnist_load";
  if (images) *images = NULL;
  if (labels) *labels = NULL;
  if (!images_path) return lt__err_null(op, "images_path");
  if (!labels_path) return lt__err_null(op, "labels_path");
  if (!images) return lt__err_null(op, "images");
  if (!labels) return lt__err_null(op, "labels");
  lt_mnist_opts o = opts ? *opts : LT_MNIST_DEFAULTS;
  if (o.max_examples < 0)
    return lt__err(LT_ERR_INVALID, "%s: max_examples is %lld; must be >= 0 (0 loads all)", op,
                   (long long)o.max_examples);
  if (o.normalize && !(o.std > 0 && isfinite(o.std) && isfinite(o.mean)))
    return lt__err(LT_ERR_INVALID, "%s: normalize with mean %g, std %g: std must be > 0 and both finite", op, o.mean,
                   o.std);

  idx_reader ri, rl;
  lt_status st = reader_open(&ri, op, images_path);
  if (st != LT_OK) return st;
  st = reader_open(&rl, op, labels_path);
  if (st != LT_OK) {
    reader_close(&ri);
    return st;
  }
  unsigned char *raw_img = NULL, *raw_lab = NULL;
  lt_tensor *x = NULL, *y = NULL;
  char words[64];
  if (ri.h.magic != LT_IDX_MAGIC_IMAGES) {
    st = lt__err(LT_ERR_FORMAT, "%s: %s: magic 0x%08x (%s) is not that of MNIST images, 0x%08x (u8, 3 dims)%s", op,
                 images_path, (unsigned)ri.h.magic, header_words(&ri.h, words, sizeof words),
                 LT_IDX_MAGIC_IMAGES, raw_note(&ri));
    goto done;
  }
  if (rl.h.magic != LT_IDX_MAGIC_LABELS) {
    st = lt__err(LT_ERR_FORMAT, "%s: %s: magic 0x%08x (%s) is not that of MNIST labels, 0x%08x (u8, 1 dim)%s", op,
                 labels_path, (unsigned)rl.h.magic, header_words(&rl.h, words, sizeof words),
                 LT_IDX_MAGIC_LABELS, raw_note(&rl));
    goto done;
  }
  const int64_t N = ri.h.shape[0], HW = ri.h.shape[1] * ri.h.shape[2];
  if (rl.h.shape[0] != N) {
    st = lt__err(LT_ERR_FORMAT, "%s: the images file %s has %lld examples but the labels file %s has %lld",
                 op, images_path, (long long)N, labels_path, (long long)rl.h.shape[0]);
    goto done;
  }
  const int64_t n = o.max_examples > 0 && o.max_examples < N ? o.max_examples : N;

  st = read_payload(&rl, n, "labels", &raw_lab);
  if (st == LT_OK && n == N) st = check_end(&rl, n);
  if (st != LT_OK) goto done;
  for (int64_t i = 0; i < n; i++)
    if (raw_lab[i] > 9) {
      st = lt__err(LT_ERR_FORMAT, "%s: %s: label %lld is %u; labels must be 0..9", op, labels_path, (long long)i,
                   (unsigned)raw_lab[i]);
      goto done;
    }
  st = read_payload(&ri, n * HW, "pixels", &raw_img);
  if (st == LT_OK && n == N) st = check_end(&ri, n * HW);
  if (st != LT_OK) goto done;

  x = lt_empty(LT_DTYPE_F32, LT_SHAPE(n, HW));
  y = x ? lt_empty(LT_DTYPE_I64, LT_SHAPE(n)) : NULL;
  if (!y) {
    st = lt_last_status();
    goto done;
  }
  /* Pixel value -> float through a 256-entry table computed in double, so the
   * result is the correctly rounded (p / 255 - mean) / std. */
  float table[256];
  for (int v = 0; v < 256; v++)
    table[v] = o.normalize ? (float)(((double)v / 255.0 - o.mean) / o.std) : (float)((double)v / 255.0);
  float *xd = x->data;
  for (int64_t i = 0; i < n * HW; i++) xd[i] = table[raw_img[i]];
  int64_t *yd = y->data;
  for (int64_t i = 0; i < n; i++) yd[i] = raw_lab[i];

done:
  free(raw_img);
  free(raw_lab);
  reader_close(&ri);
  reader_close(&rl);
  if (st != LT_OK) {
    lt_tensor_free(x);
    lt_tensor_free(y);
    return st;
  }
  *images = x;
  *labels = y;
  return LT_OK;
}

lt_status lt_mnist_load(const char *dir, lt_dataset_split split, const lt_mnist_opts *opts, lt_tensor **images,
                        lt_tensor **labels) {
  if (images) *images = NULL;
  if (labels) *labels = NULL;
  if (!dir) return lt__err_null("mnist_load", "dir");
  if (split != LT_DATASET_TRAIN && split != LT_DATASET_TEST)
    return lt__err(LT_ERR_INVALID, "mnist_load: split is %d; must be LT_DATASET_TRAIN or LT_DATASET_TEST", (int)split);
  const char *pre = split == LT_DATASET_TRAIN ? "train" : "t10k";
  size_t len = strlen(dir) + 40;
  char *pi = malloc(len), *pl = malloc(len);
  if (!pi || !pl) {
    free(pi);
    free(pl);
    return lt__err(LT_ERR_NOMEM, "mnist_load: cannot allocate a path");
  }
  snprintf(pi, len, "%s/%s-images-idx3-ubyte.gz", dir, pre);
  snprintf(pl, len, "%s/%s-labels-idx1-ubyte.gz", dir, pre);
  lt_status st = lt_mnist_load_files(pi, pl, opts, images, labels);
  free(pi);
  free(pl);
  return st;
}
