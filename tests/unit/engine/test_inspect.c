/*
 * test_inspect.c - the inspection calls (kvf_store_info_get, kvf_seq_list,
 * kvf_seq_x_len, kvf_seq_info_get, kvf_segment_info_get, kvf_verify):
 * what they report on a small store, every status they give with its
 * message and untouched outputs, and kvf_verify finding damage planted on
 * media and in the index (the index through the engine's own headers).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/seq.h"
#include "engine/seq_stream.h"
#include "engine/store_state.h"
#include "engine/catalog.h"
#include "engine/key.h"
#include "engine/seq_state.h"
#include "kvflash.h"
#include "testutil.h"

#define LAYERS 2
#define QH 4
#define KVH 2
#define DIM 64 /* f16: 128 bytes a token, G = 32 tokens a 4 KiB page */
#define G 32
#define SEG_BYTES (64 * 1024)
#define STRIPES 2
#define N_SEGS 128 /* 8 MiB / 64 KiB */

static char *dir;

static void setup(void)
{
	dir = tmpdir_make("inspect");
	cr_assert_not_null(dir);
}

static void teardown(void)
{
	tmpdir_remove(dir);
}

TestSuite(inspect, .init = setup, .fini = teardown, .timeout = 60);

static const char *store_dir(void)
{
	static char path[4096];

	snprintf(path, sizeof(path), "%s/s", dir);
	return path;
}

