/*
 * kvflash_mpi.h - one kvflash store sharded over the ranks of an MPI
 * communicator (the optional library kvflash_mpi; docs/mpi.md).
 *
 * Each rank owns a local kvflash store (DIR/rank-R under the directory it
 * passes to kvf_mpi_open).  A sequence's KV is placed by the policy chosen
 * when the sharded store is created:
 *   KVF_MPI_SHARD_HEAD   rank r holds a contiguous slice of the KV heads
 *                        (and the query heads that share them) for every
 *                        token: InstInfer's spread of heads over devices.
 *   KVF_MPI_SHARD_TOKEN  rank r holds every head of the token blocks
 *                        b with b % n_ranks == r (block_tokens tokens per
 *                        block): context parallelism; partial attention
 *                        results are merged by log-sum-exp.
 *
 * The calls on a store handle are collective (all but kvf_mpi_stats_get
 * and kvf_mpi_local): every rank of the communicator makes them, in the
 * same order.  Scalar arguments are the root's; buffers matter only on
 * the root rank (kvf_mpi_options.root, "the caller's rank"): the root
 * hands in K/V and q and receives outputs; the other ranks pass NULL.
 * Every rank returns the same status.  Attention moves only q in and
 * outputs out; K and V never cross the network after their append.
 *
 * Concurrency: one call at a time per handle (its calls are collectives
 * on one communicator); separate handles from separate threads only if
 * MPI was initialized with MPI_THREAD_MULTIPLE.  MPI_Init must come
 * first.  Each rank's local store is a kvflash store: kvf_mpi_local may
 * be read (kvf_stats_get, kvf_seq_len, kvf_read) from any thread while no
 * collective call runs.
 *
 * The library keeps its own thread-local message (kvf_mpi_last_error):
 * when a rank's store fails, every rank's message names that rank and
 * carries the store's kvf_last_error text.
 */
#ifndef KVFLASH_MPI_H
#define KVFLASH_MPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define KVF_MPI_API __attribute__((visibility("default")))
#else
#define KVF_MPI_API
#endif

typedef enum {
	KVF_MPI_SHARD_HEAD = 0, /* KV heads split over ranks */
	KVF_MPI_SHARD_TOKEN = 1 /* token blocks dealt round-robin */
} kvf_mpi_shard;

/* Sequence ids from KVF_MPI_SEQ_RESERVED up are the library's (the
 * repair of a sequence after a crash uses one); kvflash reserves
 * UINT64_MAX itself. */
#define KVF_MPI_SEQ_RESERVED (UINT64_MAX - 1)

/* Options of a sharded store.  Fill with kvf_mpi_options_init. */
typedef struct {
	size_t struct_size;    /* sizeof(kvf_mpi_options), set by _init */
	kvf_model model;       /* the whole model; same on every rank */
	kvf_mpi_shard shard;   /* placement policy; default HEAD */
	uint32_t block_tokens; /* TOKEN: tokens per block; 0 = 256 */
	int root;              /* the rank that passes and gets buffers; 0 */
	/* options of each rank's local store, or NULL for kvf_options
	 * defaults; its model is ignored (the rank's share is used) */
	const kvf_options *store;
} kvf_mpi_options;

/* Fills *o with defaults for model m; use kvf_mpi_options_init. */
KVF_MPI_API void kvf_mpi_options_init_sized(kvf_mpi_options *o,
					    const kvf_model *m,
					    size_t struct_size);

/* kvf_mpi_options_init - defaults (head sharding, root 0) for model m. */
static inline void kvf_mpi_options_init(kvf_mpi_options *o, const kvf_model *m)
{
	kvf_mpi_options_init_sized(o, m, sizeof(*o));
}

/* Figures of this rank's handle.  Bytes are counted as delivered: a
 * broadcast of s bytes to n ranks counts s received on each of the n - 1
 * others and s * (n - 1) sent at its source; control bytes are the call
 * headers and status exchanges. */
