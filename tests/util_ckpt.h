/*
 * tests/util_ckpt.h: what the checkpoint tests share: a temporary directory
 * per test (made by the checked fixture, removed with its contents after),
 * paths in it, whole-file reads and writes, and HDF5's header (which
 * tests/CMakeLists.txt does not put on the include path: Debian keeps it in
 * /usr/include/hdf5/serial).
 *
 * What this is not: a checkpoint writer (but for ckpt_write_h5py, a file as
 * another tool writes it). Bad files are crafted in test_checkpoint_badfiles.c
 * and test_hostile.c with plain HDF5 calls.
 */
#ifndef LT_TEST_UTIL_CKPT_H
#define LT_TEST_UTIL_CKPT_H

#if __has_include(<hdf5.h>)
#include <hdf5.h>
#else
#include <hdf5/serial/hdf5.h>
#endif
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "nn/nn.h"

/* The current test's directory ("/tmp/lt_ckpt_XXXXXX" made unique). */
extern char ckpt_tmpdir[256];
/* Checked-fixture setup and teardown: makes ckpt_tmpdir (and switches HDF5's
 * automatic error printing off: crafting calls may fail on purpose); removes
 * it with everything in it. */
void ckpt_tmpdir_make(void);
void ckpt_tmpdir_remove(void);
/* Removes dir and everything below it (symbolic links are not followed). */
void ckpt_rm_rf(const char *dir);
/* "<ckpt_tmpdir>/<name>" in one of 4 rotating static buffers. */
char *ckpt_path(const char *name);

/* The whole file (new, free it; NUL-terminated after its n bytes) and its
 * size; fails the test if it cannot be read. */
unsigned char *ckpt_read_file(const char *path, size_t *n);
/* Writes n bytes as the whole file (fails the test if it cannot). */
void ckpt_write_file(const char *path, const void *b, size_t n);
/* The size of path (fails the test if it does not exist). */
off_t ckpt_file_size(const char *path);
/* Files in dir whose name marks a save's temporary (".lttmp."). */
int ckpt_count_tmp_files(const char *dir);
/* The checkpoint layout of the f32 tensors of p ("format_version" 1,
 * "library_version" "h5py", "content" "model", variable-length strings; on
 * /model the bools "pre_norm" true and "bias" false as h5py's enum) with
 * a 512-byte user block, unsealed, as h5py writes it: with latest false in
 * h5py's default layout (H5F_LIBVER_EARLIEST: version-0 superblock,
 * version-1 object headers, symbol-table groups, no checksums), with latest
 * true as h5py's libver='latest'. */
void ckpt_write_h5py(const char *path, const lt_params *p, bool latest);

#endif
