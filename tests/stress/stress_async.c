/*
 * stress_async.c - background attention (kvf_attend_start, kvf_job_wait)
 * while other sequences append, for ThreadSanitizer (a plain C program:
 * Criterion does not run under TSan).
 *
 * Appender threads grow their own sequences with typed appends
 * (kvf_append_tensor, a strided view); starter threads start jobs over
 * sequences whose tokens all hold the same V row, wait for them from
 * another thread than the one that started some of them, and check each
 * output is that row (to rounding); at the end a job is left running when the
 * store is closed (kvf_close waits for it) and waited for afterwards.
 * Prints what it did; exit 1 on any failure.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvflash.h"
#include "testutil.h"

#define LAYERS 2
#define QH 4
#define KVH 2
#define DIM 32
#define APPENDERS 2
#define STARTERS 2
#define ROUNDS 80

static kvf_store *st;
static _Atomic int failed;
static _Atomic long jobs_done;

static void fail(const char *what, kvf_status rc)
{
	fprintf(stderr, "stress_async: %s: %s (%s)\n", what, kvf_strerror(rc),
		kvf_last_error());
	atomic_store(&failed, 1);
}

/* sequence id (1..APPENDERS): every token's V row is id; K is strided
 * out of a wider buffer */
static void *appender(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	float k[4][KVH + 1][DIM], v[4][KVH][DIM];
	kvf_tensor tk, tv;

	for (int t = 0; t < 4; t++)
		for (int h = 0; h <= KVH; h++)
			for (int d = 0; d < DIM; d++) {
				k[t][h][d] = 0.01f * (float)d;
				if (h < KVH)
					v[t][h][d] = (float)id;
			}
	kvf_tensor_init(&tk);
	tk.dtype = KVF_DTYPE_F32;
	tk.data = k;
	tk.n_heads = KVH;
	tk.head_dim = DIM;
	tk.token_stride = sizeof(k[0]);
	tv = tk;
	tv.data = v;
	tv.token_stride = 0;
	for (int r = 0; r < ROUNDS && !atomic_load(&failed); r++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			kvf_status rc;

			tk.n_tokens = tv.n_tokens = 1 + r % 4;
			if ((rc = kvf_append_tensor(st, id, l, &tk, &tv)) != KVF_OK)
				fail("append", rc);
		}
	return NULL;
}

struct pending {
	kvf_job *job;
	float *out;
	uint64_t ids[APPENDERS];
};

/* starter: start a job over every sequence, hand half of them to the
 * next round to wait for */
static void *starter(void *arg)
{
	float q[APPENDERS][QH][DIM];
	struct pending p[2] = { { 0 } };

	(void)arg;
	for (int i = 0; i < APPENDERS * QH * DIM; i++)
		(&q[0][0][0])[i] = (float)(i % 7) * 0.1f;
	for (int r = 0; r < ROUNDS && !atomic_load(&failed); r++) {
		struct pending *c = &p[r % 2];
		kvf_status rc;

		if (c->job != NULL) {
			if ((rc = kvf_job_wait(c->job)) != KVF_OK)
				fail("wait", rc);
			for (int s = 0; s < APPENDERS; s++)
				for (int i = 0; i < QH * DIM; i++)
					if (fabsf(c->out[s * QH * DIM + i] - (float)c->ids[s]) > 1e-5f) {
						fprintf(stderr, "stress_async: sequence %llu: output %g, its V rows are all %llu\n",
							(unsigned long long)c->ids[s],
							(double)c->out[s * QH * DIM + i],
							(unsigned long long)c->ids[s]);
						atomic_store(&failed, 1);
						break;
					}
			atomic_fetch_add(&jobs_done, 1);
			free(c->out);
			c->job = NULL;
		}
		c->out = malloc(sizeof(q));
		for (int s = 0; s < APPENDERS; s++)
			c->ids[s] = (uint64_t)(APPENDERS - s); /* any order */
		rc = kvf_attend_start(st, APPENDERS, c->ids, (uint32_t)(r % LAYERS),
				      &q[0][0][0], c->out, NULL, &c->job);
		if (rc != KVF_OK)
			fail("start", rc);
	}
	for (int i = 0; i < 2; i++)
		if (p[i].job != NULL) {
			if (kvf_job_wait(p[i].job) != KVF_OK)
				fail("last wait", KVF_OK);
			free(p[i].out);
		}
	return NULL;
}

int main(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F32 };
	char *dir = tmpdir_make("stress_async");
	pthread_t a[APPENDERS], s[STARTERS];
	float q[QH * DIM] = { 0 }, *out = malloc(sizeof(float) * QH * DIM);
	float one[KVH * DIM];
	uint64_t id = 1;
	kvf_options o;
	kvf_job *job;
	kvf_status rc;

	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 64ull << 20;
	o.n_threads = 3;
	if ((rc = kvf_open(dir, &o, &st)) != KVF_OK) {
		fail("open", rc);
		return 1;
	}
	for (int i = 0; i < KVH * DIM; i++)
		one[i] = 1.0f;
	for (uint64_t i = 1; i <= APPENDERS; i++) {
		kvf_seq_create(st, i);
		for (uint32_t l = 0; l < LAYERS; l++) {
			float v[KVH * DIM];

			for (int j = 0; j < KVH * DIM; j++)
				v[j] = (float)i;
			kvf_append(st, i, l, 1, one, v);
		}
	}
	for (int i = 0; i < APPENDERS; i++)
		pthread_create(&a[i], NULL, appender, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < STARTERS; i++)
		pthread_create(&s[i], NULL, starter, NULL);
	for (int i = 0; i < APPENDERS; i++)
		pthread_join(a[i], NULL);
	for (int i = 0; i < STARTERS; i++)
		pthread_join(s[i], NULL);
	/* a job still running when the store closes */
	if ((rc = kvf_attend_start(st, 1, &id, 0, q, out, NULL, &job)) != KVF_OK)
		fail("start before close", rc);
	if ((rc = kvf_close(st)) != KVF_OK)
		fail("close", rc);
	if ((rc = kvf_job_wait(job)) != KVF_OK)
		fail("wait after close", rc);
	free(out);
	tmpdir_remove(dir);
	printf("stress_async: %ld jobs checked, %s\n", (long)atomic_load(&jobs_done),
	       atomic_load(&failed) ? "FAILED" : "passed");
	return atomic_load(&failed) ? 1 : 0;
}
