/*
 * stress_optim.c - optimizer steps while other threads append, read and
 * sync on the same store, for ThreadSanitizer (a plain C program: Criterion
 * does not run under TSan).
 *
 * On a memory store (where a step splits its update over the pool's
 * workers and the segment writer hands its buffers to the media) and on a
 * file store: two stepper threads each step an optimizer of their own
 * with the same gradients, a reader reads their parameters meanwhile, an
 * appender grows a sequence and checks it back, a syncer syncs.  The two
 * optimizers must end bit for bit equal, at the same step count (the
 * unit tests check the values themselves).  Prints "N passed, M failed";
 * exit 1 on any failure.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvflash.h"
#include "testutil.h"

#define N_PARAMS (600u * 1024 + 17) /* two batches of chunks (optim_int.h's
				     * OPTIM_BATCH), the last one partial */
#define STEPS 12
#define DIM 32
#define KVH 2
#define MAX_TOKENS 16384

static kvf_store *st;
static _Atomic int failed;
static _Atomic int steppers_done;
static float *grads[STEPS];

static void fail(const char *what, kvf_status rc)
{
	fprintf(stderr, "stress_optim: %s: %s (%s)\n", what, kvf_strerror(rc),
		kvf_last_error());
	atomic_store(&failed, 1);
}

static void *stepper(void *arg)
{
	const char *name = arg;
	kvf_opt *o = NULL;
	kvf_status rc = kvf_opt_open(st, name, &o);

	if (rc != KVF_OK) {
		fail("open", rc);
		return NULL;
	}
	for (int s = 0; s < STEPS && !atomic_load(&failed); s++) {
		kvf_grad g = { .dtype = KVF_DTYPE_F32, .values = grads[s],
			       .n = N_PARAMS };

		if (s % 3 == 2) { /* a Top-K step now and then */
			static const uint32_t idx[] = { 0, 1, 4096, 77777, N_PARAMS - 1 };

			g.indices = idx;
			g.n = 5;
		}
		if ((rc = kvf_opt_step(o, &g, NULL)) != KVF_OK)
			fail("step", rc);
	}
	kvf_opt_close(o);
	atomic_fetch_add(&steppers_done, 1);
	return NULL;
}

/* reader - parameters of both optimizers, read while they step */
static void *reader(void *arg)
{
	float *buf = malloc(4096 * sizeof(float));
	kvf_opt *o[2] = { NULL, NULL };

	(void)arg;
	if (buf == NULL || kvf_opt_open(st, "a", &o[0]) != KVF_OK ||
	    kvf_opt_open(st, "b", &o[1]) != KVF_OK) {
		fail("reader open", KVF_ENOMEM);
		goto out;
	}
	while (atomic_load(&steppers_done) < 2 && !atomic_load(&failed))
		for (int i = 0; i < 2; i++) {
			kvf_status rc = kvf_opt_read(o[i], 1000, 4096, buf);

			if (rc != KVF_OK)
				fail("read", rc);
		}
out:
	kvf_opt_close(o[0]);
	kvf_opt_close(o[1]);
	free(buf);
	return NULL;
}

/* appender - a sequence whose every V value is its token's index */
static void *appender(void *arg)
{
	float k[KVH * DIM], v[KVH * DIM], back[DIM];
	uint64_t t = 0;

	(void)arg;
	/* at most MAX_TOKENS (8 MiB): the store is not to fill up */
	while (atomic_load(&steppers_done) < 2 && !atomic_load(&failed) &&
	       t < MAX_TOKENS) {
		kvf_status rc;

		for (int i = 0; i < KVH * DIM; i++) {
			k[i] = 0.5f;
			v[i] = (float)t;
		}
		if ((rc = kvf_append(st, 9, 0, 1, k, v)) != KVF_OK) {
			fail("append", rc);
			break;
		}
		if ((rc = kvf_read(st, 9, 0, KVH - 1, t, t + 1, NULL, back)) != KVF_OK) {
			fail("read back", rc);
			break;
		}
		if (memcmp(back, v + (KVH - 1) * DIM, DIM * sizeof(float)) != 0) {
			fprintf(stderr, "stress_optim: token %llu read back wrong\n",
				(unsigned long long)t);
			atomic_store(&failed, 1);
		}
		t++;
	}
	return NULL;
}

