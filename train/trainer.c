/*
 * train/trainer.c: the training loop of train/trainer.h: the step
 * (accumulation, non-finite skip, clipping, schedule, optimizer), the
 * cadence of evaluations and checkpoints, the metrics CSV, the progress
 * line, stop requests and the run directory.
 *
 * What it is not: the model's code (batches, forward passes, metrics and the
 * model's own checkpoint values come from the hooks), or what a checkpoint
 * of the trainer holds and how it is resumed (train/trainer_ckpt.c).
 */
#include "train/trainer_internal.h"

#include "dist/dist.h"
#include "tensor/error_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* What one step did. */
typedef struct step_result {
  double loss;       /* sum over micro-batches of loss * weight (a non-finite loss as is) */
  double grad_norm;  /* before clipping; NAN when the loss was non-finite */
  double lr;
  int64_t tokens;
  bool skipped;
  const char *why;   /* why it was skipped */
} step_result;

static volatile sig_atomic_t stop_flag;

/* ======================================================================== */
/* Small helpers                                                            */
/* ======================================================================== */

char *lt_trainer_fmt_duration(double s, char *buf, size_t n) {
  if (!buf || n == 0) return buf;
  if (!(s >= 0) || s > 1e7) snprintf(buf, n, "?");
  else if (s < 60) snprintf(buf, n, "%.1fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
  else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
  return buf;
}
#define DUR(s) lt_trainer_fmt_duration((s), (char[32]){0}, 32)

/* Resident set size now, in MB. */
static double rss_mb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

static lt_status copy_path(char *dst, const char *src, const char *what) {
  int n = snprintf(dst, LT__TRAINER_PATH_LEN, "%s", src);
  if (n < 0 || n >= LT__TRAINER_PATH_LEN)
    return lt__err(LT_ERR_OVERFLOW, "trainer: %s is longer than %d bytes", what, LT__TRAINER_PATH_LEN - 1);
  return LT_OK;
}

void lt_trainer_end_line(lt_trainer *t) {
  if (t && t->line_open) fputs("\r\033[K", t->out), fflush(t->out);
  if (t) t->line_open = false;
}

/* ======================================================================== */
/* Stop requests                                                            */
/* ======================================================================== */

void lt_trainer_request_stop(int reason) { stop_flag = reason; }
int lt_trainer_stop_requested(void) { return (int)stop_flag; }

static char signal_msg[160];
static size_t signal_msg_len;

static void on_signal(int sig) {
  stop_flag = sig;
  ssize_t w = write(STDERR_FILENO, signal_msg, signal_msg_len);
  (void)w;
}

lt_status lt_trainer_install_signal_handlers(const char *program) {
  int n = snprintf(signal_msg, sizeof signal_msg,
                   "\n%.64s: signal received: stopping after this step and saving a checkpoint (again to quit at "
                   "once)\n", program ? program : "libtensor");
  signal_msg_len = n > 0 && (size_t)n < sizeof signal_msg ? (size_t)n : 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND; /* a second signal kills at once (saves are atomic: no torn file) */
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
    return lt__err(LT_ERR_IO, "trainer: installing the SIGINT/SIGTERM handlers: %s", strerror(errno));
  return LT_OK;
}

/* ======================================================================== */
/* Run directories                                                          */
/* ======================================================================== */

lt_status lt_trainer_make_dir(const char *dir) {
  if (!dir) return lt__err(LT_ERR_NULL, "trainer_make_dir: dir is NULL");
  char p[LT__TRAINER_PATH_LEN];
  lt_status s = copy_path(p, dir, "the run directory");
  if (s != LT_OK) return s;
  for (char *q = p + 1; *q; q++) {
    if (*q != '/') continue;
    *q = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      return lt__err(LT_ERR_IO, "cannot create directory '%s': %s", p, strerror(errno));
    *q = '/';
  }
  if (mkdir(p, 0777) != 0 && errno != EEXIST)
    return lt__err(LT_ERR_IO, "cannot create directory '%s': %s", p, strerror(errno));
  return LT_OK;
}

lt_status lt_trainer_find_resume(const char *arg, const char *prefix, char *path, size_t size) {
  if (!arg || !prefix || !path) return lt__err(LT_ERR_NULL, "trainer_find_resume: a NULL argument");
  struct stat sb;
  if (stat(arg, &sb) != 0) return lt__err(LT_ERR_INVALID, "'%s': %s", arg, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) {
    int n = snprintf(path, size, "%s", arg);
    if (n < 0 || (size_t)n >= size) return lt__err(LT_ERR_OVERFLOW, "'%s': the path is longer than %zu bytes", arg, size - 1);
    return LT_OK;
  }
  int64_t step;
  lt_status s = lt_ckpt_latest(arg, prefix, true, &step, path, size);
  if (s != LT_OK) return s;
  if (step < 0)
    return lt__err(LT_ERR_STATE, "'%s': no valid checkpoint (%s-*.h5) in this directory", arg, prefix);
  return LT_OK;
}

lt_status lt_trainer_clear_dir(const char *dir, const char *prefix) {
  if (!dir || !prefix) return lt__err(LT_ERR_NULL, "trainer_clear_dir: a NULL argument");
  DIR *d = opendir(dir);
  if (!d) return LT_OK;
  size_t plen = strlen(prefix);
  struct dirent *e;
  lt_status s = LT_OK;
  while (s == LT_OK && (e = readdir(d))) {
    const char *n = e->d_name;
    size_t len = strlen(n);
    /* "<prefix>-<12 digits>.h5", the pattern of lt_ckpt_step_path */
    if (len == plen + 16 && !strncmp(n, prefix, plen) && n[plen] == '-' && !strcmp(n + len - 3, ".h5")) {
      char p[LT__TRAINER_PATH_LEN];
      int k = snprintf(p, sizeof p, "%s/%s", dir, n);
      if (k < 0 || k >= LT__TRAINER_PATH_LEN) s = lt__err(LT_ERR_OVERFLOW, "'%s/%s': the path is too long", dir, n);
      else if (remove(p) != 0 && errno != ENOENT) /* another rank may have deleted it */
        s = lt__err(LT_ERR_IO, "cannot delete '%s': %s", p, strerror(errno));
    }
  }
  closedir(d);
  return s;
}

/* ======================================================================== */
/* The trainer                                                              */
/* ======================================================================== */

lt_trainer *lt_trainer_new(const lt_trainer_config *cfg, const lt_trainer_hooks *hooks) {
  if (!cfg || !hooks) return lt__err(LT_ERR_NULL, "trainer_new: %s is NULL", cfg ? "hooks" : "cfg"), NULL;
  const lt_trainer_config *c = cfg;
#define NEED(cond, ...)                         \
  do {                                          \
    if (!(cond)) {                              \
      lt__err(LT_ERR_INVALID, __VA_ARGS__);     \
      return NULL;                              \
    }                                           \
  } while (0)
  if (!c->params || !c->optim || !c->optim_config || !c->schedule || !hooks->micro_batch) {
    lt__err(LT_ERR_NULL, "trainer_new: %s is NULL (required)",
            !c->params ? "cfg.params" : !c->optim ? "cfg.optim" : !c->optim_config ? "cfg.optim_config"
            : !c->schedule ? "cfg.schedule" : "hooks.micro_batch");
    return NULL;
  }
  NEED(c->steps >= 1, "trainer_new: steps %lld: must be >= 1", (long long)c->steps);
  NEED(c->accum >= 1 && c->accum <= LT_TRAINER_MAX_ACCUM, "trainer_new: accum %lld: must be in [1, %lld]",
       (long long)c->accum, (long long)LT_TRAINER_MAX_ACCUM);
  NEED(c->clip >= 0 && !isnan(c->clip), "trainer_new: clip %g: must be >= 0 (0 turns clipping off)", c->clip);
  NEED(c->max_nonfinite >= 1, "trainer_new: max_nonfinite %lld: must be >= 1", (long long)c->max_nonfinite);
  NEED(c->eval_every >= 0 && c->ckpt_every >= 0 && c->keep >= 0 && c->stop_after >= 0,
       "trainer_new: eval_every %lld, ckpt_every %lld, keep %lld, stop_after %lld: must be >= 0",
       (long long)c->eval_every, (long long)c->ckpt_every, (long long)c->keep, (long long)c->stop_after);
  NEED(c->log_every >= 1, "trainer_new: log_every %lld: must be >= 1", (long long)c->log_every);
  NEED(c->n_metrics >= 0 && (c->n_metrics == 0 || c->metrics), "trainer_new: %d metrics without their names",
       c->n_metrics);
  NEED(c->n_generators >= 0 && (c->n_generators == 0 || (c->generator_names && c->generators)),
       "trainer_new: %d generators without their names or pointers", c->n_generators);
  NEED(c->zero == 0 || c->zero == 1, "trainer_new: zero %d: must be 0 (off) or 1 (ZeRO-1: optimizer state sharded)",
       c->zero);
  NEED(c->autocast == LT_DTYPE_F32 || c->autocast == LT_DTYPE_BF16,
       "trainer_new: autocast %s: must be LT_DTYPE_F32 (the caller's mode) or LT_DTYPE_BF16 (autocast on)",
       lt_dtype_name(c->autocast));
  NEED(!hooks->set_position == !hooks->get_position, "trainer_new: set_position and get_position go together");
  NEED(!(c->shards && hooks->get_position),
       "trainer_new: shards and the get_position / set_position hooks both say where the data is: give one");
  NEED(c->progress >= LT_TRAINER_PROGRESS_AUTO && c->progress <= LT_TRAINER_PROGRESS_OFF,
       "trainer_new: progress %d: not an lt_trainer_progress", (int)c->progress);
  const char *prefix = c->ckpt_prefix ? c->ckpt_prefix : "ckpt";
  NEED(*prefix && strlen(prefix) < 64 && !strchr(prefix, '/'),
       "trainer_new: ckpt_prefix '%s': 1 to 63 bytes, no '/'", prefix);
  double lr1 = lt_schedule_lr(c->schedule, 1);
  NEED(isfinite(lr1) && lr1 >= 0, "trainer_new: the learning-rate schedule gives %g at step 1", lr1);
#undef NEED
  lt_trainer *t = calloc(1, sizeof *t);
  double *values = calloc((size_t)c->n_metrics + 1, sizeof *values);
  if (!t || !values) {
    free(t), free(values);
    lt__err(LT_ERR_NOMEM, "trainer_new: out of memory");
    return NULL;
  }
  t->c = *c;
  t->h = *hooks;
  t->values = values;
  snprintf(t->prefix, sizeof t->prefix, "%s", prefix);
  t->c.ckpt_prefix = t->prefix;
  lt_status s = LT_OK;
  if (c->dir) s = copy_path(t->dir, c->dir, "the run directory");
  if (s == LT_OK && c->csv_path) s = copy_path(t->csv_path, c->csv_path, "the CSV path");
  else if (s == LT_OK && c->dir) {
    int n = snprintf(t->csv_path, LT__TRAINER_PATH_LEN, "%s/metrics.csv", c->dir);
    if (n < 0 || n >= LT__TRAINER_PATH_LEN) s = lt__err(LT_ERR_OVERFLOW, "trainer_new: '%s/metrics.csv' is too long", c->dir);
  }
  if (s != LT_OK) {
    lt_trainer_free(t);
    return NULL;
  }
  t->out = c->out ? c->out : stdout;
  if (lt_dist_rank() != 0) { /* rank 0 alone prints, writes the CSV and saves checkpoints */
    t->csv_path[0] = '\0';
    t->devnull = fopen("/dev/null", "w");
    if (!t->devnull) {
      lt__err(LT_ERR_IO, "trainer_new: cannot open /dev/null for rank %d's output", lt_dist_rank());
      lt_trainer_free(t);
      return NULL;
    }
    t->out = t->devnull;
  }
  /* under mpirun a rank's stdout is a pseudo-terminal whatever mpirun's own is: lines */
  t->redraw = c->progress == LT_TRAINER_PROGRESS_REDRAW ||
              (c->progress == LT_TRAINER_PROGRESS_AUTO && !lt_dist_active() && isatty(fileno(t->out)));
  return t;
}

void lt_trainer_free(lt_trainer *t) {
  if (!t) return;
  if (t->csv) fclose(t->csv);
  if (t->devnull) fclose(t->devnull);
  lt_dist_grads_free(t->grads);
  lt_dist_zero_free(t->zero);
  free(t->values);
  free(t);
}

int64_t lt_trainer_step(const lt_trainer *t) { return t ? t->step : 0; }

/* ======================================================================== */
/* The metrics CSV                                                          */
/* ======================================================================== */

static lt_status csv_error(const lt_trainer *t, const char *what) {
  return lt__err(LT_ERR_IO, "metrics CSV '%s': %s: %s", t->csv_path, what, strerror(errno ? errno : EIO));
}

static int write_header(const lt_trainer *t, FILE *f) {
  int bad = fputs("step,epoch,lr,train_loss,grad_norm,skipped,tokens,step_ms,tokens_per_s,elapsed_s,", f) < 0;
  for (int i = 0; i < t->c.n_metrics; i++) bad |= fprintf(f, "%s,", t->c.metrics[i].name) < 0;
  bad |= fputs("rss_mb\n", f) < 0;
  return bad;
}

/* The directory part of path ("." if none) into buf. */
static void dir_of(const char *path, char *buf) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(buf, LT__TRAINER_PATH_LEN, ".");
  else if (slash == path) snprintf(buf, LT__TRAINER_PATH_LEN, "/");
  else snprintf(buf, LT__TRAINER_PATH_LEN, "%.*s", (int)(slash - path), path);
}

