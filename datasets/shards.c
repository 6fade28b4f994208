/*
 * datasets/shards.c: token shards in llm.c's format (datasets.h "Token
 * shards"): the header check, the writer (whole shards, written atomically)
 * and the loader (shards memory-mapped, windows of T + 1 tokens in a
 * two-level shuffled order, a background thread copying the next batch,
 * a position that resumes bit-exactly, each rank reading its own rows).
 *
 * What this is not: a tokenizer (tools/tokenize_main.c turns text into
 * shards) or a reader of whole files: a shard is mapped, checked a chunk at a
 * time and its pages handed back, so memory stays flat with corpus size.
 */
/* madvise(MADV_DONTNEED) is Linux's (glibc ignores POSIX_MADV_DONTNEED). */
#define _DEFAULT_SOURCE
#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "datasets/datasets_internal.h"
#include "tensor/error_internal.h"
#include "tensor/file_internal.h"

#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ======================================================================== */
/* The format                                                               */
/* ======================================================================== */

static int32_t rd_i32(const unsigned char *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}
static void wr_i32(unsigned char *p, int32_t v) {
  uint32_t u = (uint32_t)v;
  for (int k = 0; k < 4; k++) p[k] = (unsigned char)(u >> (8 * k));
}

int lt_shard_version_for_vocab(int64_t vocab) {
  return vocab < 65536 ? LT_SHARD_VERSION_U16 : LT_SHARD_VERSION_U32;
}

lt_status lt_shard_parse_header(const void *hdr, size_t hdr_len, uint64_t file_size, const char *name,
                                lt_shard_info *out) {
  if (!name) name = "shard";
  if (!hdr || !out) return lt__err(LT_ERR_NULL, "shard '%s': header and out must not be NULL", name);
  if (hdr_len < LT_SHARD_HEADER_BYTES || file_size < LT_SHARD_HEADER_BYTES)
    return lt__err(LT_ERR_FORMAT, "shard '%s': %llu bytes, shorter than the %d-byte header (truncated at offset %llu)",
                   name, (unsigned long long)file_size, LT_SHARD_HEADER_BYTES,
                   (unsigned long long)(file_size < hdr_len ? file_size : hdr_len));
  const unsigned char *h = hdr;
  int32_t magic = rd_i32(h), version = rd_i32(h + 4), count = rd_i32(h + 8);
  if (magic != LT_SHARD_MAGIC && magic != LT_SHARD_MAGIC_U32)
    return lt__err(LT_ERR_FORMAT, "shard '%s': offset 0: magic %ld, expected %d (uint16 tokens) or %d (uint32): not a "
                   "token shard", name, (long)magic, LT_SHARD_MAGIC, LT_SHARD_MAGIC_U32);
  const int32_t want = magic == LT_SHARD_MAGIC ? LT_SHARD_VERSION_U16 : LT_SHARD_VERSION_U32;
  if (version != want)
    return lt__err(LT_ERR_FORMAT, "shard '%s': offset 4: version %ld, expected %d for magic %ld", name, (long)version,
                   want, (long)magic);
  if (count < 0)
    return lt__err(LT_ERR_FORMAT, "shard '%s': offset 8: token count %ld is negative", name, (long)count);
  int tb = version == LT_SHARD_VERSION_U16 ? 2 : 4;
  uint64_t end = LT_SHARD_HEADER_BYTES + (uint64_t)count * (uint64_t)tb; /* <= 1024 + 4 * 2^31: no overflow */
  if (end > file_size)
    return lt__err(LT_ERR_FORMAT,
                   "shard '%s': truncated: the header's %ld tokens end at offset %llu, past the end of the file "
                   "(%llu bytes)",
                   name, (long)count, (unsigned long long)end, (unsigned long long)file_size);
  if (end < file_size)
    return lt__err(LT_ERR_FORMAT, "shard '%s': offset %llu: %llu bytes after the header's %ld tokens", name,
                   (unsigned long long)end, (unsigned long long)(file_size - end), (long)count);
  *out = (lt_shard_info){.version = version, .token_bytes = tb, .n_tokens = count};
  return LT_OK;
}

