/*
 * models/transformer/hf_keys.c: the readers of config.json's keys that every
 * Hugging Face family's reader uses (hf_internal.h, lt__hf_cfg): an integer,
 * a number, a boolean or a string key, each checked for its JSON type and,
 * for the configuration's numbers, against the field's range in
 * LT_TF_CONFIG_RANGES, the first failure kept so that a family reads its
 * keys in a row and checks once.
 *
 * What this is not: a family's choice of keys and defaults (hf.c for GPT-2
 * and the Llama families, hf_bert.c, hf_t5.c).
 */
#include <stdio.h>

#include "libtensor.h"
#include "models/transformer/hf_internal.h"

#define PATH_LEN 4096

/* Key key's value, in the range of the configuration field it gives
 * (LT_TF_CONFIG_RANGES, transformer.h: the table train's flags use). */
static void in_range(lt__hf_cfg *r, const char *key, const char *field, bool is_int, int64_t iv, double dv) {
  if (r->s != LT_OK || !field) return;
  char what[PATH_LEN + 128];
  snprintf(what, sizeof what, "hf config '%s': key '%s'", r->path, key);
  r->s = is_int ? lt_tf_config_check_range_int(field, iv, what) : lt_tf_config_check_range(field, dv, what);
}

void lt__hf_get_int(lt__hf_cfg *r, const char *key, int64_t *out, bool required, const char *field) {
  if (r->s != LT_OK) return;
  json_t *v = json_object_get(r->j, key);
  if (!v || json_is_null(v)) {
    if (required) r->s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' is missing", r->path, key);
    return;
  }
  if (!json_is_integer(v)) {
    r->s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' is not an integer", r->path, key);
    return;
  }
  *out = json_integer_value(v);
  in_range(r, key, field, true, *out, 0);
}


void lt__hf_get_real(lt__hf_cfg *r, const char *key, double *out, const char *field) {
  if (r->s != LT_OK) return;
  json_t *v = json_object_get(r->j, key);
  if (!v || json_is_null(v)) return;
  if (!json_is_number(v)) {
    r->s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' is not a number", r->path, key);
    return;
  }
  *out = json_number_value(v);
  in_range(r, key, field, false, 0, *out);
}

void lt__hf_get_bool(lt__hf_cfg *r, const char *key, bool *out) {
  if (r->s != LT_OK) return;
  json_t *v = json_object_get(r->j, key);
  if (!v || json_is_null(v)) return;
  if (!json_is_boolean(v)) {
    r->s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' is not true or false", r->path, key);
    return;
  }
  *out = json_is_true(v);
}

/* A string key (absent or null: def); the result borrows from r->j. */
const char *lt__hf_get_str(lt__hf_cfg *r, const char *key, const char *def) {
  if (r->s != LT_OK) return def;
  json_t *v = json_object_get(r->j, key);
  if (!v || json_is_null(v)) return def;
  if (!json_is_string(v)) {
    r->s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' is not a string", r->path, key);
    return def;
  }
  return json_string_value(v);
}
