/*
 * cleaner_state.h - the background cleaner's thread and its doorbell (cleaner.c).
 */
#ifndef KVF_ENGINE_CLEANER_STATE_H
#define KVF_ENGINE_CLEANER_STATE_H

#include <pthread.h>

#include "engine/base/wake.h"

/*
 * struct cleaner - the background cleaner thread (cleaner.c).  Its bell is
 * rung by whoever sees free space run low (engine/segments/openseg.c); the thread
 * also looks every second.  Only open and close start and stop it.
 */
struct cleaner {
	pthread_t thread;
	int running;      /* the thread exists */
	struct wake bell;
	uint64_t packed_at; /* segtab.n_opened at the last pack_open: no
			     * segment opened since, none to pack (dur.lock) */
};

/* free segments per stripe that only the cleaner may take */

#define CLEANER_RESERVE 1u

#endif /* KVF_ENGINE_CLEANER_STATE_H */
