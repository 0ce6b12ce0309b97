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

/*
 * span_fn - receives n_tokens rows (row_bytes each, contiguous) starting
 * at token first.  A non-OK return stops the iteration and is returned.
 */

#endif /* KVF_ENGINE_READPATH_STATE_H */
