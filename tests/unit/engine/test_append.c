/*
 * test_append.c - kvf_append and kvf_append_x on the filled store
 * (store_fixture.h): refusals with nothing changed, appends of zero
 * tokens, KVF_ENOSPC on a tiny store (and room again once a sequence is
 * freed), and allocation failure injection (api/alloc.h) across groups and
 * a segment flush, on a sequence and on a fork: KVF_ENOMEM with nothing
 * changed, or KVF_EFATAL with the last sync back after a reopen.  The
 * good path (suite append_round_trip, on a store of its own): prefill and
 * decode appends read back from group buffers, open segments and media,
 * across a sync and a reopen.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(append, .init = fx_setup, .fini = fx_teardown, .timeout = 60);
TestSuite(append_round_trip, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 60);

#define RT_LAYERS 3 /* the round trip's store */

Test(append, append)
{
	unsigned char k[KVH * ROW], v[KVH * ROW];

	memset(k, 1, sizeof(k));
	memset(v, 2, sizeof(v));
	REFUSED(kvf_append(NULL, 1, 0, 1, k, v), KVF_EINVAL,
		"kvf_append: store is NULL");
	REFUSED(kvf_append(fx.st, 1, LAYERS, 1, k, v), KVF_ERANGE,
		"kvf_append: layer 2 out of range (store has 2 layers)");
	REFUSED(kvf_append(fx.st, 1, 0, 1, NULL, v), KVF_EINVAL,
		"kvf_append: the first buffer is NULL");
	REFUSED(kvf_append(fx.st, 1, 0, 1, k, NULL), KVF_EINVAL,
		"kvf_append: the second buffer is NULL");
	REFUSED(kvf_append(fx.st, 3, 0, 1, k, v), KVF_ENOENT,
		"kvf_append: sequence 3 does not exist");
	REFUSED(kvf_append(fx.st, 3, 0, 0, NULL, NULL), KVF_ENOENT,
		"sequence 3 does not exist");
	{
		/* zero tokens with no buffers is a successful no-op */
		struct fx_digest a = fx_digest_of(fx.st), b;

		OK(kvf_append(fx.st, 1, 0, 0, NULL, NULL));
		OK(kvf_append(fx.st, 2, 1, 0, k, v));
		b = fx_digest_of(fx.st);
		fx_digest_same(&a, &b, "append of 0 tokens");
	}
}

Test(append, append_x)
{
	unsigned char x[QH * ROW];

	memset(x, 3, sizeof(x));
	REFUSED(kvf_append_x(NULL, 1, 0, 1, x), KVF_EINVAL,
		"kvf_append_x: store is NULL");
	REFUSED(kvf_append_x(fx.st, 1, LAYERS, 1, x), KVF_ERANGE,
		"kvf_append_x: layer 2 out of range (store has 2 layers)");
	REFUSED(kvf_append_x(fx.st, 1, 0, 1, NULL), KVF_EINVAL,
		"kvf_append_x: the first buffer is NULL");
	REFUSED(kvf_append_x(fx.st, 4, 1, 1, x), KVF_ENOENT,
		"kvf_append_x: sequence 4 does not exist");
}

/* ---- KVF_ENOSPC ---------------------------------------------------------- */

/* digest_same_data - as digest_same, but host_bytes_written may move:
 * the cleaner may copy pages while trying to make room */
static void digest_same_data(struct fx_digest a, struct fx_digest b, const char *what)
{
	a.host_bytes_written = b.host_bytes_written;
	fx_digest_same(&a, &b, what);
}

