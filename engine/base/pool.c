/*
 * pool.c - fork-join worker pool.
 *
 * A run is a batch (fn, arg, n) with an atomic next-task counter; runs wait
 * in a FIFO; workers and the submitting thread take task indices from the
 * oldest unfinished run until none is left.  The submitter returns once its
 * run's done count reaches n.  The first failure (lowest index) keeps its
 * status and message, copied from the worker's thread-local message.
 *
 * Locking: `lock` guards the queue and `stop`; a run's done count and the
 * pool's queued count change under it but are atomic, so that an idle
 * worker and a waiting submitter can watch them awake for a moment
 * (POOL_SPIN) before they sleep on `work` and a run's `done_cond`.
 */
#include "engine/base/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "api/status.h"

/* Fork-join callers queue their next run, or see their last task done,
 * within microseconds: a thread waits some microseconds awake (this many
 * pauses) before it sleeps, which spares a wake-up through the scheduler
 * each time.  Only when the pool's threads have a CPU each: otherwise the
 * spinning would take the CPU the awaited thread needs. */
#define POOL_SPIN 4000u

#if defined(__x86_64__) || defined(__i386__)
static void spin_pause(void)
{
	__builtin_ia32_pause();
}
#else
static void spin_pause(void)
{
}
#endif

struct run {
	pool_task_fn fn;
	void *arg;
	uint32_t n;              /* tasks */
	_Atomic uint32_t next;   /* next task index to hand out */
	_Atomic uint32_t done;   /* tasks finished; changed under pool lock */
	uint32_t fail_index;     /* lowest failing task; pool lock */
	kvf_status fail;         /* its status; pool lock */
	char msg[KVF_ERRMSG_CAP]; /* its message; pool lock */
	pthread_cond_t done_cond;
	struct run *next_run;    /* FIFO link; pool lock */
};

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct run *head, *tail; /* runs with tasks left to hand out */
	_Atomic uint64_t queued; /* runs queued so far: idle workers watch it */
	int stop;                /* destroy asked */
	uint32_t n_threads;
	uint32_t spin;           /* pauses before sleeping: POOL_SPIN or 0 */
	pthread_t *threads;
};

/* take - a task of the oldest run with tasks left; caller holds lock */
static struct run *take(struct pool *p, uint32_t *index)
{
	while (p->head) {
		struct run *r = p->head;
		uint32_t i = atomic_fetch_add(&r->next, 1);

		if (i < r->n) {
			*index = i;
			return r;
		}
		p->head = r->next_run; /* handed out: off the queue */
		if (p->head == NULL)
			p->tail = NULL;
	}
	return NULL;
}

/* execute - run task i of r and account for it; caller holds no lock */
static void execute(struct pool *p, struct run *r, uint32_t i)
{
	kvf_status rc = r->fn(r->arg, i);

	pthread_mutex_lock(&p->lock);
	if (rc != KVF_OK && (r->fail == KVF_OK || i < r->fail_index)) {
		r->fail = rc;
		r->fail_index = i;
		strncpy(r->msg, kvf_last_error(), sizeof(r->msg) - 1);
	}
	if (atomic_fetch_add(&r->done, 1) + 1 == r->n)
		pthread_cond_signal(&r->done_cond);
	pthread_mutex_unlock(&p->lock);
}

static void *worker(void *arg)
{
	struct pool *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		uint32_t i;
		struct run *r = take(p, &i);

		if (r == NULL) {
			uint64_t seen = atomic_load(&p->queued);

			pthread_mutex_unlock(&p->lock);
			for (uint32_t s = 0; s < p->spin &&
					     atomic_load(&p->queued) == seen; s++)
				spin_pause();
			pthread_mutex_lock(&p->lock);
			/* queued changes under the lock: no wake-up is missed */
			if (atomic_load(&p->queued) == seen && !p->stop)
				pthread_cond_wait(&p->work, &p->lock);
			continue;
		}
		pthread_mutex_unlock(&p->lock);
		execute(p, r, i);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

kvf_status pool_create(uint32_t n_threads, struct pool **out)
{
	struct pool *p = kvf_calloc(1, sizeof(*p));

	if (p == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for the worker pool");
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	/* the workers and a submitter, each on a CPU of its own */
	p->spin = (long)n_threads + 1 <= sysconf(_SC_NPROCESSORS_ONLN) ? POOL_SPIN : 0;
	p->threads = kvf_calloc(n_threads ? n_threads : 1, sizeof(pthread_t));
	if (p->threads == NULL) {
		pool_destroy(p);
		return kvf_fail(KVF_ENOMEM, "out of memory for the worker pool");
	}
	for (uint32_t i = 0; i < n_threads; i++) {
		if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
			pool_destroy(p);
			return kvf_fail(KVF_ENOMEM,
					"cannot start worker thread %u of %u", i,
					n_threads);
		}
		p->n_threads++;
	}
	*out = p;
	return KVF_OK;
}

void pool_destroy(struct pool *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	for (uint32_t i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	kvf_free(p->threads);
	pthread_cond_destroy(&p->work);
	pthread_mutex_destroy(&p->lock);
	kvf_free(p);
}

kvf_status pool_run(struct pool *p, uint32_t n, pool_task_fn fn, void *arg)
{
	struct run r = { .fn = fn, .arg = arg, .n = n };
	uint32_t i;

	if (n == 0)
		return KVF_OK;
	atomic_init(&r.next, 0);
	atomic_init(&r.done, 0);
	pthread_cond_init(&r.done_cond, NULL);
	pthread_mutex_lock(&p->lock);
	if (p->tail)
		p->tail->next_run = &r;
	else
		p->head = &r;
	p->tail = &r;
	atomic_fetch_add(&p->queued, 1);
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);

	/* work on our own run until its tasks are all handed out */
	while ((i = atomic_fetch_add(&r.next, 1)) < n)
		execute(p, &r, i);
	for (uint32_t s = 0; s < p->spin && atomic_load(&r.done) < n; s++)
		spin_pause();

	pthread_mutex_lock(&p->lock);
	/* unless a worker saw it exhausted first, our run is still queued */
	{
		struct run **pp = &p->head, *prev = NULL;

		while (*pp && *pp != &r) {
			prev = *pp;
			pp = &(*pp)->next_run;
		}
		if (*pp == &r) {
			*pp = r.next_run;
			if (p->tail == &r)
				p->tail = prev;
		}
	}
	while (atomic_load(&r.done) < n)
		pthread_cond_wait(&r.done_cond, &p->lock);
	pthread_mutex_unlock(&p->lock);
	pthread_cond_destroy(&r.done_cond);
	if (r.fail != KVF_OK)
		return kvf_fail(r.fail, "%s", r.msg);
	return KVF_OK;
}
