/*
 * cli/cli.c: the command-line helper of the programs (cli/cli.h): the error
 * exit, checked allocation and output, and the table-driven option parser.
 *
 * What this is not: libtensor code (it exits, and it does not use libtensor),
 * nor a general getopt: flags are long ("--name"), values typed and bounded.
 */
#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* The error exit, allocation, output                                       */
/* ======================================================================== */

static const char *g_prog = "program";
static void (*g_before_die)(void);

void lt_cli_init(const char *prog, void (*before_die)(void)) {
  g_prog = prog ? prog : "program";
  g_before_die = before_die;
}

_Noreturn void lt_cli_die(int code, const char *fmt, ...) {
  if (g_before_die) g_before_die();
  fflush(stdout); /* what was printed comes before the message (its failure does not matter now) */
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", g_prog);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  if (code == LT_CLI_EXIT_USAGE) fprintf(stderr, "Try '%s --help'.\n", g_prog);
  exit(code);
}

void *lt_cli_xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory (%zu bytes)", bytes);
  return p;
}

void *lt_cli_xmalloc_n(size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes))
    lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory (%zu x %zu bytes overflows size_t)", n, size);
  return lt_cli_xmalloc(bytes);
}

void *lt_cli_xcalloc(size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes))
    lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory (%zu x %zu bytes overflows size_t)", n, size);
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) lt_cli_die(LT_CLI_EXIT_FAILURE, "out of memory (%zu bytes)", bytes);
  return p;
}

char *lt_cli_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(lt_cli_xmalloc(n), s, n);
}

void lt_cli_write(FILE *f, const void *p, size_t n, const char *what) {
  if (n > 0 && fwrite(p, 1, n, f) != n) lt_cli_die(LT_CLI_EXIT_FAILURE, "writing %s: %s", what, strerror(errno));
}

void lt_cli_flush(FILE *f, const char *what) {
  if (fflush(f) != 0 || ferror(f)) lt_cli_die(LT_CLI_EXIT_FAILURE, "writing %s: %s", what, strerror(errno));
}

/* ======================================================================== */
/* Values                                                                   */
/* ======================================================================== */

static void *field(const lt_cli_opt *o, void *values) { return (char *)values + o->offset; }
static const void *cfield(const lt_cli_opt *o, const void *values) { return (const char *)values + o->offset; }

