/*
 * durable_state.h - the durable point's state (owned by durable.c).
 */
#ifndef KVF_ENGINE_DURABLE_STATE_H
#define KVF_ENGINE_DURABLE_STATE_H

#include <pthread.h>
#include <stdint.h>

struct catalog_batch;

/*
 * struct durable - owned by durable.c.  Invariants: synced_seqno, n_syncs
 * and n_points are those of the last committed sync record ("N"), and the
 * mark file DIR/SYNCED (engine/base/syncmark.h) holds the same.  Locking: lock
 * is the first lock a call takes: one durable point at a time (kvf_sync,
 * the cleaner, kvf_seq_free and the optimizer calls take it); everything
 * here is read and written under it.
 */
struct durable {
	pthread_mutex_t lock;
	uint64_t gen;           /* kvf_sync calls begun */
	uint64_t synced_seqno;  /* durable as of the last point */
	uint64_t n_syncs;       /* syncs since create */
	uint64_t n_points;      /* durable points since create */
	int mark_fd;            /* DIR/SYNCED; -1: none */
	char *mark_path;        /* its path, for messages */
	struct catalog_batch *reclaim_batch; /* the reclaim's records */
};

#endif /* KVF_ENGINE_DURABLE_STATE_H */
