/*
 * mpi_int.h - the sharded store's handle and the helpers its files share
 * (mpi_comm.c: messages, counted collectives and the placement
 * arithmetic; mpi_open.c: opening and placement files;
 * mpi_repair.c: cutting sequences back after a crash; mpi_ops.c,
 * mpi_attend.c: the collective calls).
 *
 * Every collective call starts the same way: the root broadcasts a
 * struct op_hdr (its arguments and the result of its own argument
 * checks), then every rank looks the sequence up and the ranks exchange
 * {status, local length} (lookup_lens), or just their status (agree).
 * So a refused argument, a sequence one rank lacks, or a rank that made
 * another call is caught before anything moves.  A call that every rank
 * passes takes: attention, 5 collectives (header, lookup, q, status,
 * outputs; a sixth for LSE under head sharding); append, 5.
 */
#ifndef KVF_MPI_INT_H
#define KVF_MPI_INT_H

#include <stdarg.h>
#include <stdint.h>

#include "kvflash_mpi.h"

enum mpi_cat {
	CAT_Q,
	CAT_OUT,
	CAT_KV,
	CAT_CTL
};

enum mpi_op {
	OP_SEQ_CREATE = 1,
	OP_SEQ_FREE,
	OP_SEQ_LEN,
	OP_APPEND,
	OP_READ,
	OP_ATTEND,
	OP_SYNC,
	OP_CLOSE
};

/* The root's arguments of one call, broadcast first (fixed size). */
struct op_hdr {
	int32_t status; /* the root's argument check; KVF_OK or why not */
	uint32_t op;    /* enum mpi_op, compared on every rank */
	uint64_t seq;
	uint32_t layer;
	uint32_t n_tokens; /* append */
	uint32_t kv_head;  /* read */
	uint32_t want;     /* read: 1 = K, 2 = V; attend: 1 = LSE */
	uint64_t t0, t1;   /* read: token range */
	uint64_t window;   /* attend */
	float scale;       /* attend */
	uint32_t sparse, top_r, top_k, sink, recent, h2o; /* attend, HEAD */
};

struct kvf_mpi_store {
	MPI_Comm comm; /* our duplicate of the caller's */
	int rank, n_ranks, root;
	kvf_mpi_shard shard;
	uint32_t block;        /* TOKEN: tokens per block */
	kvf_model model;       /* the whole model */
	kvf_model local_model; /* this rank's share of it */
	uint32_t group;        /* query heads per KV head */
	size_t elt;            /* bytes per stored element */
	uint32_t *kv0, *nkv;   /* [n_ranks] HEAD: first KV head, count */
	kvf_store *local;      /* this rank's store */
	char *dir;             /* the directory passed to kvf_mpi_open (a
				* cut's record goes there: mpi_repair.c) */
	int fatal;             /* an MPI call failed: ranks out of step */
	kvf_mpi_stats stats;   /* counters (struct_size unused) */
};

/* mpi_comm.c */
kvf_status mpi_fail(kvf_status status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
kvf_status mpi_fail_store(const struct kvf_mpi_store *s, kvf_status status,
			  const char *call);
kvf_status mpi_call_failed(int rc, const char *what);
kvf_status c_bcast(struct kvf_mpi_store *s, void *buf, int bytes,
		   enum mpi_cat cat);
kvf_status c_allgather(struct kvf_mpi_store *s, const void *mine, int bytes,
		       void *all, enum mpi_cat cat);
/* c_allreduce_max - out[i] = the largest of every rank's mine[i] (n of
 * them; no buffer to allocate, so no rank can skip it for memory) */
kvf_status c_allreduce_max(struct kvf_mpi_store *s, const uint64_t *mine,
			   uint64_t *out, int n);
kvf_status c_scatterv(struct kvf_mpi_store *s, const void *src,
		      const int *counts, const int *displs, void *dst,
		      int bytes, enum mpi_cat cat);
kvf_status c_gatherv(struct kvf_mpi_store *s, const void *src, int bytes,
		     void *dst, const int *counts, const int *displs,
		     enum mpi_cat cat);
kvf_status agree(struct kvf_mpi_store *s, kvf_status local, const char *call);
kvf_status start_op(struct kvf_mpi_store *s, struct op_hdr *h, enum mpi_op op,
		    const char *call, kvf_status *local);
kvf_status lookup_lens(struct kvf_mpi_store *s, const struct op_hdr *h,
		       uint64_t *lens, kvf_status local, const char *call);

/* mpi_comm.c: placement arithmetic */
uint64_t token_share(const struct kvf_mpi_store *s, int r, uint64_t n);
int token_owner(const struct kvf_mpi_store *s, uint64_t t);

/* mpi_repair.c */
kvf_status repair_resume(struct kvf_mpi_store *s, const char *rank_dir);
kvf_status repair_all(struct kvf_mpi_store *s, const char *rank_dir);
/* repair_cut_layer - this rank's share of seq's layer back to len tokens
 * (local; crash-safe as a repair at open): an append that another rank
 * refused taken back (mpi_ops.c) */
kvf_status repair_cut_layer(struct kvf_mpi_store *s, uint64_t seq,
			    uint32_t layer, uint64_t len);

#endif /* KVF_MPI_INT_H */
