/*
 * verify.c - kvf_verify: read back every page the sequences name and every
 * sealed segment's summary, and report what does not check out.  A file
 * of its own: the walk, its batching of reads and its damage records are
 * used by no other call; the damage messages are in verify_message.c.
 *
 * kvf_verify works sequence by sequence.  Holding the world lock shared
 * and the sequence's lock, it lists the pages the sequence's index names,
 * sorts them by address and walks them segment by segment: the summary is
 * read and checked once (a segment shared by forks is re-read only to
 * compare keys, and counted once), then the pages are read in batches and
 * each is checked against the summary entry and the index.  The sequence
 * holds a reference to every page it names, so none of those segments can
 * be reused while its lock is held; the cleaner moves pages only with the
 * world lock exclusive.  Damage found is kept as small records and handed
 * to the caller's function after both locks are dropped, so the function
 * may call the library.  A last pass checks the summaries of sealed
 * segments no sequence led to; without a page reference to pin them, a
 * result counts only if the segment's state and seqno are unchanged after
 * the read.
 *
 * Locking (engine/lifecycle/store.h's order): world shared, then seq->lock (through
 * seq_get_locked), then seqtab.lock (looking up ancestors), then
 * segtab.lock, held briefly for snapshots of the segment table.
 */
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/group.h"
#include "engine/inspect/inspect.h"
#include "engine/inspect/inspect_int.h"
#include "engine/base/key.h"
#include "engine/segments/openseg.h"
#include "engine/base/segfmt.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

#define VERIFY_BATCH 64u    /* data pages per verification read */
#define ANCESTOR_HOPS 4096u /* parent links followed at most (no cycles) */

/* An index entry of the sequence being checked. */
struct ventry {
	uint32_t addr;  /* page address */
	uint32_t check; /* the index's check */
	uint32_t sid;   /* stream */
	uint32_t group; /* group in the stream */
};

struct vctx {
	kvf_store *st;
	kvf_verify_fn fn;
	void *arg;
	kvf_verify_report rep;
	uint64_t *seen;          /* [n_segments]: seqno whose summary was
				  * counted; 0 = none yet */
	unsigned char *sum_buf;  /* one summary, aligned */
	unsigned char *data_buf; /* VERIFY_BATCH pages, aligned */
	struct ventry *ents;     /* the current sequence's entries */
	size_t n_ents, cap_ents;
	struct pending *pend;    /* damage found, not yet reported */
	size_t n_pend, cap_pend;
	int oom;                 /* a list could not grow */
};

