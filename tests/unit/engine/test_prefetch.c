/*
 * test_prefetch.c - kvf_prefetch and the layer-ahead reads of kvf_attend
 * (engine/reads/prefetch.h): a prefetched layer is attended with no read
 * from media and the same bits as without a tier; a kvf_attend_batch
 * that misses reads the next layer ahead, kvf_attend does not; a prefetch fills only free room and
 * evicts nothing; reads ahead only the tokens a windowed call attends; a
 * page whose segment was given back while it was read is not cached; bad
 * arguments are refused with nothing queued; a store closes with
 * prefetches queued.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/store_state.h"
#include "engine/reads/prefetch.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(prefetch, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

#define PF_GROUPS 80u           /* whole groups a layer holds */
#define PF_LEN (PF_GROUPS * G)  /* no tail: every page is on media */
#define PF_PAGES (PF_GROUPS * KVH * 2) /* K and V pages of one layer */

static kvf_options pf_opts(uint64_t budget)
{
	kvf_options o = fx_options(64ull << 20, 2);

	o.dram_budget = budget;
	o.direct_io = 2; /* tmpfs may refuse O_DIRECT */
	o.trim = 2;      /* a freed segment keeps its bytes (see below) */
	return o;
}

static kvf_stats stats_of(kvf_store *st)
{
	kvf_stats s = { .struct_size = sizeof(s) };

	OK(kvf_stats_get(st, &s));
	return s;
}

/* pf_store - a closed store at "s" holding sequence 1, PF_LEN tokens of
 * every layer (random f16 in [1/8, 1) with random signs) */
static void pf_store(void)
{
	kvf_options o = pf_opts(0);
	uint64_t rng = rng_seed("prefetch");
	size_t elts = (size_t)PF_LEN * KVH * DIM;
	uint16_t *k = malloc(elts * 2), *v = malloc(elts * 2);
	kvf_store *st;

	cr_assert(k && v);
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	OK(kvf_seq_create(st, 1));
	for (uint32_t l = 0; l < LAYERS; l++) {
		for (size_t i = 0; i < elts; i++) {
			k[i] = (uint16_t)(0x3000 + rng_below(&rng, 0x0c00)) |
			       (uint16_t)(rng_below(&rng, 2) << 15);
			v[i] = (uint16_t)(0x3000 + rng_below(&rng, 0x0c00)) |
			       (uint16_t)(rng_below(&rng, 2) << 15);
		}
		OK(kvf_append(st, 1, l, PF_LEN, k, v));
	}
	OK(kvf_sync(st));
	OK(kvf_close(st));
	free(k);
	free(v);
}

static kvf_store *pf_open(uint64_t budget)
{
	kvf_options o = pf_opts(budget);
	kvf_store *st;

	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	return st;
}

/* wait_prefetched - until prefetch_pages reaches want (10 s at most);
 * returns what it reached */
static uint64_t wait_prefetched(kvf_store *st, uint64_t want)
{
	struct timespec nap = { 0, 1000000 };
	uint64_t got = 0;

	for (int i = 0; i < 10000 && (got = stats_of(st).prefetch_pages) < want; i++)
		nanosleep(&nap, NULL);
	return got;
}

static void query(float *q, uint32_t seed)
{
	uint64_t rng = seed;

	for (uint32_t i = 0; i < QH * DIM; i++)
		q[i] = (float)rng_below(&rng, 2001) / 1000.0f - 1.0f;
}

/* reference - attention of layer over a store with no tier */
static void reference(uint32_t layer, const float *q, float *out)
{
	kvf_store *st = pf_open(0);

	OK(kvf_attend(st, 1, layer, q, out, NULL));
	OK(kvf_close(st));
}