typedef struct {
	size_t struct_size;    /* sizeof(kvf_mpi_stats), set by the caller */
	int rank;              /* this rank */
	int n_ranks;           /* ranks of the communicator */
	kvf_mpi_shard shard;   /* the store's policy */
	uint32_t kv_head0;     /* HEAD: first KV head of this rank */
	uint32_t n_kv_heads;   /* KV heads of this rank's local store */
	uint64_t attend_calls; /* kvf_mpi_attend calls */
	uint64_t append_calls; /* kvf_mpi_append calls */
	uint64_t q_bytes_sent, q_bytes_recv;     /* q of attention */
	uint64_t out_bytes_sent, out_bytes_recv; /* outputs and LSE */
	uint64_t kv_bytes_sent, kv_bytes_recv;   /* K/V of appends and reads */
	uint64_t ctl_bytes_sent, ctl_bytes_recv; /* headers, statuses */
	uint64_t repaired_seqs; /* sequences this rank cut back: at open, or
				 * taking back an append another rank
				 * refused */
} kvf_mpi_stats;

typedef struct kvf_mpi_store kvf_mpi_store;

/*
 * kvf_mpi_open - create or reopen a sharded store over comm (collective).
 * @comm: the ranks; duplicated, so the caller's traffic never mixes in.
 * @dir: this rank's directory (node-local or shared); the rank keeps its
 *       store in DIR/rank-R and its placement in DIR/rank-R.placement.
 * @opts: model and policy; every rank must pass the same.
 * A reopen checks every rank's placement against opts, then makes the
 * sequences consistent after a crash: a sequence missing on some rank is
 * freed on all, and each (sequence, layer) is cut back to the longest
 * prefix that every rank holds its share of (tokens appended after the
 * last kvf_mpi_sync may be lost, synced ones never).
 * Return: KVF_OK; KVF_EINVAL (NULL, bad enum, a model kvflash refuses,
 * root out of range; head sharding with more ranks than KV heads; comm
 * MPI_COMM_NULL, refused on that rank alone);
 * KVF_EMISMATCH (ranks passed different models or options: the model,
 * policy, block size, root, and of opts->store media, codec, kt_pages,
 * read_only, evict_policy and admit_tokens; or opts contradict a stored
 * placement: rank count, policy, block size, model);
 * KVF_ECORRUPT (a damaged placement file, named; a rank's part of the
 * store missing while other ranks hold sequences: its directory or
 * placement lost or moved; a store that holds none has the missing part
 * made again); KVF_EVERSION (a placement file of another version); any
 * status of kvf_open on some rank.  On failure *out is NULL on every rank
 * and nothing was created or changed but DIR itself (made if missing).
 * Concurrency: collective over comm.
 */
KVF_MPI_API kvf_status kvf_mpi_open(MPI_Comm comm, const char *dir,
				    const kvf_mpi_options *opts,
				    kvf_mpi_store **out);

/*
 * kvf_mpi_close - close every rank's store (collective).  NULL on every
 * rank is a no-op.  Everything is released even on failure.
 * Return: KVF_OK or the first failing rank's kvf_close status.
 * Concurrency: collective, one call at a time per handle.
 */
KVF_MPI_API kvf_status kvf_mpi_close(kvf_mpi_store *st);

/*
 * kvf_mpi_sync - kvf_sync on every rank (collective): everything appended
 * before it survives a crash of any rank.
 * Return: KVF_OK or the first failing rank's status.
 * Concurrency: collective, one call at a time per handle.
 */
KVF_MPI_API kvf_status kvf_mpi_sync(kvf_mpi_store *st);

/*
 * kvf_mpi_seq_create, kvf_mpi_seq_free - a sequence on every rank
 * (collective).  Checked on every rank before any changes.
 * Return: KVF_OK; KVF_EEXIST / KVF_ENOENT (naming a rank); KVF_EINVAL
 * (a reserved id); a rank's store status.
 * Concurrency: collective, one call at a time per handle.
 */
KVF_MPI_API kvf_status kvf_mpi_seq_create(kvf_mpi_store *st, uint64_t seq);
KVF_MPI_API kvf_status kvf_mpi_seq_free(kvf_mpi_store *st, uint64_t seq);

/*
 * kvf_mpi_seq_len - tokens of one layer of a sequence (collective); every
 * rank receives it in *n_tokens (may be NULL off the root).
 * Return: KVF_OK; KVF_ENOENT; KVF_ERANGE (layer); KVF_EINVAL.
 * Concurrency: collective, one call at a time per handle.
 */
KVF_MPI_API kvf_status kvf_mpi_seq_len(kvf_mpi_store *st, uint64_t seq,
				       uint32_t layer, uint64_t *n_tokens);

