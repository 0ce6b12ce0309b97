/*
 * test_verify.c - kvf_verify on the fixture's inspected store
 * (store_fixture.h): a clean store, every status with its message and
 * untouched outputs, damage planted on media (a data page, a summary, a
 * K^T page) and in the index (through the engine's own headers), the
 * fatal state, and verification alongside writers.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/key.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "ftl/sysio.h"
#include "engine/base/store_state.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(verify, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 60);

/* ---- kvf_verify ------------------------------------------------------------- */

#define MAX_DAMAGE 256

struct found {
	size_t n;                        /* calls */
	kvf_verify_damage d[MAX_DAMAGE]; /* copies (message NULL) */
	char msg[MAX_DAMAGE][KVF_ERRMSG_CAP];
	int stop_after; /* return nonzero at this call */
};

static int collect(void *arg, const kvf_verify_damage *d)
{
	struct found *f = arg;

	cr_assert(eq(u64, d->struct_size, sizeof(*d)));
	cr_assert_not_null(d->message);
	if (f->n < MAX_DAMAGE) {
		f->d[f->n] = *d;
		f->d[f->n].message = NULL;
		snprintf(f->msg[f->n], sizeof(f->msg[0]), "%s", d->message);
	}
	f->n++;
	return f->stop_after && (int)f->n >= f->stop_after;
}

static struct found *verify(kvf_store *st, kvf_verify_report *r)
{
	struct found *f = calloc(1, sizeof(*f));

	memset(r, 0, sizeof(*r));
	r->struct_size = sizeof(*r);
	cr_assert(eq(int, kvf_verify(st, collect, f, r), KVF_OK), "%s",
		  kvf_last_error());
	return f;
}

Test(verify, verify_clean)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_verify_report r;
	struct found *f = verify(st, &r);
	uint64_t pages = 2 * (LAYERS * 4 * 4) + QH * 2 * 2;

	cr_assert(eq(sz, f->n, 0), "%s", f->n ? f->msg[0] : "");
	cr_assert(eq(u64, r.sequences_checked, 3));
	cr_assert(eq(u64, r.pages_checked, pages), "%llu",
		  (unsigned long long)r.pages_checked);
	cr_assert(eq(u64, r.bad_pages, 0));
	cr_assert(eq(u32, r.bad_segments, 0));
	cr_assert(r.segments_checked > (0));
	cr_assert(ge(u64, r.bytes_read, pages / 2 * 4096));
	cr_assert(eq(u32, r.stopped, 0));
	free(f);

	/* appended after the sync: in memory, not checked, still clean */
	OK(fx_append(st, 7, 7, 0, 0, 70));
	f = verify(st, &r);
	cr_assert(eq(sz, f->n, 0), "%s", f->n ? f->msg[0] : "");
	free(f);
	/* fn may be NULL */
	memset(&r, 0, sizeof(r));
	r.struct_size = sizeof(r);
	cr_assert(eq(int, kvf_verify(st, NULL, NULL, &r), KVF_OK));
	cr_assert(eq(u64, r.bad_pages, 0));
	cr_assert(eq(int, kvf_close(st), KVF_OK));

	/* and read-only, after a reopen */
	st = fx_open_inspected(fx.path, 1);
	f = verify(st, &r);
	cr_assert(eq(sz, f->n, 0), "%s", f->n ? f->msg[0] : "");
	cr_assert(eq(u64, r.pages_checked, pages + 12), "seq 7's 70 tokens");
	free(f);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* a fork chain 1 -> 2 -> 3 whose middle is freed and its id made again:
 * 3's shared pages still name 1, and the new 2 is no ancestor of 3.  The
 * walk up by id took it for one and called the pages damaged. */
Test(verify, an_ancestor_id_taken_again_is_not_damage)
{
	kvf_options o = fx_options(32ull << 20, 1);
	kvf_verify_report r;
	struct found *f;
	kvf_store *st;

	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_seq_create(st, 1));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, 1, 1, l, 0, G));
	OK(kvf_seq_fork(st, 1, 2, G));
	OK(kvf_seq_fork(st, 2, 3, G));
	OK(kvf_sync(st));
	OK(kvf_seq_free(st, 2));
	OK(kvf_seq_create(st, 2));
	OK(kvf_seq_fork(st, 3, 2 + 100, G)); /* a fork of the orphan, too */
	OK(kvf_sync(st));
	for (int reopen = 0; reopen < 2; reopen++) {
		f = verify(st, &r);
		cr_assert(eq(sz, f->n, 0), "%s", f->n ? f->msg[0] : "");
		cr_assert(eq(u64, r.bad_pages, 0));
		cr_assert(r.pages_checked > 0);
		free(f);
		for (uint32_t l = 0; l < LAYERS; l++)
			fx_check_tokens(st, 102, 1, l, 0, G);
		OK(kvf_close(st));
		OK(kvf_open(fx.path, &o, &st));
	}
	OK(kvf_close(st));
}

