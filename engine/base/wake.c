/*
 * wake.c - the doorbell of engine/base/wake.h.
 */
#include "engine/base/wake.h"

#include <time.h>

void wake_init(struct wake *w)
{
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->rung = 0;
	w->stop = 0;
}

void wake_destroy(struct wake *w)
{
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}

void wake_ring(struct wake *w)
{
	pthread_mutex_lock(&w->lock);
	w->rung = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void wake_stop(struct wake *w)
{
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

int wake_wait(struct wake *w, int timeout_s)
{
	int go;

	pthread_mutex_lock(&w->lock);
	if (!w->rung && !w->stop) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += timeout_s;
		pthread_cond_timedwait(&w->cond, &w->lock, &ts);
	}
	w->rung = 0;
	go = !w->stop;
	pthread_mutex_unlock(&w->lock);
	return go;
}
