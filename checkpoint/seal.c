/*
 * checkpoint/seal.c: the two things HDF5 does not do for us.
 *
 * 1. Integrity. Debian 12's HDF5 (1.10.8) can crash on malformed files, so a
 *    checkpoint carries a 512-byte integrity header in the HDF5 user block
 *    (HDF5 itself starts at byte 512 and ignores the user block; h5dump and
 *    h5py read the file as usual). The header records the file's size and the
 *    CRC32 (zlib) of everything after it; lt__ckpt_verify checks both before
 *    HDF5 opens the file. Layout (little-endian), also in
 *    docs/checkpoint-format.md:
 *        0   8  magic "\x89LTCKPT\n"
 *        8   4  header version (1)
 *       12   4  header size (512)
 *       16   8  file size in bytes, header included
 *       24   4  CRC32 of bytes [512, file size)
 *       28   4  flags (0)
 *       32 476  zero
 *      508   4  CRC32 of bytes [0, 508)
 *
 * 2. Durability. HDF5 never fsyncs, and Debian's 1.10.8 is left in a state
 *    that crashes at exit when a write fails (disk full). So HDF5 builds the
 *    file in memory (checkpoint.c) and we write it: ".<name>.lttmp.<pid>.<n>"
 *    in the destination directory, created and flock-ed first, then written,
 *    fsynced, renamed over the final name, and the directory fsynced. A
 *    temporary whose flock can be taken belongs to a dead save and is removed
 *    by the next save or rotation in that directory. Numbered checkpoints are
 *    "<prefix>-<step, 12 digits>.h5"; only that exact pattern is ever taken
 *    for a checkpoint.
 *
 * What this is not: protection against an attacker (anyone can compute a
 * CRC32); it catches truncation, bit rot and files that are not ours.
 */
#define _DEFAULT_SOURCE /* flock */
#include "checkpoint/internal.h"
#include "tensor/error_internal.h"
#include "tensor/byteorder_internal.h"
#include "tensor/file_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static const unsigned char ckpt_magic[8] = {0x89, 'L', 'T', 'C', 'K', 'P', 'T', '\n'};
static const unsigned char hdf5_sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
#define HEADER_VERSION 1u
#define HEADER_CRC_AT 508

/* Reads up to n bytes at off; returns the count (short only at EOF) or -1. */
static ssize_t pread_full(int fd, void *buf, size_t n, off_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

static int pwrite_full(int fd, const void *buf, size_t n, off_t off) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = pwrite(fd, (const char *)buf + done, n - done, off + (off_t)done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    done += (size_t)r;
  }
  return 0;
}

/* CRC32 of bytes [from, to) of fd. */
static lt_status crc_range(int fd, const char *path, uint64_t from, uint64_t to, uint32_t *out) {
  enum { BUF = 1 << 20 };
  unsigned char *buf = malloc(BUF);
  if (!buf) return lt__err(LT_ERR_NOMEM, "checkpoint '%s': out of memory", path);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (uint64_t off = from; off < to;) {
    size_t want = (to - off) < BUF ? (size_t)(to - off) : BUF;
    ssize_t r = pread_full(fd, buf, want, (off_t)off);
    if (r < 0) {
      int e = errno;
      free(buf);
      return lt__err(LT_ERR_IO, "checkpoint '%s': read error at byte %llu: %s", path,
                     (unsigned long long)off, strerror(e));
    }
    if ((size_t)r < want) {
      free(buf);
      return lt__err(LT_ERR_FORMAT, "checkpoint '%s': truncated while reading (the file shrank at byte %llu)",
                     path, (unsigned long long)(off + (uint64_t)r));
    }
    crc = crc32(crc, buf, (uInt)want);
    off += want;
  }
  free(buf);
  *out = (uint32_t)crc;
  return LT_OK;
}

static int popcount8(unsigned v) {
  int n = 0;
  for (; v; v &= v - 1) n++;
  return n;
}

