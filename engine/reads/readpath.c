/*
 * readpath.c - reads of stored tokens (the public kvf_read and
 * kvf_read_x are in read_calls.c).
 *
 * A stream's group g is in one of three places: the group buffer (the
 * partial tail group), a page of one of the sequence's open segments (not
 * written yet), or a page on media.  Media pages are gathered into batches
 * of up to READ_BATCH pages, adjacent pages of one segment merged into one
 * request, read with one kvf_media_read (the file backend keeps them in
 * flight together), then checked and handed out in token order.
 */
#include "engine/reads/readpath.h"

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/group.h"
#include "engine/sequences/dropmark.h"
#include "engine/base/key.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "engine/base/tier.h"

#define READ_BATCH 128u /* pages per media read batch (512 KiB of 4 KiB) */

static kvf_status corrupt(kvf_store *st, uint32_t addr, uint32_t want,
			  uint32_t found, const char *what)
{
	uint32_t segid = addr_seg(addr, st->page_bits);

	return kvf_fail(KVF_ECORRUPT,
			"%s: segment %u (stripe %u, segment %llu of the stripe) page %u: checksum mismatch (index has %08x, page has %08x)",
			what, segid, seg_stripe(st, segid),
			(unsigned long long)seg_in_stripe(st, segid),
			addr_page(addr, st->page_bits), want, found);
}

/* count_read - n pages of seq read from media */
static void count_read(kvf_store *st, struct seq *seq, uint32_t n)
{
	uint64_t bytes = (uint64_t)n * st->hdr.page_size;

	atomic_fetch_add(&st->c.bytes_read, bytes);
	atomic_fetch_add(&st->c.pages_read, n);
	if (seq)
		atomic_fetch_add(&seq->bytes_read, bytes);
}

void read_io_add(kvf_store *st, struct kvf_media_io *io, uint32_t *n_io,
		 uint32_t addr, void *dst)
{
	uint32_t segid = addr_seg(addr, st->page_bits);
	uint32_t page = addr_page(addr, st->page_bits);
	struct kvf_media_io *last = *n_io ? &io[*n_io - 1] : NULL;

	if (last && last->stripe == seg_stripe(st, segid) &&
	    last->seg == seg_in_stripe(st, segid) &&
	    last->page + last->n_pages == page &&
	    (unsigned char *)last->buf + (size_t)last->n_pages * st->hdr.page_size ==
		    (unsigned char *)dst) {
		last->n_pages++;
		return;
	}
	io[(*n_io)++] = (struct kvf_media_io){
		.stripe = seg_stripe(st, segid), .seg = seg_in_stripe(st, segid),
		.page = page, .n_pages = 1, .buf = dst };
}

/* cached - the bytes of ref from the memory tier, pinned (*slot), for a
 * caller's sequence (optimizer state is not cached); NULL on a miss */
static const unsigned char *cached(kvf_store *st, struct seq *seq,
				   const struct page_ref *ref, uint32_t *slot)
{
	if (seq->ns != SEQ_NS_USER)
		return NULL;
	return tier_get(st, ref->addr, ref->check, slot);
}

kvf_status page_read_verified(kvf_store *st, struct seq *seq,
			      const struct page_ref *ref, void *dst,
			      const char *what)
{
	uint32_t segid = addr_seg(ref->addr, st->page_bits);
	uint32_t got;
	kvf_status rc;

	rc = kvf_media_read_pages(st->media, seg_stripe(st, segid),
				  seg_in_stripe(st, segid),
				  addr_page(ref->addr, st->page_bits), 1, dst);
	if (rc != KVF_OK)
		return rc;
	count_read(st, seq, 1);
	got = page_check(dst, st->hdr.page_size);
	if (got != ref->check)
		return corrupt(st, ref->addr, ref->check, got, what);
	return KVF_OK;
}

/* mapped - the bytes of ref in place, when the media keeps pages in
 * memory (checked only with verify_reads = 1: the store wrote them there
 * itself); NULL when it must be read (or *rc on a bad check) */
static const unsigned char *mapped(kvf_store *st, struct seq *seq,
				   const struct page_ref *ref, kvf_status *rc)
{
	uint32_t segid = addr_seg(ref->addr, st->page_bits);
	const unsigned char *p = kvf_media_map(st->media, seg_stripe(st, segid),
					       seg_in_stripe(st, segid),
					       addr_page(ref->addr, st->page_bits));
	uint32_t got;

	if (p == NULL)
		return NULL;
	count_read(st, seq, 1);
	if (st->opts.verify_reads == 1 &&
	    (got = page_check(p, st->hdr.page_size)) != ref->check) {
		*rc = corrupt(st, ref->addr, ref->check, got, "read");
		return NULL;
	}
	return p;
}

/* tail_tokens - tokens in group g of a stream holding `tokens` tokens */
static uint32_t group_tokens_in(kvf_store *st, uint64_t tokens, uint64_t g)
{
	uint64_t first = g * st->group_tokens;
	uint64_t n = tokens - first;

	return (uint32_t)(n < st->group_tokens ? n : st->group_tokens);
}

/* is_tail - group g is the partial last group, kept in the group buffer */
static int is_tail(kvf_store *st, uint64_t tokens, uint64_t g)
{
	return g == tokens / st->group_tokens && tokens % st->group_tokens;
}

