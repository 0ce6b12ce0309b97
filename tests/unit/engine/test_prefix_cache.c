/*
 * test_prefix_cache.c - cached prefixes (kvf_options.prefix_cache_bytes):
 * a freed sequence's published chunks stay and a later creation hits on
 * them exactly as on a live holder's, after a reopen and after a killed
 * writer too; kvf_prefix_drop gives the pages back; the budget keeps the
 * chunks with more hits; eviction takes cached prefixes first, the least
 * valuable first, and a full store without a policy drops them instead of
 * refusing an append; a power cut after a sync keeps what was synced; the caller's calls never see a cached prefix; every
 * refusal changes nothing.  Values depend only on (token id, position)
 * (prefix_fixture.h), so a wrong share shows as a wrong byte.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "powercut.h"
#include "prefix_fixture.h"
#include "store_fixture.h"

TestSuite(prefix_cache, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 60);

/* K/V bytes of one chunk: every layer, K and V, every head */
#define CHUNK ((uint64_t)LAYERS * 2 * KVH * G * ROW)

static kvf_store *open_with(uint64_t cache_bytes)
{
	kvf_options o = fx_small_opts();
	kvf_store *st;

	o.prefix_cache_bytes = cache_bytes;
	OK(kvf_open(fx.path, &o, &st));
	return st;
}

/* make - sequence id from tokens[0, n): expect `reused`, append the
 * rest, check every value */
static void make(kvf_store *st, uint64_t id, const uint32_t *tokens,
		 uint64_t n, uint64_t reused)
{
	uint64_t got = 12345;

	OK(kvf_seq_create_tokens(st, id, tokens, n, &got));
	cr_assert(eq(u64, got, reused), "sequence %llu reused %llu",
		  (unsigned long long)id, (unsigned long long)got);
	if (got < n)
		OK(px_append(st, id, tokens, got, n));
	cr_assert(px_check(st, id, tokens, n));
}

static kvf_stats stats(kvf_store *st)
{
	kvf_stats s = { .struct_size = sizeof(s) };

	OK(kvf_stats_get(st, &s));
	return s;
}

/* cached_ids - the cached prefixes' ids into ids[cap]; how many */
static size_t cached_ids(kvf_store *st, uint64_t *ids, size_t cap)
{
	size_t n = 0;

	OK(kvf_prefix_list(st, ids, cap, &n));
	cr_assert(n <= cap, "%zu cached prefixes", n);
	return n;
}

/* the only cached prefix's id */
static uint64_t the_cached(kvf_store *st)
{
	uint64_t id[4];

	cr_assert(eq(sz, cached_ids(st, id, 4), 1));
	return id[0];
}

Test(prefix_cache, hit_after_the_holder_is_freed)
{
	kvf_store *st = open_with(64 * CHUNK);
	kvf_seq_info si = { .struct_size = sizeof(si) };
	uint32_t a[4 * G + 5];
	uint64_t ids[4], cid;
	size_t n;
	kvf_stats s;

	px_tokens(a, 4 * G + 5, 1);
	make(st, 1, a, 4 * G + 5, 0);
	OK(kvf_seq_free(st, 1));
	s = stats(st);
	cr_assert(eq(u64, s.n_sequences, 0));
	cr_assert(eq(u64, s.prefix_cached, 1));
	cr_assert(eq(u64, s.prefix_cache_kept, 1));
	cr_assert(eq(u64, s.prefix_cached_bytes, 4 * CHUNK));
	cr_assert(eq(u64, s.prefix_chunks, 4));
	/* the caller's list does not show it; the cache's does */
	OK(kvf_seq_list(st, ids, 4, &n));
	cr_assert(eq(sz, n, 0));
	cid = the_cached(st);
	OK(kvf_seq_info_get(st, cid, &si));
	cr_assert(eq(u32, si.cached, 1));
	cr_assert(eq(u64, si.tokens, LAYERS * 4 * G)); /* whole groups only */
	cr_assert(eq(u64, si.prefix_chunks, 4));
	cr_assert(eq(u64, si.cached_own_chunks, 4));
	/* a new conversation on the same prompt hits the whole groups (the
	 * freed sequence's part-filled group went with it) */
	make(st, 2, a, 4 * G + 5, 4 * G);
	s = stats(st);
	cr_assert(eq(u64, s.prefix_hits, 1));
	cr_assert(eq(u64, s.prefix_cache_hits, 1));
	cr_assert(eq(u64, s.prefix_cached_bytes, 0)); /* 2 holds them too */
	OK(kvf_seq_info_get(st, cid, &si));
	cr_assert(eq(u64, si.cached_own_chunks, 0));
	/* 2 adds nothing only it holds, so its free keeps no second one */
	OK(kvf_seq_free(st, 2));
	s = stats(st);
	cr_assert(eq(u64, s.prefix_cached, 1));
	cr_assert(eq(u64, s.prefix_cached_bytes, 4 * CHUNK));
	OK(kvf_seq_info_get(st, cid, &si));
	cr_assert(eq(u64, si.cached_hits, 1));
	make(st, 3, a, 3 * G, 3 * G);
	OK(kvf_close(st));
}