/* After a resume: the header and the rows of steps <= t->step of the
 * existing file (rows a killed process wrote after its last checkpoint are
 * dropped), written to a temporary file beside it, fsynced and renamed over
 * it: at every moment the CSV is the old one or the new one, complete. */
static lt_status csv_rewrite(lt_trainer *t) {
  struct stat sb;
  if (stat(t->csv_path, &sb) != 0) {
    if (errno == ENOENT) return LT_OK; /* no CSV yet: a new one */
    return csv_error(t, "cannot read it");
  }
  if (!S_ISREG(sb.st_mode)) return LT_OK; /* a pipe or a device: nothing to keep, nothing to rename */
  FILE *in = fopen(t->csv_path, "r");
  if (!in) return csv_error(t, "cannot read it");
  char tmp[LT__TRAINER_PATH_LEN + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", t->csv_path);
  int fd = mkstemp(tmp);
  FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!out) {
    lt_status s = csv_error(t, "cannot create a temporary file beside it");
    if (fd >= 0) close(fd), unlink(tmp);
    fclose(in);
    return s;
  }
  errno = 0;
  int bad = write_header(t, out);
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  bool first = true;
  while (!bad && (n = getline(&line, &cap, in)) > 0) {
    long long st = -1;
    bool header = first;
    first = false;
    if (header || sscanf(line, "%lld", &st) != 1 || st > t->step || st < 1 || line[n - 1] != '\n') continue;
    bad |= fputs(line, out) < 0;
  }
  free(line);
  bad |= ferror(in);
  fclose(in);
  bad |= fflush(out) != 0 || fsync(fileno(out)) != 0;
  int saved = errno;
  bad |= fclose(out) != 0;
  if (!bad && rename(tmp, t->csv_path) != 0) bad = 1, saved = errno;
  if (bad) {
    errno = saved ? saved : errno;
    lt_status s = csv_error(t, "rewriting it up to the resumed step");
    unlink(tmp);
    return s;
  }
  char dir[LT__TRAINER_PATH_LEN];
  dir_of(t->csv_path, dir);
  int dfd = open(dir, O_RDONLY);
  if (dfd >= 0) fsync(dfd), close(dfd);
  return LT_OK;
}

