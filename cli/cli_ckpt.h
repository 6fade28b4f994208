/*
 * cli/cli_ckpt.h: a program's option values (an lt_cli table, cli/cli.h) in
 * a checkpoint's key-value map (lt_ckpt_meta, checkpoint/checkpoint.h), so
 * that a resumed run reads back the settings it was started with. Each
 * option is one entry "<prefix><name>": INT and BOOL as int, DOUBLE as
 * double, ENUM as its value's name (so a reordered enum still reads back),
 * STRING as string (a NULL string is no entry).
 *
 * What this is not: a checkpoint format (checkpoint/), or the rule of which
 * settings a resumed run may change (the program's, by its flag bits).
 *
 * Part of lt_cli (the programs' helper) but, unlike lt_cli_die, these never
 * exit: they return an lt_status with a message in lt_last_error(), as
 * libtensor does (tensor/tensor.h). A program using them links libtensor.
 */
#ifndef LT_CLI_CKPT_H
#define LT_CLI_CKPT_H

#include "checkpoint/checkpoint.h"
#include "cli/cli.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Adds every option of cli (groups aside) whose flags share no bit with skip
 * to m (borrowed; entries already there are replaced), read from values (the
 * caller's struct). Errors: those of lt_ckpt_meta_set_*, as
 * "saving the settings: <message>". */
lt_status lt_cli_to_meta(const lt_cli *cli, const void *values, unsigned skip, const char *prefix, lt_ckpt_meta *m);

/* Reads the same entries back into values (which holds the defaults): an
 * absent entry leaves the default (a STRING becomes NULL); a STRING borrows
 * m's text (valid until m is freed). Each value read must be in its option's
 * range (lt_cli_check) or equal the default in cli->defaults (a default
 * "by task" outside the range, such as -1), as a command line would have to.
 * what names the source in messages (a checkpoint's path). Errors, as
 * "checkpoint '<what>': ...", with LT_ERR_FORMAT: an entry of the wrong
 * kind, an enum name this program does not know, a value out of range. */
lt_status lt_cli_from_meta(const lt_cli *cli, void *values, unsigned skip, const char *prefix, const lt_ckpt_meta *m,
                           const char *what);

/* The programs' --max-memory rule, written once: the flag's value in MiB, -1
 * (the default) for lt_ckpt_default_memory_cap(), 0 for no cap. Returns the
 * cap in bytes, for lt_ckpt_load_opts.max_bytes. mib is range-checked by the
 * option table (at most INT64_MAX >> 20), so the shift cannot overflow. */
uint64_t lt_cli_memory_cap(int64_t mib);

#ifdef __cplusplus
}
#endif
#endif /* LT_CLI_CKPT_H */