static inline int64_t token_at(const unsigned char *p, int tb, int64_t i) {
  const unsigned char *q = p + i * tb;
  return tb == 2 ? (int64_t)((uint32_t)q[0] | (uint32_t)q[1] << 8)
                 : (int64_t)((uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24);
}

lt_status lt_shard_check_tokens(const void *data, int64_t n, const lt_shard_info *info, int64_t vocab,
                                uint64_t byte_offset, const char *name) {
  if (!name) name = "shard";
  if (vocab <= 0 || n <= 0) return LT_OK;
  const unsigned char *p = data;
  const int tb = info->token_bytes;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = token_at(p, tb, i);
    if (v >= vocab)
      return lt__err(LT_ERR_FORMAT,
                     "shard '%s': offset %llu: token %lld of the shard is %lld, outside the vocabulary of %lld ids "
                     "(made with another tokenizer?)",
                     name, (unsigned long long)(byte_offset + (uint64_t)i * (uint64_t)tb),
                     (long long)((byte_offset - LT_SHARD_HEADER_BYTES) / (uint64_t)tb + (uint64_t)i), (long long)v,
                     (long long)vocab);
  }
  return LT_OK;
}

lt_status lt_shard_validate(const void *buf, size_t len, int64_t vocab, const char *name, lt_shard_info *out) {
  lt_shard_info info;
  lt_status s = lt_shard_parse_header(buf, len, len, name, &info);
  if (s == LT_OK)
    s = lt_shard_check_tokens((const unsigned char *)buf + LT_SHARD_HEADER_BYTES, info.n_tokens, &info, vocab,
                              LT_SHARD_HEADER_BYTES, name);
  if (s == LT_OK && out) *out = info;
  return s;
}

/* ======================================================================== */
/* The writer                                                               */
/* ======================================================================== */

struct lt_shard_writer {
  char *dir, *prefix;
  int64_t vocab, cap; /* tokens per shard */
  lt_shard_info info;
  unsigned char *buf; /* header + cap tokens */
  int64_t n;          /* tokens in buf */
  int64_t shards, total;
};

lt_shard_writer *lt_shard_writer_new(const char *dir, const char *prefix, int64_t vocab, int64_t shard_tokens) {
  if (!dir || !prefix) return lt__err(LT_ERR_NULL, "shard_writer_new: dir and prefix must not be NULL"), NULL;
  if (vocab < 1 || vocab > ((int64_t)1 << 32))
    return lt__err(LT_ERR_INVALID, "shard_writer_new: vocab %lld outside [1, 2^32]", (long long)vocab), NULL;
  if (shard_tokens < 1 || shard_tokens > LT_SHARD_MAX_TOKENS)
    return lt__err(LT_ERR_INVALID, "shard_writer_new: shard_tokens %lld outside [1, %lld]", (long long)shard_tokens,
                   (long long)LT_SHARD_MAX_TOKENS),
           NULL;
  lt_shard_writer *w = calloc(1, sizeof *w);
  if (!w) return lt__err(LT_ERR_NOMEM, "shard_writer_new: out of memory"), NULL;
  int v = lt_shard_version_for_vocab(vocab);
  w->info = (lt_shard_info){.version = v, .token_bytes = v == LT_SHARD_VERSION_U16 ? 2 : 4};
  w->vocab = vocab, w->cap = shard_tokens;
  w->dir = strdup(dir), w->prefix = strdup(prefix);
  size_t bytes = LT_SHARD_HEADER_BYTES + (size_t)shard_tokens * (size_t)w->info.token_bytes;
  w->buf = calloc(1, bytes);
  if (!w->dir || !w->prefix || !w->buf) {
    lt_shard_writer_free(w);
    return lt__err(LT_ERR_NOMEM, "shard_writer_new: out of memory for a shard of %lld tokens (%zu bytes)",
                   (long long)shard_tokens, bytes),
           NULL;
  }
  return w;
}

void lt_shard_writer_free(lt_shard_writer *w) {
  if (!w) return;
  free(w->dir), free(w->prefix), free(w->buf), free(w);
}

