/*
 * stress_attend.c - attention near the data while other sequences append,
 * fork, free and sync, for ThreadSanitizer (a plain C program: Criterion
 * does not run under TSan).
 *
 * Appender threads grow their own sequences; attender threads run
 * kvf_attend (on the pool's workers) and kvf_attend_batch over all of
 * them, checking every output is finite and that a sequence whose tokens
 * are all equal rows attends to exactly that row; a syncer syncs.  Prints
 * "N passed, M failed"; exit 1 on any failure.
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
#define ROUNDS 60

static kvf_store *st;
static _Atomic int failed;
static _Atomic int done_appending;

static void fail(const char *what, kvf_status rc)
{
	fprintf(stderr, "stress_attend: %s: %s (%s)\n", what, kvf_strerror(rc),
		kvf_last_error());
	atomic_store(&failed, 1);
}

/* every token of sequence id has the same K and V row: value id */
static void *appender(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	float k[4 * KVH * DIM], v[4 * KVH * DIM];

	for (int i = 0; i < 4 * KVH * DIM; i++) {
		k[i] = 0.01f * (float)(i % DIM);
		v[i] = (float)id;
	}
	for (int r = 0; r < ROUNDS && !atomic_load(&failed); r++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			kvf_status rc = kvf_append(st, id, l, 1 + r % 4, k, v);

			if (rc != KVF_OK)
				fail("append", rc);
		}
	atomic_fetch_add(&done_appending, 1);
	return NULL;
}

static void *attender(void *arg)
{
	float q[2 * QH * DIM], out[2 * QH * DIM];
	uint64_t ids[2] = { 1, 2 };

	(void)arg;
	for (int i = 0; i < 2 * QH * DIM; i++)
		q[i] = 0.1f * (float)(i % 7);
	while (atomic_load(&done_appending) < APPENDERS && !atomic_load(&failed)) {
		for (uint64_t id = 1; id <= APPENDERS; id++) {
			kvf_status rc = kvf_attend(st, id, id % LAYERS, q, out, NULL);

			if (rc != KVF_OK) {
				fail("attend", rc);
				break;
			}
			for (int j = 0; j < QH * DIM; j++)
				if (!(fabsf(out[j] - (float)id) < 1e-3f) &&
				    !(out[j] == 0.0f)) { /* 0: no token yet */
					fprintf(stderr, "stress_attend: seq %llu out[%d] = %g\n",
						(unsigned long long)id, j, (double)out[j]);
					atomic_store(&failed, 1);
					break;
				}
		}
		if (kvf_attend_batch(st, 2, ids, 1, q, out, NULL) != KVF_OK)
			fail("attend_batch", KVF_EINVAL);
	}
	return NULL;
}

static void *syncer(void *arg)
{
	(void)arg;
	while (atomic_load(&done_appending) < APPENDERS && !atomic_load(&failed)) {
		kvf_status rc = kvf_sync(st);

		if (rc != KVF_OK)
			fail("sync", rc);
	}
	return NULL;
}

int main(void)
{
	char *dir = tmpdir_make("stress-attend");
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F32 };
	pthread_t t[APPENDERS + 3];
	kvf_options o;
	int bad;

	if (dir == NULL)
		return 1;
	kvf_options_init(&o, &m);
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 64ull << 20;
	o.n_threads = 3;
	if (kvf_open(tmp_path(dir, "s"), &o, &st) != KVF_OK) {
		fprintf(stderr, "stress_attend: open: %s\n", kvf_last_error());
		return 1;
	}
	for (uint64_t id = 1; id <= APPENDERS; id++)
		if (kvf_seq_create(st, id) != KVF_OK)
			return 1;
	for (int i = 0; i < APPENDERS; i++)
		pthread_create(&t[i], NULL, appender, (void *)(uintptr_t)(i + 1));
	pthread_create(&t[APPENDERS], NULL, attender, NULL);
	pthread_create(&t[APPENDERS + 1], NULL, attender, NULL);
	pthread_create(&t[APPENDERS + 2], NULL, syncer, NULL);
	for (int i = 0; i < APPENDERS + 3; i++)
		pthread_join(t[i], NULL);
	if (kvf_close(st) != KVF_OK)
		atomic_store(&failed, 1);
	tmpdir_remove(dir);
	bad = atomic_load(&failed);
	printf("%d passed, %d failed\n", bad ? 0 : 1, bad ? 1 : 0);
	return bad;
}
