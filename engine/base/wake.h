/*
 * wake.h - a doorbell for a background thread: others ring it, the thread
 * waits for a ring, a timeout or the order to stop.  Owns its lock and
 * condition; `rung` and `stop` are changed only under the lock.
 */
#ifndef KVF_ENGINE_WAKE_H
#define KVF_ENGINE_WAKE_H

#include <pthread.h>

struct wake {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int rung; /* rung since the thread last woke */
	int stop; /* the thread is to end */
};

void wake_init(struct wake *w);
void wake_destroy(struct wake *w);
/* wake_ring - wake the waiting thread (or the next wait returns at once) */
void wake_ring(struct wake *w);
/* wake_stop - tell the thread to end */
void wake_stop(struct wake *w);
/* wake_wait - wait until rung, stopped or timeout_s seconds have passed;
 * return 0 when the thread is to end, else 1 */
int wake_wait(struct wake *w, int timeout_s);

#endif /* KVF_ENGINE_WAKE_H */
