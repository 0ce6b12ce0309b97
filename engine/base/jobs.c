/*
 * jobs.c - the background jobs of a store (kvf_attend_start,
 * kvf_attend_x_start, kvf_kvpr_start, prefetches) and kvf_job_wait.
 *
 * Jobs someone waits for go to a queue served by ASYNC_THREADS threads of
 * the process, started on the first job and kept for its life (they sleep
 * on a condition variable when idle).  A job runs its function on its
 * thread (which spreads the work over the store's pool as any caller
 * does), keeps the status and the thread's message, and is marked done;
 * kvf_job_wait takes the result over on the caller's thread.  A detached
 * job (async_detach: a hint, such as a prefetch) goes to a queue of its
 * own served by HINT_THREADS more, so a hint never holds up a job someone
 * waits for; its thread frees it, and while it is queued it can be taken
 * off (async_cancel, and jobs_drain for a closing store's).
 *
 * States of a job: QUEUED -> RUNNING -> DONE -> (freed by kvf_job_wait).
 * Every job not yet DONE is on the `live` list, so kvf_close can wait for
 * its store's jobs (jobs_drain) before the store goes away.
 *
 * Locking: `lock` guards the queues, the live list, every job's state and
 * result, `started` and `next_id`; `work[q]` wakes queue q's threads,
 * `done` the waiters.  It is a leaf: no other lock is taken under it.
 */
#include "engine/base/jobs.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"

#define ASYNC_THREADS 2 /* waited jobs running at once (two micro-batches) */
#define HINT_THREADS 1  /* detached jobs running at once */

enum job_queue { Q_WAITED, Q_HINT, N_QUEUES };

enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