static lt_status csv_open(lt_trainer *t) {
  t->csv_opened = true;
  if (!t->csv_path[0]) return LT_OK;
  errno = 0;
  if (t->resumed) {
    lt_status s = csv_rewrite(t);
    if (s != LT_OK) return s;
    struct stat sb;
    bool regular = stat(t->csv_path, &sb) == 0 && S_ISREG(sb.st_mode);
    if (regular && (t->csv = fopen(t->csv_path, "r+"))) { /* the rewritten file: append to it */
      if (fseek(t->csv, 0, SEEK_END) != 0) return csv_error(t, "cannot append to it");
      return LT_OK;
    }
    if (regular) return csv_error(t, "cannot open it");
  }
  t->csv = fopen(t->csv_path, "w");
  if (!t->csv) return csv_error(t, "cannot write it");
  if (write_header(t, t->csv) || fflush(t->csv) != 0) return csv_error(t, "cannot write it");
  return LT_OK;
}

static double epoch_of(const lt_trainer *t) {
  if (!lt__trainer_has_position(t)) return 0;
  lt_loader_position p = lt__trainer_get_position(t);
  int64_t bpe = lt__trainer_batches_per_epoch(t, 0);
  return (double)p.epoch + (bpe > 0 ? (double)p.index / (double)bpe : 0.0);
}

