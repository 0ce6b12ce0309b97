/*
 * stress_store.c - many threads on one store, for ThreadSanitizer.
 *
 * A plain C program (Criterion does not run under TSan).  On a memory
 * store and then on a file store:
 *  - writer threads each append to their own sequence, every layer in
 *    turn, and read back what they wrote;
 *  - reader threads read random ranges of random heads of every writer's
 *    sequence (and of the forks) while they grow;
 *  - a forker thread forks the writers' sequences at their current length,
 *    checks and extends the child, and frees old children;
 *  - a syncer thread calls kvf_sync and kvf_stats_get in a loop;
 *  - attender threads call kvf_attend on writers' sequences and forks, and
 *    kvf_attend_batch on all writers' sequences, while they grow: a mask
 *    selects tokens below a length seen before the call (lengths only
 *    grow), and the output is checked against a double-precision
 *    reference computed from the known token values (tolerance as in
 *    test_attend.c).
 * The store is small (capacity about twice what the writers keep), so the
 * segments that freed forks and superseded partial pages leave behind must
 * be cleaned and reclaimed while all this runs: the run fails unless the
 * stats show the cleaner at work, and prints its figures.
 * Every token's bytes are a function of (family, layer, kind, token, head),
 * where a family is a writer's sequence and its forks, so any thread can
 * check any read without coordinating.  Lengths only grow, so a range
 * inside a length seen earlier stays readable; a fork that a concurrent
 * free removed answers KVF_ENOENT, and only forks are ever freed.  At the
 * end the file store is closed, reopened and read back whole.
 *
 * Prints "N passed, M failed" and exits 1 on any failure; TSan reports
 * make the run fail too (exit code 66, or halt_on_error=1 in TSAN_OPTIONS).
 * KVF_SEED reproduces the random choices (thread timing still varies).
 *
 * The attender threads are stress_store_attend.c; stress_store.h is what
 * the two files share.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compute/half.h"
#include "kvflash.h"
#include "testutil.h"
#include "tests/stress/stress_store.h"

/*
 * __tsan_default_suppressions - reports TSan must not make.  RocksDB is
 * not built with TSan: it orders its writers with atomics TSan cannot
 * see (a write group's leader copies the followers' batches into the
 * WAL), so the buffers it hands between threads look racy when they
 * reach the memcpy and write interceptors, from librocksdb itself or
 * from the libstdc++ strings it uses.  Only reports whose interceptor is
 * called from inside those two libraries are dropped (kvflash is C and
 * does not use libstdc++); races in kvflash are still reported.
 */
const char *__tsan_default_suppressions(void);

const char *__tsan_default_suppressions(void)
{
	return "called_from_lib:librocksdb.so\n"
	       "called_from_lib:libstdc++.so\n";
}

atomic_uint stress_passed, stress_failed;
atomic_int stress_writers_left;

void stress_fail(const char *fmt, ...)
{
	va_list ap;

	/* count, and report the first few */
	if (atomic_fetch_add(&stress_failed, 1) < 10) {
		va_start(ap, fmt);
		fputs("stress_store: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		va_end(ap);
	}
}

void stress_fill_row(unsigned char *dst, uint64_t family, uint32_t layer,
		     int kind, uint64_t t, uint32_t h)
{
	uint64_t x = stress_mix(stress_mix(family) + layer * 0x100000001b3ull +
			 (uint64_t)kind * 0x3c6ef372fe94f82bull +
			 h * 0x2545f4914f6cdd1dull) +
		     t * 0x9e3779b97f4a7c15ull;

	for (uint32_t j = 0; j < ROW; j += 8) {
		/* four finite f16 values below 2 in magnitude (bit 14 clear:
		 * exponent at most 15), so attention over them is finite */
		uint64_t w = stress_mix(x + j) & 0xbfffbfffbfffbfffull;

		memcpy(dst + j, &w, 8);
	}
}

/* check - read [t0, t1) of one head of seq (family fam) and compare.
 * With `may_vanish` (a fork, which the forker frees and may make again
 * with the same id, shorter) KVF_ENOENT and KVF_ERANGE are fine. */
static void check(kvf_store *st, uint64_t seq, uint64_t fam, uint32_t layer,
		  uint32_t h, uint64_t t0, uint64_t t1, int may_vanish,
		  unsigned char *k, unsigned char *v)
{
	unsigned char want[ROW];
	kvf_status rc = kvf_read(st, seq, layer, h, t0, t1, k, v);

	if ((rc == KVF_ENOENT || rc == KVF_ERANGE) && may_vanish)
		return;
	if (rc != KVF_OK) {
		stress_fail("read seq %" PRIu64 " layer %u head %u [%" PRIu64
		     ", %" PRIu64 "): %s",
		     seq, layer, h, t0, t1, kvf_last_error());
		return;
	}
	for (uint64_t i = 0; i < t1 - t0; i++) {
		stress_fill_row(want, fam, layer, 0, t0 + i, h);
		if (memcmp(k + i * ROW, want, ROW) != 0) {
			stress_fail("seq %" PRIu64 " layer %u head %u K token %" PRIu64
			     " reads back wrong",
			     seq, layer, h, t0 + i);
			return;
		}
		stress_fill_row(want, fam, layer, 1, t0 + i, h);
		if (memcmp(v + i * ROW, want, ROW) != 0) {
			stress_fail("seq %" PRIu64 " layer %u head %u V token %" PRIu64
			     " reads back wrong",
			     seq, layer, h, t0 + i);
			return;
		}
	}
	atomic_fetch_add(&stress_passed, 1);
}

/* append_family - n tokens of family fam at t0 to one layer of seq */
static kvf_status append_family(kvf_store *st, uint64_t seq, uint64_t fam,
				uint32_t layer, uint64_t t0, uint32_t n,
				unsigned char *k, unsigned char *v)
{
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t h = 0; h < KVH; h++) {
			stress_fill_row(k + ((size_t)i * KVH + h) * ROW, fam, layer, 0,
				 t0 + i, h);
			stress_fill_row(v + ((size_t)i * KVH + h) * ROW, fam, layer, 1,
				 t0 + i, h);
		}
	return kvf_append(st, seq, layer, n, k, v);
}