char *lt_cli_range_text(const lt_cli_opt *o, char *buf, size_t size) {
  switch (o->kind) {
    case LT_CLI_INT: snprintf(buf, size, "[%lld, %lld]", (long long)o->min, (long long)o->max); break;
    case LT_CLI_DOUBLE:
      snprintf(buf, size, "%c%g, %g%c", o->flags & LT_CLI_MIN_OPEN ? '(' : '[', o->dmin, o->dmax,
               o->flags & LT_CLI_MAX_OPEN ? ')' : ']');
      break;
    case LT_CLI_STRING:
      snprintf(buf, size, "%sat most %lld bytes", o->min > 0 ? "not empty, " : "", (long long)o->max);
      break;
    case LT_CLI_BOOL: snprintf(buf, size, "on or off"); break;
    case LT_CLI_ENUM: {
      size_t n = (size_t)snprintf(buf, size, "one of: ");
      for (int k = 0; k < o->n_values && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", k ? ", " : "", o->value_name(k));
      break;
    }
    case LT_CLI_GROUP: snprintf(buf, size, "-"); break;
  }
  return buf;
}

char *lt_cli_value_text(const lt_cli_opt *o, const void *values, char *buf, size_t size) {
  const void *p = cfield(o, values);
  switch (o->kind) {
    case LT_CLI_INT: snprintf(buf, size, "%lld", (long long)*(const int64_t *)p); break;
    case LT_CLI_DOUBLE: snprintf(buf, size, "%g", *(const double *)p); break;
    case LT_CLI_STRING: {
      const char *s = *(const char *const *)p;
      snprintf(buf, size, "%s", s ? s : "(none)");
      break;
    }
    case LT_CLI_BOOL: snprintf(buf, size, "%s", *(const bool *)p ? "on" : "off"); break;
    case LT_CLI_ENUM: {
      int v = *(const int *)p;
      snprintf(buf, size, "%s", v < 0 ? "(auto)" : v >= o->n_values ? "(invalid)" : o->value_name(v));
      break;
    }
    case LT_CLI_GROUP: snprintf(buf, size, "-"); break;
  }
  return buf;
}

bool lt_cli_same_value(const lt_cli_opt *o, const void *a, const void *b) {
  const void *x = cfield(o, a), *y = cfield(o, b);
  switch (o->kind) {
    case LT_CLI_INT: return *(const int64_t *)x == *(const int64_t *)y;
    case LT_CLI_DOUBLE: return *(const double *)x == *(const double *)y;
    case LT_CLI_BOOL: return *(const bool *)x == *(const bool *)y;
    case LT_CLI_ENUM: return *(const int *)x == *(const int *)y;
    case LT_CLI_STRING: {
      const char *s = *(const char *const *)x, *t = *(const char *const *)y;
      return s == t || (s && t && !strcmp(s, t));
    }
    case LT_CLI_GROUP: return true;
  }
  return false;
}

void lt_cli_copy_value(const lt_cli_opt *o, void *dst, const void *src) {
  static const size_t sizes[] = {sizeof(int64_t), sizeof(double), sizeof(const char *), sizeof(bool), sizeof(int), 0};
  memcpy(field(o, dst), cfield(o, src), sizes[o->kind]);
}

bool lt_cli_check(const lt_cli_opt *o, const void *values, char *msg, size_t msg_size) {
  const void *p = cfield(o, values);
  bool ok = true;
  switch (o->kind) {
    case LT_CLI_INT: {
      int64_t v = *(const int64_t *)p;
      ok = v >= o->min && v <= o->max;
      break;
    }
    case LT_CLI_DOUBLE: {
      double v = *(const double *)p;
      ok = isfinite(v) && (o->flags & LT_CLI_MIN_OPEN ? v > o->dmin : v >= o->dmin) &&
           (o->flags & LT_CLI_MAX_OPEN ? v < o->dmax : v <= o->dmax);
      break;
    }
    case LT_CLI_STRING: {
      const char *s = *(const char *const *)p;
      if (s) {
        size_t n = strnlen(s, (size_t)o->max + 1);
        ok = (int64_t)n >= o->min && (int64_t)n <= o->max;
      }
      break;
    }
    case LT_CLI_ENUM: ok = *(const int *)p >= 0 && *(const int *)p < o->n_values; break;
    case LT_CLI_BOOL:
    case LT_CLI_GROUP: break;
  }
  if (!ok) {
    char range[512], value[64];
    if (o->kind == LT_CLI_STRING)
      snprintf(value, sizeof value, "(%zu bytes)", strlen(*(const char *const *)p));
    else
      lt_cli_value_text(o, values, value, sizeof value);
    snprintf(msg, msg_size, "--%s %s: must be %s%s", o->name, value,
             o->kind == LT_CLI_INT || o->kind == LT_CLI_DOUBLE ? "in " : "", lt_cli_range_text(o, range, sizeof range));
  }
  return ok;
}

/* ======================================================================== */
/* Parsing                                                                  */
/* ======================================================================== */

static bool parse_bool(const char *v, bool *out) {
  static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (!strcmp(v, on[i])) return *out = true, true;
    if (!strcmp(v, off[i])) return *out = false, true;
  }
  return false;
}

int lt_cli_find(const lt_cli *cli, const char *name) {
  for (int i = 0; i < cli->n_opts; i++)
    if (cli->opts[i].kind != LT_CLI_GROUP && !strcmp(cli->opts[i].name, name)) return i;
  return -1;
}

