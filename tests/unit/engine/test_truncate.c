/*
 * test_truncate.c - kvf_seq_truncate and kvf_append_at.
 *
 * Refusals on the filled store (store_fixture.h): status, message, store
 * unchanged.  Cuts at every kind of point (inside the tail group, in a
 * group waiting for write-back or in an open segment, on a group
 * boundary, to 0), with the memory tier on and off: the kept tokens read
 * back, appends continue at the cut with other values, and both survive
 * a sync and a reopen, a group sealed again before its open segment
 * flushed among them.  Sharing: a fork and a prefix sharer keep every
 * token when the sequence they share with is cut, and the prefix index
 * stops offering the chunks cut off.  Crashes: a killed writer's cut of
 * synced tokens is in the catalog; a cut of unsynced tokens changes
 * nothing the store promised.  Room: the pages cut off are reused.
 * Speculative decoding: draft tokens appended, attended, cut and replaced
 * give bitwise the attention of a run that never saw them (dense; SparF
 * on a store with K^T pages within 1e-6, as its mean of V is summed
 * again).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "store_fixture.h"
#include "testutil.h"

TestSuite(truncate, .init = fx_setup, .fini = fx_teardown, .timeout = 60);
TestSuite(truncate_rt, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 120);

/* ---- refusals ------------------------------------------------------------- */

Test(truncate, refusals)
{
	REFUSED(kvf_seq_truncate(NULL, 1, 0), KVF_EINVAL,
		"kvf_seq_truncate: store is NULL");
	REFUSED(kvf_seq_truncate(fx.st, 3, 0), KVF_ENOENT,
		"kvf_seq_truncate: sequence 3 does not exist");
	/* layer 1 of sequence 1 has 70 tokens: the shortest layer bounds it */
	REFUSED(kvf_seq_truncate(fx.st, 1, 71), KVF_ERANGE,
		"n_tokens 71 past the end of sequence 1 (layer 1 has 70 tokens)");
	REFUSED(kvf_seq_truncate(fx.st, 1, UINT64_MAX), KVF_ERANGE,
		"past the end");
	REFUSED(kvf_seq_truncate(fx.st, 2, 51), KVF_ERANGE,
		"past the end of sequence 2 (layer 1 has 50 tokens)");
}

Test(truncate, append_at_refusals)
{
	unsigned char kv[KVH * ROW] = { 0 };
	uint64_t len;

	OK(kvf_seq_len(fx.st, 1, 1, &len));
	REFUSED(kvf_append_at(fx.st, 1, 1, len - 1, 1, kv, kv), KVF_ERANGE,
		"kvf_append_at: layer 1 of sequence 1 holds 70 tokens, not the position 69 the append expects");
	REFUSED(kvf_append_at(fx.st, 1, 1, len + 1, 1, kv, kv), KVF_ERANGE,
		"holds 70 tokens, not the position 71");
	REFUSED(kvf_append_at(fx.st, 1, 1, 0, 0, kv, kv), KVF_ERANGE,
		"not the position 0");
	REFUSED(kvf_append_at(fx.st, 3, 0, 0, 1, kv, kv), KVF_ENOENT,
		"sequence 3 does not exist");
	REFUSED(kvf_append_at(fx.st, 1, 2, 0, 1, kv, kv), KVF_ERANGE,
		"layer 2 out of range");
	REFUSED(kvf_append_at(NULL, 1, 0, 0, 1, kv, kv), KVF_EINVAL,
		"store is NULL");
	/* the right position appends, as does KVF_POS_ANY */
	OK(kvf_append_at(fx.st, 1, 1, len, 1, kv, kv));
	OK(kvf_append_at(fx.st, 1, 1, KVF_POS_ANY, 1, kv, kv));
	OK(kvf_seq_len(fx.st, 1, 1, &len));
	cr_assert(eq(u64, len, 72));
}