static void *writer(void *arg)
{
	struct thread *t = arg;
	kvf_store *st = t->c->st;
	uint64_t seq = stress_writer_seq(t->id);
	unsigned char *k = malloc((size_t)MAX_N * KVH * ROW);
	unsigned char *v = malloc((size_t)MAX_N * KVH * ROW);
	uint64_t len = 0;

	if (kvf_seq_create(st, seq) != KVF_OK)
		stress_fail("create %" PRIu64 ": %s", seq, kvf_last_error());
	for (uint32_t a = 0; a < APPENDS && k && v; a++) {
		uint32_t n =
			1 + (uint32_t)rng_below(&t->rng, a % 10 ? 3 : MAX_N);
		int failed = 0;

		for (uint32_t l = 0; l < LAYERS && !failed; l++)
			if (append_family(st, seq, seq, l, len, n, k, v) !=
			    KVF_OK) {
				stress_fail("append %" PRIu64 " layer %u: %s", seq, l,
				     kvf_last_error());
				failed = 1;
			} else {
				atomic_fetch_add(&stress_passed, 1);
			}
		/* the sequence no longer holds what later appends and
		 * checks would assume: one failure, not a cascade */
		if (failed)
			break;
		len += n;
		if (a % 8 == 7) {
			uint64_t t0 = rng_below(&t->rng, len);
			uint64_t t1 = t0 + 1 +
				      rng_below(&t->rng, len - t0 < MAX_N ?
								 len - t0 :
								 MAX_N);

			if (t1 > len)
				t1 = len;
			check(st, seq, seq,
			      (uint32_t)rng_below(&t->rng, LAYERS),
			      (uint32_t)rng_below(&t->rng, KVH), t0, t1, 0, k,
			      v);
		}
	}
	free(k);
	free(v);
	atomic_fetch_sub(&stress_writers_left, 1);
	return NULL;
}

static void *reader(void *arg)
{
	struct thread *t = arg;
	kvf_store *st = t->c->st;
	unsigned char *k = malloc(4 * (size_t)MAX_N * ROW);
	unsigned char *v = malloc(4 * (size_t)MAX_N * ROW);

	while (atomic_load(&stress_writers_left) > 0 && k && v) {
		uint32_t w = (uint32_t)rng_below(&t->rng, WRITERS);
		uint32_t slot = (uint32_t)rng_below(&t->rng, 2 * FORK_SLOTS);
		uint32_t layer = (uint32_t)rng_below(&t->rng, LAYERS);
		uint64_t seq = stress_writer_seq(w), fam = seq, len;
		int is_fork = 0;
		kvf_status rc;

		if (slot < FORK_SLOTS) {
			uint64_t f = atomic_load(&t->c->forks[slot]);

			if (f) {
				seq = f;
				fam = f / 1000 * 1000; /* the writer's id */
				is_fork = 1;
			}
		}
		rc = kvf_seq_len(st, seq, layer, &len);
		if (rc == KVF_ENOENT)
			continue; /* not created yet, or a fork freed */
		if (rc != KVF_OK) {
			stress_fail("len %" PRIu64 ": %s", seq, kvf_last_error());
			continue;
		}
		if (len == 0)
			continue;
		{
			uint64_t t0 = rng_below(&t->rng, len);
			uint64_t span = 1 + rng_below(&t->rng, 4 * MAX_N);
			uint64_t t1 = t0 + span < len ? t0 + span : len;

			check(st, seq, fam, layer,
			      (uint32_t)rng_below(&t->rng, KVH), t0, t1,
			      is_fork, k, v);
		}
	}
	free(k);
	free(v);
	return NULL;
}

