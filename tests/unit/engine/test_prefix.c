/*
 * test_prefix.c - prefix reuse: kvf_seq_create_tokens finds the longest
 * stored prefix (whole chunks, then part of a group), a sequence that
 * shares reads exactly its own tokens' values, equal chunks at other
 * positions do not match, forced hash collisions change no answer, the
 * index survives a reopen and a killed writer, a freed holder leaves it
 * (with the cache off: test_prefix_cache.c for the cache),
 * and every refusal changes nothing.  Values depend only on (token id,
 * position) (prefix_fixture.h), so a wrong share shows as a wrong byte.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <errno.h>
#include <stdio.h>

#include "api/alloc.h"
#include "engine/sequences/prefix.h"
#include "powercut.h"
#include "prefix_fixture.h"
#include "store_fixture.h"

TestSuite(prefix, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 60);

static kvf_store *open_small(void)
{
	kvf_options o = fx_small_opts();
	kvf_store *st;

	OK(kvf_open(fx.path, &o, &st));
	return st;
}

/* make - sequence id from tokens[0, n): expect `reused`, append the rest,
 * check every value */
static void make(kvf_store *st, uint64_t id, const uint32_t *tokens,
		 uint64_t n, uint64_t reused)
{
	uint64_t got = 12345;

	OK(kvf_seq_create_tokens(st, id, tokens, n, &got));
	cr_assert(eq(u64, got, reused), "sequence %llu", (unsigned long long)id);
	if (got < n)
		OK(px_append(st, id, tokens, got, n));
	cr_assert(px_check(st, id, tokens, n));
}

Test(prefix, longest_prefix_and_divergence)
{
	kvf_store *st = open_small();
	uint32_t a[5 * G + 7], b[5 * G], c[3 * G];
	kvf_stats s = { .struct_size = sizeof(s) };
	kvf_seq_info si = { .struct_size = sizeof(si) };

	px_tokens(a, 5 * G + 7, 1);
	make(st, 1, a, 5 * G + 7, 0);
	/* the first four chunks agree, the fifth not at all */
	memcpy(b, a, 4 * G * sizeof(*b));
	px_tokens(b + 4 * G, G, 2);
	make(st, 2, b, 5 * G, 4 * G);
	/* divergence inside the third group: 5 tokens of it agree */
	memcpy(c, a, (2 * G + 5) * sizeof(*c));
	px_tokens(c + 2 * G + 5, G - 5, 3);
	make(st, 3, c, 3 * G, 2 * G + 5);
	/* a list shorter than a chunk matches inside the first group */
	make(st, 4, a, 9, 9);
	/* the whole list of another sequence, to the token */
	make(st, 5, b, 5 * G, 5 * G);
	/* none of it changed the sequences shared from */
	cr_assert(px_check(st, 1, a, 5 * G + 7));
	cr_assert(px_check(st, 2, b, 5 * G));
	OK(kvf_stats_get(st, &s));
	cr_assert(eq(u64, s.prefix_lookups, 5));
	cr_assert(eq(u64, s.prefix_hits, 4));
	cr_assert(eq(u64, s.prefix_tokens_reused, 4 * G + 2 * G + 5 + 9 + 5 * G));
	cr_assert(eq(u64, s.prefix_bytes_saved,
		     s.prefix_tokens_reused * LAYERS * 2 * KVH * ROW));
	/* chunks: a's 5, b's fifth, c's third: 7 */
	cr_assert(eq(u64, s.prefix_chunks, 7));
	OK(kvf_seq_info_get(st, 2, &si));
	cr_assert(eq(u64, si.prefix_tokens, 5 * G));
	cr_assert(eq(u64, si.prefix_chunks, 5));
	cr_assert(eq(u64, si.prefix_shared_chunks, 5)); /* sequence 5 too */
	cr_assert(si.shared_pages > 0);
	OK(kvf_close(st));
}

