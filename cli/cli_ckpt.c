/*
 * cli/cli_ckpt.c: option values in a checkpoint's key-value map
 * (cli/cli_ckpt.h). Written once for every program that saves its settings
 * (train; any program built on the trainer that resumes).
 */
#include "cli/cli_ckpt.h"

#include <stdio.h>
#include <string.h>

/* Saved: not a group, no skipped bit. */
static bool saved(const lt_cli_opt *d, unsigned skip) { return d->kind != LT_CLI_GROUP && !(d->flags & skip); }

static bool make_key(char *key, size_t size, const char *prefix, const char *name) {
  int n = snprintf(key, size, "%s%s", prefix ? prefix : "", name);
  return n >= 0 && (size_t)n < size;
}

lt_status lt_cli_to_meta(const lt_cli *cli, const void *values, unsigned skip, const char *prefix, lt_ckpt_meta *m) {
  for (int i = 0; i < cli->n_opts; i++) {
    const lt_cli_opt *d = &cli->opts[i];
    if (!saved(d, skip)) continue;
    char key[256];
    if (!make_key(key, sizeof key, prefix, d->name))
      return lt_error_set(LT_ERR_OVERFLOW, "saving the settings: the key of --%s is too long", d->name);
    const void *p = (const char *)values + d->offset;
    lt_status s = LT_OK;
    switch (d->kind) {
      case LT_CLI_INT: s = lt_ckpt_meta_set_int(m, key, *(const int64_t *)p); break;
      case LT_CLI_DOUBLE: s = lt_ckpt_meta_set_double(m, key, *(const double *)p); break;
      case LT_CLI_BOOL: s = lt_ckpt_meta_set_int(m, key, *(const bool *)p); break;
      case LT_CLI_ENUM: s = lt_ckpt_meta_set_string(m, key, d->value_name(*(const int *)p)); break;
      case LT_CLI_STRING:
        if (*(const char *const *)p) s = lt_ckpt_meta_set_string(m, key, *(const char *const *)p);
        break;
      case LT_CLI_GROUP: break;
    }
    if (s != LT_OK) return lt_error_set(s, "saving the settings: %s", lt_last_error());
  }
  return LT_OK;
}

lt_status lt_cli_from_meta(const lt_cli *cli, void *values, unsigned skip, const char *prefix, const lt_ckpt_meta *m,
                           const char *what) {
  for (int i = 0; i < cli->n_opts; i++) {
    const lt_cli_opt *d = &cli->opts[i];
    if (!saved(d, skip)) continue;
    char key[256];
    if (!make_key(key, sizeof key, prefix, d->name))
      return lt_error_set(LT_ERR_OVERFLOW, "checkpoint '%s': the key of --%s is too long", what, d->name);
    void *p = (char *)values + d->offset;
    if (lt_ckpt_meta_kind(m, key) < 0) {
      if (d->kind == LT_CLI_STRING) *(const char **)p = NULL;
      continue; /* absent: the default */
    }
    int64_t iv;
    double dv;
    const char *sv;
    bool ok = true;
    switch (d->kind) {
      case LT_CLI_INT: ok = lt_ckpt_meta_get_int(m, key, &iv) == LT_OK, *(int64_t *)p = iv; break;
      case LT_CLI_DOUBLE: ok = lt_ckpt_meta_get_double(m, key, &dv) == LT_OK, *(double *)p = dv; break;
      case LT_CLI_BOOL: ok = lt_ckpt_meta_get_int(m, key, &iv) == LT_OK, *(bool *)p = iv != 0; break;
      case LT_CLI_ENUM:
        ok = lt_ckpt_meta_get_string(m, key, &sv) == LT_OK;
        if (ok) {
          int k = 0;
          while (k < d->n_values && strcmp(d->value_name(k), sv)) k++;
          if (k == d->n_values)
            return lt_error_set(LT_ERR_FORMAT,
                                "checkpoint '%s': the saved setting '%s' is '%s', which this %s does not know", what,
                                key, sv, cli->prog);
          *(int *)p = k;
        }
        break;
      case LT_CLI_STRING:
        ok = lt_ckpt_meta_get_string(m, key, &sv) == LT_OK;
        if (ok) *(const char **)p = sv;
        break;
      case LT_CLI_GROUP: break;
    }
    if (!ok)
      return lt_error_set(LT_ERR_FORMAT, "checkpoint '%s': the saved setting '%s' is not of the type of --%s", what,
                          key, d->name);
    char why[512];
    const bool unset = (d->flags & LT_CLI_UNSET_SAVED) && cli->defaults && lt_cli_same_value(d, values, cli->defaults);
    if (!unset && !lt_cli_check(d, values, why, sizeof why))
      return lt_error_set(LT_ERR_FORMAT, "checkpoint '%s': the saved setting '%s' is out of range: %s", what, key, why);
  }
  return LT_OK;
}

uint64_t lt_cli_memory_cap(int64_t mib) { return mib < 0 ? lt_ckpt_default_memory_cap() : (uint64_t)mib << 20; }