Test(verify, verify_statuses)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_verify_report r;

	memset(&r, 0x5a, sizeof(r));
	r.struct_size = sizeof(r);
	cr_assert(eq(int, kvf_verify(NULL, NULL, NULL, &r), KVF_EINVAL));
	fx_has("kvf_verify: store is NULL");
	cr_assert(eq(int, kvf_verify(st, NULL, NULL, NULL), KVF_EINVAL));
	fx_has("kvf_verify: out is NULL");
	r.struct_size = 1;
	cr_assert(eq(int, kvf_verify(st, NULL, NULL, &r), KVF_EINVAL));
	fx_has("struct_size 1 is too small");
	r.struct_size = sizeof(r);
	/* fail the 1st, 2nd, ... allocation until the call gets through */
	for (uint64_t nth = 1;; nth++) {
		kvf_status rc;

		cr_assert(lt(u64, nth, 100));
		kvf_alloc_fail_at(nth, 1);
		rc = kvf_verify(st, NULL, NULL, &r);
		kvf_alloc_fail_at(0, 0);
		if (rc == KVF_OK) {
			cr_assert(nth > (4), "verify allocates");
			break;
		}
		cr_assert(eq(int, rc, KVF_ENOMEM), "allocation %llu",
			  (unsigned long long)nth);
		fx_has("kvf_verify: out of memory");
		cr_assert(eq(u64, r.pages_checked, 0x5a5a5a5a5a5a5a5aull),
			  "output untouched");
	}
	cr_assert(eq(u64, r.bad_pages, 0));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* find_sealed - a sealed segment with at least 2 data pages */
static kvf_segment_info find_sealed(kvf_store *st)
{
	for (uint32_t i = 0; i < INSPECT_SEGS; i++) {
		kvf_segment_info g = { .struct_size = sizeof(g) };

		kvf_segment_info_get(st, i, &g);
		if (g.state == KVF_SEG_SEALED && g.data_pages >= 2)
			return g;
	}
	cr_fatal("no sealed segment");
	return (kvf_segment_info){ 0 };
}

Test(verify, verify_damaged_page)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_segment_info g = find_sealed(st);
	kvf_verify_report r;
	struct found *f;
	char want[128];

	cr_assert(eq(int, kvf_close(st), KVF_OK));
	fx_flip(fx.path, g.stripe, g.seg_in_stripe * FX_SEG + 4096 + 10,
		4); /* page 1 */
	st = fx_open_inspected(fx.path, 1);
	f = verify(st, &r);
	cr_assert(ge(sz, f->n, 1));
	cr_assert(eq(u64, r.bad_pages, f->n));
	cr_assert(eq(u32, r.bad_segments, 0));
	for (size_t i = 0; i < f->n; i++) {
		const kvf_verify_damage *d = &f->d[i];

		cr_assert(eq(u32, d->segid, g.segid));
		cr_assert(eq(u32, d->page, 1));
		cr_assert(eq(u32, d->stripe, g.stripe));
		cr_assert(eq(u64, d->seg_in_stripe, g.seg_in_stripe));
		cr_assert(eq(int, d->status, KVF_ECORRUPT));
		cr_assert(d->seq == 1 || d->seq == 2);
		cr_assert(lt(u32, d->layer, LAYERS));
		cr_assert(le(int, d->kind, KVF_KIND_X));
		snprintf(want, sizeof(want),
			 "segment %u page 1 (stripe %u at byte %llu)", g.segid,
			 g.stripe,
			 (unsigned long long)(g.seg_in_stripe * FX_SEG + 4096));
		cr_assert(fx_contains(f->msg[i], want), "%s", f->msg[i]);
		cr_assert(fx_contains(f->msg[i], "checksum mismatch"), "%s",
			  f->msg[i]);
		/* the same page read through kvf_read is refused */
		if (d->kind != KVF_KIND_X) {
			uint16_t *buf = malloc(G * DIM * 2);

			cr_assert(
				eq(int,
				   kvf_read(st, d->seq, d->layer, d->head,
					    d->group * G, d->group * G + 1,
					    d->kind == KVF_KIND_K ? buf : NULL,
					    d->kind == KVF_KIND_V ? buf : NULL),
				   KVF_ECORRUPT));
			free(buf);
		}
	}
	free(f);

	/* stopping early */
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	fx_flip(fx.path, g.stripe, g.seg_in_stripe * FX_SEG + 10,
		4); /* page 0 too */
	st = fx_open_inspected(fx.path, 1);
	f = calloc(1, sizeof(*f));
	f->stop_after = 1;
	memset(&r, 0, sizeof(r));
	r.struct_size = sizeof(r);
	cr_assert(eq(int, kvf_verify(st, collect, f, &r), KVF_OK));
	cr_assert(eq(sz, f->n, 1));
	cr_assert(eq(u32, r.stopped, 1));
	free(f);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* bad_off - the byte offset whose page no read gets past (an unreadable
 * sector), or -1 */