Test(prefetch, a_prefetched_layer_is_attended_from_dram)
{
	float q[QH * DIM], want[QH * DIM], out[QH * DIM];
	kvf_store *st;
	kvf_stats s0, s1;

	pf_store();
	query(q, 7);
	reference(1, q, want);
	st = pf_open(64ull << 20);
	OK(kvf_prefetch(st, 1, 1));
	cr_assert(eq(u64, wait_prefetched(st, PF_PAGES), PF_PAGES));
	s0 = stats_of(st);
	cr_assert(eq(u64, s0.bytes_read, (uint64_t)PF_PAGES * FX_PAGE),
		  "the prefetch reads each page once");
	OK(kvf_attend(st, 1, 1, q, out, NULL));
	s1 = stats_of(st);
	cr_assert(eq(u64, s1.attend_bytes_read - s0.attend_bytes_read, 0),
		  "attention after a prefetch reads nothing from media");
	cr_assert(eq(int, memcmp(out, want, sizeof(out)), 0),
		  "the same bits as attention with no tier");
	/* a second prefetch finds every page cached: nothing read */
	OK(kvf_prefetch(st, 1, 1));
	OK(kvf_close(st)); /* waits for it */
	st = NULL;
}

Test(prefetch, a_batch_that_misses_reads_the_next_layer_ahead)
{
	float q[QH * DIM], want[LAYERS][QH * DIM], out[QH * DIM];
	uint64_t ids[1] = { 1 };
	kvf_store *st;
	kvf_stats s0, s1;

	cr_assert(LAYERS >= 2);
	pf_store();
	query(q, 11);
	for (uint32_t l = 0; l < LAYERS; l++)
		reference(l, q, want[l]);
	st = pf_open(64ull << 20);
	OK(kvf_attend_batch(st, 1, ids, 0, q, out, NULL)); /* cold: misses */
	cr_assert(eq(int, memcmp(out, want[0], sizeof(out)), 0));
	cr_assert(eq(u64, wait_prefetched(st, PF_PAGES), PF_PAGES),
		  "layer 1 read ahead after layer 0 missed");
	s0 = stats_of(st);
	OK(kvf_attend_batch(st, 1, ids, 1, q, out, NULL));
	s1 = stats_of(st);
	cr_assert(eq(u64, s1.attend_bytes_read - s0.attend_bytes_read, 0));
	cr_assert(eq(int, memcmp(out, want[1], sizeof(out)), 0));
	/* warm now: no attention misses, so nothing more is read ahead */
	OK(kvf_attend_batch(st, 1, ids, 0, q, out, NULL));
	OK(kvf_attend_batch(st, 1, ids, 1, q, out, NULL));
	cr_assert(eq(u64, stats_of(st).prefetch_pages, PF_PAGES));
	cr_assert(eq(u64, stats_of(st).bytes_read, s1.bytes_read));
	OK(kvf_close(st));
}

Test(prefetch, kvf_attend_reads_no_layer_ahead)
{
	float q[QH * DIM], out[QH * DIM];
	kvf_store *st;

	pf_store();
	query(q, 5);
	st = pf_open(64ull << 20);
	OK(kvf_attend(st, 1, 0, q, out, NULL));
	cr_assert(eq(u64, stats_of(st).prefetch_pages, 0));
	cr_assert(eq(u64, stats_of(st).bytes_read,
		     (uint64_t)PF_PAGES * FX_PAGE), "layer 0 only");
	OK(kvf_close(st));
}

Test(prefetch, a_prefetch_fills_free_room_only)
{
	float q[QH * DIM], want[QH * DIM], out[QH * DIM];
	kvf_store *st;
	kvf_stats s0, s1;
	uint64_t budget = 1ull << 20, room; /* the least a tier takes */

	pf_store();
	query(q, 3);
	reference(1, q, want);
	st = pf_open(budget);
	s0 = stats_of(st);
	room = (budget - s0.dram_bytes) / FX_PAGE;
	cr_assert(room > 0, "no free room");
	cr_assert(lt(u64, room, PF_PAGES), "the layer must not fit");
	OK(kvf_prefetch(st, 1, 1));
	cr_assert(eq(u64, wait_prefetched(st, room), room),
		  "the free room, filled");
	OK(kvf_prefetch(st, 1, 1)); /* no room left: nothing to do */
	s1 = stats_of(st);
	cr_assert(eq(u64, s1.prefetch_pages, room));
	cr_assert(eq(u64, s1.cache_evictions, s0.cache_evictions),
		  "a prefetch evicts nothing");
	cr_assert(le(u64, s1.dram_peak, budget));
	/* the rest is read by the attention, with the same bits */
	OK(kvf_attend(st, 1, 1, q, out, NULL));
	cr_assert(eq(int, memcmp(out, want, sizeof(out)), 0));
	cr_assert(eq(u64, stats_of(st).attend_bytes_read,
		     (uint64_t)(PF_PAGES - room) * FX_PAGE));
	OK(kvf_close(st));
}

