/*
 * dist/dist.h: data parallelism over MPI (Open MPI), for any model.
 *
 * N processes (ranks) each hold a full copy of the model, each trains on its
 * own slice of every global batch, and their gradients are averaged before
 * every optimizer step, so the N copies stay bit-identical. The pieces:
 *   - the world: lt_dist_init / lt_dist_finalize, rank, size, local rank;
 *   - lt_dist_broadcast_params: parameters and buffers from rank 0 at start;
 *   - lt_dist_allreduce_f64 / _i64: scalars (loss, token counts, metrics,
 *     stop requests), summed in rank order so every rank gets the same bits;
 *   - lt_dist_check_same: a configuration (named values) identical on every
 *     rank, else an error naming the value and the ranks that differ;
 *   - lt_dist_shard: the sampler, this rank's slice of a global batch;
 *   - lt_dist_grads: gradient averaging in buckets with MPI_Iallreduce,
 *     started during backward as the buckets' gradients become final.
 * train/trainer.h calls these itself (docs/distributed.md): a program adds
 * lt_dist_init / lt_dist_finalize, shards its batches with lt_dist_shard and
 * its validation with lt_dist_shard + lt_dist_allreduce_f64.
 *
 * Without MPI (built with -DLT_MPI=OFF, or Open MPI not found), or when the
 * program was not started by mpirun (no OMPI_COMM_WORLD_SIZE / PMIX_RANK in
 * the environment), the world has size 1, rank 0, and every call below is a
 * cheap no-op (allreduce returns its input, the shard is the whole batch).
 * So one program serves both cases.
 *
 * What this is not: a transport (Open MPI is), model parallelism, or
 * fault tolerance. A rank that dies ends the whole job: Open MPI's mpirun
 * aborts every process when one exits without lt_dist_finalize or is killed
 * (its default), within a second or two on one machine. A rank that hangs
 * makes the others' collective calls fail after a timeout (lt_dist_set_timeout).
 *
 * Determinism: scalars are gathered and summed in rank order. Gradients use
 * MPI_Iallreduce; in Open MPI the algorithm (libnbc's schedules) is chosen
 * from the message size and the number of ranks only, and each schedule adds
 * in a fixed order, so a fixed N, bucket size and parameter list give the
 * same bits on every run and on every rank (tests/test_dist.c checks both).
 *
 * Threads: every call must come from the thread that called lt_dist_init
 * (MPI_THREAD_FUNNELED), in the same order on every rank (they are
 * collective: a rank that skips one deadlocks the others).
 *
 * Errors follow tensor/tensor.h: an lt_status, a message in lt_last_error();
 * an MPI error is LT_ERR_IO with MPI's error string.
 */
#ifndef LT_DIST_H
#define LT_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/nn.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the world ---------------------------------------------------------- */

/* Starts MPI (MPI_Init_thread, FUNNELED) if the library was built with it
 * and the process was started by mpirun; otherwise the world is size 1.
 * argc/argv may be NULL. Calling it again is a no-op. Errors go to
 * MPI_ERRORS_RETURN and come back as LT_ERR_IO; LT_ERR_INVALID for an
 * LT_DIST_TIMEOUT that is not a number of seconds (lt_dist_set_timeout). */
LT_API lt_status lt_dist_init(int *argc, char ***argv);
/* Ends MPI (MPI_Finalize) if lt_dist_init started it. A no-op otherwise and
 * on a second call. Call it before returning from main on every rank: a rank
 * that exits without it makes mpirun abort the job. */
LT_API void lt_dist_finalize(void);
/* Ends every rank of the job now with exit code code (MPI_Abort), or exit(code)
 * without MPI. For programs only (the library never calls it): a rank that
 * failed alone cannot tell the others. Does not return. */
LT_API _Noreturn void lt_dist_abort(int code);

LT_API bool lt_dist_built_with_mpi(void); /* true if the library was built with Open MPI */
LT_API bool lt_dist_active(void);         /* true if MPI runs (started by mpirun, lt_dist_init called) */
LT_API int lt_dist_rank(void);            /* this process's rank in [0, size); 0 without MPI */
LT_API int lt_dist_size(void);            /* number of ranks; 1 without MPI */
LT_API int lt_dist_local_rank(void);      /* rank among the ranks of this machine; 0 without MPI */
LT_API int lt_dist_local_size(void);      /* ranks on this machine; 1 without MPI */