kvf_status stream_tail(kvf_store *st, struct seq *seq, struct stream *s,
		       uint64_t tokens)
{
	uint64_t g = tokens / st->group_tokens, e = group_plain_entry(st, g);
	uint32_t tail = (uint32_t)(tokens % st->group_tokens);
	uint32_t ps = st->hdr.page_size, np = group_fill_pages(st, tail);
	unsigned char *page;
	kvf_status rc = KVF_OK;

	if (s->gbuf)
		return KVF_OK;
	if ((rc = stream_gbuf_alloc(st, s, group_buf_bytes(st))) != KVF_OK)
		return rc;
	if (tail == 0 || e >= s->n_groups || stream_page(s, e).addr == ADDR_NONE)
		return KVF_OK;
	/* after a reopen the tail lives in partial pages on media */
	page = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)np * ps);
	if (page == NULL) {
		stream_gbuf_free(st, s);
		return kvf_fail(KVF_ENOMEM, "out of memory");
	}
	for (uint32_t p = 0; p < np && rc == KVF_OK; p++) {
		struct page_ref ref = e + p < s->n_groups
			? stream_page(s, e + p) : (struct page_ref){ ADDR_NONE, 0 };

		if (ref.addr == ADDR_NONE)
			rc = kvf_fail(KVF_ECORRUPT,
				      "loading a tail group: the index has no page for entry %llu of a stream of sequence %llu",
				      (unsigned long long)(e + p),
				      (unsigned long long)seq->id);
		else
			rc = page_read_verified(st, seq, &ref,
						page + (size_t)p * ps,
						"loading a tail group");
	}
	if (rc == KVF_OK) {
		memcpy(s->gbuf, page, (size_t)tail * st->row_bytes);
		s->tail_written = tail;
	} else {
		stream_gbuf_free(st, s);
	}
	kvf_free(page);
	return rc;
}

/* no_group_page - the index has no page for entry e (of group g) */
static kvf_status no_group_page(const struct seq *seq, uint64_t g)
{
	return kvf_fail(KVF_ECORRUPT,
			"read: the index has no page for token group %llu of sequence %llu",
			(unsigned long long)g, (unsigned long long)seq->id);
}

/*
 * The path of stores whose groups take more than one page (engine/base/
 * group.h): a group's pages are gathered into one buffer, each from
 * wherever it is (waiting for write-back, an open segment, the memory
 * media, the memory tier: copied now; on media: queued), and the queued
 * pages of many groups are read together (adjacent pages in one request,
 * all in flight at once), each checked and offered to the tier.
 */
#define GATHER_PAGES 128u /* pages a gather reads in one go */

struct gather {
	struct kvf_media_io io[GATHER_PAGES]; /* requests, merged runs */
	struct page_ref ref[GATHER_PAGES];    /* what the index says */
	unsigned char *dst[GATHER_PAGES];     /* where each page goes */
	uint32_t n_io, n_read;                /* requests; pages queued */
};

/* gather_group - whole group g of s (not the tail) into dst (its sealed
 * pages, group.h, KVF_MEDIA_ALIGN-aligned): what is in memory now, the
 * rest queued on ga (which has room for that many more pages) for
 * gather_read */
static kvf_status gather_group(kvf_store *st, struct seq *seq, struct stream *s,
			       uint64_t g, unsigned char *dst, struct gather *ga)
{
	uint32_t P = group_sealed_pages(st, s), ps = st->hdr.page_size;
	uint64_t e0 = group_sealed_entry(st, s, g);
	kvf_status rc = KVF_OK;

	for (uint32_t p = 0; p < P; p++) {
		uint64_t e = e0 + p;
		unsigned char *d = dst + (size_t)p * ps;
		const unsigned char *q;
		uint32_t slot = TIER_NONE;
		struct page_ref r;

		if ((q = stream_waiting(s, e)) != NULL) {
			memcpy(d, q, ps);
			continue;
		}
		if (e >= s->n_groups || (r = stream_page(s, e)).addr == ADDR_NONE)
			return no_group_page(seq, g);
		if ((q = openseg_page(st, seq, r.addr)) == NULL &&
		    (q = mapped(st, seq, &r, &rc)) == NULL && rc != KVF_OK)
			return rc;
		if (q == NULL)
			q = cached(st, seq, &r, &slot);
		if (q) {
			memcpy(d, q, ps);
			if (slot != TIER_NONE)
				tier_unpin(st, slot);
			continue;
		}
		read_io_add(st, ga->io, &ga->n_io, r.addr, d);
		ga->ref[ga->n_read] = r;
		ga->dst[ga->n_read++] = d;
	}
	return KVF_OK;
}

/* gather_read - read what ga queued, check it, offer it to the tier */
static kvf_status gather_read(kvf_store *st, struct seq *seq, struct gather *ga)
{
	uint32_t ps = st->hdr.page_size;
	kvf_status rc = KVF_OK;

	if (ga->n_io && (rc = kvf_media_read(st->media, ga->io, ga->n_io)) == KVF_OK)
		count_read(st, seq, ga->n_read);
	for (uint32_t i = 0; i < ga->n_read && rc == KVF_OK; i++) {
		uint32_t got = page_check(ga->dst[i], ps);

		if (got != ga->ref[i].check)
			rc = corrupt(st, ga->ref[i].addr, ga->ref[i].check, got,
				     "read");
		else if (seq->ns == SEQ_NS_USER)
			tier_put_read(st, ga->ref[i].addr, got, ga->dst[i]);
	}
	ga->n_io = ga->n_read = 0;
	return rc;
}

/* group_fetch - gather_group and gather_read of one group */
static kvf_status group_fetch(kvf_store *st, struct seq *seq, struct stream *s,
			      uint64_t g, unsigned char *dst)
{
	struct gather ga;
	kvf_status rc;

	ga.n_io = ga.n_read = 0;
	if ((rc = gather_group(st, seq, s, g, dst, &ga)) != KVF_OK)
		return rc;
	return gather_read(st, seq, &ga);
}

/* gather_groups - groups a gather holds at once of n_streams streams */
static uint32_t gather_groups(const kvf_store *st, uint32_t n_streams)
{
	uint32_t k = GATHER_PAGES / (group_buf_bytes(st) / st->hdr.page_size *
				     n_streams);

	return k ? k : 1;
}

