/*
 * tensor/paths.c: the path table (tensor/paths_internal.h): the lines of
 * tensor/paths.def as data, whether this CPU supports each path (evaluated
 * once), the paths forced by the environment (read once) or by tests, and
 * the settings' variables.
 *
 * What it is not: a selector. The rules that pick a path when none is
 * forced live with their selectors (tensor/gemm.c, nn/attention.c, ...).
 */
#include "tensor/paths_internal.h"

#include "tensor/bf16dot_internal.h"
#include "tensor/cpu_internal.h"
#include "tensor/dnnl_internal.h"
#include "tensor/error_internal.h"
#include "tensor/quant_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name, *what;
} families[LT__PATH_FAMILY_COUNT] = {
#define F(family, what_) {#family, what_},
    LT_PATH_FAMILIES(F)
#undef F
};

static const struct {
  lt__path_family family;
  const char *name, *sw;
} paths[LT__PATH_COUNT] = {
#define X(family, name_, sw_, supports) {LT__PATH_FAMILY_##family, #name_, sw_},
    LT_PATHS(X)
#undef X
};

static const char *const settings[LT__SETTING_COUNT] = {
#define S(id, var, what) var,
    LT_SETTINGS(S)
#undef S
};

static bool supported[LT__PATH_COUNT];
static int forced[LT__PATH_FAMILY_COUNT]; /* an lt__path, or LT__PATH_AUTO */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Row p of the table, or family f's, after checking the index. */
static int path_at(lt__path p) {
  LT_CHECK(p >= 0 && p < LT__PATH_COUNT);
  return p;
}

static int family_at(lt__path_family f) {
  LT_CHECK(f >= 0 && f < LT__PATH_FAMILY_COUNT);
  return f;
}

/* True when the environment holds p's switch, "VARIABLE=value". */
static bool switch_set(lt__path p) {
  const char *sw = paths[p].sw, *eq = strchr(sw, '=');
  char var[64];
  const size_t n = (size_t)(eq - sw);
  LT_CHECK(eq && n < sizeof var);
  memcpy(var, sw, n);
  var[n] = '\0';
  const char *v = getenv(var);
  return v && !strcmp(v, eq + 1);
}

static void init(void) {
  const lt__cpu_info *c = lt__cpu();
  int i = 0;
#define X(family, name, sw, supports) supported[i++] = (supports);
  LT_PATHS(X)
#undef X
  (void)c;
  for (int f = 0; f < LT__PATH_FAMILY_COUNT; f++) forced[f] = LT__PATH_AUTO;
  for (int p = 0; p < LT__PATH_COUNT; p++)
    if (supported[p] && forced[paths[p].family] == LT__PATH_AUTO && switch_set((lt__path)p))
      forced[paths[p].family] = p;
}

bool lt__path_supported(lt__path p) {
  pthread_once(&once, init);
  return supported[path_at(p)];
}

lt__path lt__path_forced(lt__path_family f) {
  pthread_once(&once, init);
  int v;
#pragma omp atomic read
  v = forced[family_at(f)];
  return (lt__path)v;
}

bool lt__path_on(lt__path p) {
  if (!lt__path_supported(p)) return false;
  const lt__path f = lt__path_forced(paths[p].family);
  return f == LT__PATH_AUTO || f == p;
}

/* The quantized kernels (tensor/qgemm.c) keep their own limit, which this
 * drives (they read the same switch, LT_QDOT, themselves). */
static void qdot_apply(lt__path p) {
  (void)lt__qdot_limit(p == LT__PATH_qdot_portable ? LT__QDOT_PORTABLE
                       : p == LT__PATH_qdot_avx2   ? LT__QDOT_AVX2
                                                   : LT__QDOT_AVX512);
}

lt__path lt__path_force(lt__path_family f, lt__path p) {
  LT_CHECK(f >= 0 && f < LT__PATH_FAMILY_COUNT);
  LT_CHECK(p == LT__PATH_AUTO || (p < LT__PATH_COUNT && paths[p].family == f && lt__path_supported(p)));
  pthread_once(&once, init);
  int prev;
#pragma omp atomic capture
  {
    prev = forced[f];
    forced[f] = p;
  }
  if (f == LT__PATH_FAMILY_qdot) qdot_apply(p);
  return (lt__path)prev;
}

lt__path_family lt__path_family_of(lt__path p) { return paths[path_at(p)].family; }
const char *lt__path_name(lt__path p) { return paths[path_at(p)].name; }
const char *lt__path_switch(lt__path p) { return paths[path_at(p)].sw; }
const char *lt__path_family_name(lt__path_family f) { return families[family_at(f)].name; }
const char *lt__path_family_what(lt__path_family f) { return families[family_at(f)].what; }

const char *lt__setting_name(lt__setting s) {
  LT_CHECK(s >= 0 && s < LT__SETTING_COUNT);
  return settings[s];
}

const char *lt__setting_get(lt__setting s) { return getenv(lt__setting_name(s)); }
