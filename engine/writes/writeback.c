/*
 * writeback.c - HILOS's delayed write-back (engine/writes/writeback.h).
 */
#include "engine/writes/writeback.h"

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/group.h"
#include "engine/base/key.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "engine/base/tier.h"

/* the waiting pages of all streams may take half the budget: the other
 * half stays for group buffers, the index and the cache */
#define WB_SHARE 2u

int wb_enabled(kvf_store *st, const struct seq *seq, uint32_t sid)
{
	enum kv_kind k = stream_kind(sid);

	return st->tier.budget != 0 && st->hdr.media != KVF_MEDIA_MEMORY &&
	       seq->ns == SEQ_NS_USER &&
	       (k == KIND_K || k == KIND_V || k == KIND_X);
}

int wb_long(uint64_t k)
{
	return k >= WB_RUN;
}

/* run_stripe - the stripe a run starting at group first goes to: runs,
 * not pages, take turns over the stripes */
static uint32_t run_stripe(kvf_store *st, uint32_t sid, uint64_t first)
{
	return stream_stripe(st, sid, first / WB_RUN);
}

void wb_flush_plan(const struct stream *s, uint32_t *pages, uint32_t *own)
{
	if (s && s->wb && s->wb->n) {
		pages[s->wb->stripe] += s->wb->n;
		own[s->wb->stripe] += s->wb->n;
	}
}

void wb_plan(kvf_store *st, const struct seq *seq, const struct stream *s,
	     uint32_t sid, uint64_t g0, uint64_t k, int waits, uint32_t *pages,
	     uint32_t *own, uint32_t *stay)
{
	const struct wb_run *w = s->wb;
	uint32_t waiting = w ? w->n : 0, n = waiting;
	uint32_t per = group_sealed_pages(st, s), stripe = n ? w->stripe : 0;

	if (k == 0)
		return;
	if (!waits) {
		wb_flush_plan(s, pages, own);
		for (uint64_t j = 0; j < k; j++) {
			uint64_t e = group_sealed_entry(st, s, g0 + j);

			for (uint32_t p = 0; p < per; p++)
				pages[stream_stripe(st, sid, e + p)]++;
		}
		return;
	}
	/* a run the new pages do not continue goes out first (wb_seal) */
	if (n && group_sealed_entry(st, s, g0) != wb_entry(w, n)) {
		pages[stripe] += n;
		own[stripe] += n;
		n = waiting = 0;
	}
	/* a run that fills goes out now (the pages that waited before
	 * this append with their promised room); the new pages that go on
	 * waiting are counted too, so that an append is refused KVF_ENOSPC
	 * when the media could not take what it adds, as without the tier */
	for (uint64_t j = 0; j < k * per; j++) {
		if (n == 0)
			stripe = run_stripe(st, sid,
					    group_sealed_entry(st, s, g0 + j / per) +
						    j % per);
		if (++n == WB_RUN && seq->admitted) { /* wb_seal */
			pages[stripe] += WB_RUN;
			own[stripe] += waiting;
			waiting = 0;
			n = 0;
		}
	}
	if (n) {
		pages[stripe] += n - waiting;
		stay[stripe] += n - waiting;
	}
}

/* place - put page as s's index entry g on stripe now: the open segment
 * takes the page itself (openseg_adopt); *taken says whether it did,
 * which it may have although the flush of a full segment then failed */
static kvf_status place(kvf_store *st, struct seq *seq, struct stream *s,
			uint32_t sid, uint64_t g, unsigned char *page,
			uint32_t stripe, int *taken)
{
	struct page_key key = page_key_make(seq->id, sid, (uint32_t)g);
	uint32_t replaces = g < s->n_groups ? stream_page(s, g).addr : ADDR_NONE;
	struct page_ref ref = { .addr = ADDR_NONE };
	kvf_status rc;

	rc = openseg_adopt(st, seq, stripe, page, key, replaces, &ref);
	*taken = ref.addr != ADDR_NONE;
	if (*taken) {
		stream_set_group(s, g, ref);
		atomic_fetch_add(&st->c.data_bytes, st->hdr.page_size);
	}
	return rc;
}

