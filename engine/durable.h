/*
 * durable.h - the durable point (engine/durable.c) and what it owns.
 */
#ifndef KVF_ENGINE_DURABLE_H
#define KVF_ENGINE_DURABLE_H

#include <pthread.h>
#include <stdint.h>

#include "api/status.h"
#include "kvflash.h"

struct catalog_batch;

/*
 * struct durable - owned by durable.c.  Invariants: synced_seqno, n_syncs
 * and n_points are those of the last committed sync record ("N"), and the
 * mark file DIR/SYNCED (engine/syncmark.h) holds the same.  Locking: lock
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

kvf_status durable_init(kvf_store *st);
void durable_free(kvf_store *st);

/*
 * store_durable_point - make every committed segment durable (media sync,
 * then b plus the sync record committed with a synced log) and reuse the
 * segments that died before it.  is_sync counts it as a kvf_sync.
 * Caller holds dur.lock.  Return: KVF_OK, or KVF_EFATAL.
 */
kvf_status store_durable_point(kvf_store *st, struct catalog_batch *b,
				int is_sync);

#endif /* KVF_ENGINE_DURABLE_H */