static off_t bad_off = -1;

static ssize_t fail_one_page(enum kvf_sysio_op op, int fd, size_t len, off_t off)
{
	(void)fd;
	if (op == KVF_SYSIO_READ && bad_off >= 0 && off <= bad_off &&
	    bad_off < off + (off_t)len)
		return -EIO;
	return (ssize_t)len;
}

static ssize_t pread_one_page(int fd, void *buf, size_t len, off_t off)
{
	if (fail_one_page(KVF_SYSIO_READ, fd, len, off) < 0) {
		errno = EIO;
		return -1;
	}
	return kvf_sysio_real.pread(fd, buf, len, off);
}

/* One page that cannot be read, in a segment verify reads in one batch:
 * only that page is damage, its neighbours are read one by one and
 * checked (a flash store blamed every page of the batch on one page
 * whose ECC failed) */
Test(verify, one_unreadable_page_blames_no_neighbour)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_segment_info g = find_sealed(st);
	struct kvf_sysio hook = kvf_sysio_real;
	kvf_verify_report r;
	struct found *f;

	cr_assert(eq(int, kvf_close(st), KVF_OK));
	hook.fault = fail_one_page;
	hook.pread = pread_one_page;
	bad_off = (off_t)(g.seg_in_stripe * FX_SEG + 4096 + 100); /* page 1 */
	kvf_sysio_set(&hook);
	st = fx_open_inspected(fx.path, 1);
	f = verify(st, &r);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	kvf_sysio_set(NULL);
	bad_off = -1;
	cr_assert(ge(sz, f->n, 1));
	for (size_t i = 0; i < f->n; i++) {
		/* (the hook fails that offset in every stripe's file) */
		cr_assert(eq(u64, f->d[i].seg_in_stripe, g.seg_in_stripe));
		cr_assert(eq(u32, f->d[i].page, 1), "page %u blamed: %s",
			  f->d[i].page, f->msg[i]);
		cr_assert(fx_contains(f->msg[i], "cannot read the page"), "%s",
			  f->msg[i]);
	}
	cr_assert(r.pages_checked > f->n);
	free(f);
}