Test(truncate, read_only)
{
	kvf_options o;
	kvf_store *ro = NULL;

	OK(kvf_close(fx.st));
	fx.st = NULL;
	kvf_options_init(&o, NULL);
	o.read_only = 1;
	OK(kvf_open(fx.path, &o, &ro));
	fx.st = ro;
	REFUSED(kvf_seq_truncate(ro, 1, 10), KVF_ENOTSUP, "open read-only");
	cr_assert(eq(int, kvf_append_at(ro, 1, 0, 0, 1, "", ""), KVF_ENOTSUP));
}

/* The filled store's fork: a cut takes its own tokens of layer 0 and
 * keeps what it shares with its parent; the parent's cut leaves it whole */
Test(truncate, filled_store)
{
	uint64_t len;

	OK(kvf_seq_truncate(fx.st, 2, 50));
	for (uint32_t l = 0; l < LAYERS; l++) {
		OK(kvf_seq_len(fx.st, 2, l, &len));
		cr_assert(eq(u64, len, 50));
	}
	OK(kvf_seq_truncate(fx.st, 1, 3));
	OK(kvf_seq_len(fx.st, 1, 0, &len));
	cr_assert(eq(u64, len, 3));
	OK(kvf_seq_x_len(fx.st, 1, 0, &len));
	cr_assert(eq(u64, len, 3));
	fx_check_tokens(fx.st, 1, 1, 0, 0, 3);
	fx_check_tokens(fx.st, 2, 1, 0, 0, 50);
	fx_check_tokens(fx.st, 2, 1, 1, 0, 50);
}

/* ---- cuts at every kind of point ---------------------------------------- */

#define OTHER 77 /* values appended after a cut */

static kvf_store *open_rt(uint64_t budget)
{
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;

	o.dram_budget = budget;
	OK(kvf_open(fx.path, &o, &st));
	return st;
}

/* check_seq - seq holds its own values below cut and OTHER's from cut to
 * len on both layers (X: its own below x_cut) */
static void check_seq(kvf_store *st, uint64_t seq, uint64_t cut, uint64_t len,
		      uint64_t x_cut)
{
	uint64_t n;

	for (uint32_t l = 0; l < LAYERS; l++) {
		OK(kvf_seq_len(st, seq, l, &n));
		cr_assert(eq(u64, n, len), "layer %u", l);
		fx_check_tokens(st, seq, seq, l, 0, cut);
		if (len > cut)
			fx_check_tokens(st, seq, OTHER, l, cut, len);
	}
	OK(kvf_seq_x_len(st, seq, 0, &n));
	cr_assert(eq(u64, n, x_cut));
	OK(fx_read_x_check(st, seq, 0, 0, x_cut));
}

/* one_cut - a sequence of `len` tokens (synced up to `synced`), cut to
 * `cut`, then `more` tokens of OTHER; checked, synced, reopened, checked */
static void one_cut(uint64_t budget, uint64_t synced, uint64_t len,
		    uint64_t cut, uint32_t more)
{
	kvf_store *st = open_rt(budget);
	uint64_t id = 1000 + synced * 7 + len * 3 + cut + more, x = len / 2;

	OK(kvf_seq_create(st, id));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, id, id, l, 0, (uint32_t)synced));
	OK(fx_append_x(st, id, 0, 0, (uint32_t)(x < synced ? x : synced)));
	OK(kvf_sync(st));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, id, id, l, synced, (uint32_t)(len - synced)));
	if (x > synced)
		OK(fx_append_x(st, id, 0, synced, (uint32_t)(x - synced)));
	OK(kvf_seq_truncate(st, id, cut));
	check_seq(st, id, cut, cut, x < cut ? x : cut);
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, id, OTHER, l, cut, more));
	check_seq(st, id, cut, cut + more, x < cut ? x : cut);
	OK(kvf_sync(st));
	OK(kvf_close(st));
	st = open_rt(budget);
	fx.st = st;
	check_seq(st, id, cut, cut + more, x < cut ? x : cut);
	OK(kvf_seq_free(st, id));
	OK(kvf_close(st));
	fx.st = NULL;
}