static kvf_store *open_store(int read_only)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st = NULL;

	kvf_options_init(&o, read_only ? NULL : &m);
	o.segment_size = SEG_BYTES;
	o.capacity_bytes = 8ull << 20;
	o.n_stripes = STRIPES;
	if (read_only) { /* a zero model: everything as stored */
		kvf_options_init(&o, NULL);
		o.read_only = 1;
	}
	cr_assert(eq(int, kvf_open(store_dir(), &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	return st;
}

static void append_tokens(kvf_store *st, uint64_t seq, uint32_t layer,
			  uint64_t t0, uint32_t n)
{
	uint16_t *k = malloc((size_t)n * KVH * DIM * 2);
	uint16_t *v = malloc((size_t)n * KVH * DIM * 2);

	for (size_t i = 0; i < (size_t)n * KVH * DIM; i++) {
		k[i] = (uint16_t)(seq * 7919 + layer * 31 + t0 * 131 + i);
		v[i] = (uint16_t)~k[i];
	}
	cr_assert(eq(int, kvf_append(st, seq, layer, n, k, v), KVF_OK), "%s",
		  kvf_last_error());
	free(k);
	free(v);
}

static void append_x(kvf_store *st, uint64_t seq, uint32_t layer, uint32_t n)
{
	uint16_t *x = calloc((size_t)n * QH * DIM, 2);

	cr_assert(eq(int, kvf_append_x(st, seq, layer, n, x), KVF_OK), "%s",
		  kvf_last_error());
	free(x);
}

/* build - sequences 1 (100 tokens a layer, X 40 on layer 1), 2 (fork of 1
 * at 64, then 36 more), 7 (empty); synced */
static kvf_store *build(void)
{
	kvf_store *st = open_store(0);

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (uint32_t l = 0; l < LAYERS; l++)
		append_tokens(st, 1, l, 0, 100);
	append_x(st, 1, 1, 40);
	cr_assert(eq(int, kvf_seq_fork(st, 1, 2, 64), KVF_OK), "%s",
		  kvf_last_error());
	for (uint32_t l = 0; l < LAYERS; l++)
		append_tokens(st, 2, l, 64, 36);
	cr_assert(eq(int, kvf_seq_create(st, 7), KVF_OK));
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	return st;
}

static int contains(const char *s, const char *sub)
{
	return strstr(s, sub) != NULL;
}

/* has - the thread's last error contains s */
static void has(const char *s)
{
	cr_assert(contains(kvf_last_error(), s),
		  "message '%s' lacks '%s'", kvf_last_error(), s);
}

/* ---- kvf_store_info_get --------------------------------------------------- */

Test(inspect, store_info)
{
	kvf_store *st = build();
	kvf_store_info si = { .struct_size = sizeof(si) };

	cr_assert(eq(int, kvf_store_info_get(st, &si), KVF_OK));
	cr_assert(eq(u32, si.format_version, 3));
	cr_assert(eq(u32, si.library_version, kvf_version_number()));
	cr_assert(eq(u32, si.model.n_layers, LAYERS));
	cr_assert(eq(u32, si.model.n_q_heads, QH));
	cr_assert(eq(u32, si.model.n_kv_heads, KVH));
	cr_assert(eq(u32, si.model.head_dim, DIM));
	cr_assert(eq(int, si.model.dtype, KVF_DTYPE_F16));
	cr_assert(eq(u32, si.page_size, 4096));
	cr_assert(eq(u32, si.group_tokens, G));
	cr_assert(eq(u64, si.segment_size, SEG_BYTES));
	cr_assert(eq(u32, si.n_stripes, STRIPES));
	cr_assert(eq(u64, si.segs_per_stripe, N_SEGS / STRIPES));
	cr_assert(eq(u32, si.data_pages_per_segment, 15));
	cr_assert(eq(u64, si.capacity_bytes, 8ull << 20));
	cr_assert(eq(int, si.media, KVF_MEDIA_FILE));
	cr_assert(eq(u32, si.kt_pages, 0));
	cr_assert(ne(u64, si.store_id, 0));
	cr_assert(eq(u32, si.read_only, 0));
	cr_assert(eq(int, kvf_close(st), KVF_OK));

	st = open_store(1);
	{
		kvf_store_info ro = { .struct_size = sizeof(ro) };

		cr_assert(eq(int, kvf_store_info_get(st, &ro), KVF_OK));
		cr_assert(eq(u32, ro.read_only, 1));
		cr_assert(eq(u64, ro.store_id, si.store_id));
		cr_assert(eq(u64, ro.capacity_bytes, si.capacity_bytes));
	}
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

Test(inspect, store_info_statuses)
{
	kvf_store *st = build();
	struct {
		kvf_store_info si;
		uint64_t tail[2];
	} big;
	kvf_store_info si;
	size_t old_size;

	cr_assert(eq(int, kvf_store_info_get(NULL, &si), KVF_EINVAL));
	has("kvf_store_info_get: store is NULL");
	cr_assert(eq(int, kvf_store_info_get(st, NULL), KVF_EINVAL));
	has("kvf_store_info_get: out is NULL");
	memset(&si, 0x5a, sizeof(si));
	si.struct_size = 4;
	cr_assert(eq(int, kvf_store_info_get(st, &si), KVF_EINVAL));
	has("struct_size 4 is too small");
	cr_assert(eq(u32, si.format_version, 0x5a5a5a5a), "output untouched");
	/* a newer caller: a larger struct with a zero tail is fine */
	memset(&big, 0, sizeof(big));
	big.si.struct_size = sizeof(big);
	cr_assert(eq(int, kvf_store_info_get(st, &big.si), KVF_OK));
	cr_assert(eq(u64, big.si.struct_size, sizeof(big)));
	cr_assert(eq(u64, big.tail[1], 0));
	big.tail[1] = 1;
	cr_assert(eq(int, kvf_store_info_get(st, &big.si), KVF_EVERSION));
	has("kvf_store_info_get: out.struct_size");
	/* an older caller: only its prefix is written */
	memset(&si, 0x5a, sizeof(si));
	old_size = offsetof(kvf_store_info, page_size);
	si.struct_size = old_size;
	cr_assert(eq(int, kvf_store_info_get(st, &si), KVF_OK));
	cr_assert(eq(u32, si.model.n_layers, LAYERS));
	cr_assert(eq(u32, si.page_size, 0x5a5a5a5a), "past the caller's size");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- kvf_seq_list ------------------------------------------------------------ */

Test(inspect, seq_list)
{
	kvf_store *st = open_store(0);
	uint64_t want[] = { 0, 3, 5, 9, 1000, UINT64_MAX - 1 };
	uint64_t ids[8];
	size_t n = 99;

	cr_assert(eq(int, kvf_seq_list(st, NULL, 0, &n), KVF_OK));
	cr_assert(eq(sz, n, 0));
	for (int i = 5; i >= 0; i--)
		cr_assert(eq(int, kvf_seq_create(st, want[i]), KVF_OK));
	cr_assert(eq(int, kvf_seq_list(st, NULL, 0, &n), KVF_OK));
	cr_assert(eq(sz, n, 6));
	memset(ids, 0xff, sizeof(ids));
	cr_assert(eq(int, kvf_seq_list(st, ids, 8, &n), KVF_OK));
	cr_assert(eq(sz, n, 6));
	for (int i = 0; i < 6; i++)
		cr_assert(eq(u64, ids[i], want[i]), "ascending");
	cr_assert(eq(u64, ids[6], UINT64_MAX), "nothing past n");
	/* room for fewer: the first cap, and the total */
	memset(ids, 0, sizeof(ids));
	cr_assert(eq(int, kvf_seq_list(st, ids, 2, &n), KVF_OK));
	cr_assert(eq(sz, n, 6));
	cr_assert(eq(u64, ids[0], 0));
	cr_assert(eq(u64, ids[1], 3));
	cr_assert(eq(u64, ids[2], 0));
	cr_assert(eq(int, kvf_seq_free(st, 5), KVF_OK));
	cr_assert(eq(int, kvf_seq_list(st, ids, 8, &n), KVF_OK));
	cr_assert(eq(sz, n, 5));
	cr_assert(eq(u64, ids[2], 9));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

Test(inspect, seq_list_statuses)
{
	kvf_store *st = open_store(0);
	uint64_t ids[4] = { 42, 42, 42, 42 };
	size_t n = 42;

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	cr_assert(eq(int, kvf_seq_list(NULL, ids, 4, &n), KVF_EINVAL));
	has("kvf_seq_list: store is NULL");
	cr_assert(eq(int, kvf_seq_list(st, ids, 4, NULL), KVF_EINVAL));
	has("kvf_seq_list: n is NULL");
	cr_assert(eq(int, kvf_seq_list(st, NULL, 4, &n), KVF_EINVAL));
	has("kvf_seq_list: ids is NULL with cap 4");
	kvf_alloc_fail_at(1, 0);
	cr_assert(eq(int, kvf_seq_list(st, ids, 4, &n), KVF_ENOMEM));
	kvf_alloc_fail_at(0, 0);
	has("kvf_seq_list: out of memory");
	cr_assert(eq(sz, n, 42), "n untouched");
	cr_assert(eq(u64, ids[0], 42), "ids untouched");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- kvf_seq_x_len, kvf_seq_info_get --------------------------------------- */

Test(inspect, seq_info)
{
	kvf_store *st = build();
	kvf_seq_info a = { .struct_size = sizeof(a) };
	kvf_seq_info b = { .struct_size = sizeof(b) };
	kvf_seq_info e = { .struct_size = sizeof(e) };
	uint64_t n;
	/* per layer: K and V of 2 heads = 4 streams; 100 tokens = 4 groups */
	uint64_t kv_pages = LAYERS * 4 * 4, x_pages = QH * 2;

	cr_assert(eq(int, kvf_seq_info_get(st, 1, &a), KVF_OK));
	cr_assert(eq(u64, a.id, 1));
	cr_assert(eq(u64, a.family, 1));
	cr_assert(eq(u64, a.parent, KVF_SEQ_NONE));
	cr_assert(eq(u64, a.tokens, LAYERS * 100));
	cr_assert(eq(u64, a.x_tokens, 40));
	cr_assert(eq(u64, a.pages, kv_pages + x_pages));
	/* the fork shares the 2 full groups below 64 of every K/V stream and
	 * (its X copy holds 40 tokens) the first X group of each slice */
	cr_assert(eq(u64, a.shared_pages, LAYERS * 4 * 2 + QH), "%llu",
		  (unsigned long long)a.shared_pages);
	cr_assert(eq(int, kvf_seq_info_get(st, 2, &b), KVF_OK));
	cr_assert(eq(u64, b.family, 1));
	cr_assert(eq(u64, b.parent, 1));
	cr_assert(eq(u64, b.tokens, LAYERS * 100));
	cr_assert(eq(u64, b.shared_pages, a.shared_pages));
	cr_assert(eq(int, kvf_seq_info_get(st, 7, &e), KVF_OK));
	cr_assert(eq(u64, e.tokens, 0));
	cr_assert(eq(u64, e.pages, 0));

	cr_assert(eq(int, kvf_seq_x_len(st, 1, 1, &n), KVF_OK));
	cr_assert(eq(u64, n, 40));
	cr_assert(eq(int, kvf_seq_x_len(st, 1, 0, &n), KVF_OK));
	cr_assert(eq(u64, n, 0));
	cr_assert(eq(int, kvf_seq_x_len(st, 2, 1, &n), KVF_OK));
	cr_assert(eq(u64, n, 40), "the fork took the X below 64");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

Test(inspect, seq_info_statuses)
{
	kvf_store *st = build();
	kvf_seq_info si;
	uint64_t n = 42;

	memset(&si, 0x5a, sizeof(si));
	si.struct_size = sizeof(si);
	cr_assert(eq(int, kvf_seq_info_get(st, 99, &si), KVF_ENOENT));
	has("kvf_seq_info_get: sequence 99 does not exist");
	cr_assert(eq(u64, si.id, 0x5a5a5a5a5a5a5a5aull), "output untouched");
	cr_assert(eq(int, kvf_seq_info_get(NULL, 1, &si), KVF_EINVAL));
	has("store is NULL");
	cr_assert(eq(int, kvf_seq_info_get(st, 1, NULL), KVF_EINVAL));
	has("kvf_seq_info_get: out is NULL");
	si.struct_size = 0;
	cr_assert(eq(int, kvf_seq_info_get(st, 1, &si), KVF_EINVAL));
	has("struct_size 0 is too small");

	cr_assert(eq(int, kvf_seq_x_len(st, 99, 0, &n), KVF_ENOENT));
	has("kvf_seq_x_len: sequence 99 does not exist");
	cr_assert(eq(int, kvf_seq_x_len(st, 1, LAYERS, &n), KVF_ERANGE));
	has("kvf_seq_x_len: layer 2 out of range (store has 2 layers)");
	cr_assert(eq(int, kvf_seq_x_len(st, 1, 0, NULL), KVF_EINVAL));
	has("kvf_seq_x_len: n_tokens is NULL");
	cr_assert(eq(int, kvf_seq_x_len(NULL, 1, 0, &n), KVF_EINVAL));
	cr_assert(eq(u64, n, 42), "output untouched");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- kvf_segment_info_get -------------------------------------------------- */

/* count_states - segments by state */
static void count_states(kvf_store *st, uint32_t *count)
{
	memset(count, 0, 5 * sizeof(*count));
	for (uint32_t i = 0; i < N_SEGS; i++) {
		kvf_segment_info g = { .struct_size = sizeof(g) };

		cr_assert(eq(int, kvf_segment_info_get(st, i, &g), KVF_OK));
		cr_assert(eq(u32, g.segid, i));
		cr_assert(eq(u32, g.stripe, i % STRIPES));
		cr_assert(eq(u64, g.seg_in_stripe, i / STRIPES));
		cr_assert(le(u32, (uint32_t)g.state, KVF_SEG_CORRUPT));
		count[g.state]++;
	}
}

Test(inspect, segment_info)
{
	kvf_store *st = open_store(0);
	kvf_stats s = { .struct_size = sizeof(s) };
	uint32_t count[5];
	struct timespec ts;
	uint64_t now;
	int sealed = 0;

	cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	cr_assert(eq(u32, s.segments_total, N_SEGS));
	count_states(st, count);
	cr_assert(eq(u32, count[KVF_SEG_FREE], N_SEGS));

	/* 100 tokens: 3 full groups per stream wait in open segments */
	cr_assert(eq(int, kvf_seq_create(st, 3), KVF_OK));
	append_tokens(st, 3, 0, 0, 100);
	count_states(st, count);
	cr_assert(gt(u32, count[KVF_SEG_OPEN], 0));
	for (uint32_t i = 0; i < N_SEGS; i++) {
		kvf_segment_info g = { .struct_size = sizeof(g) };

		kvf_segment_info_get(st, i, &g);
		if (g.state != KVF_SEG_OPEN)
			continue;
		cr_assert(eq(u64, g.owner, 3));
		cr_assert(eq(u32, g.data_pages, 0));
		cr_assert(gt(u32, g.live_pages, 0));
		cr_assert(eq(u64, g.seqno, 0));
		cr_assert(eq(u64, g.write_ns, 0));
	}

	cr_assert(eq(int, kvf_sync(st), KVF_OK));
	clock_gettime(CLOCK_REALTIME, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	count_states(st, count);
	cr_assert(eq(u32, count[KVF_SEG_OPEN], 0));
	for (uint32_t i = 0; i < N_SEGS; i++) {
		kvf_segment_info g = { .struct_size = sizeof(g) };

		kvf_segment_info_get(st, i, &g);
		if (g.state == KVF_SEG_FREE) {
			cr_assert(eq(u64, g.owner, KVF_SEQ_NONE));
			cr_assert(eq(u32, g.live_pages, 0));
			cr_assert(eq(u64, g.seqno, 0));
			continue;
		}
		cr_assert(eq(int, g.state, KVF_SEG_SEALED));
		cr_assert(eq(u64, g.owner, 3));
		cr_assert(gt(u32, g.data_pages, 0));
		cr_assert(eq(u32, g.live_pages, g.data_pages));
		cr_assert(gt(u64, g.seqno, 0));
		cr_assert(le(u64, g.write_ns, now));
		cr_assert(gt(u64, g.write_ns, now - 60ull * 1000000000ull));
		sealed++;
	}
	cr_assert(gt(int, sealed, 0));

	/* freed and synced: the segments are trimmed and free again */
	cr_assert(eq(int, kvf_seq_free(st, 3), KVF_OK));
	count_states(st, count);
	cr_assert(eq(u32, count[KVF_SEG_DYING], (uint32_t)sealed));
	cr_assert(eq(int, kvf_sync(st), KVF_OK));
	count_states(st, count);
	cr_assert(eq(u32, count[KVF_SEG_FREE], N_SEGS));
	{
		uint32_t erased = 0;

		for (uint32_t i = 0; i < N_SEGS; i++) {
			kvf_segment_info g = { .struct_size = sizeof(g) };

			kvf_segment_info_get(st, i, &g);
			erased += g.erase_count;
		}
		cr_assert(eq(u32, erased, (uint32_t)sealed));
	}
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

Test(inspect, segment_info_statuses)
{
	kvf_store *st = open_store(0);
	kvf_segment_info g;

	memset(&g, 0x5a, sizeof(g));
	g.struct_size = sizeof(g);
	cr_assert(eq(int, kvf_segment_info_get(st, N_SEGS, &g), KVF_ERANGE));
	has("kvf_segment_info_get: segment 128 out of range (store has 128 segments: 2 stripes of 64)");
	cr_assert(eq(u32, g.segid, 0x5a5a5a5a), "output untouched");
	cr_assert(eq(int, kvf_segment_info_get(st, UINT32_MAX, &g), KVF_ERANGE));
	cr_assert(eq(int, kvf_segment_info_get(NULL, 0, &g), KVF_EINVAL));
	has("kvf_segment_info_get: store is NULL");
	cr_assert(eq(int, kvf_segment_info_get(st, 0, NULL), KVF_EINVAL));
	has("kvf_segment_info_get: out is NULL");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- kvf_verify ------------------------------------------------------------- */

#define MAX_DAMAGE 256

struct found {
	size_t n;                         /* calls */
	kvf_verify_damage d[MAX_DAMAGE];  /* copies (message NULL) */
	char msg[MAX_DAMAGE][KVF_ERRMSG_CAP];
	int stop_after;                   /* return nonzero at this call */
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

Test(inspect, verify_clean)
{
	kvf_store *st = build();
	kvf_verify_report r;
	struct found *f = verify(st, &r);
	uint64_t pages = 2 * (LAYERS * 4 * 4) + QH * 2 * 2;

	cr_assert(eq(sz, f->n, 0), "%s", f->n ? f->msg[0] : "");
	cr_assert(eq(u64, r.sequences_checked, 3));
	cr_assert(eq(u64, r.pages_checked, pages), "%llu",
		  (unsigned long long)r.pages_checked);
	cr_assert(eq(u64, r.bad_pages, 0));
	cr_assert(eq(u32, r.bad_segments, 0));
	cr_assert(gt(u32, r.segments_checked, 0));
	cr_assert(ge(u64, r.bytes_read, pages / 2 * 4096));
	cr_assert(eq(u32, r.stopped, 0));
	free(f);

	/* appended after the sync: in memory, not checked, still clean */
	append_tokens(st, 7, 0, 0, 70);
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
	st = open_store(1);
	f = verify(st, &r);
	cr_assert(eq(sz, f->n, 0), "%s", f->n ? f->msg[0] : "");
	cr_assert(eq(u64, r.pages_checked, pages + 12), "seq 7's 70 tokens");
	free(f);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

Test(inspect, verify_statuses)
{
	kvf_store *st = build();
	kvf_verify_report r;

	memset(&r, 0x5a, sizeof(r));
	r.struct_size = sizeof(r);
	cr_assert(eq(int, kvf_verify(NULL, NULL, NULL, &r), KVF_EINVAL));
	has("kvf_verify: store is NULL");
	cr_assert(eq(int, kvf_verify(st, NULL, NULL, NULL), KVF_EINVAL));
	has("kvf_verify: out is NULL");
	r.struct_size = 1;
	cr_assert(eq(int, kvf_verify(st, NULL, NULL, &r), KVF_EINVAL));
	has("struct_size 1 is too small");
	r.struct_size = sizeof(r);
	/* fail the 1st, 2nd, ... allocation until the call gets through */
	for (uint64_t nth = 1;; nth++) {
		kvf_status rc;

		cr_assert(lt(u64, nth, 100));
		kvf_alloc_fail_at(nth, 1);
		rc = kvf_verify(st, NULL, NULL, &r);
		kvf_alloc_fail_at(0, 0);
		if (rc == KVF_OK) {
			cr_assert(gt(u64, nth, 4), "verify allocates");
			break;
		}
		cr_assert(eq(int, rc, KVF_ENOMEM), "allocation %llu",
			  (unsigned long long)nth);
		has("kvf_verify: out of memory");
		cr_assert(eq(u64, r.pages_checked, 0x5a5a5a5a5a5a5a5aull),
			  "output untouched");
	}
	cr_assert(eq(u64, r.bad_pages, 0));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* find_sealed - a sealed segment with at least 2 data pages */
static kvf_segment_info find_sealed(kvf_store *st)
{
	for (uint32_t i = 0; i < N_SEGS; i++) {
		kvf_segment_info g = { .struct_size = sizeof(g) };

		kvf_segment_info_get(st, i, &g);
		if (g.state == KVF_SEG_SEALED && g.data_pages >= 2)
			return g;
	}
	cr_fatal("no sealed segment");
	return (kvf_segment_info){ 0 };
}

/* flip - invert 4 bytes of stripe file `stripe` at off */
static void flip(uint32_t stripe, uint64_t off)
{
	char leaf[64];
	unsigned char b[4];
	int fd;

	snprintf(leaf, sizeof(leaf), "s/stripe-%03u.kvf", stripe);
	fd = open(tmp_path(dir, leaf), O_RDWR);
	cr_assert(ge(int, fd, 0));
	cr_assert(eq(long, (long)pread(fd, b, 4, (off_t)off), 4));
	for (int i = 0; i < 4; i++)
		b[i] = (unsigned char)~b[i];
	cr_assert(eq(long, (long)pwrite(fd, b, 4, (off_t)off), 4));
	close(fd);
}

Test(inspect, verify_damaged_page)
{
	kvf_store *st = build();
	kvf_segment_info g = find_sealed(st);
	kvf_verify_report r;
	struct found *f;
	char want[128];

	cr_assert(eq(int, kvf_close(st), KVF_OK));
	flip(g.stripe, g.seg_in_stripe * SEG_BYTES + 4096 + 10); /* page 1 */
	st = open_store(1);
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
		snprintf(want, sizeof(want), "segment %u page 1 (stripe %u at byte %llu)",
			 g.segid, g.stripe,
			 (unsigned long long)(g.seg_in_stripe * SEG_BYTES + 4096));
		cr_assert(contains(f->msg[i], want), "%s", f->msg[i]);
		cr_assert(contains(f->msg[i], "checksum mismatch"), "%s",
			  f->msg[i]);
		/* the same page read through kvf_read is refused */
		if (d->kind != KVF_KIND_X) {
			uint16_t *buf = malloc(G * DIM * 2);

			cr_assert(eq(int, kvf_read(st, d->seq, d->layer, d->head,
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
	flip(g.stripe, g.seg_in_stripe * SEG_BYTES + 10); /* page 0 too */
	st = open_store(1);
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

Test(inspect, verify_damaged_summary)
{
	kvf_store *st = build();
	kvf_segment_info g = find_sealed(st);
	kvf_verify_report r;
	struct found *f;
	size_t summaries = 0;
	uint32_t pages = 0; /* bit p: page p reported */

	cr_assert(eq(int, kvf_close(st), KVF_OK));
	flip(g.stripe, g.seg_in_stripe * SEG_BYTES +
			       (uint64_t)g.data_pages * 4096 + 60);
	st = open_store(1);
	f = verify(st, &r);
	cr_assert(eq(u32, r.bad_segments, 1));
	cr_assert(ge(u64, r.bad_pages, g.live_pages));
	for (size_t i = 0; i < f->n; i++) {
		if (f->d[i].page != KVF_PAGE_SUMMARY) {
			cr_assert(eq(u32, f->d[i].segid, g.segid));
			cr_assert(lt(u32, f->d[i].page, 16));
			pages |= 1u << f->d[i].page;
			cr_assert(contains(f->msg[i], "failed verification at open"),
				  "%s", f->msg[i]);
			continue;
		}
		summaries++;
		cr_assert(eq(u32, f->d[i].segid, g.segid));
		cr_assert(eq(u64, f->d[i].seq, KVF_SEQ_NONE));
		cr_assert(contains(f->msg[i], "checksum"), "%s", f->msg[i]);
	}
	cr_assert(eq(sz, summaries, 1));
	/* every live page of it, once per sequence naming it (forks) */
	cr_assert(eq(int, __builtin_popcount(pages), (int)g.live_pages));
	free(f);
	{
		kvf_segment_info c = { .struct_size = sizeof(c) };

		cr_assert(eq(int, kvf_segment_info_get(st, g.segid, &c), KVF_OK));
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

static struct found *verify_after(kvf_store *st, void (*mess)(struct stream *, struct page_ref *),
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

Test(inspect, verify_index_damage)
{
	kvf_store *st = build();
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
	cr_assert(contains(f->msg[0], "sequence 1 layer 0 K head 0 group 0 (tokens 0..31): the index has no page for it"),
		  "%s", f->msg[0]);
	free(f);

	f = verify_after(st, swap_pages, &r);
	cr_assert(eq(sz, f->n, 1));
	cr_assert(eq(u64, f->d[0].group, 0));
	cr_assert(contains(f->msg[0], "the summary names sequence 1 layer 0 K head 0 group 1 instead"),
		  "%s", f->msg[0]);
	free(f);

	f = verify_after(st, bad_check, &r);
	cr_assert(eq(sz, f->n, 1));
	cr_assert(contains(f->msg[0], "the index check"), "%s", f->msg[0]);
	cr_assert(contains(f->msg[0], "disagrees with page and summary"), "%s",
		  f->msg[0]);
	free(f);

	f = verify(st, &r);
	cr_assert(eq(sz, f->n, 0), "restored");
	free(f);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- K^T pages -------------------------------------------------------------- */

Test(inspect, verify_kt)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_seq_info qi = { .struct_size = sizeof(qi) };
	kvf_verify_report r;
	kvf_options o;
	kvf_store *st = NULL;
	struct found *f;
	struct stream *s;
	struct seq *seq;
	uint32_t addr, segid, page;
	char want[96];

	kvf_options_init(&o, &m);
	o.segment_size = SEG_BYTES;
	o.capacity_bytes = 8ull << 20;
	o.n_stripes = STRIPES;
	o.kt_pages = 1;
	cr_assert(eq(int, kvf_open(store_dir(), &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (uint32_t l = 0; l < LAYERS; l++)
		append_tokens(st, 1, l, 0, 300);
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_seq_info_get(st, 1, &qi), KVF_OK));
	f = verify(st, &r);
	cr_assert(eq(sz, f->n, 0), "%s", f->n ? f->msg[0] : "");
	cr_assert(eq(u64, r.pages_checked, qi.pages));
	cr_assert(gt(u64, qi.pages, LAYERS * 4 * 10), "K^T pages are counted");
	free(f);

	cr_assert(eq(int, seq_get_locked(st, "test", 1, &seq), KVF_OK));
	s = seq_stream_of(st, seq, stream_id(0, KIND_KT, 1));
	cr_assert_not_null(s);
	cr_assert(gt(u32, s->n_groups, 0));
	addr = stream_page(s, 0).addr;
	seq_unlock_put(st, seq);
	segid = addr_seg(addr, st->page_bits);
	page = addr_page(addr, st->page_bits);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	flip(segid % STRIPES, (uint64_t)(segid / STRIPES) * SEG_BYTES +
				      (uint64_t)page * 4096 + 8);
	st = open_store(1);
	f = verify(st, &r);
	cr_assert(eq(sz, f->n, 1), "%zu", f->n);
	cr_assert(eq(int, f->d[0].kind, KVF_KIND_KT));
	cr_assert(eq(u32, f->d[0].head, 1));
	cr_assert(eq(u64, f->d[0].group, 0));
	cr_assert(eq(u32, f->d[0].segid, segid));
	cr_assert(eq(u32, f->d[0].page, page));
	snprintf(want, sizeof(want), "sequence 1 layer 0 KT head 1 block 0 dim group 0");
	cr_assert(contains(f->msg[0], want), "%s", f->msg[0]);
	free(f);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- the fatal state ----------------------------------------------------------- */

Test(inspect, fatal)
{
	kvf_store *st = build();
	kvf_store_info si = { .struct_size = sizeof(si) };
	kvf_seq_info qi = { .struct_size = sizeof(qi) };
	kvf_segment_info gi = { .struct_size = sizeof(gi) };
	kvf_verify_report r = { .struct_size = sizeof(r) };
	uint64_t n64;
	size_t n;

	catalog_fail_commits(st->cat, 1);
	cr_assert(eq(int, kvf_seq_create(st, 50), KVF_EFATAL));
	cr_assert(eq(int, kvf_store_info_get(st, &si), KVF_EFATAL));
	has("kvf_store_info_get: the store");
	has("close and reopen it");
	cr_assert(eq(int, kvf_seq_list(st, NULL, 0, &n), KVF_EFATAL));
	cr_assert(eq(int, kvf_seq_x_len(st, 1, 0, &n64), KVF_EFATAL));
	cr_assert(eq(int, kvf_seq_info_get(st, 1, &qi), KVF_EFATAL));
	cr_assert(eq(int, kvf_segment_info_get(st, 0, &gi), KVF_EFATAL));
	cr_assert(eq(int, kvf_verify(st, NULL, NULL, &r), KVF_EFATAL));
	has("kvf_verify: the store");
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
				if (kvf_append(w->st, id, l, 40, k, v) != KVF_OK)
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

Test(inspect, verify_alongside_writers)
{
	kvf_store *st = build();
	struct appender w = { .st = st };
	pthread_t t;
	int runs = 0;

	cr_assert(eq(int, pthread_create(&t, NULL, write_loop, &w), 0));
	while (runs < 20 || w.rounds < 10) {
		kvf_verify_report r;
		struct found *f = verify(st, &r);

		cr_assert(eq(sz, f->n, 0), "run %d: %s", runs, f->n ? f->msg[0] : "");
		free(f);
		runs++;
		if (runs > 2000)
			break;
	}
	w.stop = 1;
	pthread_join(t, NULL);
	cr_assert(ge(int, w.rounds, 10), "the writer ran (%d rounds)", w.rounds);
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
}
