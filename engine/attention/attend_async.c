/*
 * attend_async.c - kvf_attend_start and kvf_job_wait: kvf_attend_batch in
 * the background, so a decode loop overlaps the store's reads and
 * attention of one micro-batch with its own compute of another.
 *
 * Jobs go to a queue served by ASYNC_THREADS threads of the process,
 * started on the first job and kept for its life (they sleep on a
 * condition variable when idle).  A job runs kvf_attend_batch on its
 * thread (which spreads the work over the store's pool as any caller
 * does), keeps the status and the thread's message, and is marked done;
 * kvf_job_wait takes the result over on the caller's thread.
 *
 * States of a job: QUEUED -> RUNNING -> DONE -> (freed by kvf_job_wait).
 * Every job not yet DONE is on the `live` list, so kvf_close can wait for
 * its store's jobs (attend_async_drain) before the store goes away.
 *
 * Locking: `lock` guards the queue, the live list, every job's state and
 * result, and `started`; `work` wakes the threads, `done` the waiters.
 */
#include "engine/attention/attend_async.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "engine/base/fatal.h"
#include "engine/base/store_state.h"

#define ASYNC_THREADS 2 /* jobs running at once (two micro-batches) */

enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

struct kvf_job {
	kvf_store *st;
	uint32_t n_seqs;
	uint64_t *seqs;            /* [n_seqs], a copy */
	uint32_t layer;
	float *q;                  /* [n_seqs][n_q_heads][head_dim], a copy */
	float *out;                /* the caller's */
	kvf_attn_opts opts;        /* a copy; lse and mask are the caller's */
	int has_opts;
	/* a job of another call (async_submit): run(arg) instead of
	 * kvf_attend_batch, then release(arg) in kvf_job_wait */
	kvf_status (*run)(void *arg);
	void (*release)(void *arg);
	void *arg;
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

		if (j->run)
			rc = j->run(j->arg);
		else
			rc = kvf_attend_batch(j->st, j->n_seqs, j->seqs,
					      j->layer, j->q, j->out,
					      j->has_opts ? &j->opts : NULL);

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
		return kvf_fail(KVF_ENOMEM, "kvf_attend_start: cannot start a thread");
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	while (started < ASYNC_THREADS) {
		pthread_t t;

		if (pthread_create(&t, &attr, async_thread, NULL) != 0)
			break;
		started++;
	}
	pthread_attr_destroy(&attr);
	if (started == 0)
		return kvf_fail(KVF_ENOMEM, "kvf_attend_start: cannot start a thread");
	return KVF_OK;
}

static kvf_status enqueue(struct kvf_job *j);

/* start_check - the argument checks kvf_attend_batch would make first */
static kvf_status start_check(kvf_store *st, uint32_t n_seqs,
			      const uint64_t *seqs, uint32_t layer,
			      const float *q, float *out,
			      const kvf_attn_opts *opts, kvf_job **job)
{
	const char *call = "kvf_attend_start";
	kvf_status rc;

	if (job == NULL)
		return kvf_fail(KVF_EINVAL, "%s: job is NULL", call);
	if (st == NULL || q == NULL || out == NULL || (seqs == NULL && n_seqs))
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st == NULL ? "store" : q == NULL ? "q"
					: out == NULL ? "out" : "seqs");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	for (uint32_t i = 0; i < n_seqs; i++)
		for (uint32_t j = 0; j < i; j++)
			if (seqs[i] == seqs[j])
				return kvf_fail(KVF_EINVAL,
						"%s: sequence %llu is given twice",
						call, (unsigned long long)seqs[i]);
	if (opts == NULL)
		return KVF_OK;
	if ((rc = kvf_struct_check(call, "opts", opts, sizeof(*opts))) != KVF_OK)
		return rc;
	if (!isfinite(opts->scale) || opts->scale < 0)
		return kvf_fail(KVF_EINVAL, "%s: opts.scale %g must be finite and >= 0",
				call, (double)opts->scale);
	if (opts->sparse > 2)
		return kvf_fail(KVF_EINVAL, "%s: opts.sparse %u must be 0, 1 or 2",
				call, opts->sparse);
	return KVF_OK;
}

kvf_status kvf_attend_start(kvf_store *st, uint32_t n_seqs,
			    const uint64_t *seqs, uint32_t layer,
			    const float *q, float *out,
			    const kvf_attn_opts *opts, kvf_job **job)
{
	size_t q_floats;
	struct kvf_job *j;
	kvf_status rc;

	if ((rc = start_check(st, n_seqs, seqs, layer, q, out, opts, job)) != KVF_OK) {
		if (job)
			*job = NULL;
		return rc;
	}
	*job = NULL;
	q_floats = (size_t)n_seqs * st->hdr.n_q_heads * st->hdr.head_dim;
	j = kvf_calloc(1, sizeof(*j));
	if (j == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_attend_start: out of memory");
	j->seqs = kvf_malloc(n_seqs ? n_seqs * sizeof(uint64_t) : 1);
	j->q = kvf_malloc(q_floats ? q_floats * sizeof(float) : 1);
	if (j->seqs == NULL || j->q == NULL) {
		kvf_free(j->seqs);
		kvf_free(j->q);
		kvf_free(j);
		return kvf_fail(KVF_ENOMEM, "kvf_attend_start: out of memory");
	}
	memcpy(j->seqs, seqs ? seqs : (const uint64_t *)j->seqs,
	       n_seqs * sizeof(uint64_t));
	memcpy(j->q, q, q_floats * sizeof(float));
	j->st = st;
	j->n_seqs = n_seqs;
	j->layer = layer;
	j->out = out;
	if (opts) {
		kvf_attn_opts_init(&j->opts);
		memcpy(&j->opts, opts, opts->struct_size < sizeof(*opts)
			       ? opts->struct_size : sizeof(*opts));
		j->has_opts = 1;
	}
	if ((rc = enqueue(j)) != KVF_OK) {
		kvf_free(j->seqs);
		kvf_free(j->q);
		kvf_free(j);
		return rc;
	}
	*job = j;
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
	kvf_free(j->seqs);
	kvf_free(j->q);
	kvf_free(j);
	return rc;
}

void attend_async_drain(kvf_store *st)
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