/* grow - make room for need elements of size elt in *p */
static int grow(void **p, size_t *cap, size_t need, size_t elt)
{
	size_t c = *cap ? *cap : 256;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = kvf_realloc(*p, c * elt);
	if (q == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* damage - a new pending damage of page addr (ADDR_NONE: no page) of
 * stream sid, group of seq; NULL when out of memory (c->oom set) */
static struct pending *damage(struct vctx *c, enum problem problem,
			      uint64_t seq, uint32_t sid, uint32_t group,
			      uint32_t addr)
{
	kvf_store *st = c->st;
	struct pending *p;
	enum kv_kind k;

	if (grow((void **)&c->pend, &c->cap_pend, c->n_pend + 1, sizeof(*p))) {
		c->oom = 1;
		return NULL;
	}
	p = &c->pend[c->n_pend++];
	memset(p, 0, sizeof(*p));
	p->problem = problem;
	p->d.struct_size = sizeof(p->d);
	p->d.seq = seq;
	p->d.layer = stream_layer(sid);
	p->d.kind = (kvf_kind)stream_kind(sid);
	p->d.head = stream_head(sid);
	/* a K, V or X entry is named by its token group (engine/base/group.h) */
	k = stream_kind(sid);
	p->d.group = k == KIND_K || k == KIND_V || k == KIND_X
			     ? group / st->group_stride : group;
	p->d.status = problem == P_IO ? KVF_EIO : KVF_ECORRUPT;
	if (addr == ADDR_NONE) {
		p->d.segid = KVF_SEGMENT_NONE;
		p->d.page = KVF_PAGE_SUMMARY;
		p->d.stripe = UINT32_MAX;
		p->d.seg_in_stripe = UINT64_MAX;
	} else {
		p->d.segid = addr_seg(addr, st->page_bits);
		p->d.page = addr_page(addr, st->page_bits);
		p->d.stripe = seg_stripe(st, p->d.segid);
		p->d.seg_in_stripe = seg_in_stripe(st, p->d.segid);
	}
	if (problem == P_IO || problem == P_SUMMARY) {
		p->text = kvf_strdup(kvf_last_error());
		if (p->text == NULL) {
			c->n_pend--;
			c->oom = 1;
			return NULL;
		}
	}
	return p;
}

/* summary_damage - the summary of segid is bad (its error is the thread's
 * message); status KVF_EIO when it could not be read */
static void summary_damage(struct vctx *c, uint32_t segid, kvf_status rc)
{
	struct pending *p = damage(c, P_SUMMARY, KVF_SEQ_NONE, 0, 0,
				   addr_make(segid, 0, c->st->page_bits));

	if (p == NULL)
		return;
	p->d.page = KVF_PAGE_SUMMARY;
	p->d.layer = 0;
	p->d.kind = KVF_KIND_K;
	p->d.head = 0;
	p->d.group = 0;
	p->d.status = rc == KVF_EIO ? KVF_EIO : KVF_ECORRUPT;
}

/* report - hand every pending damage to fn; 1 if fn asked to stop */
static int report(struct vctx *c)
{
	char msg[KVF_ERRMSG_CAP];
	int stop = 0;

	for (size_t i = 0; i < c->n_pend; i++) {
		struct pending *p = &c->pend[i];

		if (p->problem == P_SUMMARY)
			c->rep.bad_segments++;
		else
			c->rep.bad_pages++;
		if (c->fn && !stop) {
			verify_describe(c->st, p, msg, sizeof(msg));
			p->d.message = msg;
			stop = c->fn(c->arg, &p->d) != 0;
		}
		kvf_free(p->text);
	}
	c->n_pend = 0;
	return stop;
}

/* writer_ok - page key hi names seq or one of its ancestors (a fork
 * shares the pages its ancestors wrote).  An ancestor freed since breaks
 * the chain: then any writer is accepted.  So does one whose id names a
 * sequence made after the child (the ancestor was freed and its id taken
 * again, as a server reusing request ids or the prefix cache does), or
 * of another family. */
static int writer_ok(kvf_store *st, const struct seq *seq, uint64_t writer)
{
	uint64_t cur = seq->parent, born = seq->create_seqno;

	if (writer == seq->id)
		return 1;
	for (unsigned hops = 0; cur != SEQ_NO_PARENT && hops < ANCESTOR_HOPS;
	     hops++) {
		struct seq *p;
		int same;

		if (cur == writer)
			return 1;
		if ((p = seq_get(st, cur)) == NULL)
			return 1;
		/* fixed at creation: no lock */
		same = p->family == seq->family && p->create_seqno < born;
		born = p->create_seqno;
		cur = p->parent;
		seq_put(st, p);
		if (!same)
			return 1;
	}
	return 0;
}

/* summary_bytes - bytes the summary of n_data data pages takes on media */
static uint64_t summary_bytes(const kvf_store *st, uint32_t n_data)
{
	return (uint64_t)summary_pages(n_data, st->hdr.page_size) *
	       st->hdr.page_size;
}

/* check_summary - load segid's summary into c->sum_buf; count it once per
 * seqno.  Return: 1 if it checks out (*v set), 0 if not. */
static int check_summary(struct vctx *c, uint32_t segid, uint32_t n_data,
			 uint64_t seqno, struct summary_view *v)
{
	kvf_status rc = summary_load(c->st, segid, n_data, seqno, c->sum_buf, v);

	if (rc == KVF_ENOMEM) { /* not damage: the check cannot run */
		c->oom = 1;
		return 0;
	}
	if (rc == KVF_OK)
		c->rep.bytes_read += summary_bytes(c->st, n_data);
	if (c->seen[segid] == seqno)
		return rc == KVF_OK;
	c->seen[segid] = seqno;
	c->rep.segments_checked++;
	if (rc != KVF_OK)
		summary_damage(c, segid, rc);
	return rc == KVF_OK;
}

/* check_page - one entry whose page bytes are at page; v is the
 * segment's summary, NULL when it does not check out */
static void check_page(struct vctx *c, const struct seq *seq,
		       const struct ventry *e, const unsigned char *page,
		       const struct summary_view *v)
{
	kvf_store *st = c->st;
	uint32_t pg = addr_page(e->addr, st->page_bits);
	uint64_t h = page_hash(page, st->hdr.page_size);
	int in_summary = v != NULL && pg < v->h.n_data_pages;
	struct seg_summary_entry se = { 0, 0, 0 };
	enum problem problem;
	struct pending *p;

	c->rep.pages_checked++;
	if (in_summary)
		se = summary_entry(v, pg);
	if (v == NULL)
		problem = ((uint32_t)h & PAGE_CHECK_MASK) == e->check ? P_NONE : P_DATA_INDEX;
	else if (!in_summary)
		problem = P_PAST_SUMMARY;
	else if (((uint32_t)h & PAGE_CHECK_MASK) != e->check && h != se.page_hash)
		problem = P_DATA;
	else if (((uint32_t)h & PAGE_CHECK_MASK) != e->check)
		problem = P_INDEX_CHECK;
	else if (h != se.page_hash)
		problem = P_SUMMARY_HASH;
	else if ((uint32_t)(se.key_lo >> 32) != e->sid ||
		 (uint32_t)se.key_lo != e->group)
		problem = P_KEY;
	else if (!writer_ok(st, seq, se.key_hi))
		problem = P_WRITER;
	else
		problem = P_NONE;
	if (problem == P_NONE)
		return;
	p = damage(c, problem, seq->id, e->sid, e->group, e->addr);
	if (p == NULL)
		return;
	p->check = e->check;
	p->page_hash = h;
	p->sum_hash = se.page_hash;
	p->key_hi = se.key_hi;
	p->key_lo = se.key_lo;
	p->n_sum = v ? v->h.n_data_pages : 0;
}

/* read_batch - read the pages of entries [i, j) (one segment, sorted by
 * page, at most VERIFY_BATCH distinct pages) into c->data_buf; slot[k]
 * receives the buffer page of entry i + k */
static kvf_status read_batch(struct vctx *c, uint32_t segid,
			     const struct ventry *e, size_t n, uint32_t *slot)
{
	kvf_store *st = c->st;
	struct kvf_media_io io[VERIFY_BATCH];
	uint32_t n_io = 0, n_pages = 0, last = UINT32_MAX;
	kvf_status rc;

	for (size_t k = 0; k < n; k++) {
		uint32_t pg = addr_page(e[k].addr, st->page_bits);

		if (pg == last) { /* the same page twice */
			slot[k] = n_pages - 1;
			continue;
		}
		if (n_io && io[n_io - 1].page + io[n_io - 1].n_pages == pg) {
			io[n_io - 1].n_pages++;
		} else {
			io[n_io++] = (struct kvf_media_io){
				.stripe = seg_stripe(st, segid),
				.seg = seg_in_stripe(st, segid), .page = pg,
				.n_pages = 1,
				.buf = c->data_buf +
				       (size_t)n_pages * st->hdr.page_size };
		}
		slot[k] = n_pages++;
		last = pg;
	}
	rc = kvf_media_read(st->media, io, n_io);
	if (rc != KVF_OK)
		return rc;
	atomic_fetch_add(&st->c.bytes_read, (uint64_t)n_pages * st->hdr.page_size);
	atomic_fetch_add(&st->c.pages_read, n_pages);
	c->rep.bytes_read += (uint64_t)n_pages * st->hdr.page_size;
	return KVF_OK;
}

/* batch_end - the end of the next batch of entries from i in [i, end):
 * at most VERIFY_BATCH distinct pages */
static size_t batch_end(kvf_store *st, const struct ventry *e, size_t i,
			size_t end)
{
	uint32_t distinct = 0, last = UINT32_MAX;
	size_t j;

	for (j = i; j < end; j++) {
		uint32_t pg = addr_page(e[j].addr, st->page_bits);

		if (pg != last) {
			if (distinct == VERIFY_BATCH)
				break;
			distinct++;
			last = pg;
		}
	}
	return j;
}

/* check_segment - entries [i, end) of seq, all in segment segid */
static void check_segment(struct vctx *c, const struct seq *seq, size_t i,
			  size_t end)
{
	kvf_store *st = c->st;
	uint32_t segid = addr_seg(c->ents[i].addr, st->page_bits);
	struct summary_view view, *v = NULL;
	uint32_t slot[VERIFY_BATCH * 4];
	uint32_t n_data;
	uint64_t seqno;
	uint8_t state;

	pthread_mutex_lock(&st->segtab.lock);
	state = st->segtab.info[segid].state;
	n_data = st->segtab.info[segid].n_data;
	seqno = st->segtab.info[segid].seqno;
	pthread_mutex_unlock(&st->segtab.lock);
	if (state == SEG_SEALED || state == SEG_CORRUPT)
		v = check_summary(c, segid, n_data, seqno, &view) ? &view : NULL;
	if (c->oom)
		return;
	if (state != SEG_SEALED) {
		for (size_t k = i; k < end; k++) {
			struct pending *p;

			c->rep.pages_checked++;
			p = damage(c, state == SEG_CORRUPT ? P_SEG_CORRUPT : P_SEG_STATE,
				   seq->id, c->ents[k].sid, c->ents[k].group,
				   c->ents[k].addr);
			if (p)
				p->state = state;
		}
		return;
	}
	while (i < end) {
		size_t j = batch_end(st, c->ents, i, end);
		kvf_status rc;

		/* a page can be named twice at most a few times: cap the
		 * batch so slot[] holds it */
		if (j - i > sizeof(slot) / sizeof(slot[0]))
			j = i + sizeof(slot) / sizeof(slot[0]);
		rc = read_batch(c, segid, c->ents + i, j - i, slot);
		if (rc == KVF_ENOMEM) { /* not damage: the check cannot run */
			c->oom = 1;
			return;
		}
		for (size_t k = i; k < j; k++) {
			uint32_t one = 0;

			/* a batch that failed is read again page by page, so
			 * that one unreadable page (a flash page whose ECC
			 * fails) does not blame its neighbours */
			if (rc != KVF_OK) {
				kvf_status r1 = read_batch(c, segid, c->ents + k, 1, &one);

				if (r1 == KVF_ENOMEM) {
					c->oom = 1;
					return;
				}
				if (r1 != KVF_OK) {
					c->rep.pages_checked++;
					damage(c, P_IO, seq->id, c->ents[k].sid,
					       c->ents[k].group, c->ents[k].addr);
					continue;
				}
			}
			check_page(c, seq, &c->ents[k],
				   c->data_buf + (size_t)(rc != KVF_OK ? one : slot[k - i]) *
							 st->hdr.page_size,
				   v);
		}
		i = j;
	}
}

static int cmp_ventry(const void *a, const void *b)
{
	const struct ventry *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* collect - the entries of seq's index that are on media into c->ents;
 * groups the index lost become damage.  Caller holds seq->lock. */
static void collect(struct vctx *c, struct seq *seq)
{
	kvf_store *st = c->st;
	uint32_t n = seq_n_streams(st), G = st->group_tokens;

	c->n_ents = 0;
	for (uint32_t i = 0; i < n && !c->oom; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);
		enum kv_kind kind = stream_kind(sid);
		uint64_t tokens = seq_tokens(seq, kind, stream_layer(sid));
		uint64_t groups = seq_stream_groups(st, seq, sid);

		for (uint64_t g = 0; g < groups && !c->oom; g++) {
			struct page_ref r = s && g < s->n_groups
				? stream_page(s, g)
				: (struct page_ref){ ADDR_NONE, 0 };
			uint32_t a = r.addr;
			/* the partial last token group (K^T streams count
			 * complete blocks only) */
			int tail = kind != KIND_KT &&
				   g / st->group_stride == tokens / G;

			if (kind <= KIND_X && s && !group_entry_used(st, s, tokens, g))
				continue; /* a codec store's unused entry */
			if ((kind == KIND_K || kind == KIND_V) &&
			    dropmark_is(seq, dropmark_lane(st, stream_layer(sid),
							   stream_head(sid)),
					g / st->group_stride))
				continue; /* dropped by kvf_h2o_evict */
			if (s && stream_waiting(s, g) != NULL)
				continue; /* waiting for write-back: not on
					   * media yet */
			if (a == ADDR_NONE) {
				if (tail && s && s->gbuf != NULL)
					continue; /* in memory only, so far */
				c->rep.pages_checked++;
				damage(c, P_HOLE, seq->id, sid, (uint32_t)g, ADDR_NONE);
				continue;
			}
			if (openseg_page(st, seq, a) != NULL)
				continue; /* being written: not on media yet */
			if (grow((void **)&c->ents, &c->cap_ents, c->n_ents + 1,
				 sizeof(*c->ents))) {
				c->oom = 1;
				break;
			}
			c->ents[c->n_ents++] = (struct ventry){
				.addr = a, .check = r.check,
				.sid = sid, .group = (uint32_t)g };
		}
	}
	if (c->n_ents > 1)
		qsort(c->ents, c->n_ents, sizeof(*c->ents), cmp_ventry);
}

/* verify_seq - check one sequence (of namespace ns: optimizers are
 * verified too); KVF_OK also when it was freed */
static void verify_seq(struct vctx *c, uint32_t ns, uint64_t id)
{
	kvf_store *st = c->st;
	struct seq *seq;

	pthread_rwlock_rdlock(&st->world);
	if ((seq = seq_get_ns(st, ns, id)) != NULL) {
		pthread_mutex_lock(&seq->lock);
		if (seq->dead) {
			seq_unlock_put(st, seq);
			seq = NULL;
		}
	}
	if (seq == NULL) {
		pthread_rwlock_unlock(&st->world);
		return; /* freed meanwhile */
	}
	c->rep.sequences_checked++;
	collect(c, seq);
	for (size_t i = 0; i < c->n_ents && !c->oom;) {
		uint32_t segid = addr_seg(c->ents[i].addr, st->page_bits);
		size_t j = i;

		while (j < c->n_ents &&
		       addr_seg(c->ents[j].addr, st->page_bits) == segid)
			j++;
		if (segid >= st->n_segments) {
			for (size_t k = i; k < j; k++) {
				struct pending *p;

				c->rep.pages_checked++;
				p = damage(c, P_SEG_STATE, id, c->ents[k].sid,
					   c->ents[k].group, c->ents[k].addr);
				if (p)
					p->state = 255;
			}
		} else {
			check_segment(c, seq, i, j);
		}
		i = j;
	}
	seq_unlock_put(st, seq);
	pthread_rwlock_unlock(&st->world);
}

/* verify_rest - check the summaries of sealed segments no sequence led
 * to; a result counts only if the segment did not change meanwhile */
static int verify_rest(struct vctx *c)
{
	kvf_store *st = c->st;

	for (uint32_t segid = 0; segid < st->n_segments && !c->oom; segid++) {
		struct summary_view v;
		uint64_t seqno;
		uint32_t n_data;
		uint8_t state;
		kvf_status rc;
		int same;

		pthread_rwlock_rdlock(&st->world);
		pthread_mutex_lock(&st->segtab.lock);
		state = st->segtab.info[segid].state;
		n_data = st->segtab.info[segid].n_data;
		seqno = st->segtab.info[segid].seqno;
		pthread_mutex_unlock(&st->segtab.lock);
		if ((state != SEG_SEALED && state != SEG_CORRUPT) ||
		    c->seen[segid] == seqno) {
			pthread_rwlock_unlock(&st->world);
			continue;
		}
		rc = summary_load(st, segid, n_data, seqno, c->sum_buf, &v);
		if (rc == KVF_ENOMEM)
			c->oom = 1;
		pthread_mutex_lock(&st->segtab.lock);
		same = st->segtab.info[segid].state == state &&
		       st->segtab.info[segid].seqno == seqno;
		pthread_mutex_unlock(&st->segtab.lock);
		if (same && !c->oom) {
			c->seen[segid] = seqno;
			c->rep.segments_checked++;
			if (rc == KVF_OK)
				c->rep.bytes_read += summary_bytes(st, n_data);
			else
				summary_damage(c, segid, rc);
		}
		pthread_rwlock_unlock(&st->world);
		if (report(c))
			return 1;
	}
	return 0;
}

static void vctx_release(struct vctx *c)
{
	for (size_t i = 0; i < c->n_pend; i++)
		kvf_free(c->pend[i].text);
	kvf_free(c->pend);
	kvf_free(c->ents);
	kvf_free(c->seen);
	kvf_free(c->sum_buf);
	kvf_free(c->data_buf);
}

kvf_status kvf_verify(kvf_store *st, kvf_verify_fn fn, void *arg,
		      kvf_verify_report *out)
{
	const char *call = "kvf_verify";
	struct vctx c;
	uint64_t *ids = NULL;
	size_t n_ids = 0;
	kvf_status rc;

	if ((rc = inspect_common(st, call, out, sizeof(c.rep))) != KVF_OK)
		return rc;
	memset(&c, 0, sizeof(c));
	c.st = st;
	c.fn = fn;
	c.arg = arg;
	c.seen = kvf_calloc(st->n_segments, sizeof(*c.seen));
	c.sum_buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN,
				      (size_t)summary_buf_pages(st) * st->hdr.page_size);
	c.data_buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN,
				       (size_t)VERIFY_BATCH * st->hdr.page_size);
	if (c.seen == NULL || c.sum_buf == NULL || c.data_buf == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory for read buffers", call);
		goto out;
	}
	for (uint32_t ns = SEQ_NS_USER; ns <= SEQ_NS_OPTIM && !c.rep.stopped &&
	     !c.oom; ns++) {
		kvf_free(ids);
		ids = NULL;
		pthread_rwlock_rdlock(&st->world);
		rc = inspect_live_ids(st, call, &ids, &n_ids, ns);
		pthread_rwlock_unlock(&st->world);
		if (rc != KVF_OK)
			goto out;
		for (size_t i = 0; i < n_ids && !c.rep.stopped; i++) {
			verify_seq(&c, ns, ids[i]);
			if (c.oom)
				break;
			c.rep.stopped = report(&c) != 0;
		}
	}
	if (!c.oom && !c.rep.stopped)
		c.rep.stopped = verify_rest(&c) != 0;
	if (c.oom) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory for the list of pages",
			      call);
		goto out;
	}
	inspect_publish(out, &c.rep, sizeof(c.rep));
out:
	kvf_free(ids);
	vctx_release(&c);
	return rc;
}
