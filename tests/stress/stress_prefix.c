/*
 * stress_prefix.c - prefix reuse under concurrency, for ThreadSanitizer (a
 * plain C program: Criterion does not run under TSan).
 *
 * Worker threads each run conversations over two shared system prompts:
 * a turn creates a sequence from its token ids (kvf_seq_create_tokens,
 * sharing what other threads' sequences hold), appends the rest, checks
 * every K value it reads back against the value its ids give, registers
 * its reply (kvf_seq_add_tokens) and frees the previous turn, which other
 * threads may be sharing from at that moment; a conversation's end frees
 * its last turn, whose chunks stay as a cached prefix that later
 * conversations share from.  A reader thread meanwhile lists sequences,
 * cached prefixes and their figures, reads kvf_stats, and now and then
 * drops a cached prefix (kvf_prefix_drop) while workers may be sharing
 * from it.  Prints what it did; exit 1 on any failure.
 */
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
#define DIM 32 /* f16: 64 bytes a token of a head; G = 64 */
#define G 64
#define WORKERS 3
#define CONVS 4
#define TURNS 3
#define SYSTEM 150
#define MSG 40

static kvf_store *st;
static _Atomic int failed, done;
static _Atomic uint64_t reused_total;

static void fail(const char *what, kvf_status rc)
{
	fprintf(stderr, "stress_prefix: %s: %s (%s)\n", what, kvf_strerror(rc),
		kvf_last_error());
	atomic_store(&failed, 1);
}

/* the f16 bits of element i of head h of token id at position t */
static uint16_t val(uint32_t id, uint64_t t, uint32_t l, uint32_t h, uint32_t i)
{
	uint64_t x = (uint64_t)id * 0x9e3779b97f4a7c15ull ^ (t << 20) ^
		     ((uint64_t)l << 12) ^ (h << 8) ^ i;

	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	return (uint16_t)((x >> 40) & 0x3bff);
}

static kvf_status append(uint64_t seq, const uint32_t *ids, uint64_t t0,
			 uint64_t t1)
{
	size_t n = t1 - t0;
	uint16_t *k = malloc((n ? n : 1) * KVH * DIM * 2);
	kvf_status rc = KVF_OK;

	for (uint32_t l = 0; l < LAYERS && rc == KVF_OK && n; l++) {
		for (size_t j = 0; j < n; j++)
			for (uint32_t h = 0; h < KVH; h++)
				for (uint32_t i = 0; i < DIM; i++)
					k[(j * KVH + h) * DIM + i] =
						val(ids[t0 + j], t0 + j, l, h, i);
		rc = kvf_append(st, seq, l, (uint32_t)n, k, k);
	}
	free(k);
	return rc;
}

static int check(uint64_t seq, const uint32_t *ids, uint64_t n)
{
	uint16_t *k = malloc(n * DIM * 2);
	int ok = 1;

	for (uint32_t l = 0; l < LAYERS && ok; l++)
		for (uint32_t h = 0; h < KVH && ok; h++) {
			if (kvf_read(st, seq, l, h, 0, n, k, NULL) != KVF_OK) {
				ok = 0;
				break;
			}
			for (uint64_t t = 0; t < n && ok; t++)
				for (uint32_t i = 0; i < DIM && ok; i++)
					ok = k[t * DIM + i] == val(ids[t], t, l, h, i);
		}
	free(k);
	return ok;
}

static void *worker(void *arg)
{
	uint32_t w = (uint32_t)(uintptr_t)arg;
	uint32_t ids[SYSTEM + TURNS * 2 * MSG];

	for (uint32_t c = 0; c < CONVS && !atomic_load(&failed); c++) {
		uint64_t n = 0;

		for (uint32_t i = 0; i < SYSTEM; i++)
			ids[n++] = 1000 * ((c % 2) + 1) + i;
		for (uint32_t t = 0; t < TURNS && !atomic_load(&failed); t++) {
			uint64_t seq = ((uint64_t)w << 32) | (c << 8) | t, got = 0;
			kvf_status rc;

			for (uint32_t i = 0; i < MSG; i++)
				ids[n++] = 100000 + w * 10000 + c * 1000 + t * 100 + i;
			if ((rc = kvf_seq_create_tokens(st, seq, ids, n, &got)) != KVF_OK) {
				fail("kvf_seq_create_tokens", rc);
				break;
			}
			atomic_fetch_add(&reused_total, got);
			if ((rc = append(seq, ids, got, n)) != KVF_OK) {
				fail("append", rc);
				break;
			}
			if (!check(seq, ids, n)) {
				fprintf(stderr, "stress_prefix: sequence %llx reads other values (reused %llu of %llu)\n",
					(unsigned long long)seq, (unsigned long long)got,
					(unsigned long long)n);
				atomic_store(&failed, 1);
				break;
			}
			for (uint32_t i = 0; i < MSG; i++)
				ids[n + i] = 200000 + w * 10000 + c * 1000 + t * 100 + i;
			if ((rc = append(seq, ids, n, n + MSG)) != KVF_OK ||
			    (rc = kvf_seq_add_tokens(st, seq, ids + n, MSG)) != KVF_OK) {
				fail("reply", rc);
				break;
			}
			n += MSG;
			if (t > 0 && (rc = kvf_seq_free(st, seq - 1)) != KVF_OK) {
				fail("kvf_seq_free", rc);
				break;
			}
			/* the conversation ends: its chunks go to the cache */
			if (t + 1 == TURNS && (rc = kvf_seq_free(st, seq)) != KVF_OK) {
				fail("kvf_seq_free (end)", rc);
				break;
			}
		}
	}
	return NULL;
}