static lt_status flush_shard(lt_shard_writer *w) {
  if (w->n == 0) return LT_OK;
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s_%06lld.bin", w->dir, w->prefix, (long long)w->shards) >= (int)sizeof path)
    return lt__err(LT_ERR_OVERFLOW, "shard_writer: the path of shard %lld in '%s' is too long", (long long)w->shards,
                   w->dir);
  memset(w->buf, 0, LT_SHARD_HEADER_BYTES);
  wr_i32(w->buf, w->info.version == LT_SHARD_VERSION_U16 ? LT_SHARD_MAGIC : LT_SHARD_MAGIC_U32);
  wr_i32(w->buf + 4, w->info.version);
  wr_i32(w->buf + 8, (int32_t)w->n);
  lt_status s = lt_ckpt_write_file(path, w->buf, LT_SHARD_HEADER_BYTES + (size_t)w->n * (size_t)w->info.token_bytes);
  if (s != LT_OK) return lt__err(s, "shard_writer: %s", lt_last_error());
  w->shards++, w->total += w->n, w->n = 0;
  return LT_OK;
}

lt_status lt_shard_writer_add(lt_shard_writer *w, const int64_t *ids, int64_t n) {
  if (!w || (!ids && n > 0)) return lt__err(LT_ERR_NULL, "shard_writer_add: writer and ids must not be NULL");
  if (n < 0) return lt__err(LT_ERR_INVALID, "shard_writer_add: n %lld is negative", (long long)n);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= w->vocab)
      return lt__err(LT_ERR_INVALID, "shard_writer_add: id %lld at position %lld is outside [0, %lld)",
                     (long long)ids[i], (long long)i, (long long)w->vocab);
  const int tb = w->info.token_bytes;
  for (int64_t i = 0; i < n; i++) {
    unsigned char *q = w->buf + LT_SHARD_HEADER_BYTES + w->n * tb;
    uint32_t v = (uint32_t)ids[i];
    q[0] = (unsigned char)v, q[1] = (unsigned char)(v >> 8);
    if (tb == 4) q[2] = (unsigned char)(v >> 16), q[3] = (unsigned char)(v >> 24);
    if (++w->n == w->cap) {
      lt_status s = flush_shard(w);
      if (s != LT_OK) return s;
    }
  }
  return LT_OK;
}

lt_status lt_shard_writer_close(lt_shard_writer *w, int64_t *n_shards, int64_t *n_tokens) {
  if (!w) return lt__err(LT_ERR_NULL, "shard_writer_close: writer is NULL");
  lt_status s = flush_shard(w);
  if (n_shards) *n_shards = w->shards;
  if (n_tokens) *n_tokens = w->total;
  lt_shard_writer_free(w);
  return s;
}

/* ======================================================================== */
/* The loader                                                               */
/* ======================================================================== */

/* Bytes around a copied window whose pages are handed back (more than the
 * kernel's fault-around, /sys/kernel/mm/... fault_around_bytes, 64 KiB). */
#define DROP_AROUND ((uintptr_t)256 << 10)
/* Tokens checked per chunk at open; its pages are handed back after each. */
#define CHECK_CHUNK_BYTES ((size_t)4 << 20)

typedef struct {
  char *path;
  const unsigned char *map; /* the whole file, read-only */
  size_t size;
  lt_shard_info info;
  int64_t windows;
} shard;

/* One row of a planned batch: shard index (file order) and window index. */
typedef struct {
  int64_t shard, window;
} row;

struct lt_shard_loader {
  lt_shard_loader_opts o;
  int64_t world, G;      /* ranks, and windows per global batch (world * B) */
  int64_t n_shards;
  shard *s;
  int64_t windows, tokens, max_windows, nbatches;
  uint64_t fingerprint;
  size_t page;
  lt_generator *gen;
  /* The returned position. */
  int64_t epoch, index;
  /* The cursor: where the next planned window is in the epoch's order. */
  int64_t c_epoch, c_index; /* the (epoch, index) of the next batch planned */
  int64_t *shard_order;     /* [n_shards] of c_epoch */
  int64_t *wperm;           /* [max_windows] windows of shard shard_order[c_k] */
  int64_t wperm_k;          /* which position wperm is for (-1: none) */
  int64_t c_k, c_j;         /* shard position and window position of the next window */
  /* The batch planned next (and, with prefetch, being copied). */
  row *plan;                /* [B] */
  int64_t plan_n;           /* rows of this rank */
  bool planned;
  bool reseek;              /* a failed plan left the cursor astray: recompute it from the position */
  int64_t *xbuf, *ybuf;     /* [B * T] each */
  /* The prefetch thread. */
  bool thread_on;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int job;                  /* 0 idle, 1 to copy, 2 copied, -1 quit */
};

