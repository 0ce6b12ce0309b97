/*
 * recovery.c - open-time rebuild of sequences, segments and the index.
 *
 * 1. "N" and "W": the last sync's seqno, the erase counts.
 * 2. "S": every sequence, with the lengths of its last sync.
 * 3. "G" and "R" records are listed with their seqnos and applied oldest
 *    first, so per (sequence, stream, group) the newest entry wins.  Before
 *    a segment's entries are applied its summary is read from media and
 *    checked (magic, store, segment, seqno, checksum); the page hashes it
 *    holds become the index's checks.  A segment newer than the last
 *    sync has its pages checked too.  A bad summary or page there is a
 *    write the crash cut short: the segment is dropped.  An
 *    older one is damage: its pages stay indexed with a check that cannot
 *    match, so reading them gives KVF_ECORRUPT.
 * 4. References are counted from the final index; a sequence whose length
 *    covers a group with no page (never synced: see clip_lost) is cut back
 *    to the start of that group; segments without a live page are trimmed
 *    and their records deleted.
 * Work is proportional to the metadata: one summary read per segment,
 * the summaries of up to WINDOW_ITEMS records read together.
 */
#include "engine/lifecycle/recovery.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/group.h"
#include "engine/base/key.h"
#include "engine/reads/kt_read.h"
#include "engine/base/meta.h"
#include "engine/optim/optim_store.h"
#include "engine/reads/readpath.h"
#include "engine/base/segfmt.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "ftl/media.h"

struct rec_item {
	uint64_t seqno; /* of the record */
	uint64_t id;    /* segment id ("G") or child sequence ("R") */
	char tag;       /* META_TAG_SEG or META_TAG_REF */
};

struct rec_list {
	struct rec_item *items;
	size_t n, cap;
	kvf_store *st;
};

static int push_item(struct rec_list *l, struct rec_item it)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		struct rec_item *p = kvf_realloc(l->items, cap * sizeof(*p));

		if (p == NULL)
			return KVF_ENOMEM;
		l->items = p;
		l->cap = cap;
	}
	l->items[l->n++] = it;
	return 0;
}

static int bad_record(const char *what, uint64_t id, size_t len)
{
	return kvf_fail(KVF_ECORRUPT,
			"kvf_open: catalog record %s %llu is malformed (%zu bytes)",
			what, (unsigned long long)id, len);
}

static int list_seg(void *arg, const void *key, size_t klen, const void *val,
		    size_t vlen)
{
	struct rec_list *l = arg;
	struct meta_seg m;
	uint64_t id = meta_key_id(key, 4);

	if (klen != 5 || vlen < sizeof(m))
		return bad_record("segment", id, vlen);
	memcpy(&m, val, sizeof(m));
	if (id >= l->st->n_segments ||
	    vlen != sizeof(m) + (size_t)m.n_runs * sizeof(struct meta_run) ||
	    m.n_data_pages > l->st->data_per_seg || m.n_data_pages == 0)
		return bad_record("segment", id, vlen);
	for (uint32_t i = 0; i < m.n_runs; i++) {
		struct meta_run r;

		memcpy(&r, (const char *)val + sizeof(m) + (size_t)i * sizeof(r),
		       sizeof(r));
		if (!meta_run_ok(&r, m.n_data_pages) || r.ns > SEQ_NS_OPTIM)
			return kvf_fail(KVF_ECORRUPT,
					"kvf_open: catalog record segment %llu is malformed: run %u names pages %u + %u of %u, groups from %u by %u, namespace %u",
					(unsigned long long)id, i, r.page, r.n,
					m.n_data_pages, r.group, r.stride, r.ns);
	}
	return push_item(l, (struct rec_item){ m.seqno, id, META_TAG_SEG });
}

static int list_ref(void *arg, const void *key, size_t klen, const void *val,
		    size_t vlen)
{
	struct rec_list *l = arg;
	struct meta_ref m;
	uint64_t id = meta_key_id(key, 8);

	if (klen != 9 || vlen < sizeof(m))
		return bad_record("fork reference", id, vlen);
	memcpy(&m, val, sizeof(m));
	/* n first: n * 16 wraps for n >= 2^60, and a wrapped length would
	 * let apply_ref read n entries from a short value */
	if (m.n > (vlen - sizeof(m)) / sizeof(struct meta_ref_entry) ||
	    vlen != sizeof(m) + m.n * sizeof(struct meta_ref_entry))
		return bad_record("fork reference", id, vlen);
	return push_item(l, (struct rec_item){ m.seqno, id, META_TAG_REF });
}