/* Waits for every rank. */
LT_API lt_status lt_dist_barrier(void);

/* ---- hung ranks ------------------------------------------------------------ */

/* A rank that stops making progress (SIGSTOP, an endless loop, a deadlock)
 * would leave the others waiting in their next collective call forever. Every
 * wait of this module (scalars, broadcasts, the configuration check, the
 * gradient buckets) gives up after the timeout: rank 0 names the ranks that
 * did not reach the collective ("rank 1 did not reach it (stopped, ...)"),
 * every waiting rank returns LT_ERR_IO with that message, and the program
 * must then end the job (exit without lt_dist_finalize, or lt_dist_abort): the
 * collective cannot be cancelled. The default, LT_DIST_TIMEOUT_DEFAULT, is
 * PyTorch's (30 minutes): longer than any step, evaluation or checkpoint
 * save of rank 0 that the others wait for. The environment variable
 * LT_DIST_TIMEOUT (seconds), read by lt_dist_init, sets it for any program;
 * the train program also has --dist-timeout. */
#define LT_DIST_TIMEOUT_DEFAULT 1800.0
/* seconds in [0, 1e9]; 0: wait forever. LT_ERR_INVALID otherwise. Process-wide. */
LT_API lt_status lt_dist_set_timeout(double seconds);
LT_API double lt_dist_timeout(void);

/* ---- parameters and scalars ---------------------------------------------- */

/* Overwrites every parameter and buffer of p (in store order) with rank 0's
 * values. Every rank must hold the same names, shapes and dtypes (checked:
 * LT_ERR_INVALID naming the first parameter that differs, on every rank).
 * p is borrowed; tensors are written in place (their version is bumped). */
LT_API lt_status lt_dist_broadcast_params(lt_params *p);
/* Overwrites only the buffers of p (LT_PARAM_BUFFER: BatchNorm's running
 * statistics) with rank 0's, as PyTorch DDP's broadcast_buffers does: each
 * rank updates them from its own rows, so without this the copies drift
 * apart. The trainer calls it after every step of a store that has buffers.
 * The same names and shapes on every rank are assumed (checked at start by
 * lt_dist_broadcast_params). */
LT_API lt_status lt_dist_broadcast_buffers(lt_params *p);

typedef enum {
  LT_DIST_SUM,
  LT_DIST_MAX,
  LT_DIST_MIN,
} lt_dist_op;

/* v[0..n) of every rank combined elementwise with op; every rank gets the
 * result in v. SUM adds in rank order (rank 0 first), so the bits are the
 * same on every rank and in every run at a fixed size. n in [0, 4096]. */
LT_API lt_status lt_dist_allreduce_f64(double *v, int n, lt_dist_op op);
LT_API lt_status lt_dist_allreduce_i64(int64_t *v, int n, lt_dist_op op);

/* Checks that n named values (strings, borrowed; a program formats its
 * flags, a model its sizes) are identical on every rank, each compared whole
 * (a 64-bit hash of its name and all of its bytes). what names the caller
 * ("train", "trainer"). On a difference every rank returns LT_ERR_INVALID
 * with the same message, naming the first value that differs, its value on
 * rank 0 and on every rank that differs (up to 16 listed; each shown up to
 * 255 bytes), then the names of the other values that differ:
 * "train: the configuration differs across ranks: '--batch' is '8' on rank
 * 0, '9' on rank 1; also '--lr' differs". Also an error if n differs. */
LT_API lt_status lt_dist_check_same(const char *what, int n, const char *const *names, const char *const *values);

/* A 64-bit hash of every parameter's and buffer's name, shape, dtype and
 * bits (FNV-1a): equal on every rank while the copies agree. */
LT_API uint64_t lt_dist_params_hash(const lt_params *p);
/* LT_ERR_STATE naming the ranks whose lt_dist_params_hash differs from
 * rank 0's: the copies have diverged (a missing reduction, a rank-local
 * update). The trainer checks it before every checkpoint. */
LT_API lt_status lt_dist_check_params_same(const lt_params *p);

/* ---- the sampler --------------------------------------------------------- */