Test(append, enospc_changes_nothing)
{
	kvf_options o = fx_filled_opts();
	kvf_store *t = NULL;
	uint64_t len[3] = { 0, 0, 0 };
	unsigned char x[QH * ROW];
	struct fx_digest before, after;
	kvf_status rc = KVF_OK;
	int appends = 0;

	o.segment_size = 16 * 1024; /* 4 pages: 3 data pages and a summary */
	o.capacity_bytes = 2ull * 8 * 16 * 1024;
	o.dram_budget = 0; /* pages placed as they fill (test_tier.c has the
			    * same with write-back) */
	OK(kvf_open(tmp_path(fx.dir, "tiny"), &o, &t));
	OK(kvf_seq_create(t, 1));
	OK(kvf_seq_create(t, 2));
	/* whole groups only, so a sync has no partial group to write; until
	 * neither sequence finds room */
	for (int full = 0; full != 3 && appends < 1000;) {
		full = 0;
		for (uint64_t s = 1; s <= 2; s++) {
			rc = fx_append(t, s, s, 0, len[s], G);
			if (rc == KVF_ENOSPC) {
				full |= 1 << (s - 1);
				continue;
			}
			cr_assert(eq(int, rc, KVF_OK), "%s", kvf_last_error());
			len[s] += G;
			appends++;
		}
	}
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	cr_assert(appends > 4, "only %d appends fit", appends);
	cr_assert(strstr(kvf_last_error(), "kvf_append: sequence 2") &&
			  strstr(kvf_last_error(), "free sequences or optimizers and retry"),
		  "%s", kvf_last_error());
	before = fx_digest_of(t);
	rc = fx_append(t, 1, 1, 0, len[1], G);
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	rc = fx_append(t, 2, 2, 0, len[2], 3 * G + 1);
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	rc = fx_append_x(t, 1, 0, 0, G);
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), "kvf_append_x: sequence 1") != NULL,
		  "%s", kvf_last_error());
	after = fx_digest_of(t);
	digest_same_data(before, after, "refused appends");
	/* a token that fits in a group buffer needs no segment */
	memset(x, 7, sizeof(x));
	OK(kvf_append(t, 1, 0, 1, x, x));
	OK(kvf_append(t, 1, 1, 1, x, x));
	before.len[0][0]++;
	before.len[0][1]++;
	before.user_bytes += 4 * KVH * ROW;
	after = fx_digest_of(t);
	before.hash = after.hash;
	digest_same_data(before, after, "appends into group buffers");
	cr_assert(eq(u64, after.len[0][0], len[1] + 1));
	cr_assert(eq(u64, after.len[1][0], len[2]));

	/* sync needs a page for the partial groups now, and there is none */
	rc = kvf_sync(t);
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());

	/* free a sequence, sync: its segments come back */
	OK(kvf_seq_free(t, 2));
	OK(kvf_sync(t));
	len[1]++;
	OK(fx_append(t, 1, 1, 0, len[1], G));
	len[1] += G;
	OK(fx_append_x(t, 1, 0, 0, 1));
	OK(kvf_seq_create(t, 3));
	OK(fx_append(t, 3, 3, 0, 0, 1));
	after = fx_digest_of(t);
	cr_assert(eq(u64, after.len[0][0], len[1]));
	cr_assert(eq(u64, after.len[2][0], 1));
	cr_assert(eq(int, after.exists[1], 0));
	/* the partial groups would not fit at close: drop them */
	OK(kvf_seq_free(t, 1));
	OK(kvf_seq_free(t, 3));
	OK(kvf_close(t));
}

/*
 * append_oom - append 7G+3 tokens to layer 0 of seq (at len0, values of
 * data_seq) with the nth allocation failing (and all later ones, if
 * sticky), n = 1, 2, ... until it succeeds.  Each refusal is KVF_ENOMEM
 * with nothing changed; or KVF_EFATAL (a segment was written but its
 * record could not be made), after which a reopen gives the last sync
 * back.  What was appended reads back, also after a reopen.
 */