static int load_seq_ns(kvf_store *st, uint32_t ns, const void *key,
		       size_t klen, const void *val, size_t vlen)
{
	uint32_t nl = st->hdr.n_layers;
	uint64_t id = meta_key_id(key, 8);
	struct meta_seq m;
	struct seq *seq;
	kvf_status rc;

	if (klen != 9 || vlen != sizeof(m) + 2 * (size_t)nl * sizeof(uint64_t))
		return bad_record("sequence", id, vlen);
	memcpy(&m, val, sizeof(m));
	if (m.n_layers != nl)
		return bad_record("sequence", id, vlen);
	/* no layer holds more tokens than pages of the media could */
	for (uint32_t l = 0; l < 2 * nl; l++) {
		uint64_t n;

		memcpy(&n, (const char *)val + sizeof(m) + l * sizeof(n), sizeof(n));
		if (n > ((uint64_t)st->n_segments * st->data_per_seg /
			 st->group_pages + 1) * st->group_tokens)
			return kvf_fail(KVF_ECORRUPT,
					"kvf_open: catalog record sequence %llu is malformed: %llu tokens on layer %u, more than the media holds",
					(unsigned long long)id, (unsigned long long)n,
					l % nl);
	}
	seq = seq_alloc(st, id);
	if (seq == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	seq->ns = ns;
	seq->create_seqno = m.create_seqno;
	seq->family = m.family;
	seq->parent = m.parent;
	memcpy(seq->len, (const char *)val + sizeof(m), nl * sizeof(uint64_t));
	memcpy(seq->x_len, (const char *)val + sizeof(m) + nl * sizeof(uint64_t),
	       nl * sizeof(uint64_t));
	/* what the catalog holds (recovery may cut len back below it) */
	memcpy(seq->rec_len, seq->len, nl * sizeof(uint64_t));
	memcpy(seq->rec_len + nl, seq->x_len, nl * sizeof(uint64_t));
	for (uint32_t l = 0; l < nl; l++)
		if ((seq->x_len[l] && (rc = seq_x_alloc(st, seq)) != KVF_OK) ||
		    (seq->len[l] && (rc = seq_kt_alloc(st, seq)) != KVF_OK)) {
			seq_destroy(st, seq);
			return rc;
		}
	if ((rc = seq_insert(st, seq)) != KVF_OK) {
		seq_destroy(st, seq);
		return rc;
	}
	if (m.create_seqno >= atomic_load(&st->writer.next_seqno))
		atomic_store(&st->writer.next_seqno, m.create_seqno + 1);
	return 0;
}

static int load_seq(void *arg, const void *key, size_t klen, const void *val,
		    size_t vlen)
{
	return load_seq_ns(arg, SEQ_NS_USER, key, klen, val, vlen);
}

static int load_optim_seq(void *arg, const void *key, size_t klen,
			const void *val, size_t vlen)
{
	return load_seq_ns(arg, SEQ_NS_OPTIM, key, klen, val, vlen);
}

static int load_vbar(void *arg, const void *key, size_t klen, const void *val,
		     size_t vlen)
{
	if (klen != 9)
		return kvf_fail(KVF_ECORRUPT, "kvf_open: a means-of-V key is %zu bytes",
				klen);
	kvf_store *st = arg;
	uint64_t id = meta_key_id(key, 8);
	struct seq *seq = seq_get_ns(st, SEQ_NS_USER, id);
	kvf_status rc = seq_vbar_load(st, id, seq, val, vlen);

	if (seq)
		seq_put(st, seq);
	return rc;
}

static int load_drop(void *arg, const void *key, size_t klen, const void *val,
		     size_t vlen)
{
	kvf_store *st = arg;
	uint64_t id;
	struct seq *seq;
	kvf_status rc;

	if (klen != 9)
		return kvf_fail(KVF_ECORRUPT, "kvf_open: a dropped-groups key is %zu bytes",
				klen);
	id = meta_key_id(key, 8);
	seq = seq_get_ns(st, SEQ_NS_USER, id);
	rc = dropmark_load(st, id, seq, val, vlen);
	if (seq)
		seq_put(st, seq);
	return rc;
}

struct use_ctx {
	kvf_store *st;
	uint64_t base;  /* the use clock when the records are read */
	uint64_t clock; /* the largest stamp they set */
};

static int load_use(void *arg, const void *key, size_t klen, const void *val,
		    size_t vlen)
{
	struct use_ctx *u = arg;
	uint64_t id;
	struct seq *seq;
	kvf_status rc;

	if (klen != 9)
		return kvf_fail(KVF_ECORRUPT, "kvf_open: a use record's key is %zu bytes",
				klen);
	id = meta_key_id(key, 8);
	seq = seq_get_ns(u->st, SEQ_NS_USER, id);
	rc = seq_use_load(u->st, id, seq, val, vlen, u->base, &u->clock);
	if (seq)
		seq_put(u->st, seq);
	return rc;
}

/* A tail to read back at open (tails_prefetch). */
struct tail_req {
	struct seq *seq;
	struct stream *s;
	uint64_t tokens;
	struct page_ref ref;
};

struct tail_list {
	struct tail_req *r;
	size_t n, cap;
	int oom;
};

static void list_tails(kvf_store *st, struct seq *seq, void *arg)
{
	struct tail_list *tl = arg;
	uint32_t n = seq_n_streams(st);

	if (seq->ns != SEQ_NS_USER)
		return;
	for (uint32_t i = 0; i < n && !tl->oom; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);
		enum kv_kind kind;
		uint64_t tokens, g;

		if (s == NULL || s->gbuf || (kind = stream_kind(sid)) == KIND_KT)
			continue;
		tokens = seq_tokens(seq, kind, stream_layer(sid));
		g = tokens / st->group_tokens;
		if (tokens % st->group_tokens == 0 || g >= s->n_groups ||
		    stream_page(s, g).addr == ADDR_NONE)
			continue;
		if (tl->n == tl->cap) {
			size_t cap = tl->cap ? tl->cap * 2 : 1024;
			struct tail_req *r = kvf_realloc(tl->r, cap * sizeof(*r));

			if (r == NULL) {
				tl->oom = 1;
				return;
			}
			tl->r = r;
			tl->cap = cap;
		}
		tl->r[tl->n++] = (struct tail_req){ seq, s, tokens, stream_page(s, g) };
	}
}

