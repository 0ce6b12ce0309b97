/*
 * jobs.c - the background jobs of a store (kvf_attend_start,
 * kvf_attend_x_start, kvf_kvpr_start, prefetches) and kvf_job_wait.
 *
 * Jobs go to a queue served by ASYNC_THREADS threads of the process,
 * started on the first job and kept for its life (they sleep on a
 * condition variable when idle).  A job runs its function on its thread
 * (which spreads the work over the store's pool as any caller does),
 * keeps the status and the thread's message, and is marked done;
 * kvf_job_wait takes the result over on the caller's thread.  A detached
 * job (async_detach) is freed by its thread instead.
 *
 * States of a job: QUEUED -> RUNNING -> DONE -> (freed by kvf_job_wait).
 * Every job not yet DONE is on the `live` list, so kvf_close can wait for
 * its store's jobs (jobs_drain) before the store goes away.
 *
 * Locking: `lock` guards the queue, the live list, every job's state and
 * result, and `started`; `work` wakes the threads, `done` the waiters.
 */
#include "engine/base/jobs.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"

#define ASYNC_THREADS 2 /* jobs running at once (two micro-batches) */

enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

struct kvf_job {
	kvf_store *st;
	/* run(arg) on a job thread, then release(arg) in kvf_job_wait */
	kvf_status (*run)(void *arg);
	void (*release)(void *arg);
	void *arg;
	int detached;              /* async_detach: freed when done, no wait */
	enum job_state state;      /* guarded by lock */
	kvf_status rc;             /* when DONE */
	char msg[KVF_ERRMSG_CAP];  /* kvf_last_error of the run, when DONE */
	struct kvf_job *next_queued; /* guarded by lock */
	struct kvf_job *prev_live, *next_live; /* guarded by lock */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static struct kvf_job *queue_head, *queue_tail; /* guarded by lock */
static struct kvf_job *live;                    /* guarded by lock */
static int started;                             /* threads running */

static void *async_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	for (;;) {
		struct kvf_job *j;
		kvf_status rc;

		while (queue_head == NULL)
			pthread_cond_wait(&work, &lock);
		j = queue_head;
		queue_head = j->next_queued;
		if (queue_head == NULL)
			queue_tail = NULL;
		j->state = JOB_RUNNING;
		pthread_mutex_unlock(&lock);

		rc = j->run(j->arg);

		pthread_mutex_lock(&lock);
		j->rc = rc;
		if (rc != KVF_OK)
			snprintf(j->msg, sizeof(j->msg), "%s", kvf_last_error());
		j->state = JOB_DONE;
		if (j->prev_live)
			j->prev_live->next_live = j->next_live;
		else
			live = j->next_live;
		if (j->next_live)
			j->next_live->prev_live = j->prev_live;
		pthread_cond_broadcast(&done);
		if (j->detached)
			kvf_free(j); /* its run released arg */
	}
	return NULL;
}

/* start_threads - the threads, once; caller holds lock */
static kvf_status start_threads(void)
{
	pthread_attr_t attr;

	if (started == ASYNC_THREADS)
		return KVF_OK;
	if (pthread_attr_init(&attr) != 0)
		return kvf_fail(KVF_ENOMEM, "cannot start a background job thread");
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	while (started < ASYNC_THREADS) {
		pthread_t t;

		if (pthread_create(&t, &attr, async_thread, NULL) != 0)
			break;
		started++;
	}
	pthread_attr_destroy(&attr);
	if (started == 0)
		return kvf_fail(KVF_ENOMEM, "cannot start a background job thread");
	return KVF_OK;
}

/* enqueue - queue j (threads started if need be); KVF_ENOMEM when no
 * thread can start (j is then not queued) */
static kvf_status enqueue(struct kvf_job *j)
{
	kvf_status rc;

	pthread_mutex_lock(&lock);
	if ((rc = start_threads()) != KVF_OK) {
		pthread_mutex_unlock(&lock);
		return rc;
	}
	j->state = JOB_QUEUED;
	if (queue_tail)
		queue_tail->next_queued = j;
	else
		queue_head = j;
	queue_tail = j;
	j->next_live = live;
	if (live)
		live->prev_live = j;
	live = j;
	pthread_cond_signal(&work);
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

kvf_status async_detach(kvf_store *st, const char *call,
			kvf_status (*run)(void *arg), void *arg)
{
	struct kvf_job *j = kvf_calloc(1, sizeof(*j));
	kvf_status rc;

	if (j == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	j->st = st;
	j->run = run;
	j->arg = arg;
	j->detached = 1;
	if ((rc = enqueue(j)) != KVF_OK)
		kvf_free(j);
	return rc;
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
	pthread_mutex_lock(&lock);
	for (;;) {
		struct kvf_job *j = live;

		while (j != NULL && j->st != st)
			j = j->next_live;
		if (j == NULL)
			break;
		pthread_cond_wait(&done, &lock);
	}
	pthread_mutex_unlock(&lock);
}
