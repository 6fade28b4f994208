/*
 * tests/test_checkpoint_kill.c: a process saving numbered checkpoints in a
 * loop (keep-last-3 rotation) is killed with SIGKILL at random moments, many
 * times. After every kill: each file with a checkpoint's name loads and holds
 * exactly the values of its step (so nothing torn is ever mistaken for a
 * checkpoint), the newest one is what lt_ckpt_latest returns with and without
 * verification, and it is never older than the newest before the trial.
 * Leftover temporaries (kills in the middle of a save) are ignored, and the
 * next save removes them.
 *
 * The saving process is this program run as "test_checkpoint_kill --child
 * <dir> <first step>". Trials: LT_CKPT_KILL_TRIALS (default 60).
 */
#define _DEFAULT_SOURCE /* mkdtemp, usleep */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "nn/nn.h"
#include "test_util.h"

enum { N = 48 * 48 };

static lt_params *make_model(void) {
  lt_params *p = lt_params_new();
  if (!p || lt_params_add(p, "layer.w", lt_zeros(LT_DTYPE_F32, LT_SHAPE(48, 48)), 0) ||
      lt_params_add(p, "layer.b", lt_zeros(LT_DTYPE_F32, LT_SHAPE(48)), 0) ||
      lt_params_add(p, "seen", lt_zeros(LT_DTYPE_I64, LT_SHAPE(4)), LT_PARAM_BUFFER))
    return NULL;
  return p;
}

/* The values of step: exact in f32 and i64. */
static void fill(lt_params *p, int64_t step) {
  float *w = lt_params_find(p, "layer.w")->data, *b = lt_params_find(p, "layer.b")->data;
  int64_t *s = lt_params_find(p, "seen")->data;
  for (int i = 0; i < N; i++) w[i] = (float)(step * 1000 + i % 977);
  for (int i = 0; i < 48; i++) b[i] = (float)(-step - i);
  for (int i = 0; i < 4; i++) s[i] = step * 10 + i;
}

static bool holds(const lt_params *p, int64_t step) {
  const float *w = lt_params_find(p, "layer.w")->data, *b = lt_params_find(p, "layer.b")->data;
  const int64_t *s = lt_params_find(p, "seen")->data;
  for (int i = 0; i < N; i++)
    if (w[i] != (float)(step * 1000 + i % 977)) return false;
  for (int i = 0; i < 48; i++)
    if (b[i] != (float)(-step - i)) return false;
  for (int i = 0; i < 4; i++)
    if (s[i] != step * 10 + i) return false;
  return true;
}

static const char *gname[1] = {"data"};

/* The child: save steps first, first+1, ... forever (until killed). */
static int child(const char *dir, int64_t first, int ready_fd) {
  lt_params *p = make_model();
  lt_generator *g = lt_generator_new(1);
  lt_ckpt_meta *extra = lt_ckpt_meta_new();
  if (!p || !g || !extra) return 2;
  if (write(ready_fd, "r", 1) != 1) return 2;
  close(ready_fd);
  char path[512];
  for (int64_t step = first;; step++) {
    fill(p, step);
    lt_generator_set_state(g, (lt_generator_state){(uint64_t)step, (uint64_t)step * 3});
    char blob[64];
    int n = snprintf(blob, sizeof blob, "loader at step %lld", (long long)step);
    lt_ckpt_meta_set_bytes(extra, "loader", blob, (size_t)n);
    lt_train_state st = {.params = p, .step = step, .n_generators = 1, .generator_names = gname,
                         .generators = &g};
    if (lt_ckpt_step_path(path, sizeof path, dir, "ckpt", step) ||
        lt_ckpt_save_training(path, &st, NULL, extra, NULL) || lt_ckpt_rotate(dir, "ckpt", 3)) {
      fprintf(stderr, "child: %s\n", lt_last_error());
      return 1;
    }
  }
}

static char tmpdir[256];

/* Checks the directory after a kill. Returns the newest step (-1 if none)
 * and counts leftover temporaries. */