Test(truncate_rt, every_point)
{
	/* (synced, length, cut): inside the tail group; in the group before
	 * it (waiting for write-back or in an open segment); on a boundary;
	 * below what a sync covered; to nothing; a long way back */
	static const uint64_t cases[][4] = {
		{ 0, 3 * G + 9, 3 * G + 4, 1 },
		{ G, 3 * G + 9, 2 * G + 5, G - 4 },
		{ G, 3 * G + 9, 2 * G + 5, 0 },
		{ 2 * G + 7, 3 * G + 9, 2 * G + 20, 0 },
		{ 2 * G + 7, 3 * G + 9, 2 * G + 20, 1 },
		{ 2 * G + 7, 3 * G + 9, 2 * G + 3, 2 },
		{ 0, 3 * G + 9, 2 * G, G },
		{ 2 * G + 7, 3 * G + 1, G + 3, 3 * G + 2 },
		{ 3 * G + 5, 3 * G + 9, 0, 1 },
		{ 40 * G + 3, 41 * G, 5 * G + 31, G - 4 },
		{ 5, 40 * G, 39 * G + 1, 1 },
		{ 2 * G, 2 * G, 2 * G, G },
	};

	for (int tier = 0; tier < 2; tier++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			one_cut(tier ? 0 : (64u << 20), cases[i][0], cases[i][1],
				cases[i][2], (uint32_t)cases[i][3]);
}

/*
 * A group placed in an open segment by a long append, cut and sealed anew
 * by a short one before any flush: the new page waits for write-back and
 * goes out in a run on the other stripe (31 groups past the run's own).
 * Both open segments commit at the sync; a reopen must find the new page
 * of every head, whichever stripe commits first.
 */
Test(truncate_rt, group_sealed_again_before_a_flush)
{
	kvf_options o = fx_options(64ull << 20, 2);
	kvf_store *st = NULL;
	uint64_t id = 7, cut = 31 * G + 5;

	o.segment_size = 1u << 20;
	o.dram_budget = 64u << 20;
	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_seq_create(st, id));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, id, id, l, 0, 32 * G));
	OK(kvf_seq_truncate(st, id, cut));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, id, OTHER, l, cut, G - 5));
	check_seq(st, id, cut, 32 * G, 0);
	OK(kvf_sync(st));
	OK(kvf_close(st));
	OK(kvf_open(fx.path, &o, &st));
	fx.st = st;
	check_seq(st, id, cut, 32 * G, 0);
}

/* ---- sharing ------------------------------------------------------------ */

Test(truncate_rt, fork_keeps_its_tokens)
{
	kvf_store *st = open_rt(64u << 20);

	fx.st = st;
	OK(kvf_seq_create(st, 1));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, 1, 1, l, 0, 4 * G + 5));
	OK(kvf_seq_fork(st, 1, 2, 4 * G + 5));
	/* the cut falls in a group both share */
	OK(kvf_seq_truncate(st, 1, G + 3));
	for (uint32_t l = 0; l < LAYERS; l++) {
		fx_check_tokens(st, 2, 1, l, 0, 4 * G + 5);
		OK(fx_append(st, 1, OTHER, l, G + 3, 3 * G));
	}
	OK(kvf_seq_truncate(st, 2, 2 * G)); /* and the other way */
	for (uint32_t l = 0; l < LAYERS; l++) {
		fx_check_tokens(st, 1, 1, l, 0, G + 3);
		fx_check_tokens(st, 1, OTHER, l, G + 3, 4 * G + 3);
		fx_check_tokens(st, 2, 1, l, 0, 2 * G);
	}
	OK(kvf_sync(st));
	OK(kvf_close(st));
	st = open_rt(64u << 20);
	fx.st = st;
	for (uint32_t l = 0; l < LAYERS; l++) {
		fx_check_tokens(st, 1, 1, l, 0, G + 3);
		fx_check_tokens(st, 1, OTHER, l, G + 3, 4 * G + 3);
		fx_check_tokens(st, 2, 1, l, 0, 2 * G);
	}
	OK(kvf_seq_free(st, 1));
	fx_check_tokens(st, 2, 1, 0, 0, 2 * G);
}