kvf_status stream_group_copy(kvf_store *st, struct seq *seq, struct stream *s,
			     uint64_t tokens, uint64_t g, void *dst)
{
	struct page_ref ref;
	const unsigned char *p;
	void *page;
	kvf_status rc;

	memset(dst, 0, group_buf_bytes(st));
	if (is_tail(st, tokens, g)) {
		if ((rc = stream_tail(st, seq, s, tokens)) != KVF_OK)
			return rc;
		memcpy(dst, s->gbuf,
		       (size_t)group_tokens_in(st, tokens, g) * st->row_bytes);
		return KVF_OK;
	}
	if (st->group_stride > 1) {
		const struct kvc_codec_layout *lay = stream_codec(st, s);

		page = kvf_aligned_alloc(KVF_MEDIA_ALIGN, group_buf_bytes(st));
		if (page == NULL)
			return kvf_fail(KVF_ENOMEM, "out of memory");
		rc = group_fetch(st, seq, s, g, page);
		if (rc == KVF_OK && lay)
			st->ck->decode(lay, page, 0, st->group_tokens,
				       (kvf_dtype)st->hdr.dtype, dst);
		else if (rc == KVF_OK)
			memcpy(dst, page, group_buf_bytes(st));
		kvf_free(page);
		return rc;
	}
	if ((p = stream_waiting(s, g)) != NULL) {
		memcpy(dst, p, st->hdr.page_size);
		return KVF_OK;
	}
	ref = stream_page(s, g);
	if ((p = openseg_page(st, seq, ref.addr)) != NULL) {
		memcpy(dst, p, st->hdr.page_size);
		return KVF_OK;
	}
	page = kvf_aligned_alloc(KVF_MEDIA_ALIGN, st->hdr.page_size);
	if (page == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory");
	rc = page_read_verified(st, seq, &ref, page, "reading a group");
	if (rc == KVF_OK)
		memcpy(dst, page, st->hdr.page_size);
	kvf_free(page);
	return rc;
}

/* A batch of media pages waiting to be read and handed out. */
struct batch {
	unsigned char *buf;            /* READ_BATCH pages, aligned */
	struct kvf_media_io io[READ_BATCH];
	uint32_t n_io;                 /* requests (merged runs) */
	uint64_t group[READ_BATCH];    /* group of each page */
	struct page_ref ref[READ_BATCH]; /* what the index says */
	uint32_t n;                    /* pages */
	struct batch *next;            /* store's spares; reads.lock */
	struct kvf_media_read_op op;   /* a read left in flight (pair_core) */
	int in_flight;                 /* op holds a started read */
};

#define READ_BATCHES_KEPT 8u /* read batches the store keeps for reuse */

/* read_batch_new - a batch with its page buffer, from the store's spares
 * when there is one (a 512 KiB aligned buffer is not worth mapping anew
 * for every call), or NULL (message set) */
static struct batch *read_batch_new(kvf_store *st)
{
	struct batch *b;

	pthread_mutex_lock(&st->reads.lock);
	b = st->reads.list;
	if (b) {
		st->reads.list = b->next;
		st->reads.n--;
	}
	pthread_mutex_unlock(&st->reads.lock);
	if (b) {
		b->n = b->n_io = 0;
		return b;
	}
	b = kvf_calloc(1, sizeof(*b));
	if (b)
		b->buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN,
					   (size_t)READ_BATCH * st->hdr.page_size);
	if (b == NULL || b->buf == NULL) {
		kvf_free(b);
		kvf_fail(KVF_ENOMEM, "out of memory for read buffers");
		return NULL;
	}
	return b;
}

static void read_batch_free(kvf_store *st, struct batch *b)
{
	if (b == NULL)
		return;
	pthread_mutex_lock(&st->reads.lock);
	if (st->reads.n < READ_BATCHES_KEPT) {
		b->next = st->reads.list;
		st->reads.list = b;
		st->reads.n++;
		b = NULL;
	}
	pthread_mutex_unlock(&st->reads.lock);
	if (b)
		kvf_free(b->buf);
	kvf_free(b);
}

void read_spares_init(kvf_store *st)
{
	pthread_mutex_init(&st->reads.lock, NULL);
}

void read_spares_free(kvf_store *st)
{
	while (st->reads.list) {
		struct batch *b = st->reads.list;

		st->reads.list = b->next;
		kvf_free(b->buf);
		kvf_free(b);
	}
	st->reads.n = 0;
	pthread_mutex_destroy(&st->reads.lock);
}

static void batch_add(kvf_store *st, struct batch *b, uint64_t g,
		      const struct page_ref *ref)
{
	read_io_add(st, b->io, &b->n_io, ref->addr,
		    b->buf + (size_t)b->n * st->hdr.page_size);
	b->group[b->n] = g;
	b->ref[b->n] = *ref;
	b->n++;
}

/* emit - hand tokens [t0, t1) of group g, whose page is at page, to fn */
static kvf_status emit(kvf_store *st, uint64_t g, const unsigned char *page,
		       uint64_t t0, uint64_t t1, span_fn fn, void *arg)
{
	uint64_t first = g * st->group_tokens;
	uint64_t a = t0 > first ? t0 : first;
	uint64_t z = t1 < first + st->group_tokens ? t1 : first + st->group_tokens;

	return fn(arg, a, (uint32_t)(z - a),
		  page + (size_t)(a - first) * st->row_bytes);
}

/* batch_media - read the batch's pages from media (no checks) */
static kvf_status batch_media(kvf_store *st, struct seq *seq, struct batch *b)
{
	kvf_status rc;

	if (b->n == 0)
		return KVF_OK;
	if ((rc = kvf_media_read(st->media, b->io, b->n_io)) != KVF_OK)
		return rc;
	count_read(st, seq, b->n);
	return KVF_OK;
}

/* batch_start / batch_finish - batch_media with the caller working in
 * between (kvf_media_read_start) */
static kvf_status batch_start(kvf_store *st, struct batch *b)
{
	kvf_status rc;

	if (b->n == 0)
		return KVF_OK;
	if ((rc = kvf_media_read_start(st->media, b->io, b->n_io, &b->op)) != KVF_OK)
		return rc;
	b->in_flight = 1;
	return KVF_OK;
}