Test(prefix, equal_chunks_elsewhere)
{
	kvf_store *st = open_small();
	uint32_t x[G], y[G], xxx[3 * G], yx[2 * G], xxy[3 * G];

	px_tokens(x, G, 10);
	px_tokens(y, G, 11);
	for (int i = 0; i < 3; i++)
		memcpy(xxx + i * G, x, sizeof(x));
	memcpy(yx, y, sizeof(y));
	memcpy(yx + G, x, sizeof(x));
	memcpy(xxy, xxx, 2 * sizeof(x));
	memcpy(xxy + 2 * G, y, sizeof(y));
	make(st, 1, xxx, 3 * G, 0);
	/* X at position 1 after Y is not X at position 1 after X */
	make(st, 2, yx, 2 * G, 0);
	make(st, 3, xxy, 3 * G, 2 * G);
	/* X alone is the first chunk of 1 */
	make(st, 4, x, G, G);
	OK(kvf_close(st));
}

/* every chain hash is 0 or 1: chunks collide all the time, and only the
 * token compare keeps the answers right */
Test(prefix, forced_collisions)
{
	kvf_store *st;
	uint32_t a[4 * G], b[4 * G], c[4 * G];

	prefix_hash_mask = 1;
	st = open_small();
	px_tokens(a, 4 * G, 20);
	px_tokens(b, 4 * G, 21);
	memcpy(c, a, 2 * G * sizeof(*c));
	px_tokens(c + 2 * G, 2 * G, 22);
	make(st, 1, a, 4 * G, 0);
	make(st, 2, b, 4 * G, 0);
	make(st, 3, c, 4 * G, 2 * G);
	make(st, 4, b, 3 * G, 3 * G);
	make(st, 5, c, 4 * G, 4 * G);
	cr_assert(prefix_chain_hash(PREFIX_SEED, a, G) <= 1 &&
		  prefix_chain_hash(PREFIX_SEED, b, G) <= 1);
	OK(kvf_close(st));
	prefix_hash_mask = UINT64_MAX;
}

Test(prefix, add_tokens_and_lengths)
{
	kvf_store *st = open_small();
	uint32_t a[4 * G];
	uint64_t got;

	px_tokens(a, 4 * G, 30);
	OK(kvf_seq_create(st, 1));
	OK(px_append(st, 1, a, 0, 2 * G));
	/* K/V without ids publish nothing */
	OK(kvf_seq_create_tokens(st, 2, a, 4 * G, &got));
	cr_assert(eq(u64, got, 0));
	OK(kvf_seq_free(st, 2));
	/* ids ahead of the K/V: only what every layer holds is published */
	OK(kvf_seq_add_tokens(st, 1, a, G));
	OK(kvf_seq_add_tokens(st, 1, a + G, 3 * G));
	OK(kvf_seq_create_tokens(st, 2, a, 4 * G, &got));
	cr_assert(eq(u64, got, 2 * G));
	OK(kvf_seq_free(st, 2));
	/* one layer ahead of the other: the shorter bounds it */
	{
		size_t row = (size_t)KVH * ROW;
		unsigned char *k = calloc(G, row), *v = calloc(G, row);

		for (uint32_t j = 0; j < G; j++)
			for (uint32_t h = 0; h < KVH; h++)
				for (uint32_t i = 0; i < ROW; i++) {
					k[j * row + h * ROW + i] = px_byte(a[2 * G + j], 2 * G + j, 0, 0, h, i);
					v[j * row + h * ROW + i] = px_byte(a[2 * G + j], 2 * G + j, 0, 1, h, i);
				}
		OK(kvf_append(st, 1, 0, G, k, v));
		free(k);
		free(v);
	}
	OK(kvf_seq_create_tokens(st, 2, a, 4 * G, &got));
	cr_assert(eq(u64, got, 2 * G));
	OK(kvf_seq_free(st, 2));
	OK(kvf_close(st));
}

/* with the cache off (prefix_cache_bytes 0) a freed holder takes its
 * chunks out at once; test_prefix_cache.c has the cache on */