Test(truncate_rt, prefix_chunks_cut_off_are_not_offered)
{
	uint32_t ids[4 * G];
	uint64_t reused = 0;
	kvf_store *st = open_rt(64u << 20);
	kvf_stats s = { .struct_size = sizeof(s) };

	fx.st = st;
	for (uint32_t i = 0; i < 4 * G; i++)
		ids[i] = 1000 + i;
	OK(kvf_seq_create_tokens(st, 1, ids, 4 * G, &reused));
	cr_assert(eq(u64, reused, 0));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, 1, 1, l, 0, 4 * G));
	OK(kvf_stats_get(st, &s));
	cr_assert(eq(u64, s.prefix_chunks, 4));
	OK(kvf_seq_create_tokens(st, 2, ids, 4 * G, &reused));
	cr_assert(eq(u64, reused, 4 * G));
	/* the sharer is cut: the sequence it shares from is whole */
	OK(kvf_seq_truncate(st, 2, G + 5));
	fx_check_tokens(st, 1, 1, 0, 0, 4 * G);
	OK(kvf_seq_free(st, 2));
	/* the holder is cut: only its first chunk is offered now */
	OK(kvf_seq_truncate(st, 1, G + 5));
	OK(kvf_stats_get(st, &s));
	cr_assert(eq(u64, s.prefix_chunks, 1));
	OK(kvf_seq_create_tokens(st, 3, ids, 4 * G, &reused));
	cr_assert(eq(u64, reused, G));
	fx_check_tokens(st, 3, 1, 0, 0, G);
	/* other K/V after the cut, and its ids registered: offered again,
	 * and a reopen brings the cut ids back as they are now */
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, 1, OTHER, l, G + 5, 3 * G - 5));
	for (uint32_t i = G + 5; i < 4 * G; i++)
		ids[i] = 5000 + i;
	OK(kvf_seq_add_tokens(st, 1, ids + G + 5, 3 * G - 5));
	OK(kvf_close(st));
	st = open_rt(64u << 20);
	fx.st = st;
	OK(kvf_seq_create_tokens(st, 4, ids, 4 * G, &reused));
	cr_assert(eq(u64, reused, 4 * G));
	fx_check_tokens(st, 4, 1, 0, 0, G + 5);
	fx_check_tokens(st, 4, OTHER, 0, G + 5, 4 * G);
}

/* ---- room --------------------------------------------------------------- */

Test(truncate_rt, room_is_given_back)
{
	kvf_store *st = open_rt(0);
	kvf_stats a = { .struct_size = sizeof(a) }, b = a;
	int rounds = 0;

	fx.st = st;
	OK(kvf_seq_create(st, 1));
	/* a small store filled again and again by one sequence that is cut
	 * back each time: without the room given back it fills up */
	for (; rounds < 12; rounds++) {
		for (uint32_t l = 0; l < LAYERS; l++)
			OK(fx_append(st, 1, 1, l, G, 20 * G + 7));
		OK(kvf_sync(st));
		OK(kvf_stats_get(st, &a));
		OK(kvf_seq_truncate(st, 1, G));
		OK(kvf_sync(st));
		OK(kvf_stats_get(st, &b));
		cr_assert(lt(u64, b.live_pages, a.live_pages / 10),
			  "live pages %llu before the cut, %llu after",
			  (unsigned long long)a.live_pages,
			  (unsigned long long)b.live_pages);
	}
	cr_assert(b.host_bytes_written > (8u << 20),
		  "wrote more than the store holds");
}

/* ---- crashes ------------------------------------------------------------ */

/* killed_cut - a child makes sequence 1 (synced `synced`, appended to
 * `len`), cuts it to `cut`, appends `more` of OTHER and is killed */