/* batch_finish - the read landed (counted if it succeeded) */
static kvf_status batch_finish(kvf_store *st, struct seq *seq, struct batch *b)
{
	kvf_status rc;

	if (b == NULL || !b->in_flight)
		return KVF_OK;
	b->in_flight = 0;
	if ((rc = kvf_media_read_finish(st->media, &b->op)) == KVF_OK)
		count_read(st, seq, b->n);
	return rc;
}

/* batch_check - verify the pages batch_media read and offer them to the
 * memory tier */
static kvf_status batch_check(kvf_store *st, struct seq *seq, struct batch *b)
{
	uint32_t ps = st->hdr.page_size;

	for (uint32_t i = 0; i < b->n; i++) {
		const unsigned char *p = b->buf + (size_t)i * ps;
		uint32_t got = page_check(p, ps);

		if (got != b->ref[i].check)
			return corrupt(st, b->ref[i].addr, b->ref[i].check, got,
				       "read");
		if (seq->ns == SEQ_NS_USER)
			tier_put_read(st, b->ref[i].addr, got, p);
	}
	return KVF_OK;
}

/* batch_read - read and verify the batch's pages (no hand-out), and offer
 * them to the memory tier */
static kvf_status batch_read(kvf_store *st, struct seq *seq, struct batch *b)
{
	kvf_status rc = batch_media(st, seq, b);

	return rc == KVF_OK ? batch_check(st, seq, b) : rc;
}

static kvf_status batch_run(kvf_store *st, struct seq *seq, struct batch *b,
			    uint64_t t0, uint64_t t1, span_fn fn, void *arg)
{
	uint32_t ps = st->hdr.page_size;
	kvf_status rc;

	if ((rc = batch_read(st, seq, b)) != KVF_OK)
		return rc;
	for (uint32_t i = 0; i < b->n; i++) {
		const unsigned char *p = b->buf + (size_t)i * ps;

		if ((rc = emit(st, b->group[i], p, t0, t1, fn, arg)) != KVF_OK)
			return rc;
	}
	b->n = 0;
	b->n_io = 0;
	return KVF_OK;
}

/* spans_groups - stream_read_spans for groups of several pages: the
 * groups of a gather at a time */
static kvf_status spans_groups(kvf_store *st, struct seq *seq, struct stream *s,
			       uint64_t tokens, uint64_t t0, uint64_t t1,
			       span_fn fn, span_coded_fn cfn, void *arg)
{
	uint32_t K = gather_groups(st, 1), G = st->group_tokens;
	size_t gb = group_buf_bytes(st);
	size_t slot = (size_t)group_sealed_pages(st, s) * st->hdr.page_size;
	const struct kvc_codec_layout *lay = stream_codec(st, s);
	unsigned char *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, K * gb);
	unsigned char *dec = lay && !cfn ? kvf_malloc((size_t)G * st->row_bytes)
					 : NULL;
	struct gather *ga = kvf_malloc(sizeof(*ga));
	uint64_t last = (t1 - 1) / G;
	kvf_status rc = KVF_OK;

	if (buf == NULL || ga == NULL || (lay && !cfn && dec == NULL)) {
		kvf_free(buf);
		kvf_free(dec);
		kvf_free(ga);
		return kvf_fail(KVF_ENOMEM, "out of memory for token groups");
	}
	ga->n_io = ga->n_read = 0;
	for (uint64_t g0 = t0 / G; g0 <= last && rc == KVF_OK; g0 += K) {
		const unsigned char *rows[GATHER_PAGES];
		uint32_t n = (uint32_t)(last - g0 + 1 < K ? last - g0 + 1 : K);

		for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
			if (is_tail(st, tokens, g0 + i)) {
				rc = stream_tail(st, seq, s, tokens);
				rows[i] = s->gbuf;
			} else {
				/* groups side by side, so that pages adjacent
				 * on media are read in one request */
				rows[i] = buf + i * slot;
				rc = gather_group(st, seq, s, g0 + i, buf + i * slot, ga);
			}
		}
		if (rc == KVF_OK)
			rc = gather_read(st, seq, ga);
		for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
			uint64_t first = (g0 + i) * G;
			uint64_t a = t0 > first ? t0 : first;
			uint64_t z = t1 < first + G ? t1 : first + G;

			if (lay && !is_tail(st, tokens, g0 + i) && cfn) {
				/* an encoded group, as it is */
				rc = cfn(arg, a, (uint32_t)(z - a), rows[i],
					 (uint32_t)(a - first));
				continue;
			}
			if (lay && !is_tail(st, tokens, g0 + i)) {
				/* an encoded group: its tokens decoded */
				st->ck->decode(lay, rows[i], 0, G,
					       (kvf_dtype)st->hdr.dtype, dec);
				rows[i] = dec;
			}
			rc = emit(st, g0 + i, rows[i], t0, t1, fn, arg);
		}
	}
	kvf_free(buf);
	kvf_free(dec);
	kvf_free(ga);
	return rc;
}