/* Sets option o from text v; false with msg on a bad value. The message
 * quotes at most 64 bytes of v (a value may be long). */
static bool set_value(const lt_cli_opt *o, const char *flag, void *values, const char *v, char *msg, size_t msg_size) {
  void *p = field(o, values);
  char range[512];
  char *end = NULL;
  errno = 0;
  switch (o->kind) {
    case LT_CLI_INT: {
      /* digits with an optional sign only: no spaces, no "1e18", no hex */
      const char *d = v + (*v == '-' || *v == '+');
      if (!isdigit((unsigned char)*d)) {
        snprintf(msg, msg_size, "--%s: '%.64s' is not an integer in %s", flag, v,
                 lt_cli_range_text(o, range, sizeof range));
        return false;
      }
      long long x = strtoll(v, &end, 10);
      if (*end) {
        snprintf(msg, msg_size, "--%s: '%.64s' is not an integer in %s", flag, v,
                 lt_cli_range_text(o, range, sizeof range));
        return false;
      }
      if (errno == ERANGE || x < o->min || x > o->max) {
        snprintf(msg, msg_size, "--%s %.64s: must be in %s", flag, v, lt_cli_range_text(o, range, sizeof range));
        return false;
      }
      *(int64_t *)p = x;
      return true;
    }
    case LT_CLI_DOUBLE: {
      double x = *v && !isspace((unsigned char)*v) ? strtod(v, &end) : 0;
      bool overflow = errno == ERANGE && isinf(x); /* "1e999"; an underflow ("1e-999") is a tiny number */
      if (!end || end == v || *end || isnan(x) || (isinf(x) && !overflow)) {
        snprintf(msg, msg_size, "--%s: '%.64s' is not a finite number in %s", flag, v,
                 lt_cli_range_text(o, range, sizeof range));
        return false;
      }
      double saved = *(double *)p;
      *(double *)p = x;
      if (overflow || !lt_cli_check(o, values, msg, msg_size)) {
        *(double *)p = saved;
        snprintf(msg, msg_size, "--%s %.64s: must be in %s", flag, v, lt_cli_range_text(o, range, sizeof range));
        return false;
      }
      return true;
    }
    case LT_CLI_STRING: {
      size_t n = strnlen(v, (size_t)o->max + 1);
      if ((int64_t)n < o->min || (int64_t)n > o->max) {
        if (n == 0)
          snprintf(msg, msg_size, "--%s: the value is empty (%s)", flag, lt_cli_range_text(o, range, sizeof range));
        else
          snprintf(msg, msg_size, "--%s: the value is %s than %lld bytes", flag,
                   (int64_t)n > o->max ? "longer" : "shorter", (long long)((int64_t)n > o->max ? o->max : o->min));
        return false;
      }
      *(const char **)p = v;
      return true;
    }
    case LT_CLI_BOOL:
      if (!parse_bool(v, (bool *)p)) {
        snprintf(msg, msg_size, "--%s: '%.64s' is not on/off (true/false, yes/no, 1/0)", flag, v);
        return false;
      }
      return true;
    case LT_CLI_ENUM: {
      int a;
      if (o->parse_alias && o->parse_alias(v, &a) && a >= 0 && a < o->n_values) {
        *(int *)p = a;
        return true;
      }
      for (int k = 0; k < o->n_values; k++)
        if (!strcmp(v, o->value_name(k))) {
          *(int *)p = k;
          return true;
        }
      snprintf(msg, msg_size, "--%s: unknown value '%.64s' (%s)", flag, v,
               lt_cli_range_text(o, range, sizeof range));
      return false;
    }
    case LT_CLI_GROUP: break;
  }
  snprintf(msg, msg_size, "--%s: not an option", flag);
  return false;
}

#define BAD(...) return snprintf(msg, msg_size, __VA_ARGS__), LT_CLI_BAD