/*
 * kvf_mpi_append - append n_tokens tokens of K and V to one layer
 * (collective).  @k, @v (root only): [n_tokens][n_kv_heads][head_dim] in
 * the store dtype, as kvf_append.  Each rank receives only its heads
 * (HEAD) or its tokens (TOKEN) and appends them to its store.
 * Return: KVF_OK; KVF_EINVAL (NULL buffer on the root); KVF_ENOENT;
 * KVF_ERANGE (layer); a rank's kvf_append status.  Checked on every rank
 * first; when a rank's store fails after the check (KVF_ENOSPC, KVF_EIO)
 * the other ranks take their parts back (a local cut, crash-safe as the
 * repair at open, and as costly: the layer's tokens past the shortest
 * layer are copied), so the layer keeps its old length on every rank and
 * the message adds "the other ranks took their parts back".  Should that
 * cut fail too, its status is returned and the layer is refused until a
 * reopen cuts it back to the longest common prefix.
 * Concurrency: collective, one call at a time per handle.
 */
KVF_MPI_API kvf_status kvf_mpi_append(kvf_mpi_store *st, uint64_t seq,
				      uint32_t layer, uint32_t n_tokens,
				      const void *k, const void *v);

/*
 * kvf_mpi_read - tokens [t0, t1) of one KV head to the root (collective).
 * @k_out, @v_out (root only): [t1-t0][head_dim] in the store dtype.
 * Return: KVF_OK; KVF_EINVAL (NULL outputs on the root, t0 > t1);
 * KVF_ENOENT; KVF_ERANGE (layer, head, t1 past the end); a rank's
 * kvf_read status (KVF_ECORRUPT, KVF_EIO).
 * Concurrency: collective, one call at a time per handle.
 */
KVF_MPI_API kvf_status kvf_mpi_read(kvf_mpi_store *st, uint64_t seq,
				    uint32_t layer, uint32_t kv_head,
				    uint64_t t0, uint64_t t1, void *k_out,
				    void *v_out);

/*
 * kvf_mpi_attend - decode attention of one layer (collective), computed
 * on each rank next to its data.
 * @q, @out (root only): [n_q_heads][head_dim] fp32, as kvf_attend.
 * @opts (root only, may be NULL): scale and lse ([n_q_heads], root) for
 *       both policies; window for both (TOKEN: each rank attends its
 *       tokens among the last window); sparse, top_r, top_k, sink_tokens,
 *       recent_tokens and h2o for HEAD only (each is per KV head there).
 * HEAD: each rank receives the query heads of its KV heads and returns
 * their outputs; TOKEN: each rank receives q, and the root merges the
 * ranks' outputs by their log-sum-exp (kvf_attn_merge).
 * Return: KVF_OK; KVF_EINVAL (NULL q or out on the root, bad option);
 * KVF_ENOTSUP (mask with either policy; sparse or h2o with TOKEN);
 * KVF_ENOENT; KVF_ERANGE; KVF_EVERSION; a rank's kvf_attend status.
 * Concurrency: collective, one call at a time per handle.
 */
KVF_MPI_API kvf_status kvf_mpi_attend(kvf_mpi_store *st, uint64_t seq,
				      uint32_t layer, const float *q,
				      float *out, const kvf_attn_opts *opts);

/*
 * kvf_mpi_stats_get - this rank's figures (local, not collective).  Set
 * out->struct_size first.  Return: KVF_OK; KVF_EINVAL; KVF_EVERSION.
 * Concurrency: any thread, while no collective call runs on st.
 */
KVF_MPI_API kvf_status kvf_mpi_stats_get(kvf_mpi_store *st, kvf_mpi_stats *out);

/*
 * kvf_mpi_local - this rank's local store, for kvf_stats_get and
 * inspection (local).  Changing it bypasses the placement: do not append,
 * create or free through it.  NULL for NULL.
 */
KVF_MPI_API kvf_store *kvf_mpi_local(kvf_mpi_store *st);

/* kvf_mpi_last_error - the message of the last failed kvf_mpi_ call on
 * this thread; "" if none.  Valid until the next failing call. */
KVF_MPI_API const char *kvf_mpi_last_error(void);

/* kvf_mpi_shard_name - "head", "token", or "unknown". */
KVF_MPI_API const char *kvf_mpi_shard_name(kvf_mpi_shard shard);

#ifdef __cplusplus
}
#endif
#endif /* KVFLASH_MPI_H */