static void append_oom(uint64_t seq, uint64_t data_seq, uint64_t len0,
		       int sticky)
{
	const uint32_t n_tok = 7 * G + 3;
	int si = seq == 1 ? 0 : seq == 2 ? 1 : 2;
	struct fx_digest d0, d1;
	kvf_status rc = KVF_ENOMEM;

	OK(kvf_sync(fx.st));
	d0 = fx_digest_of(fx.st);
	cr_assert(eq(u64, d0.len[si][0], len0));
	for (uint64_t n = 1; n < 1000 && rc != KVF_OK; n++) {
		kvf_alloc_fail_at(n, sticky);
		/* across groups and a segment flush, with a tail to load */
		rc = fx_append(fx.st, seq, data_seq, 0, len0, n_tok);
		kvf_alloc_fail_at(0, 0);
		if (rc == KVF_OK)
			break;
		if (rc == KVF_EFATAL) {
			cr_assert(strstr(kvf_last_error(),
					 "close and reopen") != NULL,
				  "%s", kvf_last_error());
			cr_assert(eq(int, kvf_sync(fx.st), KVF_EFATAL));
			OK(kvf_close(fx.st));
			OK(kvf_open(fx.path, NULL, &fx.st));
			d1 = fx_digest_of(fx.st);
			d1.host_bytes_written = d0.host_bytes_written;
			fx_digest_same(&d0, &d1, "reopen after a fatal append");
			d0 = fx_digest_of(fx.st);
			continue;
		}
		cr_assert(eq(int, rc, KVF_ENOMEM),
			  "allocation %" PRIu64 " failing gave %d: %s", n, rc,
			  kvf_last_error());
		d1 = fx_digest_of(fx.st);
		d1.host_bytes_written = d0.host_bytes_written;
		fx_digest_same(&d0, &d1, "refused append");
	}
	cr_assert(eq(int, rc, KVF_OK), "the append never succeeded");
	for (int reopen = 0; reopen < 2; reopen++) {
		unsigned char *k = malloc((size_t)(len0 + n_tok) * ROW),
			      *v = malloc((size_t)(len0 + n_tok) * ROW);

		if (reopen) {
			OK(kvf_close(fx.st));
			OK(kvf_open(fx.path, NULL, &fx.st));
		}
		d1 = fx_digest_of(fx.st);
		cr_assert(eq(u64, d1.len[si][0], len0 + n_tok));
		for (uint32_t h = 0; h < KVH; h++) {
			OK(kvf_read(fx.st, seq, 0, h, 0, len0 + n_tok, k, v));
			for (uint64_t i = 0; i < len0 + n_tok; i++) {
				/* a fork's prefix has its parent's values */
				uint64_t ds =
					i < len0 ?
						(seq == 2 && i < 50 ? 1 : seq) :
						data_seq;

				for (uint32_t b = 0; b < ROW; b++) {
					cr_assert(
						eq(u8, k[i * ROW + b],
						   fx_byte(ds, 0, 0, i, h, b)));
					cr_assert(
						eq(u8, v[i * ROW + b],
						   fx_byte(ds, 0, 1, i, h, b)));
				}
			}
		}
		free(k);
		free(v);
	}
}

/* a tail group to extend (164 tokens, 4 in the tail), every allocation
 * from the nth failing */
Test(append, append_out_of_memory)
{
	append_oom(1, 1, 100 + 2 * G, 1);
}

/* the same, one allocation failing */
Test(append, append_out_of_memory_once)
{
	append_oom(1, 1, 100 + 2 * G, 0);
}

/* a fork's tail (copied from its parent) to extend */
Test(append, append_out_of_memory_fork)
{
	append_oom(2, 2, 55, 1);
}

static uint64_t media_bytes_read(kvf_store *s)
{
	kvf_stats x = { .struct_size = sizeof(x) };

	OK(kvf_stats_get(s, &x));
	return x.bytes_read;
}

/* tokens [t0, t0 + n) of seq's layer 0 are data_seq's tokens t0.. */
static int tokens_ok(kvf_store *s, uint64_t seq, uint64_t data_seq,
		     uint64_t t0, uint32_t n)
{
	unsigned char k[64 * ROW], v[64 * ROW];
	int ok = 1;

	cr_assert(n <= 64);
	for (uint32_t h = 0; ok && h < KVH; h++) {
		ok = kvf_read(s, seq, 0, h, t0, t0 + n, k, v) == KVF_OK;
		for (uint64_t i = 0; ok && i < (uint64_t)n * ROW; i++)
			ok = k[i] == fx_byte(data_seq, 0, 0, t0 + i / ROW, h,
					     (uint32_t)(i % ROW)) &&
			     v[i] == fx_byte(data_seq, 0, 1, t0 + i / ROW, h,
					     (uint32_t)(i % ROW));
	}
	return ok;
}