Test(prefix, freed_holder)
{
	kvf_options o = fx_small_opts();
	kvf_store *st;
	uint32_t a[3 * G];
	kvf_stats s = { .struct_size = sizeof(s) };

	o.prefix_cache_bytes = 0;
	OK(kvf_open(fx.path, &o, &st));

	px_tokens(a, 3 * G, 40);
	make(st, 1, a, 3 * G, 0);
	make(st, 2, a, 2 * G, 2 * G);
	/* what an evictor sees: three chunks, the first two held twice */
	{
		struct prefix_chunk_info *ci;
		uint32_t held[3] = { 0 };
		size_t n;

		OK(prefix_chunks(st, &ci, &n));
		cr_assert(eq(sz, n, 3));
		for (size_t i = 0; i < n; i++) {
			cr_assert(lt(u32, ci[i].depth, 3));
			held[ci[i].depth] = ci[i].n_holders;
			cr_assert(ci[i].last_use_ns > 0);
			cr_assert(eq(u64, ci[i].holder, ci[i].depth < 2 ? 2 : 1));
		}
		cr_assert(held[0] == 2 && held[1] == 2 && held[2] == 1);
		kvf_free(ci);
	}
	OK(kvf_seq_free(st, 1));
	/* 2 still holds two chunks; the third went with 1 */
	make(st, 3, a, 3 * G, 2 * G);
	OK(kvf_seq_free(st, 2));
	OK(kvf_seq_free(st, 3));
	OK(kvf_stats_get(st, &s));
	cr_assert(eq(u64, s.prefix_chunks, 0));
	make(st, 4, a, 3 * G, 0);
	OK(kvf_close(st));
}

Test(prefix, reopen)
{
	kvf_store *st = open_small();
	uint32_t a[3 * G + 4], b[3 * G];
	kvf_seq_info si = { .struct_size = sizeof(si) };
	kvf_seq_info si2 = { .struct_size = sizeof(si2) };

	px_tokens(a, 3 * G + 4, 50);
	make(st, 1, a, 3 * G + 4, 0);
	make(st, 2, a, 2 * G, 2 * G);
	OK(kvf_close(st));
	OK(kvf_open(fx.path, NULL, &st));
	cr_assert(px_check(st, 1, a, 3 * G + 4));
	cr_assert(px_check(st, 2, a, 2 * G));
	OK(kvf_seq_info_get(st, 1, &si));
	OK(kvf_seq_info_get(st, 2, &si2));
	cr_assert(eq(u64, si.prefix_tokens, 3 * G + 4));
	cr_assert(eq(u64, si.prefix_chunks, 3));
	cr_assert(eq(u64, si.prefix_shared_chunks, 2));
	cr_assert(eq(u64, si.prefix_hash, si2.prefix_hash));
	cr_assert(si.prefix_hash != 0);
	memcpy(b, a, 3 * G * sizeof(*b));
	b[3 * G - 1] ^= 1;
	make(st, 3, b, 3 * G, 3 * G - 1);
	OK(kvf_close(st));
	/* a read-only open rebuilds it too */
	{
		kvf_options o = fx_small_opts();

		o.read_only = 1;
		OK(kvf_open(fx.path, &o, &st));
		OK(kvf_seq_info_get(st, 3, &si));
		cr_assert(eq(u64, si.prefix_chunks, 3));
		OK(kvf_close(st));
	}
}

/* crash_child - a writer killed after a sync, with appends after it */
static void crash_child(const char *path)
{
	kvf_options o = fx_small_opts();
	uint32_t a[6 * G];
	uint64_t got;
	kvf_store *st;

	px_tokens(a, 6 * G, 60);
	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_seq_create_tokens(st, 1, a, 6 * G, &got));
	CHILD_MUST(px_append(st, 1, a, 0, 3 * G));
	CHILD_MUST(kvf_sync(st));
	CHILD_MUST(px_append(st, 1, a, 3 * G, 6 * G));
	CHILD_MUST(kvf_seq_create_tokens(st, 2, a, 4 * G, &got));
	fx_child_say("S");
	kill(getpid(), SIGKILL);
}

