/*
 * readpath_state.h - the read path's spare read batches (readpath.c).
 */
#ifndef KVF_ENGINE_READPATH_STATE_H
#define KVF_ENGINE_READPATH_STATE_H

#include <pthread.h>
#include <stdint.h>

struct batch;

/* struct read_spares - read batches (their aligned buffers) kept for
 * reuse, owned by readpath.c; lock guards the list */
struct read_spares {
	pthread_mutex_t lock;
	struct batch *list;
	uint32_t n;
};

/* struct prefetch_busy - the prefetches queued or running (prefetch.c):
 * an attention of a layer being read ahead takes a queued one off its
 * queue (async_cancel), and stops a running one after the batch it has
 * in flight and waits for that, rather than read the same pages beside
 * it; lock guards the lists, done wakes waiters */
#define PREFETCH_JOBS_MAX 4u /* past it a hint is dropped */
struct prefetch_busy {
	pthread_mutex_t lock;
	pthread_cond_t done;
	uint32_t n;
	const void *job[PREFETCH_JOBS_MAX];
	uint64_t jid[PREFETCH_JOBS_MAX]; /* its id in the job queue */
	uint64_t seq[PREFETCH_JOBS_MAX];
	uint32_t layer[PREFETCH_JOBS_MAX];
	int running[PREFETCH_JOBS_MAX];
	int stop[PREFETCH_JOBS_MAX]; /* running: read no further batch */
	int closing;                 /* kvf_close: no more, and stop all */
};

/*
 * span_fn - receives n_tokens rows (row_bytes each, contiguous) starting
 * at token first.  A non-OK return stops the iteration and is returned.
 */

#endif /* KVF_ENGINE_READPATH_STATE_H */