lt_status lt__ckpt_open_verified(const char *path, int *fd_out, uint64_t *size_out) {
  *fd_out = -1;
  /* Regular files only, opened without blocking (a FIFO under a checkpoint's
   * name must not hang the load): tensor/file.c. */
  uint64_t size = 0;
  int fd = lt__open_regular(path, "checkpoint", (uint64_t)INT64_MAX, LT_ERR_FORMAT, &size);
  if (fd < 0) return lt_last_status();
  lt_status s = LT_OK;
  unsigned char h[LT__CKPT_UB];
  if (size == 0) {
    s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': the file is empty (0 bytes): not a checkpoint", path);
    goto done;
  }
  if (size < LT__CKPT_UB) {
    s = lt__err(LT_ERR_FORMAT,
                "checkpoint '%s': %llu bytes, fewer than the %d-byte integrity header: truncated or not a "
                "checkpoint", path, (unsigned long long)size, LT__CKPT_UB);
    goto done;
  }
  ssize_t r = pread_full(fd, h, LT__CKPT_UB, 0);
  if (r != LT__CKPT_UB) {
    s = r < 0 ? lt__err(LT_ERR_IO, "checkpoint '%s': read error: %s", path, strerror(errno))
              : lt__err(LT_ERR_FORMAT, "checkpoint '%s': the file shrank while reading", path);
    goto done;
  }
  /* A magic within a few bit flips of ours is a damaged header (reported by
   * the header CRC below); anything else is not our file. */
  int flips = 0;
  for (int i = 0; i < 8; i++) flips += popcount8(h[i] ^ ckpt_magic[i]);
  if (flips > 3) {
    unsigned char sig[8];
    if (!memcmp(h, hdf5_sig, 8))
      s = lt__err(LT_ERR_FORMAT,
                  "checkpoint '%s': an HDF5 file without libtensor's integrity header (write it with a "
                  "512-byte user block and call lt_ckpt_seal)", path);
    else if (size >= LT__CKPT_UB + 8 && pread_full(fd, sig, 8, LT__CKPT_UB) == 8 && !memcmp(sig, hdf5_sig, 8))
      s = lt__err(LT_ERR_FORMAT,
                  "checkpoint '%s': an HDF5 file whose user block holds no libtensor integrity header "
                  "(lt_ckpt_seal adds one)", path);
    else
      s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': not a libtensor checkpoint (no magic at byte 0)", path);
    goto done;
  }
  uint32_t hcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, HEADER_CRC_AT);
  if (hcrc != lt__get_le32(h + HEADER_CRC_AT)) {
    s = lt__err(LT_ERR_FORMAT,
                "checkpoint '%s': integrity header checksum mismatch (stored %08x, computed %08x): the file is "
                "damaged", path, lt__get_le32(h + HEADER_CRC_AT), hcrc);
    goto done;
  }
  uint32_t version = lt__get_le32(h + 8), hsize = lt__get_le32(h + 12);
  if (version != HEADER_VERSION || hsize != LT__CKPT_UB) {
    s = lt__err(LT_ERR_FORMAT,
                "checkpoint '%s': integrity header version %u size %u is not supported (this library reads "
                "version %u, size %d)", path, version, hsize, HEADER_VERSION, LT__CKPT_UB);
    goto done;
  }
  uint64_t recorded = lt__get_le64(h + 16);
  if (size < recorded) {
    s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': truncated: the header records %llu bytes, the file has %llu",
                path, (unsigned long long)recorded, (unsigned long long)size);
    goto done;
  }
  if (size > recorded) {
    s = lt__err(LT_ERR_FORMAT,
                "checkpoint '%s': %llu bytes where the header records %llu: trailing bytes were appended",
                path, (unsigned long long)size, (unsigned long long)recorded);
    goto done;
  }
  uint32_t crc;
  s = crc_range(fd, path, LT__CKPT_UB, size, &crc);
  if (s) goto done;
  if (crc != lt__get_le32(h + 24)) {
    s = lt__err(LT_ERR_FORMAT,
                "checkpoint '%s': checksum mismatch over bytes %d..%llu (stored %08x, computed %08x): the file "
                "is damaged", path, LT__CKPT_UB, (unsigned long long)size, lt__get_le32(h + 24), crc);
    goto done;
  }
  if (size_out) *size_out = size;