kvf_status stream_read_spans(kvf_store *st, struct seq *seq, struct stream *s,
			     uint64_t tokens, uint64_t t0, uint64_t t1,
			     span_fn fn, void *arg)
{
	struct batch *b = NULL;
	kvf_status rc = KVF_OK;

	if (t0 >= t1)
		return KVF_OK;
	if (st->group_stride > 1)
		return spans_groups(st, seq, s, tokens, t0, t1, fn, NULL, arg);
	for (uint64_t g = t0 / st->group_tokens; g <= (t1 - 1) / st->group_tokens;
	     g++) {
		const unsigned char *p = NULL;
		uint32_t slot = TIER_NONE;

		if (is_tail(st, tokens, g)) {
			if ((rc = stream_tail(st, seq, s, tokens)) != KVF_OK)
				break;
			p = s->gbuf;
		} else if ((p = stream_waiting(s, g)) != NULL) {
			/* waiting for write-back, in DRAM */
		} else if (g >= s->n_groups || stream_page(s, g).addr == ADDR_NONE) {
			rc = kvf_fail(KVF_ECORRUPT,
				      "read: the index has no page for token group %llu of sequence %llu",
				      (unsigned long long)g,
				      (unsigned long long)seq->id);
			break;
		} else {
			struct page_ref r = stream_page(s, g);

			p = openseg_page(st, seq, r.addr);
			if (p == NULL && (p = mapped(st, seq, &r, &rc)) == NULL &&
			    rc != KVF_OK)
				break;
			if (p == NULL)
				p = cached(st, seq, &r, &slot);
		}
		if (p) {
			/* in memory: first hand out what is queued before it */
			if (b)
				rc = batch_run(st, seq, b, t0, t1, fn, arg);
			if (rc == KVF_OK)
				rc = emit(st, g, p, t0, t1, fn, arg);
			if (slot != TIER_NONE)
				tier_unpin(st, slot);
			if (rc != KVF_OK)
				break;
			continue;
		}
		if (b == NULL && (b = read_batch_new(st)) == NULL) {
			rc = KVF_ENOMEM;
			break;
		}
		{
			struct page_ref r = stream_page(s, g);

			batch_add(st, b, g, &r);
		}
		if (b->n == READ_BATCH && (rc = batch_run(st, seq, b, t0, t1, fn, arg)) != KVF_OK)
			break;
	}
	if (rc == KVF_OK && b)
		rc = batch_run(st, seq, b, t0, t1, fn, arg);
	read_batch_free(st, b);
	return rc;
}

kvf_status stream_read_spans_coded(kvf_store *st, struct seq *seq,
				   struct stream *s, uint64_t tokens,
				   uint64_t t0, uint64_t t1, span_fn fn,
				   span_coded_fn cfn, void *arg)
{
	if (t0 >= t1)
		return KVF_OK;
	if (stream_codec(st, s) == NULL)
		return stream_read_spans(st, seq, s, tokens, t0, t1, fn, arg);
	return spans_groups(st, seq, s, tokens, t0, t1, fn, cfn, arg);
}

/* ---- two streams in step (K and V for attention) ------------------------ */

#define PAIR_GROUPS 64u /* groups per batch: 2 * 64 pages read together */

/* pair_page - where group g of s is: *p set for a page in memory, else
 * *slot = SLOT_LATER and *r is the page to find in the memory tier or
 * read (pair_resolve) */
#define SLOT_LATER (-2)
static kvf_status pair_page(kvf_store *st, struct seq *seq, struct stream *s,
			    uint64_t tokens, uint64_t g, const unsigned char **p,
			    int *slot, struct page_ref *r_out)
{
	uint64_t e = group_sealed_entry(st, s, g); /* g, but with a codec */
	struct page_ref r;
	kvf_status rc;

	*p = NULL;
	*slot = -1;
	if (is_tail(st, tokens, g)) {
		if ((rc = stream_tail(st, seq, s, tokens)) != KVF_OK)
			return rc;
		*p = s->gbuf;
		return KVF_OK;
	}
	if ((*p = stream_waiting(s, e)) != NULL)
		return KVF_OK;
	if (e >= s->n_groups || (r = stream_page(s, e)).addr == ADDR_NONE)
		return kvf_fail(KVF_ECORRUPT,
				"read: the index has no page for token group %llu of sequence %llu",
				(unsigned long long)g, (unsigned long long)seq->id);
	if ((*p = openseg_page(st, seq, r.addr)) != NULL)
		return KVF_OK;
	rc = KVF_OK;
	if ((*p = mapped(st, seq, &r, &rc)) != NULL || rc != KVF_OK)
		return rc;
	*slot = SLOT_LATER;
	*r_out = r;
	return KVF_OK;
}

/* pair_resolve - the n pages of one stream that pair_page left for later:
 * those the memory tier has (pinned; their slots in pin) under one taking
 * of its lock, the rest into the batch in order */
static void pair_resolve(kvf_store *st, struct seq *seq, struct batch *b,
			 const uint64_t *g, uint32_t n, const unsigned char **p,
			 int *slot, const struct page_ref *r, uint32_t *pin)
{
	uint32_t addr[PAIR_GROUPS] = { 0 }, check[PAIR_GROUPS] = { 0 };
	uint32_t at[PAIR_GROUPS], m = 0;
	const unsigned char *hit[PAIR_GROUPS];

	for (uint32_t i = 0; i < n; i++)
		if (slot[i] == SLOT_LATER) {
			addr[m] = r[i].addr;
			check[m] = r[i].check;
			at[m++] = i;
		}
	if (seq->ns == SEQ_NS_USER)
		tier_get_many(st, addr, check, m, hit, pin);
	else
		for (uint32_t k = 0; k < m; k++) {
			hit[k] = NULL;
			pin[k] = TIER_NONE;
		}
	for (uint32_t k = 0; k < m; k++) {
		uint32_t i = at[k];

		if (hit[k]) {
			p[i] = hit[k];
			slot[i] = -1;
		} else {
			slot[i] = (int)b->n;
			batch_add(st, b, g[i], &r[i]);
		}
	}
}

/* hand_pair - tokens [t0, t1) of group g, whose K and V are at pa and
 * pb, to fn (rows) or, for a codec store's sealed group with cfn, to cfn
 * as it is; without cfn a sealed group is decoded into dec first */
static kvf_status hand_pair(kvf_store *st, uint64_t tokens, uint64_t g,
			    uint64_t t0, uint64_t t1, const unsigned char *pa,
			    const unsigned char *pb, int coded, unsigned char *dec,
			    pair_fn fn, coded_fn cfn, void *arg)
{
	uint32_t G = st->group_tokens, rb = st->row_bytes;
	uint64_t lo = g * G, hi = lo + G;
	size_t off;

	lo = t0 > lo ? t0 : lo;
	hi = t1 < hi ? t1 : hi;
	if (lo >= hi)
		return KVF_OK;
	if (coded && !is_tail(st, tokens, g)) {
		kvf_dtype dt = (kvf_dtype)st->hdr.dtype;

		if (cfn)
			return cfn(arg, lo, (uint32_t)(hi - lo), pa, pb,
				   (uint32_t)(lo - g * G));
		st->ck->decode(&st->codec_lay[0], pa, 0, G, dt, dec);
		st->ck->decode(&st->codec_lay[1], pb, 0, G, dt, dec + (size_t)G * rb);
		pa = dec;
		pb = dec + (size_t)G * rb;
	}
	off = (size_t)(lo - g * G) * rb;
	return fn(arg, lo, (uint32_t)(hi - lo), pa + off, pb + off);
}

