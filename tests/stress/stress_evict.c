/*
 * stress_evict.c - eviction while sequences are appended, pinned, read and
 * evicted from other threads, for ThreadSanitizer (a plain C program:
 * Criterion does not run under TSan).
 *
 * A small LRU store fills over and over.  Appender threads each make one
 * sequence after another, pinned while they grow it (as a server pins the
 * requests it runs), then unpinned and left to eviction; they read back
 * their older sequences, which must either hold their own values or be
 * gone (KVF_ENOENT).  An evictor thread calls kvf_evict by every policy
 * and drains kvf_evict_log.  No append may be refused: there is always
 * something to evict.  Prints what it did; exit 1 on any failure.
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
#define QH 4
#define KVH 2
#define DIM 32   /* f32: 128 bytes a token of a head, 32 tokens a page */
#define APPENDERS 3
#define SEQS 40  /* sequences each appender makes */
#define TOKENS 256

static kvf_store *st;
static _Atomic int failed, done;
static _Atomic long reads_ok, reads_gone, evicted_by_call;

static void fail(const char *what, uint64_t id, kvf_status rc)
{
	kvf_stats s;
	size_t n = 0;

	fprintf(stderr, "stress_evict: %s (sequence %llu): %s (%s)\n", what,
		(unsigned long long)id, kvf_strerror(rc), kvf_last_error());
	memset(&s, 0, sizeof(s));
	s.struct_size = sizeof(s);
	if (st && kvf_stats_get(st, &s) == KVF_OK) {
		kvf_seq_list(st, NULL, 0, &n);
		fprintf(stderr, "  segments free %u open %u sealed %u dying %u, live %.3f, %zu sequences\n",
			s.segments_free, s.segments_open, s.segments_sealed, s.segments_dying, s.live_share, n);
	}
	atomic_store(&failed, 1);
}

static float value_of(uint64_t id)
{
	return (float)(id % 997);
}

/* check - read head 0 of layer 0 of id: its values, or gone */
static void check(uint64_t id)
{
	static _Thread_local float k[TOKENS * DIM], v[TOKENS * DIM];
	kvf_status rc = kvf_read(st, id, 0, 0, 0, TOKENS, k, v);

	if (rc == KVF_ENOENT) {
		atomic_fetch_add(&reads_gone, 1);
		return;
	}
	if (rc != KVF_OK) {
		fail("read", id, rc);
		return;
	}
	for (int i = 0; i < TOKENS * DIM; i++)
		if (v[i] != value_of(id)) {
			fprintf(stderr, "stress_evict: sequence %llu holds %g, not %g\n",
				(unsigned long long)id, (double)v[i], (double)value_of(id));
			atomic_store(&failed, 1);
			return;
		}
	atomic_fetch_add(&reads_ok, 1);
}

static void *appender(void *arg)
{
	uint64_t base = 1000 * (uint64_t)(uintptr_t)arg;
	static _Thread_local float k[32 * KVH * DIM], v[32 * KVH * DIM];
	kvf_status rc;

	for (int s = 0; s < SEQS && !atomic_load(&failed); s++) {
		uint64_t id = base + (uint64_t)s;

		for (int i = 0; i < 32 * KVH * DIM; i++) {
			k[i] = 0.5f;
			v[i] = value_of(id);
		}
		if ((rc = kvf_seq_create(st, id)) != KVF_OK ||
		    (rc = kvf_seq_pin(st, id)) != KVF_OK) {
			fail("create and pin", id, rc);
			break;
		}
		for (int t = 0; t < TOKENS; t += 32)
			for (uint32_t l = 0; l < LAYERS; l++)
				if ((rc = kvf_append(st, id, l, 32, k, v)) != KVF_OK)
					fail("append", id, rc);
		if ((rc = kvf_seq_unpin(st, id)) != KVF_OK)
			fail("unpin", id, rc);
		if (s % 4 == 0 && (rc = kvf_sync(st)) != KVF_OK)
			fail("sync", id, rc);
		for (int back = 1; back <= 3 && back <= s; back++)
			check(id - (uint64_t)back);
	}
	return NULL;
}

static void *evictor(void *arg)
{
	kvf_evict_event ev[16];
	uint32_t policy = 1, n;
	uint64_t freed;
	kvf_status rc;

	(void)arg;
	while (!atomic_load(&done) && !atomic_load(&failed)) {
		if ((rc = kvf_evict(st, policy, 4096, &freed)) != KVF_OK)
			fail("kvf_evict", 0, rc);
		if (freed)
			atomic_fetch_add(&evicted_by_call, 1);
		policy = policy % 3 + 1;
		/* leave the appenders room to fill the store: the store's
		 * own eviction must run too */
		nanosleep(&(struct timespec){ .tv_nsec = 2000000 }, NULL);
		if ((rc = kvf_evict_log(st, ev, 16, &n, NULL)) != KVF_OK)
			fail("kvf_evict_log", 0, rc);
		for (uint32_t i = 0; i < n; i++)
			if (ev[i].seq < 1000 || ev[i].bytes == 0) {
				fprintf(stderr, "stress_evict: a log record names sequence %llu with %llu bytes\n",
					(unsigned long long)ev[i].seq,
					(unsigned long long)ev[i].bytes);
				atomic_store(&failed, 1);
			}
	}
	return NULL;
}

int main(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F32 };
	char *dir = tmpdir_make("stress_evict");
	pthread_t a[APPENDERS], e;
	kvf_options o;
	kvf_stats s;
	kvf_status rc;

	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 4ull << 20; /* about 12 sequences of 256 KiB */
	o.n_threads = 2;
	o.dram_budget = 0;
	o.evict_policy = KVF_EVICT_LRU;
	if ((rc = kvf_open(dir, &o, &st)) != KVF_OK) {
		fail("open", 0, rc);
		return 1;
	}
	pthread_create(&e, NULL, evictor, NULL);
	for (int i = 0; i < APPENDERS; i++)
		pthread_create(&a[i], NULL, appender, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < APPENDERS; i++)
		pthread_join(a[i], NULL);
	atomic_store(&done, 1);
	pthread_join(e, NULL);
	memset(&s, 0, sizeof(s));
	s.struct_size = sizeof(s);
	if ((rc = kvf_stats_get(st, &s)) != KVF_OK)
		fail("stats", 0, rc);
	if (s.evict_runs_full + s.evict_runs_watermark == 0) {
		fprintf(stderr, "stress_evict: the store never evicted for room\n");
		atomic_store(&failed, 1);
	}
	if ((rc = kvf_close(st)) != KVF_OK)
		fail("close", 0, rc);
	tmpdir_remove(dir);
	printf("stress_evict: %llu sequences evicted (%llu runs for room, %ld by kvf_evict), %ld reads checked, %ld found gone, %s\n",
	       (unsigned long long)s.evicted_seqs,
	       (unsigned long long)(s.evict_runs_full + s.evict_runs_watermark),
	       (long)atomic_load(&evicted_by_call),
	       (long)atomic_load(&reads_ok), (long)atomic_load(&reads_gone),
	       atomic_load(&failed) ? "FAILED" : "passed");
	return atomic_load(&failed) ? 1 : 0;
}