static int by_addr(const void *a, const void *b)
{
	const struct tail_req *x = a, *y = b;

	return x->ref.addr < y->ref.addr ? -1 : x->ref.addr > y->ref.addr;
}

#define TAIL_BATCH 512u /* pages read at once: 2 MiB of 4 KiB pages */

/*
 * tails_prefetch - read every tail load_tails will need, in address
 * order (neighbours in one request: a pack's tails lie side by side) and
 * batches of TAIL_BATCH pages at the media's queue depth, and put those
 * that check out in their group buffers.  One page at a time, a store of
 * 10,000 short sequences took 4 s to open; now about 0.5 s.  A tail that
 * does not check out (or a batch that fails) is left to load_tails, which
 * reads it alone and says why.
 * Opening is single-threaded: no lock is needed.
 */
static kvf_status tails_prefetch(kvf_store *st)
{
	struct tail_list tl = { 0 };
	uint32_t ps = st->hdr.page_size;
	struct kvf_media_io *io = NULL;
	unsigned char *buf = NULL;
	kvf_status rc = KVF_OK;

	/* groups of several pages, and a codec's tails at entries of their
	 * own (group_plain_entry): load_tails reads them */
	if (st->group_stride > 1)
		return KVF_OK;
	if (seq_foreach(st, list_tails, &tl) != KVF_OK || tl.oom) {
		kvf_free(tl.r);
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	}
	if (tl.n == 0)
		return KVF_OK;
	qsort(tl.r, tl.n, sizeof(*tl.r), by_addr);
	io = kvf_malloc(TAIL_BATCH * sizeof(*io));
	buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)TAIL_BATCH * ps);
	if (io == NULL || buf == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		goto out;
	}
	for (size_t b = 0; b < tl.n && rc == KVF_OK; b += TAIL_BATCH) {
		uint32_t n = tl.n - b < TAIL_BATCH ? (uint32_t)(tl.n - b) : TAIL_BATCH;

		uint32_t n_io = 0;

		for (uint32_t i = 0; i < n; i++) {
			uint32_t a = tl.r[b + i].ref.addr;
			uint32_t seg = addr_seg(a, st->page_bits);

			/* neighbours on media (a pack's tails) in one read */
			if (i > 0 && a == tl.r[b + i - 1].ref.addr + 1 &&
			    addr_seg(a - 1, st->page_bits) == seg) {
				io[n_io - 1].n_pages++;
				continue;
			}
			io[n_io++] = (struct kvf_media_io){ .stripe = seg_stripe(st, seg),
							    .seg = seg_in_stripe(st, seg),
							    .page = addr_page(a, st->page_bits),
							    .n_pages = 1,
							    .buf = buf + (size_t)i * ps };
		}
		if (kvf_media_read(st->media, io, n_io) != KVF_OK)
			continue; /* load_tails reads them one by one */
		for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
			const struct tail_req *r = &tl.r[b + i];
			const unsigned char *page = buf + (size_t)i * ps;
			uint32_t tail = (uint32_t)(r->tokens % st->group_tokens);

			if (page_check(page, ps) != r->ref.check)
				continue;
			if ((rc = stream_gbuf_alloc(st, r->s, ps)) != KVF_OK)
				break;
			memcpy(r->s->gbuf, page, (size_t)tail * st->row_bytes);
			r->s->tail_written = tail;
		}
	}
out:
	kvf_free(io);
	kvf_free(buf);
	kvf_free(tl.r);
	return rc;
}

/*
 * load_tails - a writable open puts each stream's part-filled tail group,
 * and each K head's part-filled K^T block, back in memory, where the
 * store held them before it closed: so the append path reads nothing.  A
 * tail whose page fails verification stays out (its sequence then cannot
 * grow; engine/writes/append.c says so); running out of memory fails the open.
 */
static void load_tails(kvf_store *st, struct seq *seq, void *arg)
{
	kvf_status *rc = arg;
	uint32_t n = seq_n_streams(st);

	if (*rc != KVF_OK || seq->ns != SEQ_NS_USER)
		return;
	pthread_mutex_lock(&seq->lock);
	for (uint32_t i = 0; i < n && *rc != KVF_ENOMEM; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);
		enum kv_kind kind = stream_kind(sid);
		uint64_t tokens;

		if (s == NULL || kind == KIND_KT)
			continue;
		tokens = seq_tokens(seq, kind, stream_layer(sid));
		if (tokens % st->group_tokens)
			*rc = stream_tail(st, seq, s, tokens);
	}
	for (uint32_t l = 0; seq->kt && l < st->hdr.n_layers; l++)
		for (uint32_t h = 0; h < st->hdr.n_kv_heads && *rc != KVF_ENOMEM; h++) {
			const unsigned char *blk;

			if (seq->len[l] % st->kt_tokens)
				*rc = kt_open_block(st, seq, l, h, &blk);
		}
	if (*rc != KVF_ENOMEM)
		*rc = KVF_OK;
	pthread_mutex_unlock(&seq->lock);
}