/* a longer conversation's cached prefix holds a shorter one's whole: the
 * shorter goes, and the longer serves both */
Test(prefix_cache, a_cached_prefix_held_whole_by_a_newer_one_goes)
{
	kvf_store *st = open_with(64 * CHUNK);
	uint32_t a[5 * G];
	uint64_t first, ids[4];
	kvf_stats s;

	px_tokens(a, 5 * G, 2);
	make(st, 1, a, 2 * G, 0);
	OK(kvf_seq_free(st, 1));
	first = the_cached(st);
	make(st, 2, a, 5 * G, 2 * G);
	OK(kvf_seq_free(st, 2));
	cr_assert(eq(sz, cached_ids(st, ids, 4), 1));
	cr_assert(ids[0] != first);
	s = stats(st);
	cr_assert(eq(u64, s.prefix_cache_kept, 2));
	cr_assert(eq(u64, s.prefix_cache_dropped, 1));
	cr_assert(eq(u64, s.prefix_cached_bytes, 5 * CHUNK));
	make(st, 3, a, 2 * G, 2 * G);
	make(st, 4, a, 5 * G, 5 * G);
	OK(kvf_close(st));
}

Test(prefix_cache, the_caller_never_sees_one)
{
	kvf_store *st = open_with(64 * CHUNK);
	uint32_t a[2 * G];
	unsigned char buf[G * ROW * 2];
	uint64_t cid, len;
	kvf_seq_info si = { .struct_size = sizeof(si) };
	float q[QH * DIM], out[QH * DIM];

	memset(q, 0, sizeof(q));
	px_tokens(a, 2 * G, 3);
	make(st, 1, a, 2 * G, 0);
	OK(kvf_seq_free(st, 1));
	cid = the_cached(st);
	cr_assert(eq(int, kvf_seq_len(st, cid, 0, &len), KVF_ENOENT));
	fx_has("cached prefixes");
	cr_assert(eq(int, kvf_seq_free(st, cid), KVF_ENOENT));
	fx_has("cached prefixes");
	cr_assert(eq(int, kvf_seq_fork(st, cid, 9, G), KVF_ENOENT));
	cr_assert(eq(int, kvf_read(st, cid, 0, 0, 0, 1, buf, buf + ROW),
		     KVF_ENOENT));
	cr_assert(eq(int, kvf_append(st, cid, 0, 1, buf, buf), KVF_ENOENT));
	cr_assert(eq(int, kvf_attend(st, cid, 0, q, out, NULL), KVF_ENOENT));
	cr_assert(eq(int, kvf_attend_batch(st, 1, &cid, 0, q, out, NULL),
		     KVF_ENOENT));
	fx_has("cached prefixes");
	cr_assert(eq(int, kvf_seq_add_tokens(st, cid, a, 1), KVF_ENOENT));
	cr_assert(eq(int, kvf_seq_truncate(st, cid, 1), KVF_ENOENT));
	cr_assert(eq(int, kvf_seq_pin(st, cid), KVF_ENOENT));
	cr_assert(eq(int, kvf_seq_fork(st, cid, 9, G), KVF_ENOENT));
	/* none of it changed the cached prefix */
	OK(kvf_seq_info_get(st, cid, &si));
	cr_assert(eq(u64, si.tokens, LAYERS * 2 * G));
	cr_assert(eq(u64, stats(st).prefix_cached, 1));
	make(st, 2, a, 2 * G, 2 * G);
	OK(kvf_seq_free(st, 2));
	/* a caller creating its id takes it: the cache gives way */
	OK(kvf_seq_create(st, cid));
	OK(kvf_seq_len(st, cid, 0, &len));
	cr_assert(eq(u64, len, 0));
	cr_assert(eq(u64, stats(st).prefix_cached, 0));
	make(st, 3, a, 2 * G, 0);
	OK(kvf_close(st));
}