static lt_status seek(lt_shard_loader *L, int64_t e, int64_t index);

/* Generator seed of epoch e's order (splitmix64 of seed and e). */
static uint64_t epoch_seed(uint64_t seed, int64_t e) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * ((uint64_t)e + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* The permutation of [0, n) drawn from Philox offset `offset` of epoch e's
 * seed (the identity without shuffle). */
static lt_status perm_at(lt_generator *g, bool shuffle, uint64_t seed, int64_t e, uint64_t offset, int64_t n,
                         int64_t *dst) {
  if (!shuffle) {
    for (int64_t i = 0; i < n; i++) dst[i] = i;
    return LT_OK;
  }
  lt_status s = lt_generator_set_state(g, (lt_generator_state){epoch_seed(seed, e), offset});
  return s == LT_OK ? lt__draw_perm(g, n, dst) : s;
}

/* The order of epoch e: the shards' permutation (Philox offset 0), cursor at
 * its start. */
static lt_status begin_epoch(lt_shard_loader *L, int64_t e) {
  lt_status s = perm_at(L->gen, L->o.shuffle, L->o.seed, e, 0, L->n_shards, L->shard_order);
  if (s != LT_OK) return s;
  L->c_epoch = e, L->c_index = 0, L->c_k = 0, L->c_j = 0, L->wperm_k = -1;
  return LT_OK;
}

/* The window permutation of shard position k of the cursor's epoch (Philox
 * offset (k + 1) * 2^32: a shard's windows fit far below it). */
static lt_status load_wperm(lt_shard_loader *L, int64_t k) {
  if (L->wperm_k == k) return LT_OK;
  const shard *sh = &L->s[L->shard_order[k]];
  lt_status s = perm_at(L->gen, L->o.shuffle, L->o.seed, L->c_epoch, (uint64_t)(k + 1) << 32, sh->windows, L->wperm);
  if (s != LT_OK) return s;
  L->wperm_k = k;
  return LT_OK;
}

/* Plans the batch at the cursor into L->plan (this rank's rows) and moves
 * the cursor past its world * B windows (to the next epoch after the last
 * batch). Reads no token. */
static lt_status plan_next(lt_shard_loader *L) {
  if (L->c_index == L->nbatches) {
    lt_status s = begin_epoch(L, L->c_epoch + 1);
    if (s != LT_OK) return s;
  }
  int64_t g = L->G;
  if (L->c_index == L->nbatches - 1 && !L->o.drop_last && L->windows % L->G) g = L->windows % L->G;
  int64_t lo = L->o.rank * L->o.batch, hi = lo + L->o.batch;
  L->plan_n = 0;
  for (int64_t i = 0; i < g; i++) {
    while (L->c_j == L->s[L->shard_order[L->c_k]].windows) L->c_k++, L->c_j = 0;
    if (i >= lo && i < hi) {
      lt_status s = load_wperm(L, L->c_k);
      if (s != LT_OK) return s;
      L->plan[L->plan_n++] = (row){L->shard_order[L->c_k], L->wperm[L->c_j]};
    }
    L->c_j++;
  }
  L->c_index++;
  L->planned = true;
  return LT_OK;
}

/* Copies the planned rows into xbuf / ybuf and hands their pages back. */
static void copy_plan(lt_shard_loader *L) {
  const int64_t T = L->o.seq_len;
  for (int64_t b = 0; b < L->plan_n; b++) {
    const shard *sh = &L->s[L->plan[b].shard];
    const int tb = sh->info.token_bytes;
    const unsigned char *base = sh->map + LT_SHARD_HEADER_BYTES;
    int64_t t0 = L->plan[b].window * T;
    int64_t *xd = L->xbuf + b * T, *yd = L->ybuf + b * T;
    for (int64_t t = 0; t < T; t++) xd[t] = token_at(base, tb, t0 + t);
    memcpy(yd, xd + 1, (size_t)(T - 1) * sizeof *yd);
    yd[T - 1] = token_at(base, tb, t0 + T);
    /* Hand the window's pages back, and those around it: a page fault maps
     * the cached pages around the faulting one too (the kernel's
     * fault-around, 64 KiB by default), which would otherwise stay mapped
     * and make a whole shard resident window by window. */
    uintptr_t lo = (uintptr_t)sh->map, hi = lo + sh->size;
    uintptr_t a = (uintptr_t)(base + t0 * tb), z = (uintptr_t)(base + (t0 + T + 1) * tb);
    uintptr_t pa = a > lo + DROP_AROUND ? (a - DROP_AROUND) & ~(uintptr_t)(L->page - 1) : lo;
    uintptr_t pz = z + DROP_AROUND < hi ? (z + DROP_AROUND) & ~(uintptr_t)(L->page - 1) : hi;
    madvise((void *)pa, pz - pa, MADV_DONTNEED);
  }
}

static void *prefetch_main(void *arg) {
  lt_shard_loader *L = arg;
  pthread_mutex_lock(&L->mu);
  for (;;) {
    while (L->job == 0 || L->job == 2) pthread_cond_wait(&L->cv, &L->mu);
    if (L->job < 0) break;
    pthread_mutex_unlock(&L->mu);
    copy_plan(L);
    pthread_mutex_lock(&L->mu);
    L->job = 2;
    pthread_cond_broadcast(&L->cv);
  }
  pthread_mutex_unlock(&L->mu);
  return NULL;
}

/* Waits until the thread has no job in progress. */
static void wait_idle(lt_shard_loader *L) {
  if (!L->thread_on) return;
  pthread_mutex_lock(&L->mu);
  while (L->job == 1) pthread_cond_wait(&L->cv, &L->mu);
  pthread_mutex_unlock(&L->mu);
}

static void start_copy(lt_shard_loader *L) {
  if (!L->thread_on) return;
  pthread_mutex_lock(&L->mu);
  L->job = 1;
  pthread_cond_broadcast(&L->cv);
  pthread_mutex_unlock(&L->mu);
}

void lt_shard_loader_free(lt_shard_loader *L) {
  if (!L) return;
  if (L->thread_on) {
    pthread_mutex_lock(&L->mu);
    while (L->job == 1) pthread_cond_wait(&L->cv, &L->mu);
    L->job = -1;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
    pthread_join(L->thread, NULL);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv);
  }
  for (int64_t i = 0; i < L->n_shards; i++) {
    if (L->s[i].map) munmap((void *)L->s[i].map, L->s[i].size);
    free(L->s[i].path);
  }
  free(L->s);
  lt_generator_free(L->gen);
  free(L->shard_order), free(L->wperm), free(L->plan), free(L->xbuf), free(L->ybuf);
  free(L);
}