static int cmp_item(const void *a, const void *b)
{
	const struct rec_item *x = a, *y = b;

	return x->seqno < y->seqno ? -1 : x->seqno > y->seqno;
}

/*
 * apply - n index entries of one stream from a record of the given
 * seqno: groups group + k * stride at addresses addr + k (consecutive
 * pages of one segment), k < n.  The sequence and stream are looked up
 * once for the run.  Their checks are count_refs's to fill.
 */
static kvf_status apply(kvf_store *st, uint32_t ns, uint64_t seq_id,
			uint32_t sid, uint32_t group, uint32_t stride,
			uint32_t n, uint32_t addr, uint64_t seqno, int from_ref)
{
	struct seq *seq = seq_get_ns(st, ns, seq_id);
	enum kv_kind kind = stream_kind(sid);
	uint64_t groups, tokens;
	struct stream *s;
	kvf_status rc = KVF_OK;

	if (seq == NULL)
		return KVF_OK; /* freed: the entries are garbage */
	if (seqno < seq->create_seqno && !from_ref)
		goto out; /* from an earlier sequence with this id */
	if ((s = seq_stream_of(st, seq, sid)) == NULL)
		goto out;
	groups = seq_stream_groups(st, seq, sid);
	tokens = kind <= KIND_X ? seq_tokens(seq, kind, stream_layer(sid)) : 0;
	for (uint32_t k = 0; k < n && rc == KVF_OK; k++) {
		uint64_t g = group + (uint64_t)k * stride;

		if ((kind == KIND_K || kind == KIND_V) &&
		    dropmark_held(st, seq, dropmark_lane(st, stream_layer(sid), stream_head(sid)),
				  g / st->group_stride))
			continue; /* kvf_h2o_evict dropped it: its pages stay out */
		if (g >= groups)
			continue; /* past the synced length */
		if (kind <= KIND_X && !group_entry_used(st, s, tokens, g))
			continue; /* a codec store's plain pages of a group
				   * sealed since (engine/base/group.h) */
		if ((rc = stream_reserve(st, s, groups)) != KVF_OK)
			break;
		stream_set_page(s, g, (struct page_ref){ addr + k, 0 });
		if (g >= s->n_groups)
			s->n_groups = g + 1;
	}
out:
	seq_put(st, seq);
	return rc;
}

/* summary_check - check segment segid's summary, whose pages are at buf;
 * on success *hashes gets its n_data page hashes (kvf_malloc'd).
 * KVF_ECORRUPT when it does not check out.  buf's header checksum field
 * is zeroed. */
static kvf_status summary_check(kvf_store *st, uint32_t segid,
				const struct meta_seg *m, unsigned char *buf,
				uint64_t **hashes)
{
	uint32_t n = m->n_data_pages;
	struct seg_summary_header h;
	uint64_t want, *out;

	memcpy(&h, buf, sizeof(h));
	want = h.checksum;
	h.checksum = 0;
	memcpy(buf, &h, sizeof(h));
	if (memcmp(h.magic, SEG_MAGIC, 8) != 0 || h.store_id != st->hdr.store_id ||
	    h.segid != segid || h.seqno != m->seqno || h.n_data_pages != n ||
	    XXH3_64bits(buf, sizeof(h) + (size_t)n * sizeof(struct seg_summary_entry)) != want)
		return kvf_fail(KVF_ECORRUPT,
				"segment %u (stripe %u, segment %llu): summary at page %u does not match its catalog record (seqno %llu)",
				segid, seg_stripe(st, segid),
				(unsigned long long)seg_in_stripe(st, segid), n,
				(unsigned long long)m->seqno);
	out = kvf_malloc((size_t)n * sizeof(uint64_t));
	if (out == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	for (uint32_t i = 0; i < n; i++) {
		struct seg_summary_entry e;

		memcpy(&e, buf + sizeof(h) + (size_t)i * sizeof(e), sizeof(e));
		out[i] = e.page_hash;
	}
	*hashes = out;
	return KVF_OK;
}

/* summary_fits - do segment segid's n data pages and their summary fit
 * it?  KVF_ECORRUPT when not. */
static kvf_status summary_fits(kvf_store *st, uint32_t segid, uint32_t n)
{
	if (n + summary_pages(n, st->hdr.page_size) > st->pages_per_seg)
		return kvf_fail(KVF_ECORRUPT, "segment %u: %u data pages do not fit",
				segid, n);
	return KVF_OK;
}

/* read_summary - read segment segid's summary alone and check it
 * (summary_check) */
static kvf_status read_summary(kvf_store *st, uint32_t segid,
			       const struct meta_seg *m, uint64_t **hashes)
{
	uint32_t ps = st->hdr.page_size, n = m->n_data_pages;
	uint32_t sp = summary_pages(n, ps);
	unsigned char *buf;
	kvf_status rc;

	if ((rc = summary_fits(st, segid, n)) != KVF_OK)
		return rc;
	buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)sp * ps);
	if (buf == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	rc = kvf_media_read_pages(st->media, seg_stripe(st, segid),
				  seg_in_stripe(st, segid), n, sp, buf);
	if (rc == KVF_OK)
		rc = summary_check(st, segid, m, buf, hashes);
	kvf_free(buf);
	return rc;
}

