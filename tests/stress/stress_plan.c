/*
 * stress_plan.c - the planners' background calls under ThreadSanitizer (a
 * plain C program: Criterion does not run under TSan): kvf_attend_x_start
 * and kvf_kvpr_start jobs on one sequence while another thread registers
 * the layer's weights again and again (a running recomputation keeps the
 * weights it started with) and an appender grows another sequence; at the
 * end a job is left running when the store is closed (kvf_close waits for
 * it) and waited for afterwards.
 *
 * With W_v = I on X's first columns, every V row is X's first n_kv *
 * head_dim values; X rows are all the same, so attention over any range
 * is that row (to f16 rounding of X): each output is checked.  Exit 1 on any failure.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "kvflash.h"
#include "testutil.h"

#define QH 4
#define KVH 2
#define DIM 16
#define XD (QH * DIM)
#define KD (KVH * DIM)
#define TOKENS 200
#define ROUNDS 40

static kvf_store *st;
static _Atomic int failed;
static _Atomic int stop;
static float wk[XD][KD], wv[XD][KD];

static void fail(const char *what, kvf_status rc)
{
	fprintf(stderr, "stress_plan: %s: %s (%s)\n", what, kvf_strerror(rc),
		kvf_last_error());
	atomic_store(&failed, 1);
}

static float xval(int j)
{
	return 0.01f * (float)(j + 1);
}

static void *attender(void *arg)
{
	float q[QH * DIM], out[QH * DIM], lse[QH];
	kvf_attn_opts o;

	(void)arg;
	for (int i = 0; i < QH * DIM; i++)
		q[i] = 0.1f * (float)(i % 7);
	kvf_attn_opts_init(&o);
	o.lse = lse;
	for (int r = 0; r < ROUNDS && !atomic_load(&failed); r++) {
		kvf_job *job;
		kvf_status rc;

		if ((rc = kvf_attend_x_start(st, 1, 0, 0, TOKENS - r, q, out,
					     &o, &job)) != KVF_OK) {
			fail("kvf_attend_x_start", rc);
			break;
		}
		if ((rc = kvf_job_wait(job)) != KVF_OK) {
			fail("kvf_job_wait (attend_x)", rc);
			break;
		}
		for (int h = 0; h < QH; h++)
			for (int d = 0; d < DIM; d++) {
				float want = kvf_f16_to_f32(kvf_f32_to_f16(
					xval((h / (QH / KVH)) * DIM + d)));

				if (fabsf(out[h * DIM + d] - want) > 1e-4f) {
					fprintf(stderr, "stress_plan: attend_x head %d dim %d: %g, want %g\n",
						h, d, out[h * DIM + d], want);
					atomic_store(&failed, 1);
					return NULL;
				}
			}
	}
	return NULL;
}

static void *streamer(void *arg)
{
	static uint16_t x[TOKENS * XD], k[KVH * TOKENS * DIM], v[KVH * TOKENS * DIM];

	(void)arg;
	for (int r = 0; r < ROUNDS && !atomic_load(&failed); r++) {
		uint64_t l = (uint64_t)(r * 5) % TOKENS;
		kvf_job *job;
		kvf_status rc;

		if ((rc = kvf_kvpr_start(st, 1, 0, l, TOKENS, x, k, v, &job)) != KVF_OK) {
			fail("kvf_kvpr_start", rc);
			break;
		}
		if ((rc = kvf_job_wait(job)) != KVF_OK) {
			fail("kvf_job_wait (kvpr)", rc);
			break;
		}
	}
	return NULL;
}

static void *registrar(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop) && !atomic_load(&failed)) {
		kvf_status rc = kvf_kv_weights_set(st, 0, &wk[0][0], &wv[0][0], 0);

		if (rc != KVF_OK) {
			fail("kvf_kv_weights_set", rc);
			break;
		}
	}
	return NULL;
}

static void *appender(void *arg)
{
	static uint16_t k[4 * KVH * DIM], v[4 * KVH * DIM];

	(void)arg;
	for (int r = 0; r < ROUNDS && !atomic_load(&failed); r++) {
		kvf_status rc = kvf_append(st, 2, 0, 4, k, v);

		if (rc != KVF_OK) {
			fail("kvf_append", rc);
			break;
		}
	}
	return NULL;
}

int main(void)
{
	kvf_model m = { 1, QH, KVH, DIM, KVF_DTYPE_F16 };
	char *dir = tmpdir_make("stress_plan");
	static uint16_t x[TOKENS][XD], k[TOKENS][KD];
	pthread_t th[4];
	float q[QH * DIM] = { 0 }, out[QH * DIM];
	kvf_options o;
	kvf_job *job;
	kvf_status rc;

	if (dir == NULL)
		return 77;
	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.n_threads = 2;
	o.capacity_bytes = 64 << 20;
	if ((rc = kvf_open(tmp_path(dir, "s"), &o, &st)) != KVF_OK) {
		fail("kvf_open", rc);
		return 1;
	}
	for (int t = 0; t < TOKENS; t++)
		for (int j = 0; j < XD; j++)
			x[t][j] = kvf_f32_to_f16(xval(j));
	for (int j = 0; j < XD; j++)
		for (int c = 0; c < KD; c++)
			wv[j][c] = j == c ? 1.0f : 0.0f;
	if ((rc = kvf_seq_create(st, 1)) != KVF_OK ||
	    (rc = kvf_seq_create(st, 2)) != KVF_OK ||
	    (rc = kvf_append(st, 1, 0, TOKENS, k, k)) != KVF_OK ||
	    (rc = kvf_append_x(st, 1, 0, TOKENS, x)) != KVF_OK ||
	    (rc = kvf_kv_weights_set(st, 0, &wk[0][0], &wv[0][0], 0)) != KVF_OK) {
		fail("setup", rc);
		return 1;
	}
	pthread_create(&th[0], NULL, attender, NULL);
	pthread_create(&th[1], NULL, streamer, NULL);
	pthread_create(&th[2], NULL, registrar, NULL);
	pthread_create(&th[3], NULL, appender, NULL);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	atomic_store(&stop, 1);
	pthread_join(th[2], NULL);
	pthread_join(th[3], NULL);
	/* a job still running at close: kvf_close waits for it */
	if ((rc = kvf_attend_x_start(st, 1, 0, 0, TOKENS, q, out, NULL, &job)) != KVF_OK)
		fail("last kvf_attend_x_start", rc);
	if ((rc = kvf_close(st)) != KVF_OK)
		fail("kvf_close", rc);
	if (job && (rc = kvf_job_wait(job)) != KVF_OK)
		fail("kvf_job_wait after close", rc);
	tmpdir_remove(dir);
	printf("stress_plan: %d rounds of attend_x and kvpr jobs beside weight registrations and appends: %s\n",
	       ROUNDS, atomic_load(&failed) ? "FAILED" : "ok");
	return atomic_load(&failed) ? 1 : 0;
}