static void *syncer(void *arg)
{
	(void)arg;
	while (atomic_load(&steppers_done) < 2 && !atomic_load(&failed)) {
		kvf_status rc = kvf_sync(st);

		if (rc != KVF_OK)
			fail("sync", rc);
	}
	return NULL;
}

/* same - the two optimizers' parameters are bit for bit equal */
static int same(void)
{
	float *a = malloc(N_PARAMS * sizeof(float)), *b = malloc(N_PARAMS * sizeof(float));
	kvf_opt *oa = NULL, *ob = NULL;
	int ok = a && b && kvf_opt_open(st, "a", &oa) == KVF_OK &&
		 kvf_opt_open(st, "b", &ob) == KVF_OK &&
		 kvf_opt_read(oa, 0, N_PARAMS, a) == KVF_OK &&
		 kvf_opt_read(ob, 0, N_PARAMS, b) == KVF_OK &&
		 memcmp(a, b, N_PARAMS * sizeof(float)) == 0;
	uint64_t steps = 0;

	if (ok && (kvf_opt_steps(oa, &steps, NULL) != KVF_OK || steps != STEPS))
		ok = 0;
	kvf_opt_close(oa);
	kvf_opt_close(ob);
	free(a);
	free(b);
	return ok;
}

static int run(kvf_media_kind media, const char *dir)
{
	kvf_model m = { 1, 4, KVH, DIM, KVF_DTYPE_F32 };
	kvf_opt_config cfg;
	kvf_options o;
	pthread_t t[5];
	float *init = malloc(N_PARAMS * sizeof(float));

	atomic_store(&steppers_done, 0);
	kvf_options_init(&o, &m);
	o.media = media;
	o.segment_size = 128 * 1024;
	o.capacity_bytes = 64ull << 20;
	o.n_threads = 3;
	if (init == NULL ||
	    kvf_open(tmp_path(dir, media == KVF_MEDIA_MEMORY ? "mem" : "file"), &o,
		     &st) != KVF_OK) {
		fprintf(stderr, "stress_optim: open: %s\n", kvf_last_error());
		free(init);
		return 1;
	}
	for (uint32_t i = 0; i < N_PARAMS; i++)
		init[i] = (float)(i % 1000) / 500.0f - 1.0f;
	kvf_opt_config_init(&cfg, KVF_OPT_ADAM);
	cfg.max_grad_norm = 10.0f;
	for (int i = 0; i < 2; i++) {
		kvf_opt *op;

		if (kvf_opt_create(st, i ? "b" : "a", N_PARAMS, &cfg, init, &op) != KVF_OK) {
			fprintf(stderr, "stress_optim: create: %s\n", kvf_last_error());
			free(init);
			return 1;
		}
		kvf_opt_close(op);
	}
	free(init);
	if (kvf_seq_create(st, 9) != KVF_OK)
		return 1;
	pthread_create(&t[0], NULL, stepper, "a");
	pthread_create(&t[1], NULL, stepper, "b");
	pthread_create(&t[2], NULL, reader, NULL);
	pthread_create(&t[3], NULL, appender, NULL);
	pthread_create(&t[4], NULL, syncer, NULL);
	for (int i = 0; i < 5; i++)
		pthread_join(t[i], NULL);
	if (!atomic_load(&failed) && !same()) {
		fprintf(stderr, "stress_optim: the two optimizers differ after %d steps\n",
			STEPS);
		atomic_store(&failed, 1);
	}
	if (kvf_close(st) != KVF_OK)
		atomic_store(&failed, 1);
	return atomic_load(&failed);
}

int main(void)
{
	char *dir = tmpdir_make("stress-optim");
	uint64_t rng = rng_seed("stress_optim");
	int bad = 0;

	if (dir == NULL)
		return 1;
	for (int s = 0; s < STEPS; s++) {
		grads[s] = malloc(N_PARAMS * sizeof(float));
		if (grads[s] == NULL)
			return 1;
		for (uint32_t i = 0; i < N_PARAMS; i++)
			grads[s][i] = (float)((double)(rng_next(&rng) >> 11) /
					      9007199254740992.0) - 0.5f;
	}
	bad = run(KVF_MEDIA_MEMORY, dir) | run(KVF_MEDIA_FILE, dir);
	for (int s = 0; s < STEPS; s++)
		free(grads[s]);
	tmpdir_remove(dir);
	printf("%d passed, %d failed\n", bad ? 0 : 1, bad ? 1 : 0);
	return bad;
}