Test(verify, verify_damaged_summary)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_segment_info g = find_sealed(st);
	kvf_verify_report r;
	struct found *f;
	size_t summaries = 0;
	uint32_t pages = 0; /* bit p: page p reported */

	cr_assert(eq(int, kvf_close(st), KVF_OK));
	fx_flip(fx.path, g.stripe,
		g.seg_in_stripe * FX_SEG + (uint64_t)g.data_pages * 4096 + 60,
		4);
	st = fx_open_inspected(fx.path, 1);
	f = verify(st, &r);
	cr_assert(eq(u32, r.bad_segments, 1));
	cr_assert(ge(u64, r.bad_pages, g.live_pages));
	for (size_t i = 0; i < f->n; i++) {
		if (f->d[i].page != KVF_PAGE_SUMMARY) {
			cr_assert(eq(u32, f->d[i].segid, g.segid));
			cr_assert(lt(u32, f->d[i].page, 16));
			pages |= 1u << f->d[i].page;
			cr_assert(fx_contains(f->msg[i],
					      "failed verification at open"),
				  "%s", f->msg[i]);
			continue;
		}
		summaries++;
		cr_assert(eq(u32, f->d[i].segid, g.segid));
		cr_assert(eq(u64, f->d[i].seq, KVF_SEQ_NONE));
		cr_assert(fx_contains(f->msg[i], "checksum"), "%s", f->msg[i]);
	}
	cr_assert(eq(sz, summaries, 1));
	/* every live page of it, once per sequence naming it (forks) */
	cr_assert(eq(int, __builtin_popcount(pages), (int)g.live_pages));
	free(f);
	{
		kvf_segment_info c = { .struct_size = sizeof(c) };

		cr_assert(
			eq(int, kvf_segment_info_get(st, g.segid, &c), KVF_OK));
		cr_assert(eq(int, c.state, KVF_SEG_CORRUPT));
	}
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- damage in the index (through the engine's own structures) ----------- */

/* with_stream - run fn on sequence 1's layer 0 K head 0 stream */
static struct stream *stream_of(kvf_store *st, struct seq **seq)
{
	cr_assert(eq(int, seq_get_locked(st, "test", 1, seq), KVF_OK));
	return seq_kv_stream(st, *seq, 0, KIND_K, 0);
}

static struct found *
verify_after(kvf_store *st, void (*mess)(struct stream *, struct page_ref *),
	     kvf_verify_report *r)
{
	struct page_ref saved[2];
	struct stream *s;
	struct seq *seq;
	struct found *f;

	s = stream_of(st, &seq);
	saved[0] = stream_page(s, 0);
	saved[1] = stream_page(s, 1);
	mess(s, saved);
	seq_unlock_put(st, seq);
	f = verify(st, r);
	s = stream_of(st, &seq);
	stream_set_page(s, 0, saved[0]);
	stream_set_page(s, 1, saved[1]);
	seq_unlock_put(st, seq);
	return f;
}

static void lose_page(struct stream *s, struct page_ref *saved)
{
	struct page_ref r = saved[0];

	r.addr = ADDR_NONE;
	stream_set_page(s, 0, r);
}

static void swap_pages(struct stream *s, struct page_ref *saved)
{
	stream_set_page(s, 0, saved[1]);
}

static void bad_check(struct stream *s, struct page_ref *saved)
{
	struct page_ref r = saved[0];

	r.check ^= 1;
	stream_set_page(s, 0, r);
}

Test(verify, verify_index_damage)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_verify_report r;
	struct found *f;

	f = verify_after(st, lose_page, &r);
	cr_assert(eq(sz, f->n, 1));
	cr_assert(eq(u32, f->d[0].segid, KVF_SEGMENT_NONE));
	cr_assert(eq(u64, f->d[0].seq, 1));
	cr_assert(eq(u32, f->d[0].layer, 0));
	cr_assert(eq(int, f->d[0].kind, KVF_KIND_K));
	cr_assert(eq(u32, f->d[0].head, 0));
	cr_assert(eq(u64, f->d[0].group, 0));
	cr_assert(fx_contains(
			  f->msg[0],
			  "sequence 1 layer 0 K head 0 group 0 (tokens 0..31): the index has no page for it"),
		  "%s", f->msg[0]);
	free(f);

	f = verify_after(st, swap_pages, &r);
	cr_assert(eq(sz, f->n, 1));
	cr_assert(eq(u64, f->d[0].group, 0));
	cr_assert(fx_contains(
			  f->msg[0],
			  "the summary names sequence 1 layer 0 K head 0 group 1 instead"),
		  "%s", f->msg[0]);
	free(f);

	f = verify_after(st, bad_check, &r);
	cr_assert(eq(sz, f->n, 1));
	cr_assert(fx_contains(f->msg[0], "the index check"), "%s", f->msg[0]);
	cr_assert(fx_contains(f->msg[0], "disagrees with page and summary"),
		  "%s", f->msg[0]);
	free(f);

	f = verify(st, &r);
	cr_assert(eq(sz, f->n, 0), "restored");
	free(f);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- K^T pages -------------------------------------------------------------- */

Test(verify, verify_kt)
{
	kvf_seq_info qi = { .struct_size = sizeof(qi) };
	kvf_verify_report r;
	kvf_options o;
	kvf_store *st = NULL;
	struct found *f;
	struct stream *s;
	struct seq *seq;
	uint32_t addr, segid, page;
	char want[96];

	o = fx_inspect_opts();
	o.kt_pages = 1;
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, 1, 1, l, 0, 300));
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_seq_info_get(st, 1, &qi), KVF_OK));
	f = verify(st, &r);
	cr_assert(eq(sz, f->n, 0), "%s", f->n ? f->msg[0] : "");
	cr_assert(eq(u64, r.pages_checked, qi.pages));
	cr_assert(qi.pages > (LAYERS * 4 * 10), "K^T pages are counted");
	free(f);

	cr_assert(eq(int, seq_get_locked(st, "test", 1, &seq), KVF_OK));
	s = seq_stream_of(st, seq, stream_id(0, KIND_KT, 1));
	cr_assert_not_null(s);
	cr_assert(s->n_groups > (0));
	addr = stream_page(s, 0).addr;
	seq_unlock_put(st, seq);
	segid = addr_seg(addr, st->page_bits);
	page = addr_page(addr, st->page_bits);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	fx_flip(fx.path, segid % FX_STRIPES,
		(uint64_t)(segid / FX_STRIPES) * FX_SEG +
			(uint64_t)page * 4096 + 8,
		4);
	st = fx_open_inspected(fx.path, 1);
	f = verify(st, &r);
	cr_assert(eq(sz, f->n, 1), "%zu", f->n);
	cr_assert(eq(int, f->d[0].kind, KVF_KIND_KT));
	cr_assert(eq(u32, f->d[0].head, 1));
	cr_assert(eq(u64, f->d[0].group, 0));
	cr_assert(eq(u32, f->d[0].segid, segid));
	cr_assert(eq(u32, f->d[0].page, page));
	snprintf(want, sizeof(want),
		 "sequence 1 layer 0 KT head 1 block 0 dim group 0");
	cr_assert(fx_contains(f->msg[0], want), "%s", f->msg[0]);
	free(f);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- the fatal state ----------------------------------------------------------- */