/* One row per step; values: the evaluation of this step, or NULL. */
static lt_status csv_row(lt_trainer *t, const step_result *S, double step_s, const double *values) {
  if (!t->csv) return LT_OK;
  FILE *f = t->csv;
  const lt__trainer_meter *M = &t->M;
  errno = 0;
  int bad = fprintf(f, "%lld,%.4f,%.9g,%.17g,%.9g,%d,%lld,%.3f,%.1f,%.3f,", (long long)t->step, epoch_of(t), S->lr,
                    S->loss, S->grad_norm, S->skipped ? 1 : 0, (long long)t->tokens, 1000 * step_s,
                    M->tokens_ema / M->time_ema, t->train_seconds) < 0;
  for (int i = 0; i < t->c.n_metrics; i++) {
    if (values && !isnan(values[i]))
      bad |= fprintf(f, t->c.metrics[i].csv_format ? t->c.metrics[i].csv_format : "%.9g", values[i]) < 0;
    bad |= fputc(',', f) == EOF;
  }
  bad |= fprintf(f, "%.1f\n", rss_mb()) < 0;
  bad |= fflush(f) != 0;
  bad |= ferror(f);
  if (bad) return csv_error(t, "write failed");
  return LT_OK;
}

/* ======================================================================== */
/* Progress                                                                 */
/* ======================================================================== */

static void meter_add(lt__trainer_meter *M, const step_result *S, double dt) {
  M->n++;
  double a = M->n < 20 ? 1.0 / (double)M->n : 0.05;
  M->time_ema += a * (dt - M->time_ema);
  M->tokens_ema += a * ((double)S->tokens - M->tokens_ema);
  if (isfinite(S->loss)) {
    M->n_loss++;
    double b = M->n_loss < 20 ? 1.0 / (double)M->n_loss : 0.05;
    M->loss_ema = M->n_loss == 1 ? S->loss : M->loss_ema + b * (S->loss - M->loss_ema);
  }
  M->win_steps++, M->win_tokens += S->tokens, M->win_time += dt;
  if (isfinite(S->loss)) M->win_loss += S->loss, M->win_finite++;
}

/* The live line: redrawn in place on a terminal, else printed every log_every steps. */
static void progress(lt_trainer *t, const step_result *S) {
  lt__trainer_meter *M = &t->M;
  const lt_trainer_config *c = &t->c;
  if (c->progress == LT_TRAINER_PROGRESS_OFF) return;
  bool tty = t->redraw;
  if (!tty && t->step % c->log_every != 0 && t->step != c->steps) return;
  double loss = tty ? M->loss_ema : (M->win_finite ? M->win_loss / (double)M->win_finite : NAN);
  double tps = tty ? M->tokens_ema / M->time_ema : (double)M->win_tokens / M->win_time;
  int64_t left = c->steps - t->step;
  int64_t evals_left = c->eval_every > 0 ? left / c->eval_every : 0;
  double eta = (double)left * M->time_ema + (double)evals_left * M->last_eval_s;
  char line[256];
  snprintf(line, sizeof line, "step %*lld/%lld | epoch %.2f | loss %.4f | lr %.2e | %.0f tok/s | %s | ETA %s",
           (int)snprintf(NULL, 0, "%lld", (long long)c->steps), (long long)t->step, (long long)c->steps, epoch_of(t),
           loss, S->lr, tps, DUR(t->train_seconds), DUR(eta));
  if (tty) {
    fprintf(t->out, "\r\033[K%s", line);
    t->line_open = true;
  } else {
    fprintf(t->out, "%s\n", line);
  }
  fflush(t->out);
  M->win_steps = M->win_tokens = M->win_finite = 0;
  M->win_time = M->win_loss = 0;
}

/* ======================================================================== */
/* Evaluation                                                               */
/* ======================================================================== */