static int64_t check_dir(int64_t newest_before, int *temps) {
  DIR *d = opendir(tmpdir);
  ck_assert_ptr_nonnull(d);
  struct dirent *de;
  int64_t newest = -1;
  int finals = 0;
  *temps = 0;
  lt_params *m = make_model();
  lt_generator *g = lt_generator_new(0);
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (strstr(de->d_name, ".lttmp.")) {
      ck_assert_msg(de->d_name[0] == '.', "temporary %s", de->d_name);
      (*temps)++;
      continue;
    }
    long long step;
    char tail[8];
    ck_assert_msg(sscanf(de->d_name, "ckpt-%12lld%7s", &step, tail) == 2 && !strcmp(tail, ".h5"),
                  "unexpected file %s", de->d_name);
    /* Every file under a checkpoint's name is a complete checkpoint of its step. */
    char p[600];
    snprintf(p, sizeof p, "%s/%s", tmpdir, de->d_name);
    lt_train_state st = {.params = m, .n_generators = 1, .generator_names = gname, .generators = &g};
    lt_ckpt_info *info = NULL;
    lt_status s = lt_ckpt_load_training(p, &st, NULL, &info);
    ck_assert_msg(s == LT_OK, "%s does not load: %s", de->d_name, lt_last_error());
    ck_assert_msg(holds(m, step), "%s holds other values", de->d_name);
    ck_assert_int_eq(st.step, step);
    ck_assert(lt_generator_get_state(g).seed == (uint64_t)step && lt_generator_get_state(g).offset == (uint64_t)step * 3);
    const void *blob;
    size_t n;
    LT_OK_OR_FAIL(lt_ckpt_meta_get_bytes(info->extra, "loader", &blob, &n));
    char want[64];
    ck_assert_int_eq(n, (size_t)snprintf(want, sizeof want, "loader at step %lld", step));
    ck_assert(!memcmp(blob, want, n));
    lt_ckpt_info_free(info);
    finals++;
    if (step > newest) newest = step;
  }
  closedir(d);
  /* keep-last-3, plus one per child killed between its save and its rotation */
  ck_assert_int_ge(finals, newest_before >= 0 ? 1 : 0);
  int64_t a, b;
  char pa[600], pb[600];
  LT_OK_OR_FAIL(lt_ckpt_latest(tmpdir, "ckpt", true, &a, pa, sizeof pa));
  LT_OK_OR_FAIL(lt_ckpt_latest(tmpdir, "ckpt", false, &b, pb, sizeof pb));
  ck_assert_int_eq(a, newest);
  ck_assert_int_eq(b, newest);
  ck_assert_int_ge(newest, newest_before);
  lt_generator_free(g);
  lt_params_free(m);
  return newest;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

START_TEST(sigkill_while_saving) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_ckkill_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  const char *env = getenv("LT_CKPT_KILL_TRIALS");
  int trials = env ? atoi(env) : 60;
  rng_state ^= (uint64_t)time(NULL);
  int64_t newest = -1;
  int with_temp = 0, passed = 0, progressed = 0;
  uint64_t window_us = 25000;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int t = 0; t < trials; t++) {
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      char first[32], fd[16];
      snprintf(first, sizeof first, "%lld", (long long)(newest + 1));
      snprintf(fd, sizeof fd, "%d", fds[1]);
      execl("/proc/self/exe", "test_checkpoint_kill", "--child", tmpdir, first, fd, (char *)NULL);
      _exit(127);
    }
    close(fds[1]);
    char c;
    ck_assert_int_eq(read(fds[0], &c, 1), 1); /* the child is ready to save */
    close(fds[0]);
    /* A random moment in the first ~25 ms of saving (a save takes a few ms
     * on a quiet machine). On a loaded one a save can take far longer, so a
     * trial that saw no newer checkpoint widens the window by half (up to
     * 2 s): some kills still land after a save, which the test requires. */
    usleep((useconds_t)(next_rand() % window_us));
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child ended by itself (status %d)", status);
    int temps;
    int64_t now = check_dir(newest, &temps);
    if (temps) with_temp++;
    if (now > newest) progressed++;
    else if (window_us < 2000000) window_us += window_us / 2;
    newest = now;
    passed++;
  }
  /* One more save cleans up every leftover temporary. */
  lt_params *m = make_model();
  fill(m, newest + 1);
  char p[600];
  LT_OK_OR_FAIL(lt_ckpt_step_path(p, sizeof p, tmpdir, "ckpt", newest + 1));
  LT_OK_OR_FAIL(lt_ckpt_save_params(p, m, NULL, NULL));
  LT_OK_OR_FAIL(lt_ckpt_rotate(tmpdir, "ckpt", 3));
  DIR *d = opendir(tmpdir);
  struct dirent *de;
  int left = 0;
  while ((de = readdir(d))) {
    ck_assert_msg(!strstr(de->d_name, ".lttmp."), "temporary %s survived a save", de->d_name);
    if (de->d_name[0] != '.') {
      left++;
      char q[600];
      snprintf(q, sizeof q, "%s/%s", tmpdir, de->d_name);
      unlink(q);
    }
  }
  closedir(d);
  ck_assert_int_eq(left, newest + 2 < 3 ? newest + 2 : 3);
  rmdir(tmpdir);
  lt_params_free(m);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("kill trials: %d of %d passed (%d killed mid-save leaving a temporary, %d with a newer checkpoint); "
         "newest step %lld; %.1f s\n", passed, trials, with_temp, progressed, (long long)newest,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  ck_assert_int_ge(passed, 50);
  ck_assert_int_gt(progressed, 0);
}
END_TEST

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "--child")) return child(argv[2], atoll(argv[3]), atoi(argv[4]));
  Suite *s = suite_create("checkpoint_kill");
  TCase *tc = tcase_create("kill");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, sigkill_while_saving);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