kvf_status wb_flush(kvf_store *st, struct seq *seq, struct stream *s,
		    uint32_t sid)
{
	struct wb_run *w = s ? s->wb : NULL;
	uint32_t ps = st->hdr.page_size, done = 0, stripe;
	kvf_status rc = KVF_OK;

	if (w == NULL || w->n == 0)
		return KVF_OK;
	/* the run's pages follow one another in the open segment: nothing
	 * else is placed for this sequence while its lock is held.  Their
	 * promised room is in the caller's reservation (wb_flush_plan) */
	stripe = w->stripe;
	while (done < w->n && rc == KVF_OK) {
		int taken;

		rc = place(st, seq, s, sid, wb_entry(w, done), w->page[done],
			   stripe, &taken);
		done += (uint32_t)taken;
	}
	if (rc != KVF_OK) /* what is left waits on, its room promised again */
		seg_promise(st, stripe, (int32_t)(w->n - done));
	/* the placed pages are their segments' now (openseg_adopt) */
	atomic_fetch_sub(&st->c.wb_bytes, (uint64_t)done * ps);
	/* what a failure left waits on, from the first page not placed */
	memmove(w->page, w->page + done, (size_t)(w->n - done) * sizeof(w->page[0]));
	w->lead += done;
	w->first += (uint64_t)(w->lead / w->per) * w->stride;
	w->lead %= w->per;
	w->n -= done;
	if (done)
		atomic_fetch_add(&st->c.wb_runs, 1);
	return rc;
}

/* wb_grow - room in w's arrays for need pages, the tier holding it;
 * KVF_OK, KVF_ENOMEM (the tier's refusal included: then nothing waits) */
static kvf_status wb_grow(kvf_store *st, struct wb_run *w, uint64_t need)
{
	size_t ptr = sizeof(w->page[0]);
	uint32_t cap = w->cap ? w->cap : WB_RUN;
	unsigned char **p, **q;

	while (cap < need)
		cap *= 2;
	if (cap == w->cap)
		return KVF_OK;
	if (tier_hold(st, (size_t)(cap - w->cap) * 2 * ptr, "write-back") != KVF_OK)
		return KVF_ENOMEM;
	p = kvf_realloc(w->page, cap * ptr);
	if (p)
		w->page = p;
	q = p ? kvf_realloc(w->spare, cap * ptr) : NULL;
	if (q)
		w->spare = q;
	if (p == NULL || q == NULL) {
		tier_release(st, (size_t)(cap - w->cap) * 2 * ptr);
		return KVF_ENOMEM;
	}
	w->cap = cap;
	return KVF_OK;
}

kvf_status wb_prepare(kvf_store *st, struct seq *seq, struct stream *s,
		      uint32_t sid, uint64_t k, int *waits)
{
	uint32_t ps = st->hdr.page_size;
	struct wb_run *w;

	*waits = 0;
	/* a sequence not admitted keeps every page waiting, long appends
	 * too, as long as the tier has room */
	if (k == 0 || !wb_enabled(st, seq, sid) || (wb_long(k) && seq->admitted) ||
	    tier_fixed(st) + (k + 1) * ps + sizeof(*w) > st->tier.budget / WB_SHARE ||
	    !seg_plenty(st))
		goto out; /* written as they fill */
	if (s->wb == NULL) {
		if (tier_hold(st, sizeof(*w), "write-back") != KVF_OK)
			goto out;
		if ((s->wb = kvf_calloc(1, sizeof(*w))) == NULL) {
			tier_release(st, sizeof(*w));
			return kvf_fail(KVF_ENOMEM, "out of memory for write-back");
		}
		s->wb->per = group_sealed_pages(st, s);
		s->wb->stride = st->group_stride;
	}
	w = s->wb;
	if (wb_grow(st, w, w->n + k > WB_RUN ? w->n + k : WB_RUN) != KVF_OK) {
		if (w->cap == 0) { /* never used: give it back */
			kvf_free(w->page);
			kvf_free(w->spare);
			kvf_free(w);
			s->wb = NULL;
			tier_release(st, sizeof(*w));
		}
		goto out;
	}
	while (w->n_spare < k) {
		unsigned char *p;

		if (tier_page_take(st, &p) != KVF_OK) {
			wb_unprepare(st, s);
			goto out; /* no room after all: written as they fill */
		}
		w->spare[w->n_spare++] = p;
	}
	*waits = 1;
	return KVF_OK;
out:
	/* a sequence whose pages go to the media is admitted from now */
	if (k > 0 && !seq->admitted && wb_enabled(st, seq, sid))
		seq->admitted = 1;
	return KVF_OK;
}