Test(prefix, after_kill)
{
	uint32_t a[6 * G];
	uint64_t len = 0, len2 = 0, got;
	char line[256];
	kvf_store *st;
	int fd, status;
	pid_t pid;

	px_tokens(a, 6 * G, 60);
	pid = fx_spawn(&fd);
	if (pid == 0) {
		crash_child(fx.path);
		_exit(0);
	}
	cr_assert(fx_read_line(fd, line, sizeof(line)));
	cr_assert(eq(str, line, "S"), "child: %s", line);
	free(fx_collect(fd));
	waitpid(pid, &status, 0);
	OK(kvf_open(fx.path, NULL, &st));
	/* what survived of 1 is a prefix of at least the synced 3 G; the
	 * index names only what is there */
	OK(kvf_seq_len(st, 1, 0, &len));
	cr_assert(len >= 3 * G);
	cr_assert(px_check(st, 1, a, len));
	/* 2, a fork of 1, committed its length when it was made */
	OK(kvf_seq_len(st, 2, 0, &len2));
	cr_assert(eq(u64, len2, 4 * G));
	cr_assert(px_check(st, 2, a, len2));
	OK(kvf_seq_create_tokens(st, 3, a, 6 * G, &got));
	cr_assert(got >= 4 * G && got <= (len > len2 ? len : len2),
		  "reused %llu of %llu", (unsigned long long)got,
		  (unsigned long long)len);
	OK(px_append(st, 3, a, got, 6 * G));
	cr_assert(px_check(st, 3, a, 6 * G));
	OK(kvf_close(st));
}

Test(prefix, refusals_change_nothing)
{
	kvf_store *st = open_small();
	uint32_t a[2 * G];
	uint64_t got = 77;
	kvf_stats s0 = { .struct_size = sizeof(s0) }, s1 = s0;

	px_tokens(a, 2 * G, 70);
	make(st, 1, a, 2 * G, 0);
	OK(kvf_stats_get(st, &s0));
	cr_assert(eq(int, kvf_seq_create_tokens(st, 2, a, 2 * G, NULL), KVF_EINVAL));
	fx_has("n_reused is NULL");
	cr_assert(eq(int, kvf_seq_create_tokens(st, 2, NULL, 3, &got), KVF_EINVAL));
	fx_has("tokens is NULL");
	cr_assert(eq(int, kvf_seq_create_tokens(st, UINT64_MAX, a, 3, &got), KVF_EINVAL));
	fx_has("is reserved");
	cr_assert(eq(int, kvf_seq_create_tokens(st, 1, a, 2 * G, &got), KVF_EEXIST));
	fx_has("sequence 1 exists already");
	cr_assert(eq(int, kvf_seq_create_tokens(st, 2, a, PREFIX_MAX_TOKENS + 1, &got),
		     KVF_ERANGE));
	fx_has("at most");
	cr_assert(eq(int, kvf_seq_create_tokens(NULL, 2, a, 3, &got), KVF_EINVAL));
	cr_assert(eq(u64, got, 77));
	cr_assert(eq(int, kvf_seq_add_tokens(st, 9, a, 3), KVF_ENOENT));
	fx_has("sequence 9 does not exist");
	cr_assert(eq(int, kvf_seq_add_tokens(st, 1, NULL, 3), KVF_EINVAL));
	fx_has("tokens is NULL");
	cr_assert(eq(int, kvf_seq_add_tokens(st, 1, a, PREFIX_MAX_TOKENS), KVF_ERANGE));
	fx_has("at most");
	OK(kvf_stats_get(st, &s1));
	cr_assert(eq(u64, s1.prefix_lookups, s0.prefix_lookups));
	cr_assert(eq(u64, s1.prefix_chunks, s0.prefix_chunks));
	cr_assert(eq(u64, s1.n_sequences, 1));
	/* the failed creations left no record: a reopen has one sequence
	 * with its 2 G ids */
	OK(kvf_close(st));
	OK(kvf_open(fx.path, NULL, &st));
	OK(kvf_stats_get(st, &s1));
	cr_assert(eq(u64, s1.n_sequences, 1));
	cr_assert(eq(u64, s1.prefix_chunks, 2));
	OK(kvf_close(st));
	/* read-only */
	{
		kvf_options o = fx_small_opts();

		o.read_only = 1;
		OK(kvf_open(fx.path, &o, &st));
		cr_assert(eq(int, kvf_seq_create_tokens(st, 2, a, 3, &got), KVF_ENOTSUP));
		cr_assert(eq(int, kvf_seq_add_tokens(st, 1, a, 3), KVF_ENOTSUP));
		OK(kvf_close(st));
	}
}