static void killed_cut(uint64_t synced, uint64_t len, uint64_t cut,
		       uint32_t more)
{
	int fd, status, killed;
	pid_t pid = fx_spawn(&fd);

	if (pid == 0) {
		kvf_options o = fx_small_opts();
		kvf_store *st = NULL;

		CHILD_MUST(kvf_open(fx.path, &o, &st));
		CHILD_MUST(kvf_seq_create(st, 1));
		for (uint32_t l = 0; l < LAYERS; l++)
			CHILD_MUST(fx_append(st, 1, 1, l, 0, (uint32_t)synced));
		CHILD_MUST(kvf_sync(st));
		for (uint32_t l = 0; l < LAYERS; l++)
			CHILD_MUST(fx_append(st, 1, 1, l, synced,
					     (uint32_t)(len - synced)));
		CHILD_MUST(kvf_seq_truncate(st, 1, cut));
		for (uint32_t l = 0; l < LAYERS; l++)
			CHILD_MUST(fx_append(st, 1, OTHER, l, cut, more));
		fx_child_say("D");
		raise(SIGKILL);
	}
	free(fx_collect(fd));
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	killed = WIFSIGNALED(status);
	cr_assert(killed, "the child failed");
}

Test(truncate_rt, killed_after_a_cut_of_synced_tokens)
{
	kvf_store *st;
	uint64_t n;

	/* synced 3G + 9, cut to G + 3: in the catalog at once, and what
	 * was appended after it was never synced */
	killed_cut(3 * G + 9, 3 * G + 9, G + 3, 2 * G);
	st = open_rt(64u << 20);
	fx.st = st;
	for (uint32_t l = 0; l < LAYERS; l++) {
		OK(kvf_seq_len(st, 1, l, &n));
		cr_assert(eq(u64, n, G + 3), "layer %u: %llu tokens", l,
			  (unsigned long long)n);
		fx_check_tokens(st, 1, 1, l, 0, G + 3);
		/* and it grows from there */
		OK(fx_append(st, 1, OTHER, l, G + 3, G));
		fx_check_tokens(st, 1, OTHER, l, G + 3, 2 * G + 3);
	}
}

Test(truncate_rt, killed_after_a_cut_of_unsynced_tokens)
{
	kvf_store *st;
	uint64_t n;

	/* synced 2G + 7, then 3G more, cut to 3G + 1 (above the sync) and
	 * 2G of other values: none of it was synced, the sync's state is
	 * what comes back (pages past it may have reached the media; their
	 * tokens must not show) */
	killed_cut(2 * G + 7, 5 * G + 7, 3 * G + 1, 2 * G);
	st = open_rt(64u << 20);
	fx.st = st;
	for (uint32_t l = 0; l < LAYERS; l++) {
		OK(kvf_seq_len(st, 1, l, &n));
		cr_assert(eq(u64, n, 2 * G + 7), "layer %u: %llu tokens", l,
			  (unsigned long long)n);
		fx_check_tokens(st, 1, 1, l, 0, 2 * G + 7);
	}
}

/* ---- speculative decoding ---------------------------------------------- */

#define SD_LAYERS 2
#define SD_QH 4
#define SD_KVH 2
#define SD_DIM 64
#define SD_STEPS 40
#define SD_PROMPT 45

/* sd_row - the K or V row (f32) of token t of the accepted text, or of a
 * rejected draft when draft != 0 */
static void sd_rows(float *k, float *v, uint32_t layer, uint64_t t,
		    uint64_t draft)
{
	for (uint32_t h = 0; h < SD_KVH; h++)
		for (uint32_t d = 0; d < SD_DIM; d++) {
			uint64_t s = ((t * 31 + layer) * 17 + h) * 131 + d +
				     draft * 7777777;

			k[h * SD_DIM + d] = (float)((s * 2654435761u) % 2001) / 1000.0f - 1.0f;
			v[h * SD_DIM + d] = (float)((s * 40503u) % 1999) / 999.0f - 1.0f;
		}
}

static kvf_store *sd_open(const char *name, int kt)
{
	kvf_model m = { SD_LAYERS, SD_QH, SD_KVH, SD_DIM, KVF_DTYPE_F32 };
	kvf_options o;
	kvf_store *st = NULL;
	char path[512];

	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.capacity_bytes = 64u << 20;
	o.segment_size = 64 * 1024;
	o.kt_pages = (uint32_t)kt;
	o.n_threads = 1;
	snprintf(path, sizeof(path), "%s/%s", fx.dir, name);
	OK(kvf_open(path, &o, &st));
	return st;
}