/* Opens, checks and maps one shard. */
static lt_status open_shard(lt_shard_loader *L, shard *sh) {
  const char *op = "shard_loader_open";
  uint64_t size;
  int fd = lt__open_regular(sh->path, op, UINT64_MAX, LT_ERR_IO, &size);
  if (fd < 0) return lt_last_status();
  if (size < LT_SHARD_HEADER_BYTES || size > SIZE_MAX) {
    close(fd);
    unsigned char none[LT_SHARD_HEADER_BYTES] = {0};
    return lt_shard_parse_header(none, 0, size, sh->path, &sh->info);
  }
  void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (m == MAP_FAILED) return lt__err(LT_ERR_IO, "%s: shard '%s': mmap failed: %s", op, sh->path, strerror(err));
  sh->map = m, sh->size = (size_t)size;
  lt_status s = lt_shard_parse_header(m, (size_t)size, size, sh->path, &sh->info);
  if (s != LT_OK) return s;
  /* Every token against the vocabulary, a chunk at a time, each chunk's pages
   * handed back afterwards. */
  const int64_t per = (int64_t)(CHECK_CHUNK_BYTES / (size_t)sh->info.token_bytes);
  for (int64_t i = 0; i < sh->info.n_tokens && L->o.vocab > 0; i += per) {
    int64_t n = sh->info.n_tokens - i < per ? sh->info.n_tokens - i : per;
    uint64_t off = LT_SHARD_HEADER_BYTES + (uint64_t)i * (uint64_t)sh->info.token_bytes;
    s = lt_shard_check_tokens(sh->map + off, n, &sh->info, L->o.vocab, off, sh->path);
    uintptr_t a = (uintptr_t)(sh->map + off) & ~(uintptr_t)(L->page - 1);
    madvise((void *)a, (size_t)((uintptr_t)(sh->map + off + (uint64_t)n * (uint64_t)sh->info.token_bytes) - a),
            MADV_DONTNEED);
    if (s != LT_OK) return s;
  }
  sh->windows = sh->info.n_tokens > 0 ? (sh->info.n_tokens - 1) / L->o.seq_len : 0;
  return LT_OK;
}