/* Runs the evaluate hook under no-grad, inside one lt_scope (the hook's
 * tensors go when it returns), after the eval_batch hook's batches, each in
 * a scope of its own; prints its line (what: "validation at", "final
 * validation at") unless interrupted. *done: it was not. */
static lt_status evaluate(lt_trainer *t, bool final, const char *what, bool *done, double *seconds) {
  *done = false;
  if (!t->h.evaluate && !t->h.eval_batch) return LT_OK;
  for (int i = 0; i < t->c.n_metrics; i++) t->values[i] = NAN;
  lt_trainer_eval ev = {.step = t->step, .final = final, .values = t->values};
  double t0 = lt_monotonic_seconds();
  lt_scope *scope = lt_scope_begin();
  if (!scope) return lt_last_status() ? lt_last_status() : lt__err(LT_ERR_NOMEM, "trainer: evaluation scope");
  bool prev = lt_set_grad_enabled(false);
  lt_status s = LT_OK;
  for (int64_t b = 0; t->h.eval_batch; b++) {
    if (lt_trainer_stop_requested()) {
      ev.interrupted = true;
      break;
    }
    lt_scope *bs = lt_scope_begin();
    if (!bs) {
      s = lt_last_status() ? lt_last_status() : lt__err(LT_ERR_NOMEM, "trainer: evaluation batch scope");
      break;
    }
    bool more = false;
    s = t->h.eval_batch(t->h.user, &ev, b, &more);
    lt_scope_end(bs);
    if (s != LT_OK || !more || ev.interrupted) break;
  }
  if (s == LT_OK && !ev.interrupted && t->h.evaluate) s = t->h.evaluate(t->h.user, &ev);
  lt_set_grad_enabled(prev);
  lt_scope_end(scope);
  ev.seconds = lt_monotonic_seconds() - t0;
  if (s != LT_OK) return s;
  if (lt_dist_size() > 1) { /* reported only if no rank was interrupted */
    int64_t cut = ev.interrupted;
    if ((s = lt_dist_allreduce_i64(&cut, 1, LT_DIST_MAX)) != LT_OK) return s;
    ev.interrupted = cut != 0;
  }
  if (seconds) *seconds = ev.seconds;
  if (ev.interrupted) return LT_OK;
  *done = true;
  char text[512] = "";
  if (t->h.eval_line) {
    t->h.eval_line(t->h.user, &ev, text, sizeof text);
  } else {
    size_t n = 0;
    for (int i = 0; i < t->c.n_metrics && n < sizeof text; i++)
      n += (size_t)snprintf(text + n, sizeof text - n, "%s%s %.4g", i ? ", " : "", t->c.metrics[i].name,
                            t->values[i]);
  }
  lt_trainer_end_line(t);
  fprintf(t->out, "%s step %lld: %s [%s]\n", what, (long long)t->step, text, DUR(ev.seconds));
  fflush(t->out);
  return LT_OK;
}

/* ======================================================================== */
/* One training step                                                        */
/* ======================================================================== */

/* With several ranks, after the micro-batches of a step: the step's loss
 * (the mean of the ranks' losses), its tokens (the sum), whether every rank's
 * loss was finite, and the stop request (any rank's), agreed by every rank
 * at this step boundary (a signal reaches one rank, or reaches them at
 * different moments). */
static lt_status dist_agree(lt_trainer *t, step_result *S, bool *finite) {
  double v[3] = {*finite ? S->loss : 0.0, *finite ? 0.0 : 1.0, (double)S->tokens};
  int64_t stop = stop_flag;
  lt_status s = lt_dist_allreduce_f64(v, 3, LT_DIST_SUM);
  if (s == LT_OK) s = lt_dist_allreduce_i64(&stop, 1, LT_DIST_MAX);
  if (s != LT_OK) return s;
  if (*finite) S->loss = v[1] == 0 ? v[0] / (double)lt_dist_size() : NAN;
  *finite = v[1] == 0;
  S->tokens = (int64_t)v[2];
  t->stop = (int)stop;
  return LT_OK;
}

/* accum micro-batches forward and backward, all inside one lt_scope (every
 * intermediate and the autograd graph are freed at its end; only the
 * parameters' .grad survive until lt_params_zero_grad), then the gradient
 * norm (clipped to clip), the schedule's learning rate and the update. A
 * non-finite loss or gradient norm skips the update (the step's data is still
 * consumed, so the data order stays that of a clean run). */