/* min_len - the tokens every layer of seq has (lengths only grow) */
int stress_min_len(kvf_store *st, uint64_t seq, uint64_t *out)
{
	uint64_t m = UINT64_MAX, n;

	for (uint32_t l = 0; l < LAYERS; l++) {
		if (kvf_seq_len(st, seq, l, &n) != KVF_OK)
			return 0;
		if (n < m)
			m = n;
	}
	*out = m;
	return 1;
}

static void *forker(void *arg)
{
	struct thread *t = arg;
	struct ctx *c = t->c;
	kvf_store *st = c->st;
	unsigned char *k = malloc((size_t)MAX_N * KVH * ROW);
	unsigned char *v = malloc((size_t)MAX_N * KVH * ROW);
	uint64_t next = 1;

	while (atomic_load(&stress_writers_left) > 0 && k && v) {
		uint32_t w = (uint32_t)rng_below(&t->rng, WRITERS);
		uint32_t slot = (uint32_t)rng_below(&t->rng, FORK_SLOTS);
		uint64_t parent = stress_writer_seq(w), child, n, old;
		kvf_status rc;

		if (!stress_min_len(st, parent, &n))
			continue;
		child = parent + next++ % 999; /* family = parent */
		if (child == parent)
			child = parent + next++ % 999;
		old = atomic_exchange(&c->forks[slot], 0);
		if (old && kvf_seq_free(st, old) != KVF_OK)
			stress_fail("free %" PRIu64 ": %s", old, kvf_last_error());
		rc = kvf_seq_fork(st, parent, child, n);
		if (rc == KVF_EEXIST)
			continue; /* that id is still a live fork elsewhere */
		if (rc != KVF_OK) {
			stress_fail("fork %" PRIu64 " -> %" PRIu64 " at %" PRIu64
			     ": %s",
			     parent, child, n, kvf_last_error());
			continue;
		}
		atomic_fetch_add(&stress_passed, 1);
		if (n > 0)
			check(st, child, parent,
			      (uint32_t)rng_below(&t->rng, LAYERS),
			      (uint32_t)rng_below(&t->rng, KVH),
			      n > MAX_N ? n - MAX_N : 0, n, 0, k, v);
		/* the child's own tokens continue its family's values */
		if (append_family(st, child, parent, 0, n, 5, k, v) != KVF_OK)
			stress_fail("append to fork %" PRIu64 ": %s", child,
			     kvf_last_error());
		else
			check(st, child, parent, 0, 1, n > 3 ? n - 3 : 0, n + 5,
			      0, k, v);
		old = atomic_exchange(&c->forks[slot], child);
		if (old && kvf_seq_free(st, old) != KVF_OK)
			stress_fail("free %" PRIu64 ": %s", old, kvf_last_error());
	}
	for (uint32_t s = 0; s < FORK_SLOTS; s++) {
		uint64_t old = atomic_exchange(&c->forks[s], 0);

		if (old && kvf_seq_free(st, old) != KVF_OK)
			stress_fail("free %" PRIu64 ": %s", old, kvf_last_error());
	}
	free(k);
	free(v);
	return NULL;
}

/* the fewest free segments the syncer saw: the run's margin */
static _Atomic uint32_t least_free = UINT32_MAX;