/* pair_groups - pair_core for groups of several pages: the groups of a
 * gather (both streams' pages) at a time */
static kvf_status pair_groups(kvf_store *st, struct seq *seq, struct stream *a,
			      struct stream *bs, uint64_t tokens, uint64_t t0,
			      uint64_t t1, const uint64_t *list, uint64_t first,
			      uint64_t n_groups, pair_fn fn, coded_fn cfn,
			      void *arg)
{
	uint32_t G = st->group_tokens, rb = st->row_bytes;
	uint32_t K = gather_groups(st, 2);
	size_t gb = group_buf_bytes(st);
	/* K and V of a codec store are both encoded: decoded into dec for
	 * fn, or handed to cfn as they are */
	int coded = a->enc && bs->enc;
	size_t slot = (size_t)st->group_pages * st->hdr.page_size;
	unsigned char *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, 2 * K * gb);
	unsigned char *dec = coded && cfn == NULL
				     ? kvf_malloc(2 * (size_t)G * rb) : NULL;
	struct gather *ga = kvf_malloc(sizeof(*ga));
	kvf_status rc = KVF_OK;

	if (buf == NULL || ga == NULL || (coded && cfn == NULL && dec == NULL)) {
		kvf_free(buf);
		kvf_free(dec);
		kvf_free(ga);
		return kvf_fail(KVF_ENOMEM, "out of memory for token groups");
	}
	ga->n_io = ga->n_read = 0;
	for (uint64_t i0 = 0; i0 < n_groups && rc == KVF_OK; i0 += K) {
		const unsigned char *pa[GATHER_PAGES], *pb[GATHER_PAGES];
		uint32_t n = (uint32_t)(n_groups - i0 < K ? n_groups - i0 : K);

		for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
			uint64_t g = list ? list[i0 + i] : first + i0 + i;
			unsigned char *da = buf + (size_t)(2 * i) * gb, *db = da + gb;

			/* a codec store's encoded groups of one stream side by
			 * side (K's, then V's), so that pages adjacent on media
			 * are read in one request */
			if (coded) {
				da = buf + (size_t)i * slot;
				db = buf + ((size_t)K + i) * slot;
			}

			if (is_tail(st, tokens, g)) {
				if ((rc = stream_tail(st, seq, a, tokens)) == KVF_OK)
					rc = stream_tail(st, seq, bs, tokens);
				pa[i] = a->gbuf;
				pb[i] = bs->gbuf;
				continue;
			}
			pa[i] = da;
			pb[i] = db;
			if ((rc = gather_group(st, seq, a, g, da, ga)) == KVF_OK)
				rc = gather_group(st, seq, bs, g, db, ga);
		}
		if (rc == KVF_OK)
			rc = gather_read(st, seq, ga);
		for (uint32_t i = 0; i < n && rc == KVF_OK; i++)
			rc = hand_pair(st, tokens, list ? list[i0 + i] : first + i0 + i,
				       t0, t1, pa[i], pb[i], coded, dec, fn, cfn, arg);
	}
	kvf_free(buf);
	kvf_free(dec);
	kvf_free(ga);
	return rc;
}

/*
 * One step of pair_core: up to PAIR_GROUPS groups of both streams, their
 * pages found in memory or queued on the step's batch.  Steps run as a
 * pipeline of two: the media read of step i + 1 is in flight
 * (kvf_media_read_start) while the caller checks and hands out step i, so
 * the device is not idle while pages are verified, cached and attended.
 */
struct pair_step {
	struct batch *b;
	uint32_t n;                        /* groups */
	uint64_t g[PAIR_GROUPS];
	const unsigned char *pa[PAIR_GROUPS], *pb[PAIR_GROUPS];
	int sa[PAIR_GROUPS], sb[PAIR_GROUPS]; /* batch slots, or -1 */
	struct page_ref ra[PAIR_GROUPS], rb[PAIR_GROUPS];
	uint32_t pin[2 * PAIR_GROUPS];     /* tier pins of both streams */
};

/* What pair_core's steps share. */
struct pair_run {
	kvf_store *st;
	struct seq *seq;
	struct stream *a, *bs;
	uint64_t tokens, t0, t1;
	const uint64_t *list;
	uint64_t first;
	int coded;
	unsigned char *dec;
	pair_fn fn;
	coded_fn cfn;
	void *arg;
};

/* pair_prep - step s for groups i0.. (n of them): where each page is, the
 * tier's pinned, the rest queued on s->b.  On failure some may be pinned:
 * pair_unpin. */
static kvf_status pair_prep(struct pair_run *r, struct pair_step *s,
			    uint64_t i0, uint32_t n)
{
	kvf_store *st = r->st;
	kvf_status rc = KVF_OK;

	s->n = n;
	s->b->n = s->b->n_io = 0;
	for (uint32_t i = 0; i < 2 * n; i++)
		s->pin[i] = TIER_NONE;
	for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
		s->g[i] = r->list ? r->list[i0 + i] : r->first + i0 + i;
		rc = pair_page(st, r->seq, r->a, r->tokens, s->g[i], &s->pa[i],
			       &s->sa[i], &s->ra[i]);
	}
	for (uint32_t i = 0; i < n && rc == KVF_OK; i++)
		rc = pair_page(st, r->seq, r->bs, r->tokens, s->g[i], &s->pb[i],
			       &s->sb[i], &s->rb[i]);
	/* all of a's pages, then all of b's: consecutive pages of one
	 * stream merge into one request (batch_add) */
	if (rc == KVF_OK) {
		pair_resolve(st, r->seq, s->b, s->g, n, s->pa, s->sa, s->ra,
			     s->pin);
		pair_resolve(st, r->seq, s->b, s->g, n, s->pb, s->sb, s->rb,
			     s->pin + n);
	}
	return rc;
}