struct kvf_job {
	kvf_store *st;
	/* run(arg) on a job thread, then release(arg) in kvf_job_wait */
	kvf_status (*run)(void *arg);
	void (*release)(void *arg);
	void *arg;
	int detached;              /* async_detach: freed when done, no wait */
	uint64_t id;               /* detached: for async_cancel */
	void (*drop)(void *arg);   /* detached: frees arg when taken off */
	enum job_state state;      /* guarded by lock */
	kvf_status rc;             /* when DONE */
	char msg[KVF_ERRMSG_CAP];  /* kvf_last_error of the run, when DONE */
	struct kvf_job *next_queued; /* guarded by lock */
	struct kvf_job *prev_live, *next_live; /* guarded by lock */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work[N_QUEUES] = { PTHREAD_COND_INITIALIZER,
					 PTHREAD_COND_INITIALIZER };
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
/* guarded by lock: each queue's jobs, every job not done, threads running */
static struct kvf_job *queue_head[N_QUEUES], *queue_tail[N_QUEUES];
static struct kvf_job *live;
static int started[N_QUEUES];
static uint64_t next_id;

/* live_unlink - j is no longer queued or running: off the live list, and
 * its waiters (kvf_job_wait, jobs_drain) woken (lock held) */
static void live_unlink(struct kvf_job *j)
{
	if (j->prev_live)
		j->prev_live->next_live = j->next_live;
	else
		live = j->next_live;
	if (j->next_live)
		j->next_live->prev_live = j->prev_live;
	pthread_cond_broadcast(&done);
}

static void *async_thread(void *arg)
{
	int q = (int)(intptr_t)arg;

	pthread_mutex_lock(&lock);
	for (;;) {
		struct kvf_job *j;
		kvf_status rc;

		while (queue_head[q] == NULL)
			pthread_cond_wait(&work[q], &lock);
		j = queue_head[q];
		queue_head[q] = j->next_queued;
		if (queue_head[q] == NULL)
			queue_tail[q] = NULL;
		j->state = JOB_RUNNING;
		pthread_mutex_unlock(&lock);

		rc = j->run(j->arg);

		pthread_mutex_lock(&lock);
		j->rc = rc;
		if (rc != KVF_OK)
			snprintf(j->msg, sizeof(j->msg), "%s", kvf_last_error());
		j->state = JOB_DONE;
		live_unlink(j);
		if (j->detached)
			kvf_free(j); /* its run released arg */
	}
	return NULL;
}

/* start_threads - queue q's threads, once; caller holds lock */
static kvf_status start_threads(int q)
{
	int want = q == Q_HINT ? HINT_THREADS : ASYNC_THREADS;
	pthread_attr_t attr;

	if (started[q] == want)
		return KVF_OK;
	if (pthread_attr_init(&attr) != 0)
		return kvf_fail(KVF_ENOMEM, "cannot start a background job thread");
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	while (started[q] < want) {
		pthread_t t;

		if (pthread_create(&t, &attr, async_thread, (void *)(intptr_t)q) != 0)
			break;
		started[q]++;
	}
	pthread_attr_destroy(&attr);
	if (started[q] == 0)
		return kvf_fail(KVF_ENOMEM, "cannot start a background job thread");
	return KVF_OK;
}

/* enqueue - queue j (threads started if need be); KVF_ENOMEM when no
 * thread can start (j is then not queued) */
static kvf_status enqueue(struct kvf_job *j)
{
	int q = j->detached ? Q_HINT : Q_WAITED;
	kvf_status rc;

	pthread_mutex_lock(&lock);
	if ((rc = start_threads(q)) != KVF_OK) {
		pthread_mutex_unlock(&lock);
		return rc;
	}
	j->state = JOB_QUEUED;
	if (queue_tail[q])
		queue_tail[q]->next_queued = j;
	else
		queue_head[q] = j;
	queue_tail[q] = j;
	j->next_live = live;
	if (live)
		live->prev_live = j;
	live = j;
	pthread_cond_signal(&work[q]);
	pthread_mutex_unlock(&lock);
	return KVF_OK;
}

kvf_status async_submit(kvf_store *st, const char *call,
			kvf_status (*run)(void *arg),
			void (*release)(void *arg), void *arg, kvf_job **job)
{
	struct kvf_job *j;
	kvf_status rc;

	*job = NULL;
	j = kvf_calloc(1, sizeof(*j));
	if (j == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	j->st = st;
	j->run = run;
	j->release = release;
	j->arg = arg;
	if ((rc = enqueue(j)) != KVF_OK) {
		kvf_free(j);
		return rc;
	}
	*job = j;
	return KVF_OK;
}

uint64_t async_id(void)
{
	uint64_t id;

	pthread_mutex_lock(&lock);
	id = ++next_id;
	pthread_mutex_unlock(&lock);
	return id;
}

kvf_status async_detach(kvf_store *st, const char *call,
			kvf_status (*run)(void *arg), void (*drop)(void *arg),
			void *arg, uint64_t id)
{
	struct kvf_job *j = kvf_calloc(1, sizeof(*j));
	kvf_status rc;

	if (j == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	j->st = st;
	j->run = run;
	j->drop = drop;
	j->arg = arg;
	j->detached = 1;
	j->id = id;
	if ((rc = enqueue(j)) != KVF_OK)
		kvf_free(j);
	return rc;
}

/* unlink_queued - take queued hint j off its queue and the live list
 * (lock held; prev: the job before it in the queue, or NULL) */
static void unlink_queued(struct kvf_job *prev, struct kvf_job *j)
{
	if (prev)
		prev->next_queued = j->next_queued;
	else
		queue_head[Q_HINT] = j->next_queued;
	if (queue_tail[Q_HINT] == j)
		queue_tail[Q_HINT] = prev;
	live_unlink(j);
}

int async_cancel(uint64_t id)
{
	struct kvf_job *prev = NULL, *j;

	pthread_mutex_lock(&lock);
	for (j = queue_head[Q_HINT]; j && j->id != id; j = j->next_queued)
		prev = j;
	if (j)
		unlink_queued(prev, j);
	pthread_mutex_unlock(&lock);
	if (j == NULL)
		return 0; /* running, done, or never queued */
	j->drop(j->arg);
	kvf_free(j);
	return 1;
}

kvf_status kvf_job_wait(kvf_job *j)
{
	kvf_status rc;

	if (j == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_job_wait: job is NULL");
	pthread_mutex_lock(&lock);
	while (j->state != JOB_DONE)
		pthread_cond_wait(&done, &lock);
	pthread_mutex_unlock(&lock);
	rc = j->rc;
	if (j->release)
		j->release(j->arg);
	if (rc != KVF_OK)
		kvf_fail(rc, "%s", j->msg);
	kvf_free(j);
	return rc;
}

void jobs_drain(kvf_store *st)
{
	struct kvf_job *gone = NULL, *prev = NULL, *j, *next;

	/* st's queued hints are taken off, not waited for behind the hints
	 * of other stores */
	pthread_mutex_lock(&lock);
	for (j = queue_head[Q_HINT]; j; j = next) {
		next = j->next_queued;
		if (j->st != st) {
			prev = j;
			continue;
		}
		unlink_queued(prev, j);
		j->next_queued = gone;
		gone = j;
	}
	pthread_mutex_unlock(&lock);
	for (; gone; gone = next) {
		next = gone->next_queued;
		gone->drop(gone->arg);
		kvf_free(gone);
	}
	pthread_mutex_lock(&lock);
	for (;;) {
		for (j = live; j != NULL && j->st != st; j = j->next_live)
			;
		if (j == NULL)
			break;
		pthread_cond_wait(&done, &lock);
	}
	pthread_mutex_unlock(&lock);
}