lt_cli_status lt_cli_parse(const lt_cli *cli, int argc, char *const *argv, void *values, bool *given, const char **pos,
                           int *n_pos, char *msg, size_t msg_size) {
  char scratch[8];
  if (!msg || msg_size == 0) msg = scratch, msg_size = sizeof scratch;
  msg[0] = '\0';
  if (n_pos) *n_pos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return LT_CLI_HELP;
    if (cli->positional && pos && n_pos && (strncmp(a, "--", 2) != 0 || !a[2])) {
      if (!strcmp(a, "--"))
        while (++i < argc) pos[(*n_pos)++] = argv[i];
      else
        pos[(*n_pos)++] = a;
      continue;
    }
    if (strncmp(a, "--", 2) != 0 || !a[2]) BAD("unexpected argument '%.64s' (flags start with --; see --help)", a);
    char name[128];
    const char *eq = strchr(a, '='), *val = eq ? eq + 1 : NULL;
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (len >= sizeof name) BAD("unknown flag '%.64s...' (see --help)", a);
    memcpy(name, a + 2, len);
    name[len] = '\0';

    /* the option(s) this flag sets */
    int idx[2] = {lt_cli_find(cli, name), -1};
    bool negated = false;
    for (int k = 0; idx[0] < 0 && k < cli->n_aliases; k++)
      if (!strcmp(cli->aliases[k].name, name)) {
        idx[0] = lt_cli_find(cli, cli->aliases[k].target[0]);
        idx[1] = cli->aliases[k].target[1] ? lt_cli_find(cli, cli->aliases[k].target[1]) : -1;
        negated = cli->aliases[k].negate;
      }
    if (idx[0] < 0 && !strncmp(name, "no-", 3) && (idx[0] = lt_cli_find(cli, name + 3)) >= 0) {
      if (cli->opts[idx[0]].kind != LT_CLI_BOOL) idx[0] = -1;
      negated = true;
    }
    if (idx[0] < 0) BAD("unknown flag --%s (see --help)", name);
    const lt_cli_opt *o = &cli->opts[idx[0]];

    if (o->kind == LT_CLI_BOOL) {
      bool b = true;
      if (val && !parse_bool(val, &b)) BAD("--%s: '%.64s' is not on/off (true/false, yes/no, 1/0)", name, val);
      for (int k = 0; k < 2 && idx[k] >= 0; k++) *(bool *)field(&cli->opts[idx[k]], values) = negated ? !b : b;
    } else {
      if (!val) { /* the next argument, unless it is the next flag (--flag=--value gives such a value) */
        if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))
          BAD("--%s needs a value (%s)", name, o->arg ? o->arg : "NAME");
        val = argv[++i];
      }
      for (int k = 0; k < 2 && idx[k] >= 0; k++) /* the message names the flag as written (an alias too) */
        if (!set_value(&cli->opts[idx[k]], name, values, val, msg, msg_size)) return LT_CLI_BAD;
    }
    for (int k = 0; k < 2 && idx[k] >= 0; k++)
      if (given) given[idx[k]] = true;
  }
  return LT_CLI_PARSED;
}
#undef BAD

void lt_cli_parse_or_exit(const lt_cli *cli, int argc, char *const *argv, void *values, bool *given, const char **pos,
                          int *n_pos) {
  char msg[1024];
  switch (lt_cli_parse(cli, argc, argv, values, given, pos, n_pos, msg, sizeof msg)) {
    case LT_CLI_PARSED: return;
    case LT_CLI_HELP:
      if (lt_cli_usage(cli, stdout) != 0 || fflush(stdout) != 0)
        lt_cli_die(LT_CLI_EXIT_FAILURE, "writing the help text: %s", strerror(errno));
      exit(LT_CLI_EXIT_OK);
    case LT_CLI_BAD: lt_cli_die(LT_CLI_EXIT_USAGE, "%s", msg);
  }
}

/* ======================================================================== */
/* --help                                                                   */
/* ======================================================================== */

