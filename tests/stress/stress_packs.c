/*
 * stress_packs.c - many short sequences on a small store, for
 * ThreadSanitizer (a plain C program: Criterion does not run under TSan).
 *
 * Each short sequence holds an open segment of its own for its few pages
 * until a sync, and there are more of them than the store has segments
 * (120 live, each 16 KiB, against 64 segments of 64 KiB):
 * the cleaner must put their open segments into packs (with the world
 * lock) while appender threads make, grow, read back and free sequences,
 * a syncer syncs now and then and a reader attends to whatever is live.
 * No append or sync may be refused (the live data is under half the
 * store), and every
 * read must give the sequence's own values.  Prints what it did; exit 1
 * on any failure.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvflash.h"
#include "testutil.h"

#define LAYERS 2
#define QH 2
#define KVH 1
#define DIM 32    /* f32: 128 bytes a token of a head, 32 tokens a page */
#define TOKENS 32 /* a page of K and one of V a layer: 4 pages a sequence */
#define APPENDERS 3
#define SEQS 200  /* sequences each appender makes */
#define KEEP 40   /* of its own, the newest it keeps; older ones are freed */

static kvf_store *st;
static _Atomic int failed, done;
static _Atomic long reads_ok, attends_ok;

static void fail(const char *what, uint64_t id, kvf_status rc)
{
	kvf_stats s;

	fprintf(stderr, "stress_packs: %s (sequence %llu): %s (%s)\n", what,
		(unsigned long long)id, kvf_strerror(rc), kvf_last_error());
	memset(&s, 0, sizeof(s));
	s.struct_size = sizeof(s);
	if (st && kvf_stats_get(st, &s) == KVF_OK)
		fprintf(stderr, "  segments free %u open %u sealed %u dying %u\n",
			s.segments_free, s.segments_open, s.segments_sealed,
			s.segments_dying);
	atomic_store(&failed, 1);
}

static float value_of(uint64_t id, uint32_t layer)
{
	return (float)((id * 3 + layer) % 997);
}

/* check - every layer of id holds its own values */
static void check(uint64_t id)
{
	static _Thread_local float k[TOKENS * DIM], v[TOKENS * DIM];

	for (uint32_t l = 0; l < LAYERS; l++) {
		kvf_status rc = kvf_read(st, id, l, 0, 0, TOKENS, k, v);

		if (rc != KVF_OK) {
			fail("read", id, rc);
			return;
		}
		for (int i = 0; i < TOKENS * DIM; i++)
			if (v[i] != value_of(id, l) || k[i] != -value_of(id, l)) {
				fprintf(stderr, "stress_packs: sequence %llu layer %u holds %g, not %g\n",
					(unsigned long long)id, l, (double)v[i],
					(double)value_of(id, l));
				atomic_store(&failed, 1);
				return;
			}
	}
	atomic_fetch_add(&reads_ok, 1);
}

static void *appender(void *arg)
{
	uint64_t base = 1000 * (uint64_t)(uintptr_t)arg;
	static _Thread_local float k[TOKENS * KVH * DIM], v[TOKENS * KVH * DIM];
	kvf_status rc;

	for (int s = 0; s < SEQS && !atomic_load(&failed); s++) {
		uint64_t id = base + (uint64_t)s;

		if ((rc = kvf_seq_create(st, id)) != KVF_OK) {
			fail("create", id, rc);
			break;
		}
		for (uint32_t l = 0; l < LAYERS; l++) {
			for (int i = 0; i < TOKENS * KVH * DIM; i++) {
				k[i] = -value_of(id, l);
				v[i] = value_of(id, l);
			}
			if ((rc = kvf_append(st, id, l, TOKENS, k, v)) != KVF_OK)
				fail("append", id, rc);
		}
		check(id);
		if (s >= KEEP) {
			check(id - KEEP);
			if ((rc = kvf_seq_free(st, id - KEEP)) != KVF_OK)
				fail("free", id - KEEP, rc);
		}
	}
	return NULL;
}