/*
 * check_pages - does every data page of segment segid match its hash in the
 * summary?  For segments written after the last durable point: one write
 * of a segment is atomic against a killed process but not against a power
 * cut, which can keep the summary and lose a page before it.  KVF_ECORRUPT
 * names the first page that does not match.
 */
static kvf_status check_pages(kvf_store *st, uint32_t segid,
			      const struct meta_seg *m, const uint64_t *hashes)
{
	uint32_t ps = st->hdr.page_size, n = m->n_data_pages;
	unsigned char *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)n * ps);
	kvf_status rc;

	if (n == 0) {
		kvf_free(buf);
		return KVF_OK;
	}
	if (buf == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	rc = kvf_media_read_pages(st->media, seg_stripe(st, segid),
				  seg_in_stripe(st, segid), 0, n, buf);
	for (uint32_t i = 0; i < n && rc == KVF_OK; i++)
		if (page_hash(buf + (size_t)i * ps, ps) != hashes[i])
			rc = kvf_fail(KVF_ECORRUPT,
				      "segment %u (stripe %u, segment %llu): page %u does not match its summary (seqno %llu)",
				      segid, seg_stripe(st, segid),
				      (unsigned long long)seg_in_stripe(st, segid),
				      i, (unsigned long long)m->seqno);
	kvf_free(buf);
	return rc;
}

/* Segments whose write a crash cut short: their records go at open, or a
 * later durable point would make them look older than it, and damaged. */
struct dropped {
	uint32_t *ids;
	size_t n, cap;
};

static kvf_status drop_seg(struct dropped *d, uint32_t segid)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 16;
		uint32_t *p = kvf_realloc(d->ids, cap * sizeof(*p));

		if (p == NULL)
			return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		d->ids = p;
		d->cap = cap;
	}
	d->ids[d->n++] = segid;
	return KVF_OK;
}

/* A window of records applied in seqno order: the segment records'
 * values and their summaries, read together at the media's queue depth
 * (one at a time, the summaries were most of an open of a large store). */
#define WINDOW_ITEMS 256u         /* records a window */
#define WINDOW_BYTES (4u << 20)   /* summary bytes a window reads at most */

struct seg_rec {
	void *val;          /* the "G" record; NULL: none (deleted) */
	unsigned char *sum; /* its summary, read with the window; NULL:
			     * read alone (read_summary says why) */
};

/*
 * window_read - the records of items it[0..n) that are segments, and
 * their summaries, all read in one kvf_media_read into buf (buf_bytes).
 * Returns how many items the window takes (a prefix of n: as many
 * summaries as buf holds) or 0 with *rc set.  A failed read leaves every
 * sum NULL: each is then read alone, so the error names its segment.
 */
static size_t window_read(kvf_store *st, const struct rec_item *it, size_t n,
			  struct seg_rec *rec, unsigned char *buf,
			  size_t buf_bytes, struct kvf_media_io *io,
			  kvf_status *rc)
{
	uint32_t ps = st->hdr.page_size, n_io = 0;
	size_t off = 0, i;

	for (i = 0; i < n; i++) {
		unsigned char key[5];
		struct meta_seg m;
		size_t vlen;
		uint32_t sp;

		rec[i] = (struct seg_rec){ 0 };
		if (it[i].tag != META_TAG_SEG)
			continue;
		meta_key_u32(key, META_TAG_SEG, (uint32_t)it[i].id);
		*rc = catalog_get(st->cat, key, sizeof(key), &rec[i].val, &vlen);
		if (*rc == KVF_ENOENT) {
			*rc = KVF_OK;
			continue;
		}
		if (*rc != KVF_OK)
			break;
		memcpy(&m, rec[i].val, sizeof(m));
		sp = summary_pages(m.n_data_pages, ps);
		if (m.n_data_pages + sp > st->pages_per_seg ||
		    (size_t)sp * ps > buf_bytes)
			continue; /* apply_seg says so; a summary larger
				   * than a window is read alone */
		if (off + (size_t)sp * ps > buf_bytes) {
			kvf_free(rec[i].val); /* the next window's */
			rec[i].val = NULL;
			break;
		}
		io[n_io++] = (struct kvf_media_io){
			.stripe = seg_stripe(st, (uint32_t)it[i].id),
			.seg = seg_in_stripe(st, (uint32_t)it[i].id),
			.page = m.n_data_pages, .n_pages = sp, .buf = buf + off };
		rec[i].sum = buf + off;
		off += (size_t)sp * ps;
	}
	if (*rc != KVF_OK) {
		for (size_t j = 0; j <= i && j < n; j++)
			kvf_free(rec[j].val);
		return 0;
	}
	if (n_io > 0 && kvf_media_read(st->media, io, n_io) != KVF_OK)
		for (size_t j = 0; j < i; j++)
			rec[j].sum = NULL;
	return i;
}