/* queued - prefetches of st listed (queued or running): a prefetch is
 * listed before it is queued, so 0 right after a call says it queued none */
static uint32_t queued(kvf_store *st)
{
	uint32_t n;

	pthread_mutex_lock(&st->prefetch.lock);
	n = st->prefetch.n;
	pthread_mutex_unlock(&st->prefetch.lock);
	return n;
}

Test(prefetch, refusals_change_nothing)
{
	kvf_store *st;

	pf_store();
	st = pf_open(64ull << 20);
	cr_assert(eq(int, kvf_prefetch(NULL, 1, 0), KVF_EINVAL));
	cr_assert(eq(int, kvf_prefetch(st, 1, LAYERS), KVF_ERANGE));
	cr_assert(not(eq(ptr, strstr(kvf_last_error(), "layer"), NULL)),
		  "%s", kvf_last_error());
	cr_assert(eq(int, kvf_prefetch(st, 99, 0), KVF_ENOENT));
	cr_assert(not(eq(ptr, strstr(kvf_last_error(), "99"), NULL)),
		  "%s", kvf_last_error());
	cr_assert(eq(u32, queued(st), 0), "a refused call queues nothing");
	OK(kvf_prefetch(st, 1, 0)); /* and a good one does */
	cr_assert(eq(u32, queued(st) + (uint32_t)stats_of(st).prefetch_pages
			  / PF_PAGES, 1));
	OK(kvf_close(st));
	/* no tier: nothing to do, nothing queued or read */
	st = pf_open(0);
	OK(kvf_prefetch(st, 1, 1));
	cr_assert(eq(u32, queued(st), 0));
	cr_assert(eq(u64, stats_of(st).bytes_read, 0));
	OK(kvf_close(st));
}

Test(prefetch, a_store_closes_with_prefetches_queued)
{
	kvf_store *st;

	pf_store();
	for (int i = 0; i < 4; i++) {
		st = pf_open(64ull << 20);
		for (uint32_t l = 0; l < LAYERS; l++)
			OK(kvf_prefetch(st, 1, l));
		OK(kvf_close(st));
	}
	/* and a sequence freed while its prefetch runs */
	st = pf_open(64ull << 20);
	OK(kvf_prefetch(st, 1, 0));
	OK(kvf_seq_free(st, 1));
	OK(kvf_close(st));
}

Test(prefetch, read_ahead_takes_the_window_a_call_attends)
{
	float q[QH * DIM], out[QH * DIM];
	uint64_t ids[1] = { 1 };
	kvf_attn_opts o;
	kvf_store *st;

	pf_store();
	query(q, 13);
	kvf_attn_opts_init(&o);
	o.window = 10 * G;
	st = pf_open(64ull << 20);
	OK(kvf_attend_batch(st, 1, ids, 0, q, out, &o)); /* cold: misses */
	cr_assert(eq(u64, stats_of(st).attend_bytes_read,
		     (uint64_t)10 * KVH * 2 * FX_PAGE),
		  "layer 0's window only");
	cr_assert(eq(u64, wait_prefetched(st, 10 * KVH * 2), 10 * KVH * 2));
	/* what the layer-ahead read: layer 1's window, and no more */
	cr_assert(eq(u64, stats_of(st).bytes_read,
		     (uint64_t)2 * 10 * KVH * 2 * FX_PAGE));
	OK(kvf_close(st));
}