lt_shard_loader *lt_shard_loader_open(const char *pattern, const lt_shard_loader_opts *opts) {
  const char *op = "shard_loader_open";
  if (!pattern || !opts) return lt__err(LT_ERR_NULL, "%s: pattern and opts must not be NULL", op), NULL;
  lt_shard_loader_opts o = *opts;
  if (o.world < 1) o.world = 1, o.rank = 0;
  if (o.batch < 1 || o.seq_len < 1 || o.rank < 0 || o.rank >= o.world)
    return lt__err(LT_ERR_INVALID, "%s: batch %lld and seq_len %lld must be >= 1, rank %d in [0, world %d)", op,
                   (long long)o.batch, (long long)o.seq_len, o.rank, o.world),
           NULL;
  if (o.batch > ((int64_t)1 << 24) || o.seq_len > ((int64_t)1 << 24) || o.batch * o.seq_len > ((int64_t)1 << 32))
    return lt__err(LT_ERR_OVERFLOW, "%s: batch %lld x seq_len %lld is too large", op, (long long)o.batch,
                   (long long)o.seq_len),
           NULL;
  glob_t g;
  int gr = glob(pattern, GLOB_ERR, NULL, &g);
  if (gr != 0) {
    if (gr != GLOB_NOMATCH) globfree(&g);
    return lt__err(gr == GLOB_NOMATCH ? LT_ERR_INVALID : LT_ERR_IO, "%s: no shard matches '%s'%s", op, pattern,
                   gr == GLOB_NOMATCH ? "" : " (the directory cannot be read)"),
           NULL;
  }
  lt_shard_loader *L = calloc(1, sizeof *L);
  if (!L) {
    globfree(&g);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  }
  L->o = o;
  L->world = o.world;
  L->G = o.world * o.batch;
  L->page = (size_t)sysconf(_SC_PAGESIZE);
  L->n_shards = (int64_t)g.gl_pathc;
  L->s = calloc((size_t)L->n_shards, sizeof *L->s);
  lt_status s = L->s ? LT_OK : lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  for (int64_t i = 0; s == LT_OK && i < L->n_shards; i++)
    if (!(L->s[i].path = strdup(g.gl_pathv[i]))) s = lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  globfree(&g);
  uint64_t h = lt__fnv_mix(LT__FNV_BASIS, 0x5a4a5a4a); /* kind tag */
  for (int64_t i = 0; s == LT_OK && i < L->n_shards; i++) {
    s = open_shard(L, &L->s[i]);
    L->windows += L->s[i].windows;
    L->tokens += L->s[i].info.n_tokens;
    if (L->s[i].windows > L->max_windows) L->max_windows = L->s[i].windows;
    h = lt__fnv_mix(h, (uint64_t)L->s[i].info.n_tokens);
  }
  if (s == LT_OK) {
    L->nbatches = o.drop_last ? L->windows / L->G : (L->windows + L->G - 1) / L->G;
    if (L->nbatches < 1)
      s = lt__err(LT_ERR_INVALID,
                  "%s: '%s': %lld shards, %lld tokens: %lld windows of %lld + 1 tokens, fewer than a global batch of "
                  "%lld",
                  op, pattern, (long long)L->n_shards, (long long)L->tokens, (long long)L->windows,
                  (long long)o.seq_len, (long long)L->G);
  }
  if (s == LT_OK) {
    h = lt__fnv_mix(h, (uint64_t)L->n_shards);
    h = lt__fnv_mix(h, (uint64_t)L->G);
    h = lt__fnv_mix(h, (uint64_t)o.seq_len);
    h = lt__fnv_mix(h, (uint64_t)o.shuffle | (uint64_t)o.drop_last << 1);
    L->fingerprint = h;
    L->gen = lt_generator_new(o.seed);
    L->shard_order = malloc((size_t)L->n_shards * sizeof *L->shard_order);
    L->wperm = malloc((size_t)(L->max_windows > 0 ? L->max_windows : 1) * sizeof *L->wperm);
    L->plan = malloc((size_t)o.batch * sizeof *L->plan);
    L->xbuf = malloc((size_t)(o.batch * o.seq_len) * sizeof *L->xbuf);
    L->ybuf = malloc((size_t)(o.batch * o.seq_len) * sizeof *L->ybuf);
    if (!L->gen || !L->shard_order || !L->wperm || !L->plan || !L->xbuf || !L->ybuf)
      s = lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  }
  if (s == LT_OK) s = begin_epoch(L, 0);
  if (s == LT_OK && o.prefetch) {
    if (pthread_mutex_init(&L->mu, NULL) != 0 || pthread_cond_init(&L->cv, NULL) != 0 ||
        pthread_create(&L->thread, NULL, prefetch_main, L) != 0)
      s = lt__err(LT_ERR_NOMEM, "%s: cannot start the prefetch thread", op);
    else
      L->thread_on = true;
  }
  if (s != LT_OK) {
    lt_shard_loader_free(L);
    return NULL;
  }
  return L;
}