/* apply_seg - apply segment segid's record rec after checking its summary
 * (and, if it is newer than the last durable point, its pages) */
static kvf_status apply_seg(kvf_store *st, uint32_t segid,
			    const struct seg_rec *rec, uint32_t **checks,
			    struct dropped *dropped)
{
	struct meta_seg m;
	struct meta_run *runs;
	uint64_t *hashes = NULL;
	kvf_status rc;
	int corrupt = 0;

	if (rec->val == NULL)
		return KVF_OK;
	memcpy(&m, rec->val, sizeof(m));
	runs = (struct meta_run *)((char *)rec->val + sizeof(m));
	if ((rc = summary_fits(st, segid, m.n_data_pages)) == KVF_OK)
		rc = rec->sum ? summary_check(st, segid, &m, rec->sum, &hashes)
			    : read_summary(st, segid, &m, &hashes);
	if (rc == KVF_OK && m.seqno > st->dur.synced_seqno)
		rc = check_pages(st, segid, &m, hashes);
	if (rc == KVF_ECORRUPT && m.seqno > st->dur.synced_seqno) {
		/* cut short by the crash: not there */
		rc = drop_seg(dropped, segid);
		goto out;
	}
	if (rc == KVF_ECORRUPT)
		corrupt = 1;
	else if (rc != KVF_OK)
		goto out;
	if ((rc = seg_mark_sealed(st, segid, &m)) != KVF_OK)
		goto out;
	if (corrupt)
		st->segtab.info[segid].state = SEG_CORRUPT;
	/* pages of a damaged segment get a check that cannot match
	 * (count_refs: it has no checks[segid]), so reads say KVF_ECORRUPT */
	for (uint32_t i = 0; i < m.n_runs && rc == KVF_OK; i++) {
		struct meta_run r;

		memcpy(&r, &runs[i], sizeof(r));
		rc = apply(st, r.ns, r.seq, r.stream, r.group, r.stride, r.n,
			   addr_make(segid, r.page, st->page_bits), m.seqno, 0);
	}
	if (rc == KVF_OK && !corrupt) {
		checks[segid] = kvf_malloc((size_t)m.n_data_pages * sizeof(uint32_t));
		if (checks[segid] == NULL)
			rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		else
			for (uint32_t i = 0; i < m.n_data_pages; i++)
				checks[segid][i] = (uint32_t)hashes[i] & PAGE_CHECK_MASK;
	}
out:
	kvf_free(hashes);
	return rc;
}

static kvf_status apply_ref(kvf_store *st, uint64_t child)
{
	unsigned char key[9];
	struct meta_ref m;
	struct meta_ref_entry *e;
	struct seq *seq;
	void *val;
	size_t vlen;
	kvf_status rc;

	meta_key_u64(key, META_TAG_REF, child);
	if ((rc = catalog_get(st->cat, key, sizeof(key), &val, &vlen)) != KVF_OK)
		return rc == KVF_ENOENT ? KVF_OK : rc;
	memcpy(&m, val, sizeof(m));
	e = (struct meta_ref_entry *)((char *)val + sizeof(m));
	if ((seq = seq_get(st, child)) != NULL) {
		seq->has_ref_record = 1;
		seq_put(st, seq);
	}
	for (uint64_t i = 0; i < m.n && rc == KVF_OK; i++)
		rc = apply(st, SEQ_NS_USER, child, e[i].stream, e[i].group, 1,
			   1, e[i].addr, m.seqno, 1);
	kvf_free(val);
	return rc;
}

struct count_ctx {
	uint32_t **checks; /* per segment: page checks (page_check) */
	int oom;           /* a reference could not be counted */
};

/* count_refs - take the final index's references and fill its checks */
static void count_refs(kvf_store *st, struct seq *seq, void *arg)
{
	struct count_ctx *c = arg;
	uint32_t n = seq_n_streams(st);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);

		if (s == NULL)
			continue;
		for (uint32_t g = 0; g < s->n_groups; g++) {
			struct page_ref r = stream_page(s, g);
			uint32_t segid, page;
			struct seg_info *si;

			if (r.addr == ADDR_NONE)
				continue;
			segid = addr_seg(r.addr, st->page_bits);
			page = addr_page(r.addr, st->page_bits);
			si = segid < st->n_segments ? &st->segtab.info[segid] : NULL;
			if (si == NULL || si->live_bits == NULL || page >= si->n_data) {
				r.addr = ADDR_NONE; /* names no sealed page */
				stream_set_page(s, g, r);
				continue;
			}
			if (seg_ref_inc(st, r.addr) != KVF_OK)
				c->oom = 1;
			/* a damaged segment has no checks: its pages get
			 * one their own will not give (apply left 0) */
			r.check = c->checks[segid] ? c->checks[segid][page]
						   : ~r.check & PAGE_CHECK_MASK;
			stream_set_page(s, g, r);
		}
	}
}

/*
 * clip_lost - a sequence whose length covers a token group with no page
 * on media lost that group in a crash, and the tokens in it were never
 * synced: a fork commits its child's length when it returns while the
 * child's partial tail group is written only at the next sync, and a
 * power cut can take a segment written after the last one.  The length
 * goes back to the start of the first such group, a prefix of what was
 * appended, instead of reading zeros there.
 */