Test(prefix_cache, survives_a_reopen)
{
	kvf_store *st = open_with(64 * CHUNK);
	uint32_t a[3 * G], b[2 * G];
	uint64_t cid;
	kvf_stats s;

	px_tokens(a, 3 * G, 4);
	px_tokens(b, 2 * G, 5);
	make(st, 1, a, 3 * G, 0);
	make(st, 2, b, 2 * G, 0);
	OK(kvf_seq_free(st, 1));
	cid = the_cached(st);
	OK(kvf_close(st));
	st = open_with(64 * CHUNK);
	cr_assert(eq(u64, the_cached(st), cid));
	s = stats(st);
	cr_assert(eq(u64, s.n_sequences, 1));
	cr_assert(eq(u64, s.prefix_cached, 1));
	cr_assert(eq(u64, s.prefix_cached_bytes, 3 * CHUNK));
	make(st, 3, a, 3 * G, 3 * G);
	cr_assert(eq(u64, stats(st).prefix_cache_hits, 1));
	/* a cached prefix made after the reopen takes a fresh id */
	OK(kvf_seq_free(st, 2));
	{
		uint64_t ids[4];

		cr_assert(eq(sz, cached_ids(st, ids, 4), 2));
		cr_assert(ids[0] == cid && ids[1] > cid);
	}
	OK(kvf_close(st));
	/* read-only: listed and shared from, never changed */
	{
		kvf_options o = fx_small_opts();
		uint64_t n = 9;

		o.read_only = 1;
		OK(kvf_open(fx.path, &o, &st));
		cr_assert(eq(u64, stats(st).prefix_cached, 2));
		cr_assert(eq(int, kvf_prefix_drop(st, cid, &n), KVF_ENOTSUP));
		cr_assert(eq(u64, n, 9));
		OK(kvf_close(st));
	}
}

/* the writer of after_a_kill: a conversation synced, freed (its chunks
 * cached), synced again, then other work, killed */
static void kill_child(const char *path)
{
	kvf_options o = fx_small_opts();
	uint32_t a[4 * G + 3], b[3 * G];
	uint64_t got;
	kvf_store *st;

	px_tokens(a, 4 * G + 3, 6);
	px_tokens(b, 3 * G, 7);
	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_seq_create_tokens(st, 1, a, 4 * G + 3, &got));
	CHILD_MUST(px_append(st, 1, a, 0, 4 * G + 3));
	CHILD_MUST(kvf_sync(st));
	CHILD_MUST(kvf_seq_free(st, 1));
	CHILD_MUST(kvf_sync(st));
	/* a second one freed without a sync after: a kill keeps what the
	 * catalog committed, which a process death does not lose */
	CHILD_MUST(kvf_seq_create_tokens(st, 2, b, 3 * G, &got));
	CHILD_MUST(px_append(st, 2, b, 0, 3 * G));
	CHILD_MUST(kvf_seq_free(st, 2));
	CHILD_MUST(kvf_seq_create_tokens(st, 3, b, 3 * G, &got));
	fx_child_say("S");
	CHILD_MUST(px_append(st, 3, a, 0, G));
	kill(getpid(), SIGKILL);
}

Test(prefix_cache, after_a_kill)
{
	uint32_t a[4 * G + 3], b[3 * G];
	char line[256];
	kvf_store *st;
	int fd, status;
	pid_t pid;

	px_tokens(a, 4 * G + 3, 6);
	px_tokens(b, 3 * G, 7);
	pid = fx_spawn(&fd);
	if (pid == 0) {
		kill_child(fx.path);
		_exit(0);
	}
	cr_assert(fx_read_line(fd, line, sizeof(line)));
	cr_assert(eq(str, line, "S"), "child: %s", line);
	free(fx_collect(fd));
	waitpid(pid, &status, 0);
	st = open_with(64 * CHUNK);
	cr_assert(stats(st).prefix_cached >= 1);
	make(st, 4, a, 4 * G + 3, 4 * G);
	cr_assert(eq(u64, stats(st).prefix_cache_hits, 1));
	/* b's is there too: either as the cached prefix or through 3 */
	{
		uint64_t got;

		OK(kvf_seq_create_tokens(st, 5, b, 3 * G, &got));
		cr_assert(eq(u64, got, 3 * G));
		cr_assert(px_check(st, 5, b, 3 * G));
	}
	{
		kvf_verify_report r = { .struct_size = sizeof(r) };

		OK(kvf_verify(st, NULL, NULL, &r));
		cr_assert(eq(u64, r.bad_pages, 0));
		cr_assert(eq(u32, r.bad_segments, 0));
		/* 3, 4, 5 and the cached prefixes */
		cr_assert(r.sequences_checked >= 4);
	}
	OK(kvf_close(st));
}