done:
  if (s) close(fd);
  else *fd_out = fd;
  return s;
}

lt_status lt__ckpt_verify(const char *path) {
  int fd;
  lt_status s = lt__ckpt_open_verified(path, &fd, NULL);
  if (!s) close(fd);
  return s;
}

/* The header for a file of size bytes whose payload has CRC crc. */
static void make_header(unsigned char *h, uint64_t size, uint32_t crc) {
  memset(h, 0, LT__CKPT_UB);
  memcpy(h, ckpt_magic, 8);
  lt__put_le32(h + 8, HEADER_VERSION);
  lt__put_le32(h + 12, LT__CKPT_UB);
  lt__put_le64(h + 16, size);
  lt__put_le32(h + 24, crc);
  lt__put_le32(h + 28, 0);
  lt__put_le32(h + HEADER_CRC_AT, (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, HEADER_CRC_AT));
}

void lt__ckpt_seal_buffer(unsigned char *buf, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t off = LT__CKPT_UB; off < size;) {
    size_t n = size - off < (1u << 30) ? size - off : (1u << 30);
    crc = crc32(crc, buf + off, (uInt)n);
    off += n;
  }
  make_header(buf, size, (uint32_t)crc);
}

lt_status lt__ckpt_seal_fd(int fd, const char *path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return lt__err(LT_ERR_IO, "checkpoint '%s': cannot stat: %s", path, strerror(errno));
  uint64_t size = (uint64_t)st.st_size;
  unsigned char sig[8];
  if (size < LT__CKPT_UB + 8 || pread_full(fd, sig, 8, LT__CKPT_UB) != 8 || memcmp(sig, hdf5_sig, 8))
    return lt__err(LT_ERR_FORMAT,
                   "checkpoint '%s': no HDF5 superblock at byte %d: the file needs a %d-byte user block",
                   path, LT__CKPT_UB, LT__CKPT_UB);
  uint32_t crc;
  lt_status s = crc_range(fd, path, LT__CKPT_UB, size, &crc);
  if (s) return s;
  unsigned char h[LT__CKPT_UB];
  make_header(h, size, crc);
  if (pwrite_full(fd, h, sizeof h, 0) != 0)
    return lt__err(LT_ERR_IO, "checkpoint '%s': cannot write the integrity header: %s", path, strerror(errno));
  if (fsync(fd) != 0) return lt__err(LT_ERR_IO, "checkpoint '%s': fsync failed: %s", path, strerror(errno));
  return LT_OK;
}

lt_status lt_ckpt_verify(const char *path) {
  if (!path) return lt__err_null("ckpt_verify", "path");
  return lt__ckpt_verify(path);
}

lt_status lt_ckpt_seal(const char *path) {
  if (!path) return lt__err_null("ckpt_seal", "path");
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return lt__err(LT_ERR_IO, "checkpoint '%s': cannot open for writing: %s", path, strerror(errno));
  lt_status s = lt__ckpt_seal_fd(fd, path);
  if (close(fd) != 0 && !s) s = lt__err(LT_ERR_IO, "checkpoint '%s': close failed: %s", path, strerror(errno));
  return s;
}

/* ---- paths ------------------------------------------------------------- */

static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *s = malloc((size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* Splits path into a new directory string ("." when there is no slash) and a
 * pointer to the base name inside path. */
static char *dir_of(const char *path, const char **base) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    *base = path;
    return strdup(".");
  }
  *base = slash + 1;
  if (slash == path) return strdup("/");
  char *d = malloc((size_t)(slash - path) + 1);
  if (d) {
    memcpy(d, path, (size_t)(slash - path));
    d[slash - path] = '\0';
  }
  return d;
}