static void clip_lost(kvf_store *st, struct seq *seq, void *arg)
{
	uint32_t n = seq_n_streams(st);

	(void)arg;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);
		enum kv_kind kind;
		uint64_t need, g, *len;

		if (s == NULL)
			continue;
		kind = stream_kind(sid);
		if (kind != KIND_K && kind != KIND_V && kind != KIND_X)
			continue;
		need = seq_stream_groups(st, seq, sid);
		for (g = 0; g < need; g++)
			if (!(kind != KIND_X &&
			      dropmark_held(st, seq, dropmark_lane(st, stream_layer(sid),
								   stream_head(sid)),
					    g / st->group_stride)) &&
			    group_entry_used(st, s, seq_tokens(seq, kind,
							       stream_layer(sid)), g) &&
			    (g >= s->n_groups || stream_page(s, g).addr == ADDR_NONE))
				break;
		if (g == need)
			continue;
		g /= st->group_stride; /* the entry's token group */
		len = kind == KIND_X ? &seq->x_len[stream_layer(sid)]
				     : &seq->len[stream_layer(sid)];
		if (*len > g * st->group_tokens) {
			*len = g * st->group_tokens;
			seq->changes++; /* the next sync records it */
		}
	}
}

/* trim_drops - marks on groups a crash took past the length (a drop of
 * groups never synced, clip_lost) go, and the sequences whose "D" record
 * must say so are listed (written when the store is writable: else the
 * next writable open trims them again) */
struct trim_ctx {
	uint64_t *ids;
	size_t n, cap;
	int oom;
};

static void trim_drops(kvf_store *st, struct seq *seq, void *arg)
{
	struct trim_ctx *t = arg;

	if (seq->ns != SEQ_NS_USER || !dropmark_trim(st, seq))
		return;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 8;
		uint64_t *ids = kvf_realloc(t->ids, cap * sizeof(*ids));

		if (ids == NULL) {
			t->oom = 1;
			return;
		}
		t->ids = ids;
		t->cap = cap;
	}
	t->ids[t->n++] = seq->id;
}

kvf_status recovery_sync_record(kvf_store *st)
{
	unsigned char tag = META_TAG_SYNC;
	void *val;
	size_t vlen;
	kvf_status rc;

	rc = catalog_get(st->cat, &tag, 1, &val, &vlen);
	if (rc == KVF_OK) {
		struct meta_sync ms;

		if (vlen != sizeof(ms)) {
			kvf_free(val);
			return bad_record("sync", 0, vlen);
		}
		memcpy(&ms, val, sizeof(ms));
		kvf_free(val);
		st->dur.synced_seqno = ms.seqno;
		st->dur.n_syncs = ms.n_syncs;
		st->dur.n_points = ms.n_points;
		atomic_store(&st->c.user_bytes, ms.user_bytes);
		atomic_store(&st->c.data_bytes, ms.data_bytes);
		atomic_store(&st->c.padding_bytes, ms.padding_bytes);
		atomic_store(&st->c.kt_bytes, ms.kt_bytes);
		atomic_store(&st->c.cleaner_bytes, ms.cleaner_bytes);
		atomic_store(&st->c.summary_bytes, ms.summary_bytes);
		atomic_store(&st->c.optim_bytes, ms.optim_bytes);
		if (ms.seqno >= atomic_load(&st->writer.next_seqno))
			atomic_store(&st->writer.next_seqno, ms.seqno + 1);
	} else if (rc != KVF_ENOENT) {
		return rc;
	}
	return KVF_OK;
}