static lt_status train_step(lt_trainer *t, step_result *S) {
  *S = (step_result){0, NAN, 0, 0, false, NULL};
  const lt_trainer_config *c = &t->c;
  const int64_t A = c->accum, step = t->step + 1;
  lt_scope *scope = lt_scope_begin();
  if (!scope) return lt_last_status() ? lt_last_status() : lt__err(LT_ERR_NOMEM, "trainer: step scope");
  lt_status s = t->h.begin_step ? t->h.begin_step(t->h.user, step, A) : LT_OK;
  bool finite = true;
  for (int64_t a = 0; a < A && s == LT_OK; a++) {
    lt_trainer_micro m = {.step = step, .index = a, .accum = A, .forward = finite};
    lt_dist_grads_set_sync(t->grads, a == A - 1); /* only the last backward starts the reduction */
    s = t->h.micro_batch(t->h.user, &m);
    if (s != LT_OK) break;
    S->tokens += m.tokens;
    if (!finite) continue;
    double v;
    if (!m.loss) {
      s = lt_last_status() ? lt_last_status()
                           : lt__err(LT_ERR_NULL, "trainer: step %lld: micro-batch %lld has no loss", (long long)step,
                                     (long long)a);
      break;
    }
    if ((s = lt_item(m.loss, &v)) != LT_OK) break;
    finite = isfinite(v);
    if (finite && (s = lt_backward(lt_mul_scalar(m.loss, m.weight), NULL, false)) != LT_OK) break;
    S->loss += finite ? v * m.weight : v;
  }
  if (s == LT_OK) {
    S->lr = lt_schedule_lr(c->schedule, step);
    if (!isfinite(S->lr))
      s = lt__err(LT_ERR_INVALID, "trainer: the learning-rate schedule gives %g at step %lld", S->lr, (long long)step);
  }
  if (s == LT_OK && lt_dist_size() > 1) s = dist_agree(t, S, &finite);
  /* The buckets the last backward started (and any it did not) complete on
   * every rank, even when a loss was not finite: every rank issued them. */
  if (s == LT_OK && lt_dist_size() > 1 && (s = lt_dist_grads_start(t->grads)) == LT_OK)
    s = lt_dist_grads_finish(t->grads);
  if (s == LT_OK && !finite) {
    S->skipped = true, S->why = "non-finite loss";
  } else if (s == LT_OK) {
    if (s == LT_OK) s = lt_clip_grad_norm(c->params, c->clip > 0 ? c->clip : INFINITY, &S->grad_norm);
    if (s == LT_ERR_NUMERIC) { /* with several ranks: the averaged gradient, the same on every rank */
      S->skipped = true, S->why = "non-finite gradient";
      lt_clear_error();
      s = LT_OK;
    } else if (s == LT_OK) {
      lt_optimizer_set_lr(c->optim, S->lr);
      s = lt_optimizer_step(c->optim); /* with ZeRO-1: this rank's shard only */
      if (s == LT_OK && t->zero) s = lt_dist_zero_broadcast_params(t->zero); /* each from its owner */
    }
  }
  if (s == LT_OK && t->has_buffers) s = lt_dist_broadcast_buffers(c->params); /* rank 0's running statistics */
  lt_params_zero_grad(c->params);
  lt_scope_end(scope);
  return s;
}

/* ======================================================================== */
/* The loop                                                                 */
/* ======================================================================== */

static void fill_result(const lt_trainer *t, lt_trainer_result *r, lt_trainer_end end) {
  if (!r) return;
  *r = (lt_trainer_result){.end = end, .stop_reason = end == LT_TRAINER_INTERRUPTED ? t->stop : 0, .step = t->step,
                           .start_step = t->start_step, .tokens = t->tokens, .train_seconds = t->train_seconds,
                           .bad_streak = t->bad_streak, .last_checkpoint = t->last_ckpt, .csv_path = t->csv_path};
}

/* The stop request: this process's, or with several ranks the one agreed at
 * the last step boundary (dist_agree), so that every rank stops together. */
static int stop_now(lt_trainer *t) {
  if (lt_dist_size() == 1) t->stop = stop_flag;
  return t->stop;
}

/* With several ranks, once: the run's settings and the model's shape must be
 * the same on every rank; rank 0's parameters go to all; the reducer. */
static lt_status dist_setup(lt_trainer *t) {
  t->dist_ready = true;
  if (lt_dist_size() == 1) return LT_OK;
  const lt_trainer_config *c = &t->c;
  char v[9][64];
  snprintf(v[0], 64, "%lld", (long long)c->steps);
  snprintf(v[1], 64, "%lld", (long long)c->accum);
  snprintf(v[2], 64, "%.17g", c->clip);
  snprintf(v[3], 64, "%d", lt_params_count(c->params));
  snprintf(v[4], 64, "%lld", (long long)lt_params_numel(c->params, false));
  snprintf(v[5], 64, "%lld", (long long)t->step);
  snprintf(v[6], 64, "%d", (int)c->optim_config->kind);
  snprintf(v[7], 64, "%.17g", c->optim_config->weight_decay);
  snprintf(v[8], 64, "%d", c->zero);
  static const char *const names[9] = {"steps", "accum", "clip", "parameter tensors", "parameters",
                                       "the step resumed from", "optimizer", "weight decay", "ZeRO stage"};
  const char *vals[9] = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
  lt_status s = lt_dist_check_same("trainer", 9, names, vals);
  if (s == LT_OK) { /* rank 0 alone prints (t->out is /dev/null elsewhere) */
    lt_trainer_end_line(t);
    fprintf(t->out,
            "trainer: data parallel over %d ranks: parameters from rank 0, gradients averaged every step%s; "
            "each rank's micro_batch gives its own shard of the global batch (lt_dist_shard)\n",
            lt_dist_size(), c->zero == 1 ? ", optimizer state sharded (ZeRO-1)" : "");
    fflush(t->out);
  }
  s = s ? s : lt_dist_broadcast_params(c->params);
  for (int i = 0; i < c->n_generators && s == LT_OK && !t->rank_streams; i++) { /* each rank its own dropout */
    lt_generator_state g = lt_generator_get_state(c->generators[i]);
    g.seed = lt_dist_rank_seed(g.seed);
    s = lt_generator_set_state(c->generators[i], g);
  }
  t->rank_streams = true;
  for (int i = 0; i < lt_params_count(c->params); i++)
    t->has_buffers |= (lt_params_at(c->params, i)->flags & LT_PARAM_BUFFER) != 0;
  if (s == LT_OK && !(t->grads = lt_dist_grads_new(c->params, 0))) s = lt_last_status();
  if (s == LT_OK && c->zero == 1 && !(t->zero = lt_dist_zero_new(c->optim))) s = lt_last_status();
  int64_t stop = stop_flag;
  s = s ? s : lt_dist_allreduce_i64(&stop, 1, LT_DIST_MAX);
  t->stop = (int)stop;
  return s;
}