static bool all_digits(const char *s, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

bool lt__is_tmp_name(const char *name) {
  if (name[0] != '.') return false;
  const char *p = NULL;
  for (const char *q = strstr(name, ".lttmp."); q; q = strstr(q + 1, ".lttmp.")) p = q;
  if (!p || p == name) return false;
  p += 7;
  const char *dot = strchr(p, '.');
  return dot && all_digits(p, (size_t)(dot - p)) && all_digits(dot + 1, strlen(dot + 1));
}

/* Removes temporaries in dir whose flock can be taken (their saver is dead). */
static void clean_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!lt__is_tmp_name(de->d_name)) continue;
    char *p = str_printf("%s/%s", dir, de->d_name);
    if (!p) break;
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd >= 0) {
      struct stat a, b;
      if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 && lstat(p, &b) == 0 && S_ISREG(a.st_mode) &&
          a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        unlink(p);
      close(fd);
    }
    free(p);
  }
  closedir(d);
}

static lt_status fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return lt__err(LT_ERR_IO, "checkpoint: cannot open directory '%s': %s", dir, strerror(errno));
  lt_status s = LT_OK;
  if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
    s = lt__err(LT_ERR_IO, "checkpoint: fsync of directory '%s' failed: %s", dir, strerror(errno));
  close(fd);
  return s;
}

static void tmp_release(lt__tmpfile *t) {
  if (t->fd >= 0) close(t->fd);
  free(t->final_path);
  free(t->tmp_path);
  free(t->dir);
  *t = (lt__tmpfile){.fd = -1};
}

lt_status lt__tmp_begin(const char *final_path, lt__tmpfile *t) {
  static atomic_uint counter;
  *t = (lt__tmpfile){.fd = -1};
  const char *base;
  if (!final_path[0]) return lt__err(LT_ERR_INVALID, "checkpoint save: the path is empty");
  t->dir = dir_of(final_path, &base);
  t->final_path = strdup(final_path);
  if (!t->dir || !t->final_path) {
    tmp_release(t);
    return lt__err(LT_ERR_NOMEM, "checkpoint save: out of memory");
  }
  if (!base[0] || !strcmp(base, ".") || !strcmp(base, "..")) {
    tmp_release(t);
    return lt__err(LT_ERR_INVALID, "checkpoint save: '%s' does not name a file", final_path);
  }
  struct stat dst;
  if (stat(t->dir, &dst) != 0 || !S_ISDIR(dst.st_mode)) {
    int e = errno;
    tmp_release(t);
    return lt__err(LT_ERR_IO, "checkpoint save '%s': the directory does not exist or is not a directory: %s",
                   final_path, strerror(e));
  }
  clean_stale(t->dir);
  for (int attempt = 0; attempt < 100; attempt++) {
    unsigned n = atomic_fetch_add(&counter, 1u);
    free(t->tmp_path);
    t->tmp_path = str_printf("%s/.%s.lttmp.%ld.%u", t->dir, base, (long)getpid(), n);
    if (!t->tmp_path) break;
    int fd = open(t->tmp_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      int e = errno;
      char *p = t->tmp_path;
      t->tmp_path = NULL;
      lt_status s = lt__err(LT_ERR_IO, "checkpoint save: cannot create '%s': %s", p, strerror(e));
      free(p);
      tmp_release(t);
      return s;
    }
    /* Lock it, then make sure a concurrent cleaner did not unlink it between
     * our create and our lock. */
    struct stat a, b;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 && lstat(t->tmp_path, &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
      t->fd = fd;
      return LT_OK;
    }
    close(fd);
  }
  tmp_release(t);
  return lt__err(LT_ERR_IO, "checkpoint save '%s': cannot create a temporary file", final_path);
}

void lt__tmp_abort(lt__tmpfile *t) {
  if (t->tmp_path) unlink(t->tmp_path);
  tmp_release(t);
}