Test(verify, fatal)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_store_info si = { .struct_size = sizeof(si) };
	kvf_seq_info qi = { .struct_size = sizeof(qi) };
	kvf_segment_info gi = { .struct_size = sizeof(gi) };
	kvf_verify_report r = { .struct_size = sizeof(r) };
	uint64_t n64;
	size_t n;

	catalog_fail_commits(st->cat, 1);
	cr_assert(eq(int, kvf_seq_create(st, 50), KVF_EFATAL));
	cr_assert(eq(int, kvf_store_info_get(st, &si), KVF_EFATAL));
	fx_has("kvf_store_info_get: the store");
	fx_has("close and reopen it");
	cr_assert(eq(int, kvf_seq_list(st, NULL, 0, &n), KVF_EFATAL));
	cr_assert(eq(int, kvf_seq_x_len(st, 1, 0, &n64), KVF_EFATAL));
	cr_assert(eq(int, kvf_seq_info_get(st, 1, &qi), KVF_EFATAL));
	cr_assert(eq(int, kvf_segment_info_get(st, 0, &gi), KVF_EFATAL));
	cr_assert(eq(int, kvf_verify(st, NULL, NULL, &r), KVF_EFATAL));
	fx_has("kvf_verify: the store");
	kvf_close(st);
}

/* ---- alongside writers ------------------------------------------------------------ */

struct appender {
	kvf_store *st;
	_Atomic int stop;
	int rounds;
};

static void *write_loop(void *arg)
{
	struct appender *w = arg;
	uint16_t *k = calloc((size_t)40 * KVH * DIM, 2);
	uint16_t *v = calloc((size_t)40 * KVH * DIM, 2);

	for (uint64_t id = 100; !w->stop; id++, w->rounds++) {
		if (kvf_seq_create(w->st, id) != KVF_OK)
			break;
		for (uint32_t l = 0; l < LAYERS; l++)
			for (int i = 0; i < 3; i++) {
				k[i] = (uint16_t)(id + (uint64_t)i);
				if (kvf_append(w->st, id, l, 40, k, v) !=
				    KVF_OK)
					goto out;
			}
		if (id % 2 == 0 && kvf_sync(w->st) != KVF_OK)
			break;
		if (id > 101 && kvf_seq_free(w->st, id - 2) != KVF_OK)
			break;
	}
out:
	free(k);
	free(v);
	return NULL;
}

Test(verify, verify_alongside_writers)
{
	kvf_store *st = fx_make_inspected(fx.path);
	struct appender w = { .st = st };
	pthread_t t;
	int runs = 0;

	cr_assert(eq(int, pthread_create(&t, NULL, write_loop, &w), 0));
	while (runs < 20 || w.rounds < 10) {
		kvf_verify_report r;
		struct found *f = verify(st, &r);

		cr_assert(eq(sz, f->n, 0), "run %d: %s", runs,
			  f->n ? f->msg[0] : "");
		free(f);
		runs++;
		if (runs > 2000)
			break;
	}
	w.stop = 1;
	pthread_join(t, NULL);
	cr_assert(ge(int, w.rounds, 10), "the writer ran (%d rounds)",
		  w.rounds);
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
}