lt_status lt_shard_loader_next(lt_shard_loader *L, lt_tensor **x, lt_tensor **y) {
  if (!L || !x || !y) return lt__err(LT_ERR_NULL, "shard_loader_next: loader, x and y must not be NULL");
  if (!L->planned) { /* the first call, after set_position or a failed plan: plan and copy here */
    lt_status s = L->reseek ? seek(L, L->epoch, L->index) : LT_OK;
    if (s == LT_OK) L->reseek = false, s = plan_next(L);
    if (s != LT_OK) {
      L->reseek = true;
      return s;
    }
    copy_plan(L);
  } else {
    wait_idle(L);
    if (!L->thread_on) copy_plan(L);
  }
  const int64_t T = L->o.seq_len, b = L->plan_n;
  lt_tensor *xt = NULL, *yt = NULL;
  if (b > 0) {
    xt = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){b, T}, L->xbuf);
    yt = xt ? lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){b, T}, L->ybuf) : NULL;
    if (!yt) {
      lt_status s = lt_last_status();
      lt_tensor_free(xt);
      return s;
    }
  }
  /* The batch is out: the position moves, and the next one is planned and
   * copied in the background. A failure to plan leaves it unplanned (the
   * next call plans again and reports it). */
  L->epoch = L->c_epoch, L->index = L->c_index;
  L->planned = false;
  if (plan_next(L) == LT_OK) start_copy(L);
  else L->planned = false, L->reseek = true;
  *x = xt, *y = yt;
  return LT_OK;
}

int64_t lt_shard_loader_batches_per_epoch(const lt_shard_loader *L) { return L ? L->nbatches : 0; }
int64_t lt_shard_loader_num_shards(const lt_shard_loader *L) { return L ? L->n_shards : 0; }
int64_t lt_shard_loader_num_tokens(const lt_shard_loader *L) { return L ? L->tokens : 0; }
int64_t lt_shard_loader_num_windows(const lt_shard_loader *L) { return L ? L->windows : 0; }
const char *lt_shard_loader_shard_path(const lt_shard_loader *L, int64_t i) {
  return L && i >= 0 && i < L->n_shards ? L->s[i].path : NULL;
}

