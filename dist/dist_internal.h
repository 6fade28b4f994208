/*
 * dist/dist_internal.h: what the files of dist/ share: the world (ranks and
 * communicators, dist/dist.c owns it), MPI errors in our words, and the
 * waits with a timeout that every collective goes through. Not installed.
 */
#ifndef LT_DIST_INTERNAL_H
#define LT_DIST_INTERNAL_H

#include "dist/dist.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef LT_HAVE_MPI
#include <mpi.h>
#endif

/* The process's place in the job; a world of one until lt_dist_init finds
 * mpirun's. */
typedef struct lt__dist_world {
  bool active;      /* MPI_Init was called by us and MPI_Finalize not yet */
  bool initialized; /* lt_dist_init ran */
  int rank, size, local_rank, local_size;
  double timeout;   /* seconds a collective may wait without completing (0: forever) */
  int64_t seq;      /* collectives waited for so far: the same sequence on every rank */
#ifdef LT_HAVE_MPI
  MPI_Comm world;   /* a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN */
  MPI_Comm notice;  /* another: "I am waiting in collective #seq" notices after a timeout */
#endif
} lt__dist_world;
extern lt__dist_world lt__dist_W;

#ifdef LT_HAVE_MPI
/* LT_ERR_IO with MPI's own words for rc; what names the call. */
lt_status lt__dist_mpi_err(int rc, const char *what);
/* Waits for a collective's request, polling, for at most the timeout; then
 * the ranks that did not reach it are named and the request is left (the
 * job must end). Counts the collective in lt__dist_W.seq. */
lt_status lt__dist_wait_req(MPI_Request *req, const char *what);
#endif

/* root's bytes of the (contiguous) tensor t to every rank; t's version is
 * bumped. what names it in errors. A no-op without MPI. */
lt_status lt__dist_bcast_tensor(lt_tensor *t, int root, const char *what);

#endif