/* power_child - the writer of power_cut: journals its writes, syncs
 * 3 G tokens of 1, then goes on (2 shares from 1) until killed */
static void power_child(const char *path, const char *journal)
{
	kvf_options o = fx_small_opts();
	uint32_t a[6 * G];
	uint64_t got;
	kvf_store *st;

	px_tokens(a, 6 * G, 80);
	if (powercut_arm(journal, path) != 0) {
		fx_child_say("E powercut_arm: %s", strerror(errno));
		_exit(3);
	}
	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_seq_create_tokens(st, 1, a, 6 * G, &got));
	CHILD_MUST(px_append(st, 1, a, 0, 3 * G));
	CHILD_MUST(kvf_sync(st));
	fx_child_say("S");
	CHILD_MUST(px_append(st, 1, a, 3 * G, 5 * G));
	CHILD_MUST(kvf_seq_create_tokens(st, 2, a, 6 * G, &got));
	CHILD_MUST(px_append(st, 2, a, got, 6 * G));
	CHILD_MUST(px_append(st, 1, a, 5 * G, 6 * G));
	kill(getpid(), SIGKILL);
}

/* the power fails under a writer after its sync: at reopen every sequence
 * holds at least what was synced, exactly, and the index offers no chunk
 * the store lost */
Test(prefix, power_cut)
{
	uint32_t a[6 * G];
	struct powercut_stats cs;
	uint64_t seed = 0x5eed, cut = 0, reverted = 0;

	px_tokens(a, 6 * G, 80);
	for (int r = 0; r < 12; r++) {
		char path[4096], journal[4096], why[300], line[256];
		uint64_t len = 0, best = 0, got;
		kvf_store *st;
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
		if (r % 3)
			fx_sleep_us(1000u * (unsigned)r);
		kill(pid, SIGKILL);
		free(fx_collect(fd));
		waitpid(pid, &status, 0);
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		cr_assert(powercut_apply(journal, seed, &cs, why, sizeof(why)) == 0,
			  "%s", why);
		cut += cs.pages;
		reverted += cs.reverted + cs.torn;
		OK(kvf_open(path, NULL, &st));
		OK(kvf_seq_len(st, 1, 0, &len));
		cr_assert(len >= 3 * G, "round %d: %llu tokens", r,
			  (unsigned long long)len);
		cr_assert(px_check(st, 1, a, len), "round %d", r);
		best = len;
		if (kvf_seq_len(st, 2, 0, &len) == KVF_OK) {
			cr_assert(px_check(st, 2, a, len), "round %d", r);
			best = len > best ? len : best;
		}
		OK(kvf_seq_create_tokens(st, 3, a, 6 * G, &got));
		cr_assert(got >= 3 * G && got <= best, "round %d: reused %llu, %llu held",
			  r, (unsigned long long)got, (unsigned long long)best);
		OK(px_append(st, 3, a, got, 6 * G));
		cr_assert(px_check(st, 3, a, 6 * G), "round %d", r);
		OK(kvf_close(st));
	}
	/* the cuts did lose writes */
	cr_assert(cut > 0 && reverted > 0, "%llu unsynced pages, %llu lost",
		  (unsigned long long)cut, (unsigned long long)reverted);
}