static void *syncer(void *arg)
{
	kvf_status rc;

	(void)arg;
	while (!atomic_load(&done) && !atomic_load(&failed)) {
		nanosleep(&(struct timespec){ .tv_nsec = 50000000 }, NULL);
		if ((rc = kvf_sync(st)) != KVF_OK)
			fail("sync", 0, rc);
	}
	return NULL;
}

/* reader - attends to the newest sequence of appender 1 that is live */
static void *reader(void *arg)
{
	static float q[QH * DIM], out[QH * DIM];
	kvf_attn_opts a;
	uint64_t rng = 7;

	(void)arg;
	kvf_attn_opts_init(&a);
	for (int i = 0; i < QH * DIM; i++)
		q[i] = 0.01f * (float)(i % 7);
	while (!atomic_load(&done) && !atomic_load(&failed)) {
		uint64_t id = 1000 + rng_below(&rng, SEQS), len = 0;
		kvf_status rc;

		/* a sequence made but not yet appended to attends to nothing */
		if (kvf_seq_len(st, id, id % LAYERS, &len) != KVF_OK || len < TOKENS)
			continue;
		rc = kvf_attend(st, id, (uint32_t)(id % LAYERS), q, out, &a);
		if (rc == KVF_OK) {
			/* V is one value throughout: attention gives it back */
			if (out[0] != value_of(id, (uint32_t)(id % LAYERS))) {
				fprintf(stderr, "stress_packs: attention to %llu gave %g\n",
					(unsigned long long)id, (double)out[0]);
				atomic_store(&failed, 1);
			}
			atomic_fetch_add(&attends_ok, 1);
		} else if (rc != KVF_ENOENT) { /* freed meanwhile: fine */
			fail("attend", id, rc);
		}
	}
	return NULL;
}

int main(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F32 };
	char *dir = tmpdir_make("stress_packs");
	pthread_t a[APPENDERS], sy, rd;
	kvf_options o;
	kvf_stats s;
	kvf_status rc;

	kvf_options_init(&o, &m);
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 4ull << 20; /* 64 segments, 120 sequences live */
	o.n_threads = 2;
	o.dram_budget = 0; /* pages go to their open segments as they fill */
	o.direct_io = 2;   /* tmpfs may refuse O_DIRECT */
	if ((rc = kvf_open(dir, &o, &st)) != KVF_OK) {
		fail("open", 0, rc);
		return 1;
	}
	pthread_create(&sy, NULL, syncer, NULL);
	pthread_create(&rd, NULL, reader, NULL);
	for (int i = 0; i < APPENDERS; i++)
		pthread_create(&a[i], NULL, appender, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < APPENDERS; i++)
		pthread_join(a[i], NULL);
	atomic_store(&done, 1);
	pthread_join(sy, NULL);
	pthread_join(rd, NULL);
	memset(&s, 0, sizeof(s));
	s.struct_size = sizeof(s);
	if ((rc = kvf_stats_get(st, &s)) != KVF_OK)
		fail("stats", 0, rc);
	if ((rc = kvf_close(st)) != KVF_OK)
		fail("close", 0, rc);
	/* what was live at the close is all there after a reopen */
	if ((rc = kvf_open(dir, &o, &st)) != KVF_OK) {
		fail("reopen", 0, rc);
	} else {
		for (int i = 1; i <= APPENDERS && !atomic_load(&failed); i++)
			for (int j = SEQS - KEEP; j < SEQS; j++)
				check(1000 * (uint64_t)i + (uint64_t)j);
		if ((rc = kvf_close(st)) != KVF_OK)
			fail("close after reopen", 0, rc);
	}
	tmpdir_remove(dir);
	printf("stress_packs: %d sequences of %d pages through %u segments, %ld reads and %ld attentions checked, %s\n",
	       APPENDERS * SEQS, LAYERS * KVH * 2, (unsigned)(o.capacity_bytes / o.segment_size),
	       (long)atomic_load(&reads_ok), (long)atomic_load(&attends_ok),
	       atomic_load(&failed) ? "FAILED" : "passed");
	return atomic_load(&failed) ? 1 : 0;
}