lt_status lt__tmp_commit(lt__tmpfile *t, const unsigned char *buf, size_t size) {
  lt_status s = LT_OK;
  if (pwrite_full(t->fd, buf, size, 0) != 0)
    s = lt__err(LT_ERR_IO, "checkpoint save '%s': writing %zu bytes failed: %s", t->final_path, size,
                strerror(errno));
  else if (fsync(t->fd) != 0)
    s = lt__err(LT_ERR_IO, "checkpoint save '%s': fsync failed: %s", t->final_path, strerror(errno));
  else if (rename(t->tmp_path, t->final_path) != 0)
    s = lt__err(LT_ERR_IO, "checkpoint save: cannot rename '%s' to '%s': %s", t->tmp_path, t->final_path,
                strerror(errno));
  if (s) {
    lt__tmp_abort(t);
    return s;
  }
  s = fsync_dir(t->dir);
  tmp_release(t);
  return s;
}

/* ---- numbered checkpoints ---------------------------------------------- */

static lt_status check_prefix(const char *op, const char *dir, const char *prefix) {
  if (!dir) return lt__err_null(op, "dir");
  if (!prefix) return lt__err_null(op, "prefix");
  if (!prefix[0] || strchr(prefix, '/') || strlen(prefix) > 200)
    return lt__err(LT_ERR_INVALID, "%s: prefix '%s' must be 1 to 200 bytes without '/'", op, prefix);
  return LT_OK;
}

lt_status lt_ckpt_step_path(char *buf, size_t size, const char *dir, const char *prefix, int64_t step) {
  lt_status s = check_prefix("ckpt_step_path", dir, prefix);
  if (s) return s;
  if (!buf) return lt__err_null("ckpt_step_path", "buf");
  if (step < 0) return lt__err(LT_ERR_INVALID, "ckpt_step_path: step %lld is negative", (long long)step);
  int n = snprintf(buf, size, "%s/%s-%012lld.h5", dir, prefix, (long long)step);
  if (n < 0 || (size_t)n >= size) {
    if (size) buf[0] = '\0';
    return lt__err(LT_ERR_INVALID, "ckpt_step_path: %zu bytes are too few for the path (%d needed)", size, n + 1);
  }
  return LT_OK;
}

/* "<prefix>-<digits>.h5": 12 digits, or more without a leading zero (the one
 * spelling lt_ckpt_step_path produces), so each step has exactly one name. */
static bool parse_step_name(const char *name, const char *prefix, int64_t *step) {
  size_t pl = strlen(prefix), nl = strlen(name);
  if (nl < pl + 1 + 12 + 3 || strncmp(name, prefix, pl) || name[pl] != '-' || strcmp(name + nl - 3, ".h5"))
    return false;
  const char *d = name + pl + 1;
  size_t nd = nl - pl - 1 - 3;
  if (!all_digits(d, nd) || nd > 18 || (nd > 12 && d[0] == '0')) return false;
  int64_t v = 0;
  for (size_t i = 0; i < nd; i++) v = v * 10 + (d[i] - '0');
  *step = v;
  return true;
}

typedef struct step_file {
  int64_t step;
  char *name;
} step_file;