/* cached - the cached prefixes: list, describe, and every 8th round drop
 * one (it may go meanwhile: KVF_ENOENT is fine); 0 on failure */
static int cached(unsigned round)
{
	uint64_t ids[64];
	size_t n = 0;
	kvf_status rc;

	if (kvf_prefix_list(st, ids, 64, &n) != KVF_OK)
		return 0;
	for (size_t i = 0; i < n && i < 64; i++) {
		kvf_seq_info si = { .struct_size = sizeof(si) };

		rc = kvf_seq_info_get(st, ids[i], &si);
		if (rc != KVF_OK && rc != KVF_ENOENT)
			return 0;
		if (rc == KVF_OK && si.cached != 1)
			return 0;
	}
	if (n > 0 && round % 8 == 7) {
		rc = kvf_prefix_drop(st, ids[round % (n < 64 ? n : 64)], NULL);
		if (rc != KVF_OK && rc != KVF_ENOENT)
			return 0;
	}
	return 1;
}

static void *reader(void *arg)
{
	(void)arg;
	for (unsigned round = 0; !atomic_load(&done); round++) {
		uint64_t ids[64];
		size_t n = 0;
		kvf_stats s = { .struct_size = sizeof(s) };

		if (!cached(round)) {
			fail("reader: cached prefixes", KVF_EINVAL);
			break;
		}
		if (kvf_seq_list(st, ids, 64, &n) != KVF_OK ||
		    kvf_stats_get(st, &s) != KVF_OK) {
			fail("reader", KVF_EINVAL);
			break;
		}
		for (size_t i = 0; i < n && i < 64; i++) {
			kvf_seq_info si = { .struct_size = sizeof(si) };
			kvf_status rc = kvf_seq_info_get(st, ids[i], &si);

			if (rc != KVF_OK && rc != KVF_ENOENT) {
				fail("kvf_seq_info_get", rc);
				break;
			}
		}
	}
	return NULL;
}

int main(void)
{
	char *dir = tmpdir_make("stress_prefix");
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	pthread_t th[WORKERS], rd;
	kvf_stats s = { .struct_size = sizeof(s) };
	kvf_options o;
	kvf_status rc;

	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.capacity_bytes = 64u << 20;
	o.segment_size = 64 * 1024;
	o.n_threads = 2;
	if ((rc = kvf_open(dir, &o, &st)) != KVF_OK) {
		fail("kvf_open", rc);
		return 1;
	}
	pthread_create(&rd, NULL, reader, NULL);
	for (uintptr_t w = 0; w < WORKERS; w++)
		pthread_create(&th[w], NULL, worker, (void *)w);
	for (int w = 0; w < WORKERS; w++)
		pthread_join(th[w], NULL);
	atomic_store(&done, 1);
	pthread_join(rd, NULL);
	if (kvf_stats_get(st, &s) == KVF_OK)
		printf("stress_prefix: %llu creations, %llu hits, %llu tokens reused, %llu chunks left; cached prefixes: %llu kept, %llu dropped, %llu hits only they served, %llu left\n",
		       (unsigned long long)s.prefix_lookups,
		       (unsigned long long)s.prefix_hits,
		       (unsigned long long)s.prefix_tokens_reused,
		       (unsigned long long)s.prefix_chunks,
		       (unsigned long long)s.prefix_cache_kept,
		       (unsigned long long)s.prefix_cache_dropped,
		       (unsigned long long)s.prefix_cache_hits,
		       (unsigned long long)s.prefix_cached);
	if (s.prefix_hits == 0) {
		fprintf(stderr, "stress_prefix: no creation reused anything\n");
		atomic_store(&failed, 1);
	}
	if (s.prefix_cache_kept == 0) {
		fprintf(stderr, "stress_prefix: no conversation's end left a cached prefix\n");
		atomic_store(&failed, 1);
	}
	if ((rc = kvf_close(st)) != KVF_OK)
		fail("kvf_close", rc);
	tmpdir_remove(dir);
	return atomic_load(&failed) ? 1 : 0;
}