Test(prefix_cache, drop_gives_the_pages_back)
{
	kvf_store *st = open_with(64 * CHUNK);
	uint32_t a[3 * G], b[3 * G], c[3 * G];
	uint64_t n = 99, cid;
	kvf_stats s;

	px_tokens(a, 3 * G, 8);
	px_tokens(b, 3 * G, 9);
	px_tokens(c, 3 * G, 10);
	make(st, 1, a, 3 * G, 0);
	make(st, 2, b, 3 * G, 0);
	make(st, 3, c, 3 * G, 0);
	OK(kvf_seq_free(st, 1));
	cid = the_cached(st);
	OK(kvf_seq_free(st, 2));
	OK(kvf_sync(st));
	s = stats(st);
	cr_assert(eq(u64, s.prefix_cached, 2));
	cr_assert(eq(u64, s.live_pages, 3 * 3 * CHUNK / 4096));
	/* one */
	OK(kvf_prefix_drop(st, cid, &n));
	cr_assert(eq(u64, n, 1));
	s = stats(st);
	cr_assert(eq(u64, s.prefix_cached, 1));
	cr_assert(eq(u64, s.prefix_cached_bytes, 3 * CHUNK));
	cr_assert(eq(u64, s.live_pages, 2 * 3 * CHUNK / 4096));
	make(st, 4, a, 3 * G, 0);
	OK(kvf_seq_free(st, 4));
	/* all */
	OK(kvf_prefix_drop(st, KVF_SEQ_NONE, &n));
	cr_assert(eq(u64, n, 2));
	OK(kvf_prefix_drop(st, KVF_SEQ_NONE, NULL)); /* none left: fine */
	s = stats(st);
	cr_assert(eq(u64, s.prefix_cached, 0));
	cr_assert(eq(u64, s.prefix_cached_bytes, 0));
	cr_assert(eq(u64, s.prefix_cache_dropped, 3));
	cr_assert(eq(u64, s.prefix_chunks, 3)); /* c's, held by 3 */
	cr_assert(eq(u64, s.live_pages, 3 * CHUNK / 4096));
	/* the dropped pages' segments are reused after a durable point */
	OK(kvf_seq_free(st, 3));
	OK(kvf_prefix_drop(st, KVF_SEQ_NONE, NULL));
	OK(kvf_sync(st));
	s = stats(st);
	cr_assert(eq(u64, s.live_pages, 0));
	cr_assert(eq(u32, s.segments_sealed, 0));
	cr_assert(eq(u32, s.segments_dying, 0));
	make(st, 5, b, 3 * G, 0);
	OK(kvf_close(st));
	/* dropped stays dropped */
	st = open_with(64 * CHUNK);
	cr_assert(eq(u64, stats(st).prefix_cached, 0));
	OK(kvf_close(st));
}