static int by_step_desc(const void *a, const void *b) {
  int64_t x = ((const step_file *)a)->step, y = ((const step_file *)b)->step;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void free_list(step_file *v, int n) {
  for (int i = 0; i < n; i++) free(v[i].name);
  free(v);
}

/* Lists the numbered checkpoints of prefix in dir (regular files only),
 * newest first. */
static lt_status list_steps(const char *op, const char *dir, const char *prefix, step_file **out, int *n_out) {
  DIR *d = opendir(dir);
  if (!d) return lt__err(LT_ERR_IO, "%s: cannot open directory '%s': %s", op, dir, strerror(errno));
  step_file *v = NULL;
  int n = 0, cap = 0;
  struct dirent *de;
  lt_status s = LT_OK;
  while ((de = readdir(d))) {
    int64_t step;
    if (!parse_step_name(de->d_name, prefix, &step)) continue;
    /* Only regular files (or links to them) count: a FIFO, directory or
     * device under a checkpoint's name is neither loaded nor removed. stat
     * does not open, so a FIFO cannot block here. */
    char *full = str_printf("%s/%s", dir, de->d_name);
    struct stat sb;
    bool regular = full && stat(full, &sb) == 0 && S_ISREG(sb.st_mode);
    free(full);
    if (!regular) continue;
    if (n == cap) {
      int nc = cap ? 2 * cap : 16;
      step_file *nv = realloc(v, (size_t)nc * sizeof *nv);
      if (!nv) {
        s = lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
        break;
      }
      v = nv;
      cap = nc;
    }
    v[n].step = step;
    v[n].name = strdup(de->d_name);
    if (!v[n].name) {
      s = lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
      break;
    }
    n++;
  }
  closedir(d);
  if (s) {
    free_list(v, n);
    return s;
  }
  if (n) qsort(v, (size_t)n, sizeof *v, by_step_desc);
  *out = v;
  *n_out = n;
  return LT_OK;
}

lt_status lt_ckpt_latest(const char *dir, const char *prefix, bool verify, int64_t *step, char *path,
                         size_t size) {
  lt_status s = check_prefix("ckpt_latest", dir, prefix);
  if (s) return s;
  if (!step) return lt__err_null("ckpt_latest", "step");
  step_file *v = NULL;
  int n = 0;
  s = list_steps("ckpt_latest", dir, prefix, &v, &n);
  if (s) return s;
  int found = -1;
  for (int i = 0; i < n && found < 0; i++) {
    if (!verify) {
      found = i;
      break;
    }
    char *p = str_printf("%s/%s", dir, v[i].name);
    if (!p) {
      free_list(v, n);
      return lt__err(LT_ERR_NOMEM, "ckpt_latest: out of memory");
    }
    lt_status vs = lt__ckpt_verify(p);
    free(p);
    if (vs == LT_OK) found = i;
    else if (vs == LT_ERR_NOMEM) {
      free_list(v, n);
      return vs;
    }
  }
  if (found < 0) {
    *step = -1;
    if (path && size) path[0] = '\0';
  } else {
    if (path) {
      int k = snprintf(path, size, "%s/%s", dir, v[found].name);
      if (k < 0 || (size_t)k >= size) {
        if (size) path[0] = '\0';
        free_list(v, n);
        return lt__err(LT_ERR_INVALID, "ckpt_latest: %zu bytes are too few for the path", size);
      }
    }
    *step = v[found].step;
  }
  free_list(v, n);
  /* Verification failures of skipped candidates are not the caller's error. */
  if (verify) lt_clear_error();
  return LT_OK;
}

lt_status lt_ckpt_rotate(const char *dir, const char *prefix, int keep_last) {
  lt_status s = check_prefix("ckpt_rotate", dir, prefix);
  if (s) return s;
  step_file *v = NULL;
  int n = 0;
  s = list_steps("ckpt_rotate", dir, prefix, &v, &n);
  if (s) return s;
  for (int i = keep_last > 0 ? keep_last : n; i < n; i++) {
    char *p = str_printf("%s/%s", dir, v[i].name);
    if (!p) {
      s = lt__err(LT_ERR_NOMEM, "ckpt_rotate: out of memory");
      break;
    }
    if (unlink(p) != 0 && errno != ENOENT) {
      s = lt__err(LT_ERR_IO, "ckpt_rotate: cannot remove '%s': %s", p, strerror(errno));
      free(p);
      break;
    }
    free(p);
  }
  free_list(v, n);
  clean_stale(dir);
  if (!s) s = fsync_dir(dir);
  return s;
}

/* ---- whole files for other formats (config.json beside safetensors) ---- */

lt_status lt_ckpt_write_file(const char *path, const void *data, size_t size) {
  if (!path || (!data && size)) return lt__err(LT_ERR_NULL, "write_file: path or data is NULL");
  lt__tmpfile t;
  lt_status s = lt__tmp_begin(path, &t);
  if (s != LT_OK) return s;
  return lt__tmp_commit(&t, data, size);
}

lt_status lt_ckpt_read_file(const char *path, uint64_t max_bytes, char **data, size_t *size) {
  if (!path || !data) return lt__err(LT_ERR_NULL, "read_file: path or data is NULL");
  size_t n = 0;
  lt_status s = lt__read_regular(path, "read_file", max_bytes, data, &n);
  if (s == LT_OK && size) *size = n;
  return s;
}