void wb_unprepare(kvf_store *st, struct stream *s)
{
	if (s == NULL || s->wb == NULL)
		return;
	while (s->wb->n_spare > 0)
		tier_page_give(st, s->wb->spare[--s->wb->n_spare]);
}

kvf_status wb_flush_seq(kvf_store *st, struct seq *seq, const char *call)
{
	uint32_t n = seq_n_kv_streams(st) + seq_n_x_streams(st);
	uint32_t pages[KVF_MEDIA_MAX_STRIPES] = { 0 };
	uint32_t own[KVF_MEDIA_MAX_STRIPES] = { 0 };
	kvf_status rc;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t sid;

		wb_flush_plan(seq_stream_at(st, seq, i, &sid), pages, own);
	}
	if ((rc = openseg_reserve(st, seq, pages, own, call)) != KVF_OK)
		return rc;
	for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_placed(st, seq, i, &sid);

		rc = wb_flush(st, seq, s, sid);
	}
	seg_unreserve(st, seq);
	return rc;
}

kvf_status wb_seal(kvf_store *st, struct seq *seq, struct stream *s,
		   uint32_t sid, uint64_t g, const unsigned char *src)
{
	struct wb_run *w = s->wb;
	unsigned char *page;
	kvf_status rc;

	if (w->n && g != wb_entry(w, w->n) && (rc = wb_flush(st, seq, s, sid)) != KVF_OK)
		return rc;
	page = w->spare[--w->n_spare]; /* wb_prepare made it */
	if (src == s->gbuf && s->gbuf_page) {
		size_t rows = (size_t)st->group_tokens * st->row_bytes;

		/* the group buffer waits as it is, and the next group
		 * fills the page made for this one; what its rows do not
		 * cover is zero, as in every page written */
		memset(page + rows, 0, st->hdr.page_size - rows);
		s->gbuf = page;
		page = (unsigned char *)src;
	} else {
		memcpy(page, src, st->hdr.page_size);
	}
	atomic_fetch_add(&st->c.wb_bytes, st->hdr.page_size);
	if (w->n == 0) {
		/* g may be any of its group's sealed pages (a run that
		 * filled may have ended inside the group): lead pages in */
		w->lead = (uint32_t)(g - group_sealed_entry(st, s, g / w->stride));
		w->first = g - w->lead;
		w->stripe = run_stripe(st, sid, g);
	}
	w->page[w->n++] = page;
	seg_promise(st, w->stripe, 1);
	if (g >= s->n_groups)
		s->n_groups = (uint32_t)g + 1;
	if (w->n >= WB_RUN && seq->admitted)
		return wb_flush(st, seq, s, sid);
	return KVF_OK;
}

kvf_status wb_admit(kvf_store *st, struct seq *seq, uint64_t tokens,
		    const char *call)
{
	kvf_status rc;

	if (seq->admitted || tokens < st->opts.admit_tokens)
		return KVF_OK;
	if ((rc = wb_flush_seq(st, seq, call)) == KVF_OK)
		seq->admitted = 1;
	return rc;
}