static lt_status fit(lt_trainer *t, lt_trainer_result *result);

lt_status lt_trainer_fit(lt_trainer *t, lt_trainer_result *result) {
  if (!t) return lt__err(LT_ERR_NULL, "trainer_fit: t is NULL");
  if (t->c.autocast != LT_DTYPE_BF16) return fit(t, result);
  lt_dtype prev = lt_set_autocast(LT_DTYPE_BF16); /* steps, their backward and evaluations */
  lt_status s = fit(t, result);
  lt_set_autocast(prev);
  return s;
}

static lt_status fit(lt_trainer *t, lt_trainer_result *result) {
  const lt_trainer_config *c = &t->c;
  lt_status s = t->dist_ready ? LT_OK : dist_setup(t);
  s = s ? s : t->csv_opened ? LT_OK : csv_open(t);
  if (s != LT_OK) return fill_result(t, result, LT_TRAINER_FAILED), s;
  lt_autothreads AT;
  lt_autothreads_init(&AT, c->auto_threads, lt_get_num_threads());
  t->M = (lt__trainer_meter){0};
  t->M.loss_ema = NAN;
  bool stopped = false, final_done = false;
  while (t->step < c->steps && !stop_now(t)) {
    int threads = AT.on ? lt_autothreads_next(&AT) : 0;
    if (AT.on) lt_set_num_threads(threads);
    step_result S;
    double t0 = lt_monotonic_seconds();
    s = train_step(t, &S);
    double dt = lt_monotonic_seconds() - t0;
    if (AT.on) {
      int prev = AT.chosen;
      if (lt_autothreads_record(&AT, threads, (double)S.tokens, dt)) {
        lt_trainer_end_line(t);
        fprintf(t->out, "threads: now %d (%.0f tokens/s, against %.0f on %d)\n", AT.chosen,
                AT.rate[AT.chosen == AT.max ? 0 : 1], AT.rate[prev == AT.max ? 0 : 1], prev);
        fflush(t->out);
      }
      lt_set_num_threads(AT.chosen); /* evaluations and checkpoints run on the chosen setting */
    }
    if (s != LT_OK) break;
    t->step++;
    t->tokens += S.tokens;
    t->train_seconds += dt;
    meter_add(&t->M, &S, dt);
    if (S.skipped) {
      t->bad_streak++;
      lt_trainer_end_line(t);
      fprintf(t->out, "step %lld: %s (loss %g, gradient norm %g): update skipped (%lld in a row)\n",
              (long long)t->step, S.why, fabs(S.loss), fabs(S.grad_norm), (long long)t->bad_streak);
      fflush(t->out);
      if (t->bad_streak >= c->max_nonfinite) {
        s = csv_row(t, &S, dt, NULL);
        if (s != LT_OK) break;
        fill_result(t, result, LT_TRAINER_NONFINITE);
        return lt__err(LT_ERR_NUMERIC,
                       "stopping: %lld non-finite steps in a row (the last at step %lld; the limit is %lld). "
                       "Skipped steps leave the parameters unchanged; the newest checkpoint is %s.",
                       (long long)t->bad_streak, (long long)t->step, (long long)c->max_nonfinite,
                       t->last_ckpt[0] ? t->last_ckpt : "(none yet)");
      }
    } else {
      t->bad_streak = 0;
    }
    progress(t, &S);
    bool evaluated = false;
    if (t->step == c->steps && !stop_now(t)) { /* the end: the final evaluation */
      lt_trainer_end_line(t);
      s = evaluate(t, true, "final validation at", &evaluated, NULL);
      final_done = evaluated;
    } else if (c->eval_every > 0 && t->step % c->eval_every == 0 && !stop_now(t)) {
      s = evaluate(t, false, "validation at", &evaluated, &t->M.last_eval_s);
    }
    if (s != LT_OK) break;
    s = csv_row(t, &S, dt, evaluated ? t->values : NULL);
    if (s == LT_OK && c->ckpt_every > 0 && t->step % c->ckpt_every == 0 && t->step < c->steps)
      s = lt_trainer_save(t);
    if (s != LT_OK) break;
    if (c->stop_after > 0 && t->step >= c->stop_after && t->step < c->steps) {
      stopped = true;
      break;
    }
  }
  lt_trainer_end_line(t);
  if (s != LT_OK) return fill_result(t, result, LT_TRAINER_FAILED), s;
  if (stop_now(t) || stopped) {
    if (t->last_saved != t->step) s = lt_trainer_save(t);
    fill_result(t, result, s != LT_OK ? LT_TRAINER_FAILED : t->stop ? LT_TRAINER_INTERRUPTED : LT_TRAINER_STOPPED);
    return s;
  }
  bool done;
  if (!final_done) s = evaluate(t, true, "final validation at", &done, NULL); /* resumed at the last step */
  if (s == LT_OK && t->last_saved != t->step) s = lt_trainer_save(t);
  fill_result(t, result, s != LT_OK ? LT_TRAINER_FAILED : LT_TRAINER_DONE);
  return s;
}