kvf_status recovery_load(kvf_store *st)
{
	struct rec_list l = { .st = st };
	struct count_ctx cc = { 0 };
	struct dropped dropped = { 0 };
	struct trim_ctx trim = { 0 };
	struct {
		struct seg_rec *rec;
		struct kvf_media_io *io;
		unsigned char *buf;
		size_t bytes; /* of buf: WINDOW_BYTES, or all a small
			       * store's summaries */
	} win = { 0 };
	unsigned char tag;
	struct catalog_batch *b;
	void *val;
	size_t vlen;
	kvf_status rc;

	tag = META_TAG_WEAR;
	rc = catalog_get(st->cat, &tag, 1, &val, &vlen);
	if (rc == KVF_OK) {
		if (vlen == (size_t)st->n_segments * sizeof(uint32_t))
			for (uint32_t i = 0; i < st->n_segments; i++)
				memcpy(&st->segtab.info[i].erase_count,
				       (char *)val + (size_t)i * 4, 4);
		kvf_free(val);
	} else if (rc != KVF_ENOENT) {
		return rc;
	}
	tag = META_TAG_SEQ;
	if ((rc = catalog_scan(st->cat, &tag, 1, load_seq, st)) != KVF_OK)
		return rc;
	tag = META_TAG_VBAR;
	if ((rc = catalog_scan(st->cat, &tag, 1, load_vbar, st)) != KVF_OK)
		return rc;
	tag = META_TAG_DROP; /* before the index: dropped groups stay out */
	if ((rc = catalog_scan(st->cat, &tag, 1, load_drop, st)) != KVF_OK)
		return rc;
	/* recency and frequency as of the last sync, stamped after those
	 * loading gave (a sequence without a record counts as older); the
	 * use clock goes on past them */
	{
		struct use_ctx u = { .st = st,
				     .base = atomic_load(&st->seqtab.use_clock) };

		tag = META_TAG_USE;
		if ((rc = catalog_scan(st->cat, &tag, 1, load_use, &u)) != KVF_OK)
			return rc;
		if (u.clock >= atomic_load(&st->seqtab.use_clock))
			atomic_store(&st->seqtab.use_clock, u.clock + 1);
	}
	tag = META_TAG_OPTIM_SEQ;
	if ((rc = catalog_scan(st->cat, &tag, 1, load_optim_seq, st)) != KVF_OK ||
	    (rc = optim_recovery_load(st)) != KVF_OK)
		return rc;
	tag = META_TAG_SEG;
	if ((rc = catalog_scan(st->cat, &tag, 1, list_seg, &l)) != KVF_OK)
		goto out;
	tag = META_TAG_REF;
	if ((rc = catalog_scan(st->cat, &tag, 1, list_ref, &l)) != KVF_OK)
		goto out;
	if (l.n > 1)
		qsort(l.items, l.n, sizeof(*l.items), cmp_item);
	cc.checks = kvf_calloc(st->n_segments, sizeof(uint32_t *));
	if (cc.checks == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		goto out;
	}
	/* a small store's summaries take less than a window (at least a
	 * page: a store with no segment reads nothing into it) */
	win.bytes = st->hdr.page_size;
	for (size_t i = 0, n = 0; i < l.n && win.bytes < WINDOW_BYTES; i++)
		if (l.items[i].tag == META_TAG_SEG)
			win.bytes = (size_t)++n *
				    summary_pages(st->data_per_seg,
						  st->hdr.page_size) *
				    st->hdr.page_size;
	if (win.bytes > WINDOW_BYTES)
		win.bytes = WINDOW_BYTES;
	win.rec = kvf_malloc(WINDOW_ITEMS * sizeof(*win.rec));
	win.io = kvf_malloc(WINDOW_ITEMS * sizeof(*win.io));
	win.buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, win.bytes);
	if (win.rec == NULL || win.io == NULL || win.buf == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		goto out;
	}
	for (size_t i = 0; i < l.n && rc == KVF_OK;) {
		size_t n = l.n - i < WINDOW_ITEMS ? l.n - i : WINDOW_ITEMS;

		n = window_read(st, l.items + i, n, win.rec, win.buf,
				win.bytes, win.io, &rc);
		for (size_t j = 0; j < n; j++, i++) {
			if (l.items[i].seqno >= atomic_load(&st->writer.next_seqno))
				atomic_store(&st->writer.next_seqno,
					     l.items[i].seqno + 1);
			if (rc != KVF_OK)
				;
			else if (l.items[i].tag == META_TAG_SEG)
				rc = apply_seg(st, (uint32_t)l.items[i].id,
					       &win.rec[j], cc.checks, &dropped);
			else
				rc = apply_ref(st, l.items[i].id);
			kvf_free(win.rec[j].val);
		}
	}
	if (rc != KVF_OK)
		goto out;
	if (seq_foreach(st, count_refs, &cc) != KVF_OK ||
	    seq_foreach(st, clip_lost, NULL) != KVF_OK)
		cc.oom = 1;
	if (seq_foreach(st, trim_drops, &trim) != KVF_OK || trim.oom)
		cc.oom = 1;
	if (cc.oom) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory for page references");
		goto out;
	}
	seg_finish_load(st);
	if (st->read_only)
		goto out;
	/* segments that no live page needs: trim now, drop their records;
	 * and the records of segments cut short */
	b = catalog_batch_new();
	if (b == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		goto out;
	}
	for (size_t i = 0; i < trim.n; i++) {
		struct seq *seq = seq_get_ns(st, SEQ_NS_USER, trim.ids[i]);

		if (seq && rc == KVF_OK)
			rc = dropmark_record(st, seq, b);
		if (seq)
			seq_put(st, seq);
	}
	for (size_t i = 0; i < dropped.n; i++) {
		unsigned char key[5];

		meta_key_u32(key, META_TAG_SEG, dropped.ids[i]);
		catalog_batch_delete(b, key, sizeof(key));
	}
	if (rc == KVF_OK)
		rc = seg_reclaim(st, UINT64_MAX, b);
	if (rc == KVF_OK && catalog_batch_count(b) > 0)
		rc = catalog_commit(st->cat, b, 1);
	catalog_batch_free(b);
	if (rc == KVF_OK)
		rc = tails_prefetch(st);
	if (rc == KVF_OK && seq_foreach(st, load_tails, &rc) != KVF_OK)
		rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
out:
	if (cc.checks)
		for (uint32_t i = 0; i < st->n_segments; i++)
			kvf_free(cc.checks[i]);
	kvf_free(cc.checks);
	kvf_free(win.rec);
	kvf_free(win.io);
	kvf_free(win.buf);
	kvf_free(dropped.ids);
	kvf_free(trim.ids);
	kvf_free(l.items);
	return rc;
}