static void sd_append(kvf_store *st, uint64_t t0, uint32_t n, uint64_t draft)
{
	float k[SD_KVH * SD_DIM * 8], v[SD_KVH * SD_DIM * 8];

	cr_assert(le(u32, n, 8));
	for (uint32_t l = 0; l < SD_LAYERS; l++) {
		for (uint32_t i = 0; i < n; i++)
			sd_rows(k + i * SD_KVH * SD_DIM, v + i * SD_KVH * SD_DIM,
				l, t0 + i, draft);
		OK(kvf_append_at(st, 1, l, t0, n, k, v));
	}
}

static void sd_attend(kvf_store *st, uint64_t step, int sparse, float *out)
{
	float q[SD_QH * SD_DIM];
	kvf_attn_opts a;

	kvf_attn_opts_init(&a);
	a.sparse = (uint32_t)sparse;
	for (uint32_t i = 0; i < SD_QH * SD_DIM; i++)
		q[i] = sinf((float)(step * 97 + i)) * 2.0f;
	for (uint32_t l = 0; l < SD_LAYERS; l++)
		OK(kvf_attend(st, 1, l, q, out + l * SD_QH * SD_DIM,
			      sparse ? &a : NULL));
}

/* speculate - a store that drafts k tokens a step (attending them), keeps
 * `accept` of them and cuts the rest, and a store that only ever sees
 * the accepted tokens, attend bitwise alike after every step */
static void speculate(int sparse)
{
	kvf_store *spec = sd_open(sparse ? "spec-kt" : "spec", sparse);
	kvf_store *plain = sd_open(sparse ? "plain-kt" : "plain", sparse);
	float a[SD_LAYERS * SD_QH * SD_DIM], b[SD_LAYERS * SD_QH * SD_DIM];
	uint64_t len = SD_PROMPT, rng = 12345;

	OK(kvf_seq_create(spec, 1));
	OK(kvf_seq_create(plain, 1));
	for (uint64_t t = 0; t < SD_PROMPT; t += 5) {
		sd_append(spec, t, 5, 0);
		sd_append(plain, t, 5, 0);
	}
	for (uint64_t step = 1; step <= SD_STEPS; step++) {
		uint32_t k = 1 + (uint32_t)(rng % 7), accept;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		accept = (uint32_t)((rng >> 33) % (k + 1));
		/* the drafts: the accepted ones carry the text's values */
		sd_append(spec, len, accept, 0);
		if (k > accept)
			sd_append(spec, len + accept, k - accept, step);
		sd_attend(spec, step * 2, sparse, a); /* the verification */
		OK(kvf_seq_truncate(spec, 1, len + accept));
		/* the corrected token follows the accepted drafts */
		sd_append(spec, len + accept, 1, 0);
		sd_append(plain, len, accept + 1, 0);
		len += accept + 1;
		sd_attend(spec, step * 2 + 1, sparse, a);
		sd_attend(plain, step * 2 + 1, sparse, b);
		if (sparse) {
			/* SparF folds (1 - alpha) * mean(V) in: the cut
			 * sequence's mean is summed again from its pages, in
			 * another order than the other's, appended a few
			 * tokens at a time */
			for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
				cr_assert(le(dbl, fabs((double)a[i] - b[i]),
					     1e-6 * (1 + fabs((double)b[i]))),
					  "step %llu element %zu: %g and %g",
					  (unsigned long long)step, i,
					  (double)a[i], (double)b[i]);
			continue;
		}
		cr_assert(eq(int, memcmp(a, b, sizeof(a)), 0),
			  "step %llu (%u drafts, %u accepted): the outputs differ",
			  (unsigned long long)step, k, accept);
	}
	OK(kvf_close(spec));
	OK(kvf_close(plain));
}

Test(truncate_rt, speculative_decoding_dense)
{
	speculate(0);
}

Test(truncate_rt, speculative_decoding_sparf)
{
	speculate(1);
}