lt_loader_position lt_shard_loader_get_position(const lt_shard_loader *L) {
  return (lt_loader_position){.epoch = L->epoch, .index = L->index, .gen = {epoch_seed(L->o.seed, L->epoch), 0},
                              .fingerprint = L->fingerprint};
}

/* Moves the cursor to batch index of epoch e (no batch planned). */
static lt_status seek(lt_shard_loader *L, int64_t e, int64_t index) {
  lt_status s = begin_epoch(L, e);
  if (s != LT_OK) return s;
  int64_t skip = index * L->G;
  while (L->c_k < L->n_shards && skip >= L->s[L->shard_order[L->c_k]].windows)
    skip -= L->s[L->shard_order[L->c_k]].windows, L->c_k++;
  if (L->c_k == L->n_shards) L->c_k = L->n_shards - 1, skip = L->s[L->shard_order[L->c_k]].windows;
  L->c_j = skip;
  L->c_index = index;
  return LT_OK;
}

void lt_shard_loader_where(const lt_shard_loader *L, int64_t *shard, int64_t *offset) {
  /* Recomputed from the returned position with a generator of its own (the
   * cursor may be a batch ahead, planned for the prefetch thread). */
  int64_t e = L->epoch, idx = L->index;
  if (idx == L->nbatches) e++, idx = 0;
  int64_t *order = malloc((size_t)L->n_shards * sizeof *order), *perm = NULL;
  lt_generator *g = lt_generator_new(0);
  int64_t sh = -1, off = 0;
  if (order && g && perm_at(g, L->o.shuffle, L->o.seed, e, 0, L->n_shards, order) == LT_OK) {
    int64_t skip = idx * L->G, k = 0;
    while (k < L->n_shards && skip >= L->s[order[k]].windows) skip -= L->s[order[k]].windows, k++;
    if (k < L->n_shards && (perm = malloc((size_t)L->s[order[k]].windows * sizeof *perm)) &&
        perm_at(g, L->o.shuffle, L->o.seed, e, (uint64_t)(k + 1) << 32, L->s[order[k]].windows, perm) == LT_OK)
      sh = order[k], off = perm[skip] * L->o.seq_len;
  }
  free(order), free(perm);
  lt_generator_free(g);
  if (shard) *shard = sh;
  if (offset) *offset = off;
}

lt_status lt_shard_loader_set_position(lt_shard_loader *L, lt_loader_position pos) {
  const char *op = "shard_loader_set_position";
  if (!L) return lt__err(LT_ERR_NULL, "%s: loader is NULL", op);
  if (pos.fingerprint != L->fingerprint)
    return lt__err(LT_ERR_STATE,
                   "%s: position fingerprint %016llx does not match these shards' %016llx: different shards, "
                   "token counts or batch options",
                   op, (unsigned long long)pos.fingerprint, (unsigned long long)L->fingerprint);
  if (pos.epoch < 0 || pos.index < 0 || pos.index > L->nbatches)
    return lt__err(LT_ERR_INVALID, "%s: epoch %lld must be >= 0 and index %lld in [0, %lld]", op,
                   (long long)pos.epoch, (long long)pos.index, (long long)L->nbatches);
  if (pos.gen.seed != epoch_seed(L->o.seed, pos.epoch) || pos.gen.offset != 0)
    return lt__err(LT_ERR_STATE, "%s: generator state (seed %016llx, offset %llu) is not epoch %lld's of seed %llu", op,
                   (unsigned long long)pos.gen.seed, (unsigned long long)pos.gen.offset, (long long)pos.epoch,
                   (unsigned long long)L->o.seed);
  wait_idle(L);
  lt_status s = seek(L, pos.epoch, pos.index);
  if (s != LT_OK) return s;
  L->epoch = pos.epoch, L->index = pos.index;
  L->planned = false, L->reseek = false;
  return LT_OK;
}

lt_status lt_shard_loader_rewind(lt_shard_loader *L) {
  if (!L) return lt__err(LT_ERR_NULL, "shard_loader_rewind: loader is NULL");
  return lt_shard_loader_set_position(L, (lt_loader_position){.gen = {epoch_seed(L->o.seed, 0), 0},
                                                              .fingerprint = L->fingerprint});
}