/* The hook frees sequence 1 (and syncs, so its segments are given back)
 * after the prefetch took its addresses; the pages keep their bytes
 * (trim = 2), so each still matches its check: only the segments' drop
 * counts keep them out of the tier. */
static _Atomic int hook_done, hook_rc; /* asserted on the test's thread */
static _Atomic uint64_t hook_read, hook_cached, hook_reclaimed;

static void free_under_prefetch(kvf_store *st, int done)
{
	kvf_stats s = { .struct_size = sizeof(s) };
	kvf_status rc;

	if (!done) {
		if ((rc = kvf_seq_free(st, 1)) == KVF_OK &&
		    (rc = kvf_sync(st)) == KVF_OK &&
		    (rc = kvf_stats_get(st, &s)) == KVF_OK)
			hook_reclaimed = s.segments_reclaimed;
		hook_rc = rc;
		return;
	}
	if ((rc = kvf_stats_get(st, &s)) != KVF_OK)
		hook_rc = rc;
	hook_read = s.pages_read;
	hook_cached = s.prefetch_pages;
	hook_done = 1;
}

Test(prefetch, a_page_of_a_segment_given_back_meanwhile_is_not_cached)
{
	struct timespec nap = { 0, 1000000 };
	kvf_store *st;

	pf_store();
	st = pf_open(64ull << 20);
	hook_done = 0;
	hook_rc = KVF_OK;
	prefetch_test_hook = free_under_prefetch;
	OK(kvf_prefetch(st, 1, 1));
	for (int i = 0; i < 10000 && !hook_done; i++)
		nanosleep(&nap, NULL);
	prefetch_test_hook = NULL;
	cr_assert(eq(int, hook_done, 1));
	cr_assert(eq(int, hook_rc, KVF_OK), "free, sync or stats in the hook");
	cr_assert(hook_reclaimed > 0, "the segments were given back");
	cr_assert(eq(u64, hook_read, PF_PAGES), "the pages were read");
	cr_assert(eq(u64, hook_cached, 0), "and none was cached");
	cr_assert(eq(u64, stats_of(st).cache_bytes, 0));
	OK(kvf_close(st));
}

/* The hook holds the hint thread in the first prefetch (layer 0) until
 * released, so a second one (layer 1) stays queued: an attention of
 * layer 1 takes it off its queue and reads the layer itself. */
static _Atomic int hold, held_calls;

static void hold_first(kvf_store *st, int done)
{
	struct timespec nap = { 0, 1000000 };

	(void)st;
	if (done || atomic_fetch_add(&held_calls, 1) != 0)
		return;
	for (int i = 0; i < 10000 && hold; i++)
		nanosleep(&nap, NULL);
}

Test(prefetch, an_attention_takes_a_queued_prefetch_of_its_layer_off)
{
	float q[QH * DIM], want[QH * DIM], out[QH * DIM];
	struct timespec nap = { 0, 1000000 };
	uint64_t ids[1] = { 1 };
	kvf_store *st;

	pf_store();
	query(q, 17);
	reference(1, q, want);
	st = pf_open(64ull << 20);
	hold = 1;
	held_calls = 0;
	prefetch_test_hook = hold_first;
	OK(kvf_prefetch(st, 1, 0));
	for (int i = 0; i < 10000 && held_calls == 0; i++)
		nanosleep(&nap, NULL);
	cr_assert(eq(int, held_calls, 1), "the first prefetch runs");
	OK(kvf_prefetch(st, 1, 1)); /* queued behind it */
	OK(kvf_attend_batch(st, 1, ids, 1, q, out, NULL));
	cr_assert(eq(int, memcmp(out, want, sizeof(out)), 0));
	cr_assert(eq(u64, stats_of(st).attend_bytes_read,
		     (uint64_t)PF_PAGES * FX_PAGE), "layer 1 read by the attention");
	hold = 0;
	cr_assert(eq(u64, wait_prefetched(st, PF_PAGES), PF_PAGES));
	OK(kvf_close(st));
	prefetch_test_hook = NULL;
	cr_assert(eq(int, held_calls, 1),
		  "the prefetch of layer 1 never ran: it was taken off");
}
