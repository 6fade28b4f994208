/*
 * tensor/file.c: the one way the library opens a file that comes from
 * outside (checkpoints, text and TSV corpora, IDX files, tokenizer training
 * text): lt__open_regular and lt__read_regular, and lt__map_regular for the
 * binary formats that parse in place (tensor/file_internal.h).
 *
 * Why: open(2) on a FIFO blocks until a writer appears (forever), and a
 * character device such as /dev/zero never ends. So the file is opened with
 * O_NONBLOCK (which makes opening a FIFO return at once), fstat()ed, refused
 * unless it is a regular file (the message names the path and what it is),
 * and only then switched back to blocking reads. The size from fstat is
 * checked against the caller's bound before anything is allocated, and reads
 * keep to that bound (a file that grows while it is read is refused, not
 * followed).
 *
 * What this is not: a parser. Callers decide what the bytes mean.
 */
#define _DEFAULT_SOURCE /* madvise (tensor/file_internal.h's lt__map_release) */
#include "tensor/error_internal.h"
#include "tensor/file_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

const char *lt__file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

int lt__open_regular(const char *path, const char *op, uint64_t max_bytes, lt_status not_regular, uint64_t *size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    lt__err(e == ENOMEM ? LT_ERR_NOMEM : LT_ERR_IO, "%s: %s: cannot open: %s", op, path, strerror(e));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    lt__err(LT_ERR_IO, "%s: %s: cannot stat: %s", op, path, strerror(e));
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    lt__err(not_regular, "%s: %s: is %s, not a regular file: refused (only regular files are read)", op, path,
            lt__file_kind((unsigned)st.st_mode));
    return -1;
  }
  if (st.st_size < 0 || (uint64_t)st.st_size > max_bytes) {
    close(fd);
    lt__err(LT_ERR_OVERFLOW, "%s: %s: %lld bytes, more than the limit of %llu bytes", op, path,
            (long long)st.st_size, (unsigned long long)max_bytes);
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(fd);
    lt__err(LT_ERR_IO, "%s: %s: cannot switch to blocking reads: %s", op, path, strerror(e));
    return -1;
  }
  if (size) *size = (uint64_t)st.st_size;
  return fd;
}

lt_status lt__read_regular(const char *path, const char *op, uint64_t max_bytes, char **data, size_t *len) {
  *data = NULL;
  *len = 0;
  if (max_bytes > (uint64_t)SIZE_MAX - 2) max_bytes = (uint64_t)SIZE_MAX - 2;
  uint64_t size;
  int fd = lt__open_regular(path, op, max_bytes, LT_ERR_IO, &size);
  if (fd < 0) return lt_last_status();
  /* fstat's size is a hint (the file may change): read to the end, refusing
   * anything past the bound. One byte more than the size is asked for, so
   * that a file that grew is seen. */
  size_t cap = (size_t)size + 2, n = 0;
  char *buf = malloc(cap);
  lt_status s = LT_OK;
  if (!buf) {
    close(fd);
    return lt__err(LT_ERR_NOMEM, "%s: %s: out of memory for its %llu bytes", op, path, (unsigned long long)size);
  }
  for (;;) {
    if (cap - n < 2) {
      if (cap - 2 >= max_bytes) {
        s = lt__err(LT_ERR_OVERFLOW, "%s: %s: larger than the limit of %llu bytes (it grew while read)", op,
                    path, (unsigned long long)max_bytes);
        break;
      }
      size_t ncap = cap - 2 > (size_t)max_bytes / 2 ? (size_t)max_bytes + 2 : 2 * cap;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        s = lt__err(LT_ERR_NOMEM, "%s: %s: out of memory while reading (%zu bytes so far)", op, path, n);
        break;
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0) {
      if (errno == EINTR) continue;
      s = lt__err(LT_ERR_IO, "%s: %s: read error: %s", op, path, strerror(errno));
      break;
    }
    if (r == 0) break;
    n += (size_t)r;
    if (n > max_bytes) {
      s = lt__err(LT_ERR_OVERFLOW, "%s: %s: larger than the limit of %llu bytes", op, path,
                  (unsigned long long)max_bytes);
      break;
    }
  }
  close(fd);
  if (s != LT_OK) {
    free(buf);
    return s;
  }
  buf[n] = '\0';
  *data = buf;
  *len = n;
  return LT_OK;
}

void lt__unmap(lt__file_map *m) {
  if (!m) return;
  if (m->bytes) {
    if (m->mapped) munmap(m->bytes, m->size);
    else free(m->bytes);
  }
  m->bytes = NULL, m->size = 0, m->mapped = false;
}

lt_status lt__map_regular(const char *path, const char *op, lt_status not_regular, lt__file_map *out) {
  out->bytes = NULL, out->size = 0, out->mapped = false;
  uint64_t fsize = 0;
  int fd = lt__open_regular(path, op, SIZE_MAX, not_regular, &fsize);
  if (fd < 0) return lt_last_status();
  out->size = (size_t)fsize;
  void *map = out->size ? mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  if (map != MAP_FAILED) {
    out->bytes = map, out->mapped = true;
    close(fd);
    return LT_OK;
  }
  /* not mappable: read it once (an empty file gives a 1-byte buffer) */
  lt_status s = LT_OK;
  if (!(out->bytes = malloc(out->size ? out->size : 1))) {
    s = lt__err(LT_ERR_NOMEM, "%s: %s: out of memory for its %zu bytes", op, path, out->size);
  }
  size_t got = 0;
  while (s == LT_OK && got < out->size) {
    ssize_t r = pread(fd, out->bytes + got, out->size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      s = lt__err(LT_ERR_IO, "%s: %s: read failed at byte %zu: %s", op, path, got,
                  r < 0 ? strerror(errno) : "the file shrank");
    else got += (size_t)r;
  }
  close(fd);
  if (s != LT_OK) lt__unmap(out);
  return s;
}

void lt__map_release(const lt__file_map *m, const void *p, size_t n) {
  if (!m || !m->mapped || !p || n == 0) return;
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  const uintptr_t ps = (uintptr_t)page, b = (uintptr_t)p, e = b + n;
  const uintptr_t pb = (b + ps - 1) / ps * ps, pe = e / ps * ps;
  if (pe > pb) (void)madvise((void *)pb, pe - pb, MADV_DONTNEED);
}