/* This rank's slice of a global batch of n examples: [*start, *start +
 * *count), rank r taking examples floor(r*n/N) .. floor((r+1)*n/N). Every
 * example of the global batch goes to exactly one rank; when n is not a
 * multiple of N, the slices differ by at most one example (ranks with the
 * larger slices are the higher ones). When n < N, some ranks get count 0;
 * callers that need an example on every rank keep n >= N (the trainer's
 * equivalence: N ranks x batch B see exactly the examples 1 process x batch
 * N*B sees, in the same order, when every rank draws the same global order
 * from the same seed). Without MPI: start 0, count n. */
LT_API void lt_dist_shard(int64_t n, int64_t *start, int64_t *count);

/* The seed of this rank's own random stream derived from seed: seed itself
 * on rank 0 (so a world of one draws what it always drew), seed + rank x
 * 0x9E3779B97F4A7C15 (the golden-ratio increment, mod 2^64) on the others:
 * different on every rank, the same in every run. The trainer gives each
 * rank its own dropout stream with it (train/trainer.h). */
LT_API uint64_t lt_dist_rank_seed(uint64_t seed);

/* ---- gradient averaging -------------------------------------------------- */

/* The gradient reducer of a parameter store: the trainable parameters
 * (buffers and frozen parameters are left out) in REVERSE store order,
 * grouped into buckets of about bucket_bytes (a parameter larger than that is
 * a bucket of its own; parameters of different dtypes go to different
 * buckets). Reverse, because backward makes the gradients of the last layers
 * final first (PyTorch DDP orders its buckets the same way).
 *
 * Overlap with backward: with more than one rank, lt_dist_grads_new registers
 * a post-accumulate hook (autograd.h) on every parameter it reduces (replacing
 * any the program had set; lt_dist_grads_free removes them). While sync is on
 * (the default), a backward that makes a parameter's gradient final marks it
 * ready, and as soon as every gradient of bucket 0, then 1, ... is ready, that
 * bucket is packed into one buffer and its MPI_Iallreduce starts, while the
 * rest of backward runs (each hook also lets MPI progress the buckets in
 * flight). Buckets always start in index order, on a communicator of their
 * own, so every rank issues the same collectives in the same order whatever
 * its graph, and the sums are the same bits in every run.
 *
 * A step:  set_sync(false) for the micro-batches before the last (gradient
 * accumulation sends nothing: PyTorch's no_sync), set_sync(true) before the
 * last backward, then lt_dist_grads_finish before the optimizer step. A
 * program that does not use backward's hooks (gradients made otherwise) calls
 * lt_dist_grads_start, which starts every bucket not started yet.
 *
 * lt_dist_grads_finish starts the buckets not started yet (a parameter unused
 * by this rank's batch, or a rank that skipped its backward), waits for every
 * bucket, divides by N and writes the averages back into each parameter's
 * .grad (a parameter without a .grad on this rank gets one: it contributed
 * zeros). */
typedef struct lt_dist_grads lt_dist_grads;

/* The default bucket size: 1 MiB. Buckets must be small enough that several
 * fill during backward, so that their reductions overlap the rest of it; a
 * bucket as large as PyTorch DDP's 25 MB fills only at the end of backward
 * and hides nothing. Smaller buckets pay a message latency each (docs/distributed.md,
 * "Speed" has the measurements and "A scaling model" the trade-off). */
#define LT_DIST_BUCKET_BYTES ((size_t)1 << 20)

/* The bucket size lt_dist_grads_new uses when given 0 (the trainer does):
 * LT_DIST_BUCKET_BYTES until set; 0 restores it. Process-wide. */
LT_API void lt_dist_set_bucket_bytes(size_t bytes);
LT_API size_t lt_dist_bucket_bytes(void);

/* Returns new (free with lt_dist_grads_free); p is borrowed and must outlive
 * it, with the same parameters (lt_params_to_dtype after it: make a new one).
 * bucket_bytes 0: lt_dist_bucket_bytes(). */
LT_API lt_dist_grads *lt_dist_grads_new(lt_params *p, size_t bucket_bytes);
LT_API void lt_dist_grads_free(lt_dist_grads *g); /* NULL is a no-op; waits for buckets in flight */
/* The hooks start buckets during backward (sync, the default) or do nothing
 * (no_sync: the micro-batches before the last of a step). A no-op with NULL
 * and with size 1. A gradient made final twice while sync is on (two
 * backwards before a finish) fails that backward with LT_ERR_STATE. */
LT_API void lt_dist_grads_set_sync(lt_dist_grads *g, bool sync);
/* Starts the reduction of every bucket not started by the hooks (a no-op
 * with size 1). LT_ERR_STATE if called twice before a finish. */