static void pair_unpin(struct pair_run *r, struct pair_step *s)
{
	tier_unpin_many(r->st, s->pin, 2 * s->n);
	s->n = 0;
}

/* pair_hand - check step s's pages (read already) and hand its groups
 * out in order */
static kvf_status pair_hand(struct pair_run *r, struct pair_step *s)
{
	kvf_store *st = r->st;
	uint32_t ps = st->hdr.page_size;
	kvf_status rc = batch_check(st, r->seq, s->b);

	for (uint32_t i = 0; i < s->n && rc == KVF_OK; i++) {
		if (s->sa[i] >= 0)
			s->pa[i] = s->b->buf + (size_t)s->sa[i] * ps;
		if (s->sb[i] >= 0)
			s->pb[i] = s->b->buf + (size_t)s->sb[i] * ps;
		rc = hand_pair(st, r->tokens, s->g[i], r->t0, r->t1, s->pa[i],
			       s->pb[i], r->coded, r->dec, r->fn, r->cfn, r->arg);
	}
	return rc;
}

/* pair_core - the groups list[0..n) (or, with list NULL, first..first+n)
 * of two streams, clipped to [t0, t1), to fn in order */
static kvf_status pair_core(kvf_store *st, struct seq *seq, struct stream *a,
			    struct stream *bs, uint64_t tokens, uint64_t t0,
			    uint64_t t1, const uint64_t *list, uint64_t first,
			    uint64_t n_groups, pair_fn fn, coded_fn cfn,
			    void *arg)
{
	uint32_t G = st->group_tokens, rb = st->row_bytes;
	struct pair_run r = { .st = st, .seq = seq, .a = a, .bs = bs,
			      .tokens = tokens, .t0 = t0, .t1 = t1,
			      .list = list, .first = first,
			      .coded = a->enc && bs->enc, .fn = fn, .cfn = cfn,
			      .arg = arg };
	struct pair_step *steps, *now, *next;
	kvf_status rc = KVF_OK, rc2;
	uint64_t i0;

	/* groups of one page, plain or encoded, are used where they are */
	if (group_sealed_pages(st, a) > 1 || group_sealed_pages(st, bs) > 1)
		return pair_groups(st, seq, a, bs, tokens, t0, t1, list, first,
				   n_groups, fn, cfn, arg);
	if (n_groups == 0)
		return KVF_OK;
	steps = kvf_calloc(2, sizeof(*steps));
	if (r.coded && cfn == NULL)
		r.dec = kvf_malloc(2 * (size_t)G * rb);
	if (steps == NULL || (r.coded && cfn == NULL && r.dec == NULL)) {
		kvf_free(steps);
		kvf_free(r.dec);
		return kvf_fail(KVF_ENOMEM, "out of memory for token groups");
	}
	now = &steps[0];
	next = &steps[1];
	if ((now->b = read_batch_new(st)) == NULL ||
	    (n_groups > PAIR_GROUPS && (next->b = read_batch_new(st)) == NULL)) {
		rc = KVF_ENOMEM;
		goto out;
	}
	i0 = n_groups < PAIR_GROUPS ? n_groups : PAIR_GROUPS;
	if ((rc = pair_prep(&r, now, 0, (uint32_t)i0)) == KVF_OK)
		rc = batch_start(st, now->b);
	while (rc == KVF_OK && now->n) {
		uint32_t n = (uint32_t)(n_groups - i0 < PAIR_GROUPS ? n_groups - i0
								    : PAIR_GROUPS);
		struct pair_step *done = now;

		/* the next step is found while this one's read is in
		 * flight, and read while this one is handed out */
		if (n && (rc = pair_prep(&r, next, i0, n)) != KVF_OK)
			break;
		i0 += n;
		if ((rc = batch_finish(st, seq, now->b)) != KVF_OK)
			break;
		if (n && (rc = batch_start(st, next->b)) != KVF_OK)
			break;
		rc = pair_hand(&r, now);
		pair_unpin(&r, done);
		now = next;
		next = done;
	}
out:
	/* a read still in flight lands before its buffer goes */
	if ((rc2 = batch_finish(st, seq, steps[0].b)) != KVF_OK && rc == KVF_OK)
		rc = rc2;
	if ((rc2 = batch_finish(st, seq, steps[1].b)) != KVF_OK && rc == KVF_OK)
		rc = rc2;
	pair_unpin(&r, &steps[0]);
	pair_unpin(&r, &steps[1]);
	read_batch_free(st, steps[0].b);
	read_batch_free(st, steps[1].b);
	kvf_free(steps);
	kvf_free(r.dec);
	return rc;
}

kvf_status stream_read_pair(kvf_store *st, struct seq *seq, struct stream *a,
			    struct stream *bs, uint64_t tokens, uint64_t t0,
			    uint64_t t1, pair_fn fn, void *arg)
{
	uint32_t G = st->group_tokens;

	if (t0 >= t1)
		return KVF_OK;
	return pair_core(st, seq, a, bs, tokens, t0, t1, NULL, t0 / G,
			 (t1 - 1) / G - t0 / G + 1, fn, NULL, arg);
}

kvf_status stream_read_pair_coded(kvf_store *st, struct seq *seq,
				  struct stream *a, struct stream *bs,
				  uint64_t tokens, uint64_t t0, uint64_t t1,
				  pair_fn fn, coded_fn cfn, void *arg)
{
	uint32_t G = st->group_tokens;

	if (t0 >= t1)
		return KVF_OK;
	return pair_core(st, seq, a, bs, tokens, t0, t1, NULL, t0 / G,
			 (t1 - 1) / G - t0 / G + 1, fn, cfn, arg);
}