static void *syncer(void *arg)
{
	struct thread *t = arg;
	kvf_store *st = t->c->st;

	while (atomic_load(&stress_writers_left) > 0) {
		kvf_stats s = { .struct_size = sizeof(s) };
		struct timespec ts = { 0, 2 * 1000 * 1000 };

		if (kvf_sync(st) != KVF_OK)
			stress_fail("sync: %s", kvf_last_error());
		else if (kvf_stats_get(st, &s) != KVF_OK)
			stress_fail("stats: %s", kvf_last_error());
		else
			atomic_fetch_add(&stress_passed, 1);
		for (uint32_t m = atomic_load(&least_free);
		     s.segments_free < m &&
		     !atomic_compare_exchange_weak(&least_free, &m,
						   s.segments_free);)
			;
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* verify_all - every writer's sequence, whole, every layer and head */
static void verify_all(kvf_store *st)
{
	size_t cap = (size_t)APPENDS * MAX_N * ROW;
	unsigned char *k = malloc(cap), *v = malloc(cap);

	for (uint32_t w = 0; w < WRITERS && k && v; w++) {
		uint64_t seq = stress_writer_seq(w), len;

		for (uint32_t l = 0; l < LAYERS; l++) {
			if (kvf_seq_len(st, seq, l, &len) != KVF_OK) {
				stress_fail("len %" PRIu64 ": %s", seq,
				     kvf_last_error());
				continue;
			}
			for (uint32_t h = 0; h < KVH; h++)
				check(st, seq, seq, l, h, 0, len, 0, k, v);
		}
	}
	free(k);
	free(v);
}

static int run(kvf_media_kind media, const char *dir, uint64_t seed)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	const char *path =
		tmp_path(dir, media == KVF_MEDIA_FILE ? "file" : "mem");
	struct thread th[WRITERS + READERS + 2 + ATTENDERS];
	pthread_t tid[WRITERS + READERS + 2 + ATTENDERS];
	kvf_stats stats = { .struct_size = sizeof(stats) };
	struct ctx c = { .seed = seed };
	uint32_t n = 0;
	kvf_options o;
	char p[4096];

	snprintf(p, sizeof(p), "%s", path);
	kvf_options_init(&o, &m);
	o.media = media;
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 2ull * 300 * 64 * 1024; /* the writers keep ~540 */
	o.n_stripes = 2;
	o.n_threads = 2;
	/* a small memory tier: its cache and write-back run under the same
	 * load, and the media still fills enough for the cleaner */
	o.dram_budget = 4ull << 20;
	if (kvf_open(p, &o, &c.st) != KVF_OK) {
		stress_fail("open: %s", kvf_last_error());
		return 1;
	}
	atomic_store(&stress_writers_left, WRITERS);
	for (uint32_t i = 0; i < WRITERS + READERS + 2 + ATTENDERS; i++) {
		void *(*fn)(void *) = i < WRITERS                ? writer :
				      i < WRITERS + READERS      ? reader :
				      i == WRITERS + READERS     ? forker :
				      i == WRITERS + READERS + 1 ? syncer :
								   stress_attender;

		th[i] = (struct thread){ &c, i < WRITERS ? i : i - WRITERS,
					 stress_mix(seed + i) };
		if (pthread_create(&tid[i], NULL, fn, &th[i]) != 0) {
			stress_fail("pthread_create");
			if (i < WRITERS)
				atomic_fetch_sub(&stress_writers_left, 1);
			continue;
		}
		n++;
	}
	for (uint32_t i = 0; i < WRITERS + READERS + 2 + ATTENDERS; i++)
		if (i < n)
			pthread_join(tid[i], NULL);
	verify_all(c.st);
	/* freed forks and superseded partial pages filled the small store:
	 * the cleaner must have moved live pages and segments been reused */
	if (kvf_stats_get(c.st, &stats) != KVF_OK)
		stress_fail("stats: %s", kvf_last_error());
	printf("stress_store %s: %" PRIu64 " segments written, %" PRIu64
	       " cleaned, %" PRIu64 " reclaimed, %" PRIu64
	       " bytes copied by the cleaner, %u of %u segments free at the end (%u at the fewest a sync saw); %u attends, %u attend batches checked\n",
	       media == KVF_MEDIA_FILE ? "file" : "memory",
	       stats.segments_written, stats.segments_cleaned,
	       stats.segments_reclaimed, stats.cleaner_bytes,
	       stats.segments_free, stats.segments_total,
	       atomic_load(&least_free), atomic_load(&stress_attends),
	       atomic_load(&stress_attend_batches));
	atomic_store(&least_free, UINT32_MAX);
	if (stats.segments_cleaned == 0 || stats.segments_reclaimed == 0)
		stress_fail("%s store: the cleaner did not run (%" PRIu64
		     " segments cleaned, %" PRIu64 " reclaimed)",
		     media == KVF_MEDIA_FILE ? "file" : "memory",
		     stats.segments_cleaned, stats.segments_reclaimed);
	atomic_store(&stress_attends, 0);
	atomic_store(&stress_attend_batches, 0);
	if (kvf_close(c.st) != KVF_OK)
		stress_fail("close: %s", kvf_last_error());
	if (media == KVF_MEDIA_FILE) {
		/* everything made it to the media */
		if (kvf_open(p, NULL, &c.st) != KVF_OK) {
			stress_fail("reopen: %s", kvf_last_error());
			return 1;
		}
		verify_all(c.st);
		if (kvf_close(c.st) != KVF_OK)
			stress_fail("close: %s", kvf_last_error());
	}
	return 0;
}

int main(void)
{
	char *dir = tmpdir_make("stress-store");
	uint64_t seed = rng_seed("stress_store");

	if (dir == NULL) {
		fprintf(stderr,
			"stress_store: cannot make a temporary directory\n");
		return 1;
	}
	run(KVF_MEDIA_MEMORY, dir, seed);
	run(KVF_MEDIA_FILE, dir, stress_mix(seed));
	tmpdir_remove(dir);
	printf("%u passed, %u failed\n", atomic_load(&stress_passed),
	       atomic_load(&stress_failed));
	return atomic_load(&stress_failed) ? 1 : 0;
}