Test(prefix_cache, bad_inputs_change_nothing)
{
	kvf_store *st = open_with(64 * CHUNK);
	uint32_t a[2 * G];
	uint64_t n = 77, ids[2] = { 5, 5 }, cid;
	size_t k = 33;
	kvf_stats s0, s1;

	px_tokens(a, 2 * G, 11);
	make(st, 1, a, 2 * G, 0);
	make(st, 2, a, G, G);
	OK(kvf_seq_free(st, 1));
	cid = the_cached(st);
	s0 = stats(st);
	cr_assert(eq(int, kvf_prefix_drop(st, 12345, &n), KVF_ENOENT));
	fx_has("kvf_prefix_drop: sequence 12345 does not exist");
	cr_assert(eq(int, kvf_prefix_drop(st, 2, &n), KVF_ENOENT));
	fx_has("sequence 2 is not a cached prefix: it is the caller's");
	cr_assert(eq(int, kvf_prefix_drop(NULL, cid, &n), KVF_EINVAL));
	cr_assert(eq(u64, n, 77));
	cr_assert(eq(int, kvf_prefix_list(st, NULL, 2, &k), KVF_EINVAL));
	fx_has("ids is NULL with cap 2");
	cr_assert(eq(int, kvf_prefix_list(st, ids, 2, NULL), KVF_EINVAL));
	fx_has("n is NULL");
	cr_assert(eq(int, kvf_prefix_list(NULL, ids, 2, &k), KVF_EINVAL));
	cr_assert(eq(sz, k, 33));
	cr_assert(ids[0] == 5 && ids[1] == 5);
	/* size only */
	OK(kvf_prefix_list(st, NULL, 0, &k));
	cr_assert(eq(sz, k, 1));
	/* refused forks into the cached prefix's id: it stays (the cache
	 * gave its id up before the parent was checked) */
	cr_assert(eq(int, kvf_seq_fork(st, 2, cid, 3 * G), KVF_ERANGE));
	fx_has("n_tokens");
	cr_assert(eq(int, kvf_seq_fork(st, 12345, cid, G), KVF_ENOENT));
	cr_assert(eq(u64, the_cached(st), cid));
	s1 = stats(st);
	cr_assert(eq(u64, s1.prefix_cached, s0.prefix_cached));
	cr_assert(eq(u64, s1.prefix_cached_bytes, s0.prefix_cached_bytes));
	cr_assert(eq(u64, s1.n_sequences, 1));
	cr_assert(eq(u64, s1.live_pages, s0.live_pages));
	cr_assert(px_check(st, 2, a, G));
	make(st, 3, a, 2 * G, 2 * G);
	OK(kvf_close(st));
}

Test(prefix_cache, budget_keeps_the_chunks_with_more_hits)
{
	/* room for five chunks only the cache holds */
	kvf_store *st = open_with(5 * CHUNK);
	uint32_t a[3 * G], b[3 * G], c[6 * G];
	uint64_t ca;
	kvf_stats s;

	px_tokens(a, 3 * G, 12);
	px_tokens(b, 3 * G, 13);
	px_tokens(c, 6 * G, 14);
	/* alone past the budget: not kept at all */
	make(st, 1, c, 6 * G, 0);
	OK(kvf_seq_free(st, 1));
	s = stats(st);
	cr_assert(eq(u64, s.prefix_cached, 0));
	cr_assert(eq(u64, s.prefix_cache_kept, 0));
	make(st, 2, c, 6 * G, 0);
	OK(kvf_seq_free(st, 2));
	/* a is cached, then hit once (3 shares its first chunk) */
	make(st, 1, a, 3 * G, 0);
	OK(kvf_seq_free(st, 1));
	ca = the_cached(st);
	make(st, 3, a, G, G);
	OK(kvf_seq_free(st, 3));
	/* b, freed later, was never hit: over the budget it is b that goes */
	make(st, 4, b, 3 * G, 0);
	OK(kvf_seq_free(st, 4));
	cr_assert(eq(u64, the_cached(st), ca));
	s = stats(st);
	cr_assert(eq(u64, s.prefix_cached_bytes, 3 * CHUNK));
	cr_assert(s.prefix_cached_bytes <= 5 * CHUNK);
	make(st, 5, b, 3 * G, 0);
	make(st, 6, a, 3 * G, 3 * G);
	OK(kvf_seq_free(st, 5));
	OK(kvf_seq_free(st, 6));
	/* with no hits on any, the one used longer ago goes: two chunks
	 * each, so two fit and the third makes one go */
	OK(kvf_prefix_drop(st, KVF_SEQ_NONE, NULL));
	make(st, 7, a, 2 * G, 0);
	make(st, 8, b, 2 * G, 0);
	OK(kvf_seq_free(st, 7));
	OK(kvf_seq_free(st, 8));
	cr_assert(eq(u64, stats(st).prefix_cached, 2));
	make(st, 9, c, 2 * G, 0);
	OK(kvf_seq_free(st, 9));
	s = stats(st);
	cr_assert(eq(u64, s.prefix_cached, 2));
	cr_assert(eq(u64, s.prefix_cached_bytes, 4 * CHUNK));
	make(st, 10, a, 2 * G, 0); /* a's went: its chunks were the oldest */
	make(st, 11, b, 2 * G, 2 * G);
	make(st, 12, c, 2 * G, 2 * G);
	OK(kvf_close(st));
	/* a reopen with 0 turns the cache off but keeps what it holds */
	st = open_with(0);
	cr_assert(eq(u64, stats(st).prefix_cached, 2));
	OK(kvf_seq_free(st, 12));
	OK(kvf_seq_free(st, 11));
	OK(kvf_seq_free(st, 10));
	cr_assert(eq(u64, stats(st).prefix_cached, 2));
	OK(kvf_close(st));
}

