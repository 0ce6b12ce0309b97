/*
 * stress_prefetch.c - reads ahead (kvf_prefetch and kvf_attend_batch's
 * layer-ahead reads) under concurrency, for ThreadSanitizer (a plain C
 * program: Criterion does not run under TSan).
 *
 * Worker threads each grow sequences of their own in a small store, with
 * a memory tier far smaller than the data: append a few groups to every layer, attend every layer
 * with kvf_attend_batch (a miss reads the next layer ahead), hint a
 * layer with kvf_prefetch, read every head of a layer back and check each
 * token (a page cached from a reused segment would show here), now and
 * then cut a sequence back or free it and start another (its segments go
 * back and are taken again while prefetches may be reading them).  Beside
 * them a thread syncs, reads kvf_stats and verifies the store.  Prints
 * what it did; exit 1 on any failure, or when nothing was read ahead.
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

#define LAYERS 4
#define QH 4
#define KVH 2
#define DIM 32 /* f16: 64 bytes a token of a head; G = 64 */
#define G 64
#define WORKERS 3
#define ROUNDS 40
#define STEP (3 * G) /* tokens appended a round */

static kvf_store *st;
static _Atomic int failed, done;
static _Atomic uint64_t hints, frees, cuts, checked;

static void fail(const char *what, kvf_status rc)
{
	fprintf(stderr, "stress_prefetch: %s: %s (%s)\n", what, kvf_strerror(rc),
		kvf_last_error());
	atomic_store(&failed, 1);
}

/* attend - every layer of seq in order, as a decode step does */
static int attend(uint64_t seq)
{
	float q[QH * DIM], out[QH * DIM];

	for (uint32_t i = 0; i < QH * DIM; i++)
		q[i] = (float)((seq + i) % 7) / 7.0f;
	for (uint32_t l = 0; l < LAYERS; l++) {
		kvf_status rc = kvf_attend_batch(st, 1, &seq, l, q, out, NULL);

		if (rc != KVF_OK) {
			fail("kvf_attend_batch", rc);
			return 0;
		}
		for (uint32_t i = 0; i < QH * DIM; i++)
			if (!isfinite(out[i])) {
				fail("kvf_attend_batch: an output is not finite",
				     KVF_OK);
				return 0;
			}
	}
	return 1;
}

/* layer_ok - every token of every head of layer l reads back exactly */
static int layer_ok(uint64_t seq, uint32_t l, uint64_t n)
{
	uint16_t *k = malloc(n * DIM * 2), *v = malloc(n * DIM * 2);
	int ok = 1;

	for (uint32_t h = 0; h < KVH && ok; h++) {
		kvf_status rc = kvf_read(st, seq, l, h, 0, n, k, v);

		if (rc != KVF_OK) {
			fail("kvf_read", rc);
			ok = 0;
			break;
		}
		for (uint64_t t = 0; t < n && ok; t++)
			for (uint32_t i = 0; i < DIM; i++)
				if (k[t * DIM + i] != stress_val(seq, t, l, h, i) ||
				    v[t * DIM + i] != stress_val(seq, t, l, h, i)) {
					fprintf(stderr,
						"stress_prefetch: sequence %llu layer %u head %u token %llu reads back wrong\n",
						(unsigned long long)seq, l, h,
						(unsigned long long)t);
					atomic_store(&failed, 1);
					ok = 0;
					break;
				}
	}
	atomic_fetch_add(&checked, n * KVH);
	free(k);
	free(v);
	return ok;
}

static void *worker(void *arg)
{
	uint64_t w = (uint64_t)(uintptr_t)arg, seq = (w + 1) << 32, n = 0;
	kvf_status rc;

	if ((rc = kvf_seq_create(st, seq)) != KVF_OK) {
		fail("kvf_seq_create", rc);
		return NULL;
	}
	for (uint32_t r = 0; r < ROUNDS && !atomic_load(&failed); r++) {
		uint32_t l = (uint32_t)((r + w) % LAYERS);

		if ((rc = stress_append(st, seq, n, STEP, LAYERS, KVH, DIM)) != KVF_OK) {
			fail("append", rc);
			break;
		}
		n += STEP;
		if (!attend(seq))
			break;
		if ((rc = kvf_prefetch(st, seq, l)) != KVF_OK) {
			fail("kvf_prefetch", rc);
			break;
		}
		atomic_fetch_add(&hints, 1);
		if (!layer_ok(seq, (l + 1) % LAYERS, n) || !attend(seq) ||
		    !layer_ok(seq, l, n))
			break;
		if (r % 6 == 5) { /* back to a group and a half */
			if ((rc = kvf_seq_truncate(st, seq, G + G / 2)) != KVF_OK) {
				fail("kvf_seq_truncate", rc);
				break;
			}
			n = G + G / 2;
			atomic_fetch_add(&cuts, 1);
		}
		if (r % 8 == 7) { /* a new sequence: the old one's room goes */
			if ((rc = kvf_seq_free(st, seq)) != KVF_OK ||
			    (rc = kvf_seq_create(st, ++seq)) != KVF_OK) {
				fail("free and create", rc);
				break;
			}
			n = 0;
			atomic_fetch_add(&frees, 1);
		}
	}
	return NULL;
}

int main(void)
{
	char *dir = tmpdir_make("stress_prefetch");
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	pthread_t th[WORKERS], bs;
	kvf_stats s = { .struct_size = sizeof(s) };
	struct stress_beside beside = { .name = "stress_prefetch", .done = &done,
					.failed = &failed };
	kvf_options o;
	kvf_status rc;

	kvf_options_init(&o, &m);
	o.capacity_bytes = 8u << 20; /* small: segments are taken again */
	o.segment_size = 64 * 1024;
	o.n_threads = 2;
	o.dram_budget = 2u << 20; /* far below the data: pages go cold */
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
	if (kvf_stats_get(st, &s) == KVF_OK) {
		printf("stress_prefetch: %llu hints, %llu pages read ahead, %llu tokens checked, %llu cuts, %llu frees, %llu syncs beside; %llu segments reclaimed\n",
		       (unsigned long long)atomic_load(&hints),
		       (unsigned long long)s.prefetch_pages,
		       (unsigned long long)atomic_load(&checked),
		       (unsigned long long)atomic_load(&cuts),
		       (unsigned long long)atomic_load(&frees),
		       (unsigned long long)atomic_load(&beside.syncs),
		       (unsigned long long)s.segments_reclaimed);
		if (s.prefetch_pages == 0) {
			fprintf(stderr, "stress_prefetch: nothing was read ahead\n");
			atomic_store(&failed, 1);
		}
	}
	if ((rc = kvf_close(st)) != KVF_OK)
		fail("kvf_close", rc);
	tmpdir_remove(dir);
	return atomic_load(&failed) ? 1 : 0;
}