LT_API lt_status lt_dist_grads_start(lt_dist_grads *g);
/* Starts what is left, waits for every bucket and writes the averages (a
 * no-op with size 1). LT_ERR_STATE if nothing was started, by
 * lt_dist_grads_start or by a backward's hooks, since the last finish; the
 * status of a hook that failed during backward. */
LT_API lt_status lt_dist_grads_finish(lt_dist_grads *g);
/* Buckets, and the time spent in lt_dist_grads_finish (starting what was
 * left and waiting: the exposed communication) and in total from the first
 * bucket's start to the end of finish, summed over calls. */
LT_API int lt_dist_grads_buckets(const lt_dist_grads *g);
LT_API void lt_dist_grads_times(const lt_dist_grads *g, double *wait_seconds, double *total_seconds);
/* The buckets started by the hooks during backward (summed over steps), and
 * the time spent inside the hooks (packing, starting, MPI progress), which
 * runs on backward's thread and so adds to its time. */
LT_API void lt_dist_grads_overlap(const lt_dist_grads *g, int64_t *early_buckets, double *hook_seconds);

/* ---- ZeRO-1: optimizer state sharded across ranks ------------------------ */

/* ZeRO-1 (DeepSpeed's stage 1; llm.c's -z 1): every rank keeps the whole
 * model and the whole averaged gradient (lt_dist_grads, unchanged), but the
 * optimizer's state only for its shard of the parameters: rank r updates the
 * parameters it owns, then lt_dist_zero_broadcast_params sends each updated
 * parameter from its owner to every rank. The shards are whole parameters,
 * contiguous in the optimizer's order (the store's non-parameter-buffer
 * entries), cut at about 1/N of the elements each (a parameter goes to the
 * rank whose 1/N holds its middle element; with few big parameters a rank may
 * own none). The per-element update is the optimizer's own, so the
 * parameters are bit-identical to an unsharded run's; the state held per
 * rank (AdamW: 8 bytes per f32 parameter) is about 1/N of it.
 *
 * A step: backward, lt_dist_grads_finish, (clipping), lt_optimizer_step (it
 * updates this rank's shard only), lt_dist_zero_broadcast_params.
 * A checkpoint: lt_dist_zero_gather_state (rank 0 then holds every
 * parameter's state, the unsharded format), rank 0 saves, then
 * lt_dist_zero_release_state (rank 0 drops the others' state again).
 * A resume: load the whole state on every rank (the file's format is the
 * unsharded one), then lt_dist_zero_new (or release_state) drops what the
 * rank does not own.
 *
 * With one rank every call is a no-op but new's (the shard is everything). */
typedef struct lt_dist_zero lt_dist_zero;

/* Partitions o's parameters over the ranks and restricts o to this rank's
 * shard (lt_optimizer_set_shard: the state of other parameters is dropped).
 * o is borrowed and must outlive it. Every rank must pass the same parameter
 * list (lt_dist_broadcast_params checks the store). Returns new; NULL with
 * LT_ERR_NULL / LT_ERR_NOMEM. */
LT_API lt_dist_zero *lt_dist_zero_new(lt_optimizer *o);
/* Restores o to all its parameters (their state stays absent until their
 * next update). NULL is a no-op. */
LT_API void lt_dist_zero_free(lt_dist_zero *z);
/* rank's shard: optimizer parameters [*first, *first + *count). */
LT_API void lt_dist_zero_shard(const lt_dist_zero *z, int rank, int *first, int *count);
/* Collective: each parameter from its owner to every rank (MPI_Ibcast, in
 * parameter order), after the optimizer step. */
LT_API lt_status lt_dist_zero_broadcast_params(lt_dist_zero *z);
/* Collective: rank 0 receives every other rank's optimizer state (each
 * owner sends its shard's tensors), so that it holds all of it, as an
 * unsharded optimizer would, for a checkpoint. Rank 0's memory for optimizer
 * state grows to the unsharded size until lt_dist_zero_release_state. */
LT_API lt_status lt_dist_zero_gather_state(lt_dist_zero *z);
/* Local: drops the state of the parameters this rank does not own. */
LT_API lt_status lt_dist_zero_release_state(lt_dist_zero *z);

#ifdef __cplusplus
}
#endif
#endif /* LT_DIST_H */