/* eviction takes cached prefixes before any sequence, the one with the
 * fewest hits first */
Test(prefix_cache, eviction_takes_cached_prefixes_first)
{
	kvf_options o = fx_small_opts();
	kvf_evict_event ev[16];
	uint32_t a[3 * G], b[3 * G], c[3 * G];
	uint64_t ca, cb, freed;
	uint32_t n;
	kvf_store *st;

	o.evict_policy = KVF_EVICT_LRU;
	OK(kvf_open(fx.path, &o, &st));
	px_tokens(a, 3 * G, 15);
	px_tokens(b, 3 * G, 16);
	px_tokens(c, 3 * G, 17);
	make(st, 1, c, 3 * G, 0); /* the least recently used sequence */
	make(st, 2, a, 3 * G, 0);
	OK(kvf_seq_free(st, 2));
	ca = the_cached(st);
	make(st, 3, b, 3 * G, 0);
	OK(kvf_seq_free(st, 3));
	/* b's is hit twice, a's never */
	make(st, 4, b, 2 * G, 2 * G);
	make(st, 5, b, 3 * G, 3 * G);
	OK(kvf_seq_free(st, 4));
	OK(kvf_seq_free(st, 5));
	{
		uint64_t ids[4];

		cr_assert(eq(sz, cached_ids(st, ids, 4), 2));
		cb = ids[0] == ca ? ids[1] : ids[0];
	}
	OK(kvf_evict_log(st, ev, 16, &n, NULL));
	/* room for one: a's cached prefix goes */
	OK(kvf_evict(st, KVF_EVICT_LRU, 3 * CHUNK, &freed));
	cr_assert(eq(u64, freed, 3 * CHUNK));
	OK(kvf_evict_log(st, ev, 16, &n, NULL));
	cr_assert(eq(u32, n, 1));
	cr_assert(eq(u64, ev[0].seq, ca));
	/* room for two: b's, then sequence 1 */
	OK(kvf_evict(st, KVF_EVICT_LRU, 6 * CHUNK, &freed));
	OK(kvf_evict_log(st, ev, 16, &n, NULL));
	cr_assert(eq(u32, n, 2));
	cr_assert(eq(u64, ev[0].seq, cb));
	cr_assert(eq(u64, ev[1].seq, 1));
	cr_assert(eq(u64, stats(st).prefix_cached, 0));
	OK(kvf_close(st));
}

/* with no eviction policy a full store drops cached prefixes rather than
 * refuse an append */
Test(prefix_cache, a_full_store_drops_them_without_a_policy)
{
	kvf_options o = fx_options(2u << 20, 0);
	uint32_t t[8 * G];
	kvf_store *st;
	kvf_stats s;
	uint64_t round;

	o.dram_budget = 0;
	OK(kvf_open(fx.path, &o, &st));
	/* conversations on distinct prompts, each freed: about twice the
	 * media's room passes through the cache */
	for (round = 0; round < 16; round++) {
		px_tokens(t, 8 * G, 100 + (uint32_t)round);
		make(st, 1, t, 8 * G, 0);
		OK(kvf_seq_free(st, 1));
	}
	s = stats(st);
	cr_assert(s.prefix_cached >= 1);
	cr_assert(s.prefix_cache_dropped > 0);
	cr_assert(eq(u64, s.prefix_cache_kept, 16));
	cr_assert(eq(u64, s.evicted_seqs, s.prefix_cache_dropped));
	/* the latest is still there */
	make(st, 2, t, 8 * G, 8 * G);
	OK(kvf_close(st));
}

/* power_child - the writer of a_power_cut: a conversation synced, ended
 * (its chunks cached) and synced again; then more conversations, cached,
 * shared from and dropped (all but that first one) without a sync, until
 * killed */
