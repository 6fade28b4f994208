/*
 * tensor/paths_internal.h: the path table (tensor/paths.def, tensor/paths.c):
 * every alternative implementation of the library with its environment
 * switch and whether this CPU runs it, and the environment settings the
 * library reads. Not installed.
 *
 * Who reads it: each selector asks it before it picks a path (the GEMM
 * dispatch tensor/gemm.c, the attention's nn/attention.c and
 * nn/attention_bf16.c, conv2d's tensor/dnnl_conv.c, the Philox draws of
 * tensor/random.c), lt_runtime_get_info reports it, the op runner
 * (tests/test_ops.c, technique "paths") forces every path the CPU runs in
 * turn, and the benchmarks print it in their header.
 *
 * What it is not: a rule. Which path a selector takes when nothing is
 * forced (shapes, sizes, measured crossovers) stays in the selector.
 */
#ifndef LT_TENSOR_PATHS_INTERNAL_H
#define LT_TENSOR_PATHS_INTERNAL_H

#include "tensor/paths.def"
#include "tensor/tensor.h"

#include <stdbool.h>

typedef enum lt__path_family {
#define LT__PATHS_F(family, what) LT__PATH_FAMILY_##family,
  LT_PATH_FAMILIES(LT__PATHS_F)
#undef LT__PATHS_F
  LT__PATH_FAMILY_COUNT
} lt__path_family;

/* LT__PATH_<family>_<name>; LT__PATH_AUTO: nothing forced. */
typedef enum lt__path {
  LT__PATH_AUTO = -1,
#define LT__PATHS_X(family, name, sw, supports) LT__PATH_##family##_##name,
  LT_PATHS(LT__PATHS_X)
#undef LT__PATHS_X
  LT__PATH_COUNT
} lt__path;

typedef enum lt__setting {
#define LT__PATHS_S(id, var, what) LT__SETTING_##id,
  LT_SETTINGS(LT__PATHS_S)
#undef LT__PATHS_S
  LT__SETTING_COUNT
} lt__setting;

/* Whether this CPU (and build) runs path p (its supports expression,
 * evaluated once per process). */
bool lt__path_supported(lt__path p);

/* The path forced for family f (by its switch in the environment, read on
 * the first call of any function here, or by lt__path_force), or
 * LT__PATH_AUTO. A forced path is always supported. */
lt__path lt__path_forced(lt__path_family f);

/* Whether a selector may take p: p is supported and its family is not
 * forced to another path. (Selectors whose forced path changes more than
 * one choice, the GEMM dispatch's, read lt__path_forced themselves.) */
bool lt__path_on(lt__path p);

/* For tests and benchmarks: forces family f to path p, as its switch does
 * (p a supported path of f: a programmer error otherwise, LT_CHECK), or
 * back to the selector's rule (LT__PATH_AUTO), and returns what was forced
 * before. Not thread-safe against running ops. */
lt__path lt__path_force(lt__path_family f, lt__path p);

/* Names, static: the family of p, "gemm"; p's name, "small"; p's switch,
 * "LT_GEMM=small"; a family's name and what it chooses. */
lt__path_family lt__path_family_of(lt__path p);
const char *lt__path_name(lt__path p);
const char *lt__path_switch(lt__path p);
const char *lt__path_family_name(lt__path_family f);
const char *lt__path_family_what(lt__path_family f);

/* The value of setting s in the environment (getenv of its declared
 * variable; NULL when unset), and the variable's name. */
const char *lt__setting_get(lt__setting s);
const char *lt__setting_name(lt__setting s);

#endif /* LT_TENSOR_PATHS_INTERNAL_H */
