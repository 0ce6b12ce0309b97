/*
 * stress_h2o.c - H2O eviction inside a sequence under concurrency, for
 * ThreadSanitizer (a plain C program: Criterion does not run under TSan).
 *
 * Worker threads each grow sequences of their own: append a few groups to
 * every layer, attend every layer with opts.h2o = 1 (gathering scores),
 * drop half of each KV head's groups (kvf_h2o_evict), attend again (dense
 * over the kept groups) and check that the recent window, which a drop
 * never takes, reads back exactly; now and then cut a sequence back
 * (kvf_seq_truncate, below its drops or not) or free it and start
 * another.  Beside them a thread syncs, reads kvf_stats and verifies the
 * store (no page missing or damaged), while the segments the drops empty
 * are freed and taken again.  Prints what it did; exit 1 on any failure.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvflash.h"
#include "stress_common.h"
#include "testutil.h"

#define LAYERS 2
#define QH 4
#define KVH 2
#define DIM 32 /* f16: 64 bytes a token of a head; G = 64 */
#define G 64
#define WORKERS 3
#define ROUNDS 40
#define STEP (3 * G) /* tokens appended a round */
#define WINDOW (2 * G)

static kvf_store *st;
static _Atomic int failed, done;
static _Atomic uint64_t dropped_total, drops, cuts;

static void fail(const char *what, kvf_status rc)
{
	fprintf(stderr, "stress_h2o: %s: %s (%s)\n", what, kvf_strerror(rc),
		kvf_last_error());
	atomic_store(&failed, 1);
}

/* attend - every layer of seq, finite outputs; h2o gathers scores */
static int attend(uint64_t seq, int h2o)
{
	float q[QH * DIM], out[QH * DIM];
	kvf_attn_opts o;

	kvf_attn_opts_init(&o);
	o.h2o = (uint32_t)h2o;
	for (uint32_t i = 0; i < QH * DIM; i++)
		q[i] = (float)((seq + i) % 7) / 7.0f;
	for (uint32_t l = 0; l < LAYERS; l++) {
		kvf_status rc = kvf_attend(st, seq, l, q, out, &o);

		if (rc != KVF_OK) {
			fail("kvf_attend", rc);
			return 0;
		}
		for (uint32_t i = 0; i < QH * DIM; i++)
			if (!isfinite(out[i])) {
				fail("kvf_attend: an output is not finite", KVF_OK);
				return 0;
			}
	}
	return 1;
}

/* window_ok - the last WINDOW tokens of every head read back exactly */
static int window_ok(uint64_t seq, uint64_t n)
{
	uint16_t k[WINDOW * DIM], v[WINDOW * DIM];
	uint64_t t0 = n > WINDOW ? n - WINDOW : 0;

	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KVH; h++) {
			kvf_status rc = kvf_read(st, seq, l, h, t0, n, k, v);

			if (rc != KVF_OK) {
				fail("kvf_read of the window", rc);
				return 0;
			}
			for (uint64_t t = t0; t < n; t++)
				for (uint32_t i = 0; i < DIM; i++)
					if (k[(t - t0) * DIM + i] != stress_val(seq, t, l, h, i) ||
					    v[(t - t0) * DIM + i] != stress_val(seq, t, l, h, i)) {
						fail("the window reads back wrong", KVF_OK);
						return 0;
					}
		}
	return 1;
}

static void *worker(void *arg)
{
	uint64_t w = (uint64_t)(uintptr_t)arg, seq = (w + 1) << 32, n = 0;
	kvf_h2o_evict_opts eo;
	kvf_status rc;

	kvf_h2o_evict_opts_init(&eo);
	eo.keep = 0.5;
	eo.window = WINDOW;
	if ((rc = kvf_seq_create(st, seq)) != KVF_OK) {
		fail("kvf_seq_create", rc);
		return NULL;
	}
	for (uint32_t r = 0; r < ROUNDS && !atomic_load(&failed); r++) {
		uint64_t got = 0;

		if ((rc = stress_append(st, seq, n, STEP, LAYERS, KVH, DIM)) != KVF_OK) {
			fail("append", rc);
			break;
		}
		n += STEP;
		if (!attend(seq, 1))
			break;
		if ((rc = kvf_h2o_evict(st, seq, KVF_LAYER_ALL, &eo, &got)) != KVF_OK) {
			fail("kvf_h2o_evict", rc);
			break;
		}
		atomic_fetch_add(&dropped_total, got);
		atomic_fetch_add(&drops, 1);
		if (!attend(seq, 0) || !window_ok(seq, n))
			break;
		if (r % 4 == 3) {
			/* a cut into the window: below no drop, or below all */
			uint64_t to = r % 8 == 3 ? n - G / 2 : G;

			if ((rc = kvf_seq_truncate(st, seq, to)) != KVF_OK) {
				fail("kvf_seq_truncate", rc);
				break;
			}
			n = to;
			atomic_fetch_add(&cuts, 1);
		}
		if (r == ROUNDS / 2) { /* a new sequence */
			if ((rc = kvf_seq_free(st, seq)) != KVF_OK ||
			    (rc = kvf_seq_create(st, ++seq)) != KVF_OK) {
				fail("free and create", rc);
				break;
			}
			n = 0;
		}
	}
	return NULL;
}

int main(void)
{
	char *dir = tmpdir_make("stress_h2o");
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	pthread_t th[WORKERS], bs;
	kvf_stats s = { .struct_size = sizeof(s) };
	struct stress_beside beside = { .name = "stress_h2o", .done = &done,
					.failed = &failed };
	kvf_options o;
	kvf_status rc;

	kvf_options_init(&o, &m);
	o.capacity_bytes = 8u << 20; /* small: the cleaner works */
	o.segment_size = 64 * 1024;
	o.n_threads = 2;
	o.dram_budget = 0; /* pages go to the media at once: drops take them */
	if ((rc = kvf_open(dir, &o, &st)) != KVF_OK) {
		fail("kvf_open", rc);
		return 1;
	}
	beside.st = st;
	pthread_create(&bs, NULL, stress_beside, &beside);
	for (uintptr_t w = 0; w < WORKERS; w++)
		pthread_create(&th[w], NULL, worker, (void *)w);
	for (int w = 0; w < WORKERS; w++)
		pthread_join(th[w], NULL);
	atomic_store(&done, 1);
	pthread_join(bs, NULL);
	if (kvf_stats_get(st, &s) == KVF_OK)
		printf("stress_h2o: %llu drops of %llu tokens, %llu cuts, %llu syncs beside; %llu segments cleaned\n",
		       (unsigned long long)atomic_load(&drops),
		       (unsigned long long)atomic_load(&dropped_total),
		       (unsigned long long)atomic_load(&cuts),
		       (unsigned long long)atomic_load(&beside.syncs),
		       (unsigned long long)s.segments_cleaned);
	if (atomic_load(&dropped_total) == 0) {
		fprintf(stderr, "stress_h2o: no drop took a token\n");
		atomic_store(&failed, 1);
	}
	if ((rc = kvf_close(st)) != KVF_OK)
		fail("kvf_close", rc);
	tmpdir_remove(dir);
	return atomic_load(&failed) ? 1 : 0;
}
