/*
 * tests/interop/tool_export.h: what the interop tools (hf_tool.c, bert_tool.c,
 * t5_tool.c) share: ids read from the command line (tool_parse_ids), and a
 * model of configuration c with every parameter random (norm weights around
 * 1, everything else, biases included, N(0, 0.3^2)), so that a swapped or
 * missing tensor cannot hide behind an initialisation of zeros or ones,
 * exported to dir as a Hugging Face directory (lt_hf_export).
 * Returns 0, or 1 with "<tool>: <what>: <error>" on stderr.
 */
#ifndef LT_TESTS_TOOL_EXPORT_H
#define LT_TESTS_TOOL_EXPORT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libtensor_transformer.h"

static int tool_fail(const char *tool, const char *what) {
  fprintf(stderr, "%s: %s: %s\n", tool, what, lt_last_error());
  return 1;
}

/* The comma-separated ids of `text` (at most 512) as a new [1, T] i64 tensor. */
static inline lt_tensor *tool_parse_ids(const char *text) {
  int64_t ids[512], T = 0;
  const char *p = text;
  while (*p && T < 512) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) break;
    ids[T++] = v;
    p = *end == ',' ? end + 1 : end;
  }
  return lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, T}, ids);
}

static int tool_export_random(const char *tool, const lt_tf_config *c, const char *dir, uint64_t seed) {
  lt_generator *g = lt_generator_new(seed);
  lt_transformer *m = g ? lt_transformer_new(c, g) : NULL;
  if (!m) return lt_generator_free(g), tool_fail(tool, "building the model");
  lt_params *P = lt_transformer_params(m);
  int rc = 0;
  for (int i = 0; i < lt_params_count(P) && !rc; i++) {
    const lt_param *p = lt_params_at(P, i);
    const bool norm = strstr(p->name, "norm") != NULL && strstr(p->name, ".weight");
    if (lt_init_normal_(g, p->value, norm ? 1.0 : 0.0, norm ? 0.2 : 0.3) != LT_OK) rc = tool_fail(tool, "init");
  }
  if (!rc && lt_hf_export(m, dir) != LT_OK) rc = tool_fail(tool, "export");
  lt_transformer_free(m);
  lt_generator_free(g);
  return rc;
}

#endif /* LT_TESTS_TOOL_EXPORT_H */