static void power_child(const char *path, const char *journal)
{
	kvf_options o = fx_small_opts();
	uint32_t a[4 * G + 3], b[3 * G];
	uint64_t got, keep = 0, ids[8];
	kvf_store *st;
	size_t n;

	px_tokens(a, 4 * G + 3, 30);
	px_tokens(b, 3 * G, 31);
	if (powercut_arm(journal, path) != 0) {
		fx_child_say("E powercut_arm: %s", strerror(errno));
		_exit(3);
	}
	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_seq_create_tokens(st, 1, a, 4 * G + 3, &got));
	CHILD_MUST(px_append(st, 1, a, 0, 4 * G + 3));
	CHILD_MUST(kvf_sync(st));
	CHILD_MUST(kvf_seq_free(st, 1));
	CHILD_MUST(kvf_sync(st));
	CHILD_MUST(kvf_prefix_list(st, &keep, 1, &n));
	fx_child_say(n == 1 ? "S" : "E %zu cached prefixes after the first free", n);
	for (uint64_t i = 0;; i++) {
		uint64_t id = 10 + i;

		CHILD_MUST(kvf_seq_create_tokens(st, id, i % 2 ? a : b,
						 i % 2 ? 4 * G + 3 : 3 * G, &got));
		CHILD_MUST(px_append(st, id, i % 2 ? a : b, got,
				     i % 2 ? 4 * G + 3 : 3 * G));
		CHILD_MUST(kvf_seq_free(st, id));
		if (i % 4 != 3)
			continue;
		/* every cached prefix but a's first: b's go and come back */
		CHILD_MUST(kvf_prefix_list(st, ids, 8, &n));
		for (size_t j = 0; j < n && j < 8; j++)
			if (ids[j] != keep)
				CHILD_MUST(kvf_prefix_drop(st, ids[j], NULL));
	}
}

/* the power fails under a writer after it synced a cached prefix: at
 * reopen that one serves a new conversation exactly, any other cached
 * prefix a cut left reads exactly what its ids give, and verify finds
 * nothing wrong */
Test(prefix_cache, a_power_cut)
{
	uint32_t a[4 * G + 3], b[3 * G];
	uint64_t seed = 0xcace, cut = 0;

	px_tokens(a, 4 * G + 3, 30);
	px_tokens(b, 3 * G, 31);
	for (int r = 0; r < 10; r++) {
		char path[4096], journal[4096], why[300], line[256];
		kvf_verify_report vr = { .struct_size = sizeof(vr) };
		struct powercut_stats cs;
		kvf_store *st;
		uint64_t got;
		int fd, status;
		pid_t pid;

		snprintf(path, sizeof(path), "%s/s%d", fx.dir, r);
		snprintf(journal, sizeof(journal), "%s/j%d", fx.dir, r);
		{
			kvf_options o = fx_small_opts(); /* made before the cuts */

			OK(kvf_open(path, &o, &st));
			OK(kvf_close(st));
		}
		pid = fx_spawn(&fd);
		if (pid == 0) {
			power_child(path, journal);
			_exit(0);
		}
		cr_assert(fx_read_line(fd, line, sizeof(line)));
		cr_assert(eq(str, line, "S"), "child: %s", line);
		fx_sleep_us(2000u * (unsigned)r);
		kill(pid, SIGKILL);
		free(fx_collect(fd));
		waitpid(pid, &status, 0);
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		cr_assert(powercut_apply(journal, seed, &cs, why, sizeof(why)) == 0,
			  "%s", why);
		cut += cs.pages;
		OK(kvf_open(path, NULL, &st));
		OK(kvf_verify(st, NULL, NULL, &vr));
		cr_assert(eq(u64, vr.bad_pages, 0), "round %d", r);
		cr_assert(eq(u32, vr.bad_segments, 0), "round %d", r);
		/* a's chunks were cached and synced: whatever the cut left
		 * after that, some holder of them survives */
		OK(kvf_seq_create_tokens(st, 1, a, 4 * G + 3, &got));
		cr_assert(eq(u64, got, 4 * G), "round %d: reused %llu", r,
			  (unsigned long long)got);
		OK(px_append(st, 1, a, got, 4 * G + 3));
		cr_assert(px_check(st, 1, a, 4 * G + 3), "round %d", r);
		OK(kvf_seq_create_tokens(st, 2, b, 3 * G, &got));
		cr_assert(got == 0 || got == 3 * G, "round %d: reused %llu", r,
			  (unsigned long long)got);
		OK(px_append(st, 2, b, got, 3 * G));
		cr_assert(px_check(st, 2, b, 3 * G), "round %d", r);
		OK(kvf_close(st));
	}
	cr_assert(cut > 0, "the cuts lost no write");
}