/* ======================================================================== */
/* Language modelling on token shards                                       */
/* ======================================================================== */

/* The logits of at most this many rows x V live at once in an evaluation:
 * 16 Mi floats, 64 MiB (at T 1,024, V 50,257: one window; 3.3 GB for the
 * 16 windows of one unsplit batch). */
#define LM_EVAL_LOGITS (16LL << 20)

lt_status lt_trainer_lm_batch_sums(lt_trainer_lm_logits logits, void *user, const lt_tensor *x, const lt_tensor *y,
                                   double sums[3]) {
  if (!logits || !x || !y || !sums)
    return lt__err(LT_ERR_NULL, "trainer_lm_batch_sums: logits, x, y and sums must not be NULL");
  if (x->ndim != 2 || y->ndim != 2 || x->shape[0] != y->shape[0] || x->shape[1] != y->shape[1]) {
    char xs[96], ys[96];
    return lt__err(LT_ERR_SHAPE, "trainer_lm_batch_sums: ids x %s and targets y %s: want the same [b, T]",
                   lt_shape_str(x->ndim, x->shape, xs, sizeof xs), lt_shape_str(y->ndim, y->shape, ys, sizeof ys));
  }
  lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, 0.0, LT_REDUCTION_SUM};
  const int64_t b = x->shape[0], T = x->shape[1];
  lt_status st = LT_OK;
  /* Rows [r0, r0 + n): one row first, then as many as LM_EVAL_LOGITS holds
   * (V is known from the first logits). */
  for (int64_t r0 = 0, next = 1, n; r0 < b && st == LT_OK; r0 += n) {
    n = next < b - r0 ? next : b - r0;
    lt_scope *sc = lt_scope_begin();
    lt_tensor *xr = lt_narrow(x, 0, r0, n), *yr = lt_narrow(y, 0, r0, n);
    lt_tensor *z = xr && yr ? logits(user, xr) : NULL;
    double l, c;
    if (!z) {
      st = lt_last_status() ? lt_last_status() : LT_ERR_INVALID;
    } else if (z->ndim != 3 || z->shape[0] != n || z->shape[1] != T) {
      char zs[96];
      st = lt__err(LT_ERR_SHAPE, "trainer_lm_batch_sums: logits are %s for ids [%lld, %lld]: want [b, T, V]",
                   lt_shape_str(z->ndim, z->shape, zs, sizeof zs), (long long)n, (long long)T);
    } else {
      lt_tensor *hit = lt_sum(lt_eq(lt_argmax(z, -1, false), yr), 0, NULL, false);
      if (!hit || lt_item(lt_cross_entropy(z, yr, &ce), &l) != LT_OK || lt_item(hit, &c) != LT_OK)
        st = lt_last_status();
      else
        sums[0] += l, sums[1] += c, sums[2] += (double)yr->numel;
      int64_t per_row = T * (z->shape[2] > 0 ? z->shape[2] : 1);
      next = LM_EVAL_LOGITS / per_row > 1 ? LM_EVAL_LOGITS / per_row : 1;
    }
    lt_scope_end(sc);
  }
  return st;
}

lt_status lt_trainer_lm_evaluate(lt_shard_loader *L, lt_trainer_lm_logits logits, void *user,
                                 lt_trainer_lm_eval *out) {
  if (!L || !logits || !out) return lt__err(LT_ERR_NULL, "trainer_lm_evaluate: loader, logits and out must not be NULL");
  *out = (lt_trainer_lm_eval){.loss = NAN, .perplexity = NAN, .token_acc = NAN};
  lt_status st = lt_shard_loader_rewind(L);
  if (st != LT_OK) return st;
  const int N = lt_dist_size();
  double v[3] = {0, 0, 0}; /* loss sum, correct, targets */
  bool prev = lt_set_grad_enabled(false);
  /* A stop request cuts a one-process evaluation short; with several ranks
   * every rank must reach the reduction, so it runs to the end. */
  for (int64_t i = 0; i < lt_shard_loader_batches_per_epoch(L) && (N > 1 || !lt_trainer_stop_requested()); i++) {
    lt_scope *sc = lt_scope_begin();
    lt_tensor *x, *y;
    st = lt_shard_loader_next(L, &x, &y);
    /* x NULL: this rank has no row of the last, short batch */
    if (st == LT_OK && x) st = lt_trainer_lm_batch_sums(logits, user, x, y, v);
    lt_scope_end(sc);
    if (st != LT_OK) break;
  }
  lt_set_grad_enabled(prev);
  if (st != LT_OK) return st;
  if ((st = lt_dist_allreduce_f64(v, 3, LT_DIST_SUM)) != LT_OK) return st;
  out->tokens = v[2];
  out->loss = v[2] > 0 ? v[0] / v[2] : NAN;
  out->perplexity = exp(out->loss);
  out->token_acc = v[2] > 0 ? v[1] / v[2] : NAN;
  out->interrupted = N == 1 && lt_trainer_stop_requested() != 0;
  return LT_OK;
}