/* the append path reads nothing from the media: after a reopen the
 * part-filled tail groups and K^T blocks are in memory already (the open
 * loaded them), and a fork makes its child's; every token reads back */
Test(append, reads_nothing)
{
	kvf_options o = fx_filled_opts();
	char *path = strdup(tmp_path(fx.dir, "kt"));
	kvf_store *s;
	uint64_t r;

	o.kt_pages = 1;
	OK(kvf_open(path, &o, &s));
	OK(kvf_seq_create(s, 5));
	OK(fx_append(s, 5, 5, 0, 0, 2 * G + 7));
	OK(fx_append(s, 5, 5, 1, 0, 2 * G + 11));
	OK(fx_append_x(s, 5, 0, 0, 9));
	OK(kvf_close(s));
	OK(kvf_open(path, NULL, &s));
	r = media_bytes_read(s);
	cr_assert(r > (0), "the open loaded no tail");
	OK(fx_append(s, 5, 5, 0, 2 * G + 7, G));
	OK(fx_append(s, 5, 5, 1, 2 * G + 11, 3));
	OK(fx_append_x(s, 5, 0, 9, 4));
	cr_assert(eq(u64, media_bytes_read(s), r),
		  "appends after a reopen read %" PRIu64 " bytes from media",
		  media_bytes_read(s) - r);
	OK(kvf_seq_fork(s, 5, 6, G + 20));
	r = media_bytes_read(s);
	OK(fx_append(s, 6, 6, 0, G + 20, 3));
	cr_assert(eq(u64, media_bytes_read(s), r),
		  "appends to a fork read %" PRIu64 " bytes from media",
		  media_bytes_read(s) - r);
	cr_assert(fx_data_ok(s, 5, 0, 3 * G + 7) && fx_data_ok(s, 5, 1, 2 * G + 14));
	cr_assert(tokens_ok(s, 6, 5, G - 12, 32));
	cr_assert(tokens_ok(s, 6, 6, G + 20, 3));
	OK(kvf_close(s));
	free(path);
}

/* the round trip: append (prefill, then decode one token at a time),
 * read back from group buffers, open segments and media, sync, reopen */
Test(append_round_trip, append_read_sync_reopen)
{
	kvf_model m = { RT_LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m, 64 * 1024, 64ull << 20, 2);
	kvf_store *st = NULL;
	uint64_t n;

	OK(kvf_open(fx.path, &o, &st));
	cr_assert(eq(int, kvf_seq_create(st, 7), KVF_OK));
	/* prefill 1000 tokens on every layer, then decode 45 single tokens */
	for (uint32_t l = 0; l < RT_LAYERS; l++)
		OK(fx_append(st, 7, 7, l, 0, 1000));
	for (uint64_t t = 1000; t < 1045; t++)
		for (uint32_t l = 0; l < RT_LAYERS; l++)
			OK(fx_append(st, 7, 7, l, t, 1));
	for (uint32_t l = 0; l < RT_LAYERS; l++) {
		cr_assert(eq(int, kvf_seq_len(st, 7, l, &n), KVF_OK));
		cr_assert(eq(u64, n, 1045));
		fx_check_tokens(st, 7, 7, l, 0, 1045);
		fx_check_tokens(st, 7, 7, l, 31, 33);
		fx_check_tokens(st, 7, 7, l, 1040, 1045);
	}
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	OK(fx_append(st, 7, 7, 0, 1045, 3)); /* not synced: gone after reopen */
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
	{
		kvf_store *st2 = NULL;

		cr_assert(eq(int, kvf_open(fx.path, NULL, &st2), KVF_OK),
			  "%s", kvf_last_error());
		cr_assert(eq(int, kvf_seq_len(st2, 7, 0, &n), KVF_OK));
		cr_assert(eq(u64, n, 1048), "close syncs");
		for (uint32_t l = 0; l < RT_LAYERS; l++)
			fx_check_tokens(st2, 7, 7, l, 0, l == 0 ? 1048 : 1045);
		OK(fx_append(st2, 7, 7, 1, 1045, 40));
		fx_check_tokens(st2, 7, 7, 1, 1000, 1085);
		cr_assert(eq(int, kvf_close(st2), KVF_OK));
	}
}