kvf_status stream_read_spans_kept(kvf_store *st, struct seq *seq,
				  uint32_t lane, struct stream *s,
				  uint64_t tokens, uint64_t t0, uint64_t t1,
				  span_fn fn, span_coded_fn cfn, void *arg)
{
	uint64_t a, b;
	kvf_status rc = KVF_OK;

	if (!dropmark_any(st, seq, lane))
		return cfn ? stream_read_spans_coded(st, seq, s, tokens, t0, t1,
						     fn, cfn, arg)
			   : stream_read_spans(st, seq, s, tokens, t0, t1, fn, arg);
	for (; rc == KVF_OK && dropmark_run(st, seq, lane, t0, t1, &a, &b); t0 = b)
		rc = cfn ? stream_read_spans_coded(st, seq, s, tokens, a, b, fn,
						   cfn, arg)
			 : stream_read_spans(st, seq, s, tokens, a, b, fn, arg);
	return rc;
}

kvf_status stream_read_pair_kept(kvf_store *st, struct seq *seq,
				 uint32_t lane, struct stream *as,
				 struct stream *bs, uint64_t tokens,
				 uint64_t t0, uint64_t t1, pair_fn fn,
				 coded_fn cfn, void *arg)
{
	uint64_t a, b;
	kvf_status rc = KVF_OK;

	if (!dropmark_any(st, seq, lane))
		return stream_read_pair_coded(st, seq, as, bs, tokens, t0, t1, fn,
					      cfn, arg);
	for (; rc == KVF_OK && dropmark_run(st, seq, lane, t0, t1, &a, &b); t0 = b)
		rc = stream_read_pair_coded(st, seq, as, bs, tokens, a, b, fn,
					    cfn, arg);
	return rc;
}

kvf_status stream_read_pair_groups(kvf_store *st, struct seq *seq,
				   struct stream *a, struct stream *bs,
				   uint64_t tokens, const uint64_t *groups,
				   uint64_t n_groups, pair_fn fn, coded_fn cfn,
				   void *arg)
{
	return pair_core(st, seq, a, bs, tokens, 0, tokens, groups, 0,
			 n_groups, fn, cfn, arg);
}

/* no_page - the index has no page for entry idx of a stream of seq */
static kvf_status no_page(const struct seq *seq, uint64_t idx)
{
	return kvf_fail(KVF_ECORRUPT,
			"read: the index has no page for entry %llu of a stream of sequence %llu",
			(unsigned long long)idx, (unsigned long long)seq->id);
}

kvf_status stream_read_entries(kvf_store *st, struct seq *seq,
			       struct stream *s, const uint64_t *idx,
			       uint64_t n, entry_fn fn, void *arg)
{
	struct batch *b = read_batch_new(st);
	kvf_status rc = KVF_OK;

	if (b == NULL)
		return KVF_ENOMEM;
	for (uint64_t i0 = 0; i0 < n && rc == KVF_OK; i0 += READ_BATCH) {
		uint32_t m = (uint32_t)(n - i0 < READ_BATCH ? n - i0 : READ_BATCH);
		const unsigned char *p[READ_BATCH];
		int slot[READ_BATCH], in_place[READ_BATCH];
		uint32_t pin[READ_BATCH];

		b->n = b->n_io = 0;
		for (uint32_t i = 0; i < m; i++)
			pin[i] = TIER_NONE;
		for (uint32_t i = 0; i < m && rc == KVF_OK; i++) {
			struct page_ref r;

			slot[i] = -1;
			in_place[i] = 0;
			if (idx[i0 + i] >= s->n_groups ||
			    (r = stream_page(s, idx[i0 + i])).addr == ADDR_NONE) {
				rc = no_page(seq, idx[i0 + i]);
				break;
			}
			if ((p[i] = openseg_page(st, seq, r.addr)) != NULL)
				continue;
			if ((p[i] = mapped(st, seq, &r, &rc)) != NULL) {
				in_place[i] = 1;
				continue;
			}
			if (rc != KVF_OK)
				break;
			if ((p[i] = cached(st, seq, &r, &pin[i])) != NULL)
				continue; /* valid during the call, as a read's */
			slot[i] = (int)b->n;
			batch_add(st, b, idx[i0 + i], &r);
		}
		if (rc == KVF_OK)
			rc = batch_read(st, seq, b);
		for (uint32_t i = 0; i < m && rc == KVF_OK; i++) {
			if (slot[i] >= 0)
				p[i] = b->buf + (size_t)slot[i] * st->hdr.page_size;
			rc = fn(arg, i0 + i, p[i], in_place[i]);
		}
		tier_unpin_many(st, pin, m);
	}
	read_batch_free(st, b);
	return rc;
}

kvf_status stream_read_into(kvf_store *st, struct seq *seq,
			    const struct page_read *want, uint32_t n,
			    struct kvf_media_io *io)
{
	uint32_t ps = st->hdr.page_size, n_io = 0, n_read = 0;
	kvf_status rc = KVF_OK;

	for (uint32_t i = 0; i < n; i++) {
		const struct page_read *w = &want[i];
		const unsigned char *p;
		struct page_ref r;

		if (w->idx >= w->s->n_groups ||
		    (r = stream_page(w->s, w->idx)).addr == ADDR_NONE)
			return no_page(seq, w->idx);
		if ((p = mapped(st, seq, &r, &rc)) != NULL) {
			memcpy(w->dst, p, ps);
			continue;
		}
		if (rc != KVF_OK)
			return rc;
		read_io_add(st, io, &n_io, r.addr, w->dst);
		n_read++;
	}
	if (n_io == 0)
		return KVF_OK;
	if ((rc = kvf_media_read(st->media, io, n_io)) != KVF_OK)
		return rc;
	count_read(st, seq, n_read);
	for (uint32_t i = 0; i < n; i++) {
		struct page_ref r = stream_page(want[i].s, want[i].idx);
		uint32_t got = page_check(want[i].dst, ps);

		if (got != r.check)
			return corrupt(st, r.addr, r.check, got, "read");
	}
	return KVF_OK;
}