/* "  --flag ARG   text" with the text wrapped at 100 columns under itself. */
static void print_wrapped(FILE *f, const char *lhs, const char *text) {
  enum { INDENT = 27, WIDTH = 100 };
  int col = fprintf(f, "  %-24s ", lhs);
  if (col > INDENT) fprintf(f, "\n%*s", INDENT, ""), col = INDENT;
  const char *p = text;
  while (*p) {
    const char *w = p;
    while (*w && *w != ' ') w++;
    int len = (int)(w - p);
    if (col > INDENT && col + 1 + len > WIDTH)
      fprintf(f, "\n%*s", INDENT, ""), col = INDENT;
    else if (col > INDENT)
      fputc(' ', f), col++;
    fprintf(f, "%.*s", len, p);
    col += len;
    p = *w ? w + 1 : w;
  }
  fputc('\n', f);
}

int lt_cli_usage(const lt_cli *cli, FILE *f) {
  if (cli->synopsis) fputs(cli->synopsis, f);
  for (int i = 0; i < cli->n_opts; i++) {
    const lt_cli_opt *o = &cli->opts[i];
    if (o->kind == LT_CLI_GROUP) {
      fprintf(f, "\n%s:\n", o->name);
      continue;
    }
    char lhs[64], text[2048], range[512], def[256];
    bool on_by_default = o->kind == LT_CLI_BOOL && cli->defaults && *(const bool *)cfield(o, cli->defaults);
    if (o->kind == LT_CLI_BOOL)
      snprintf(lhs, sizeof lhs, "--%s%s", o->default_text || on_by_default ? "[no-]" : "", o->name);
    else if (o->kind == LT_CLI_ENUM)
      snprintf(lhs, sizeof lhs, "--%s NAME", o->name);
    else
      snprintf(lhs, sizeof lhs, "--%s %s", o->name, o->arg ? o->arg : "VALUE");
    size_t n = (size_t)snprintf(text, sizeof text, "%s", o->help ? o->help : "");
    lt_cli_range_text(o, range, sizeof range);
    if (o->kind == LT_CLI_INT || o->kind == LT_CLI_DOUBLE)
      n += (size_t)snprintf(text + n, n < sizeof text ? sizeof text - n : 0, "; %s in %s",
                            o->arg ? o->arg : "the value", range);
    else if (o->kind == LT_CLI_ENUM || o->kind == LT_CLI_STRING)
      n += (size_t)snprintf(text + n, n < sizeof text ? sizeof text - n : 0, "; %s", range);
    def[0] = '\0';
    if (o->default_text)
      snprintf(def, sizeof def, "%s", o->default_text);
    else if (cli->defaults && o->kind != LT_CLI_BOOL &&
             (o->kind != LT_CLI_STRING || *(const char *const *)cfield(o, cli->defaults)))
      lt_cli_value_text(o, cli->defaults, def, sizeof def);
    if (def[0]) snprintf(text + n, n < sizeof text ? sizeof text - n : 0, " (default: %s)", def);
    print_wrapped(f, lhs, text);
  }
  for (int k = 0; k < cli->n_aliases; k++) {
    const lt_cli_alias *al = &cli->aliases[k];
    int t = lt_cli_find(cli, al->target[0]);
    char lhs[64];
    bool value = t >= 0 && cli->opts[t].kind != LT_CLI_BOOL;
    snprintf(lhs, sizeof lhs, "--%s%s%s", al->name, value ? " " : "",
             value && cli->opts[t].arg ? cli->opts[t].arg : "");
    print_wrapped(f, lhs, al->help ? al->help : "");
  }
  print_wrapped(f, "-h, --help", "this text");
  if (cli->epilogue) fprintf(f, "\n%s", cli->epilogue);
  return ferror(f) ? -1 : 0;
}

const char *lt_cli_precision_name(int i) {
  static const char *const names[LT_CLI_PRECISION_COUNT] = {"f32", "bf16"};
  return i >= 0 && i < LT_CLI_PRECISION_COUNT ? names[i] : "unknown";
}
