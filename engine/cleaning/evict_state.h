/*
 * evict_state.h - eviction's state (owned by evict.c): one run at a time,
 * the log of evicted sequences for kvf_evict_log, and the counters.
 */
#ifndef KVF_ENGINE_EVICT_STATE_H
#define KVF_ENGINE_EVICT_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kvflash.h"

#define EVICT_LOG_CAP 4096u /* kvf_evict_log's records kept */

/*
 * struct evictor - lock serializes runs and guards the log (a ring of
 * log_n records from log_head); lost counts records overwritten since
 * the last kvf_evict_log.  Locking: lock is taken before dur.lock (a run
 * frees its victims under it), never inside another engine lock.
 */
struct evictor {
	pthread_mutex_t lock;
	kvf_evict_event *log;  /* [EVICT_LOG_CAP] */
	uint32_t log_head, log_n;
	uint64_t lost;
	_Atomic uint64_t quiet_until; /* ns (CLOCK_MONOTONIC): a watermark run
				       * found nothing to evict; the next
				       * waits, as a scan costs a walk of
				       * every index */
	_Atomic uint64_t runs, runs_full, runs_watermark;
	_Atomic uint64_t seqs, bytes, copy_bytes;
};

#endif /* KVF_ENGINE_EVICT_STATE_H */
