/*
 * segtable.c - the segment table: every segment's state, its live pages
 * and the page references, the free segments of each stripe and what is
 * promised from them.
 *
 * Free segments wait in one FIFO per stripe, so erases spread evenly over
 * each stripe's segments; but a segment given back unwritten, and on file
 * media every reclaimed one, goes to the front: used again before the
 * stripe file grows into a segment it never held.  A page's reference count is the number of
 * index slots that point at it (several after a fork); a sealed segment
 * whose last reference goes becomes DYING, and seg_reclaim makes it FREE
 * once a sync has made its death durable (see segtable.h).
 *
 * Locking: segtab.lock guards everything in struct seg_table; it is taken
 * inside seq->lock, never the other way round.
 */
#include "engine/segments/segtable.h"

#include <string.h>
#include <xxh_x86dispatch.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/key.h"
#include "engine/base/meta.h"
#include "engine/base/store_state.h"
#include "engine/base/tier.h"

uint64_t page_hash(const void *page, uint32_t page_size)
{
	return XXH3_64bits_dispatch(page, page_size); /* AVX2 where present */
}

uint32_t page_check(const void *page, uint32_t page_size)
{
	return (uint32_t)page_hash(page, page_size) & PAGE_CHECK_MASK;
}

void seg_table_begin(kvf_store *st)
{
	pthread_mutex_init(&st->segtab.lock, NULL);
	st->segtab.epoch = 1;
}

kvf_status seg_table_init(kvf_store *st)
{
	uint32_t ns = st->hdr.n_stripes;

	st->segtab.info = kvf_calloc(st->n_segments, sizeof(*st->segtab.info));
	st->segtab.free_fifo = kvf_calloc(st->n_segments, sizeof(uint32_t));
	st->segtab.free_head = kvf_calloc(ns, sizeof(uint32_t));
	st->segtab.free_count = kvf_calloc(ns, sizeof(uint32_t));
	st->segtab.reserved = kvf_calloc(ns, sizeof(uint32_t));
	st->segtab.promised = kvf_calloc(ns, sizeof(uint32_t));
	st->segtab.live_words = kvf_calloc((size_t)st->n_segments *
					    ((st->data_per_seg + 63) / 64),
				    sizeof(uint64_t));
	st->segtab.reclaim_ids = kvf_calloc(st->n_segments, sizeof(uint32_t));
	st->segtab.wear_counts = kvf_calloc(st->n_segments, sizeof(uint32_t));
	if (!st->segtab.info || !st->segtab.free_fifo || !st->segtab.free_head || !st->segtab.free_count ||
	    !st->segtab.reserved || !st->segtab.promised || !st->segtab.live_words || !st->segtab.reclaim_ids ||
	    !st->segtab.wear_counts) {
		seg_table_free(st);
		return kvf_fail(KVF_ENOMEM,
				"kvf_open: out of memory for the table of %u segments",
				st->n_segments);
	}
	return KVF_OK;
}

void seg_table_free(kvf_store *st)
{
	kvf_free(st->segtab.live_words); /* the segments' live_bits point into it */
	st->segtab.live_words = NULL;
	kvf_free(st->segtab.reclaim_ids);
	kvf_free(st->segtab.wear_counts);
	st->segtab.reclaim_ids = st->segtab.wear_counts = NULL;
	kvf_free(st->segtab.shared_addr);
	kvf_free(st->segtab.shared_extra);
	st->segtab.shared_addr = st->segtab.shared_extra = NULL;
	st->segtab.shared_cap = st->segtab.shared_n = 0;
	kvf_free(st->segtab.info);
	kvf_free(st->segtab.free_fifo);
	kvf_free(st->segtab.free_head);
	kvf_free(st->segtab.free_count);
	kvf_free(st->segtab.reserved);
	kvf_free(st->segtab.promised);
	st->segtab.promised = NULL;
	st->segtab.info = NULL;
	st->segtab.free_fifo = st->segtab.free_head = st->segtab.free_count = st->segtab.reserved = NULL;
}

void seg_table_end(kvf_store *st)
{
	seg_table_free(st);
	pthread_mutex_destroy(&st->segtab.lock);
}

/* the FIFO of stripe s occupies free_fifo[s * segs_per_stripe ...] */
static void free_push(kvf_store *st, uint32_t segid)
{
	uint32_t s = seg_stripe(st, segid);
	uint32_t cap = (uint32_t)st->hdr.segs_per_stripe;
	uint32_t tail = (st->segtab.free_head[s] + st->segtab.free_count[s]) % cap;

	st->segtab.free_fifo[(uint64_t)s * cap + tail] = segid;
	st->segtab.free_count[s]++;
	st->segtab.n_free++;
	st->segtab.info[segid].state = SEG_FREE;
}

/* free_push_front - segid is taken next: a segment given back unwritten,
 * or on file media one reclaimed, which is used again before a segment
 * the stripe file never held (so the file does not spread over its whole
 * capacity; a file on an SSD leaves wear levelling to the SSD) */
static void free_push_front(kvf_store *st, uint32_t segid)
{
	uint32_t s = seg_stripe(st, segid);
	uint32_t cap = (uint32_t)st->hdr.segs_per_stripe;

	st->segtab.free_head[s] = (st->segtab.free_head[s] + cap - 1) % cap;
	st->segtab.free_fifo[(uint64_t)s * cap + st->segtab.free_head[s]] = segid;
	st->segtab.free_count[s]++;
	st->segtab.n_free++;
	st->segtab.info[segid].state = SEG_FREE;
}

static uint32_t free_pop(kvf_store *st, uint32_t s)
{
	uint32_t cap = (uint32_t)st->hdr.segs_per_stripe;
	uint32_t segid;

	if (st->segtab.free_count[s] == 0)
		return SEG_NONE;
	segid = st->segtab.free_fifo[(uint64_t)s * cap + st->segtab.free_head[s]];
	st->segtab.free_head[s] = (st->segtab.free_head[s] + 1) % cap;
	st->segtab.free_count[s]--;
	st->segtab.n_free--;
	if (st->segtab.info[segid].kept) {
		st->segtab.info[segid].kept = 0;
		st->segtab.n_kept--;
	}
	return segid;
}

uint32_t seg_pop_free_locked(kvf_store *st, uint32_t s)
{
	return free_pop(st, s);
}

/* avail_for_writers - free segments of stripe s that writers may still
 * take: not promised to another writer, not the cleaner's reserve, not
 * the room of pages waiting for write-back (but for own of them, the
 * caller's, which it is about to place) */
static uint32_t avail_for_writers(kvf_store *st, uint32_t s, uint32_t own)
{
	uint32_t d = st->data_per_seg, p = st->segtab.promised[s];
	uint32_t held = st->segtab.reserved[s] + CLEANER_RESERVE +
			((p > own ? p - own : 0) + d - 1) / d;

	return st->segtab.free_count[s] > held ? st->segtab.free_count[s] - held : 0;
}

#define KEEP_MIN 2u /* reclaimed segments kept untrimmed, at least */

/* set when the last KVF_ENOSPC of this thread came from the file system
 * (seg_fs_full_take) */
static _Thread_local int fs_full;

/* seg_allocate_ahead - the media space of the free segments of stripe s
 * that writers take next (the free lists are FIFO): those reserved or
 * promised already, need more, and the cleaner's reserve.  Stripe files
 * grow as segments are used, so a full file system is found here, before
 * an append places anything (KVF_ENOSPC).  Caller holds segtab.lock. */
static kvf_status seg_allocate_ahead(kvf_store *st, uint32_t s, uint32_t need)
{
	struct seg_table *t = &st->segtab;
	uint32_t cap = (uint32_t)st->hdr.segs_per_stripe, d = st->data_per_seg;
	uint32_t n = t->reserved[s] + need + CLEANER_RESERVE +
		     (t->promised[s] + d - 1) / d;
	kvf_status rc = KVF_OK;

	if (n > t->free_count[s])
		n = t->free_count[s];
	for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
		uint32_t *fi = &t->free_fifo[(uint64_t)s * cap +
					     (t->free_head[s] + i) % cap];

		rc = kvf_media_allocate_segment(st->media, s,
						seg_in_stripe(st, *fi));
		/* the file system is full: a free segment further on whose
		 * space exists (one used before) takes this one's place */
		for (uint32_t j = i + 1; rc == KVF_ENOSPC && j < t->free_count[s]; j++) {
			uint32_t *fj = &t->free_fifo[(uint64_t)s * cap +
						     (t->free_head[s] + j) % cap];
			uint32_t id = *fj;

			if (kvf_media_allocate_segment(st->media, s,
						       seg_in_stripe(st, id)) == KVF_OK) {
				*fj = *fi;
				*fi = id;
				rc = KVF_OK;
			}
		}
	}
	if (rc == KVF_ENOSPC)
		fs_full = 1;
	return rc;
}

/* stripes holding fewer segments than this allocate none ahead */
#define AHEAD_FROM 64u

void seg_allocate_next(kvf_store *st, uint32_t s, uint32_t ahead)
{
	struct seg_table *t = &st->segtab;
	uint32_t cap = (uint32_t)st->hdr.segs_per_stripe, d = st->data_per_seg;
	uint32_t ids[SEG_AHEAD_MAX], n, in_use;

	pthread_mutex_lock(&t->lock);
	/* what writers take next, and `ahead` more once the stripe holds
	 * AHEAD_FROM segments: a small store's files stay near what it holds
	 * (docs/store.md, "Footprint"); the segments the cleaner keeps free
	 * are allocated when taken */
	in_use = cap - t->free_count[s];
	n = t->reserved[s] + (t->promised[s] + d - 1) / d +
	    (in_use >= AHEAD_FROM ? ahead : 0);
	if (n > t->free_count[s])
		n = t->free_count[s];
	if (n > SEG_AHEAD_MAX)
		n = SEG_AHEAD_MAX;
	for (uint32_t i = 0; i < n; i++)
		ids[i] = t->free_fifo[(uint64_t)s * cap + (t->free_head[s] + i) % cap];
	pthread_mutex_unlock(&t->lock);
	/* outside the lock: a segment given out meanwhile is allocated
	 * twice at worst, which the media takes as done; a failure (a full
	 * file system) is left for the writer's own allocation to report */
	for (uint32_t i = 0; i < n; i++)
		if (kvf_media_allocate_segment(st->media, s,
					       seg_in_stripe(st, ids[i])) != KVF_OK)
			break;
}

int seg_fs_full_take(void)
{
	int was = fs_full;

	fs_full = 0;
	return was;
}

kvf_status seg_reserve(kvf_store *st, struct seq *seq, const uint32_t *need,
		       const uint32_t *own)
{
	uint32_t ns = st->hdr.n_stripes, s;

	pthread_mutex_lock(&st->segtab.lock);
	for (s = 0; s < ns; s++)
		if (need[s] > avail_for_writers(st, s, own ? own[s] : 0))
			break;
	if (s < ns) {
		uint32_t avail = avail_for_writers(st, s, own ? own[s] : 0);

		pthread_mutex_unlock(&st->segtab.lock);
		return kvf_fail(KVF_ENOSPC,
				"needs %u free segments on stripe %u, %u are free (%u segments of %llu bytes per stripe)",
				need[s], s, avail,
				(uint32_t)st->hdr.segs_per_stripe,
				(unsigned long long)st->hdr.segment_size);
	}
	for (s = 0; s < ns; s++) {
		kvf_status rc = need[s] ? seg_allocate_ahead(st, s, need[s]) : KVF_OK;

		if (rc != KVF_OK) {
			pthread_mutex_unlock(&st->segtab.lock);
			return rc;
		}
	}
	for (s = 0; s < ns; s++) {
		st->segtab.reserved[s] += need[s];
		seq->reserved[s] += need[s];
		if (own) /* their room is in the reservation now */
			st->segtab.promised[s] -= own[s] < st->segtab.promised[s]
				? own[s] : st->segtab.promised[s];
	}
	pthread_mutex_unlock(&st->segtab.lock);
	return KVF_OK;
}

void seg_unreserve(kvf_store *st, struct seq *seq)
{
	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		st->segtab.reserved[s] -= seq->reserved[s];
		seq->reserved[s] = 0;
	}
	pthread_mutex_unlock(&st->segtab.lock);
}

uint32_t seg_free_count(kvf_store *st)
{
	uint32_t n;

	pthread_mutex_lock(&st->segtab.lock);
	n = st->segtab.n_free;
	pthread_mutex_unlock(&st->segtab.lock);
	return n;
}

kvf_status seg_mark_sealed(kvf_store *st, uint32_t segid,
			   const struct meta_seg *rec)
{
	struct seg_info *si = &st->segtab.info[segid];

	si->live_bits = seg_bits_take(st, segid);
	si->state = SEG_SEALED;
	si->n_data = rec->n_data_pages;
	si->seqno = rec->seqno;
	si->write_ns = rec->write_ns;
	si->owner = rec->owner;
	si->live = 0;
	return KVF_OK;
}

void seg_finish_load(kvf_store *st)
{
	for (uint32_t i = 0; i < st->n_segments; i++) {
		struct seg_info *si = &st->segtab.info[i];

		if (si->state == SEG_SEALED && si->live == 0) {
			si->state = SEG_DYING;
			si->died_epoch = 0;
			st->segtab.n_dying++;
		} else if (si->state == SEG_FREE) {
			free_push(st, i);
		}
	}
}

/* ---- page references ----------------------------------------------------
 * A page's reference count is its live bit plus, for pages a fork shares,
 * an entry in the shared map holding the references beyond the first, so
 * the common unshared page costs one bit.  All under segtab.lock.
 */

uint64_t *seg_bits_take(kvf_store *st, uint32_t segid)
{
	size_t words = (st->data_per_seg + 63) / 64;
	uint64_t *bits = st->segtab.live_words + (size_t)segid * words;

	memset(bits, 0, words * sizeof(uint64_t));
	return bits;
}

static uint32_t shared_slot(kvf_store *st, uint32_t addr)
{
	uint32_t mask = st->segtab.shared_cap - 1;
	uint32_t i = (addr * 2654435761u) & mask;

	while (st->segtab.shared_addr[i] != ADDR_NONE && st->segtab.shared_addr[i] != addr)
		i = (i + 1) & mask;
	return i;
}

/* shared_extra - references of addr beyond the first */
static uint32_t shared_extra(kvf_store *st, uint32_t addr)
{
	uint32_t i;

	if (st->segtab.shared_n == 0)
		return 0;
	i = shared_slot(st, addr);
	return st->segtab.shared_addr[i] == addr ? st->segtab.shared_extra[i] : 0;
}

static int shared_grow(kvf_store *st)
{
	uint32_t old_cap = st->segtab.shared_cap, cap = old_cap ? old_cap * 2 : 64;
	uint32_t *oa = st->segtab.shared_addr, *oe = st->segtab.shared_extra;
	uint32_t *na = kvf_malloc((size_t)cap * sizeof(uint32_t));
	uint32_t *ne = kvf_malloc((size_t)cap * sizeof(uint32_t));

	if (na == NULL || ne == NULL) {
		kvf_free(na);
		kvf_free(ne);
		return -1;
	}
	memset(na, 0xff, (size_t)cap * sizeof(uint32_t)); /* ADDR_NONE */
	st->segtab.shared_addr = na;
	st->segtab.shared_extra = ne;
	st->segtab.shared_cap = cap;
	for (uint32_t k = 0; k < old_cap; k++)
		if (oa[k] != ADDR_NONE) {
			uint32_t i = shared_slot(st, oa[k]);

			na[i] = oa[k];
			ne[i] = oe[k];
		}
	kvf_free(oa);
	kvf_free(oe);
	return 0;
}

/* shared_set - set addr's extra references (0 removes it) */
static int shared_set(kvf_store *st, uint32_t addr, uint32_t extra)
{
	uint32_t i, mask, j;

	if (extra > 0) {
		if (st->segtab.shared_n > 0) { /* present: update in place */
			i = shared_slot(st, addr);
			if (st->segtab.shared_addr[i] == addr) {
				st->segtab.shared_extra[i] = extra;
				return 0;
			}
		}
		if ((st->segtab.shared_n + 1) * 4 > st->segtab.shared_cap * 3 &&
		    shared_grow(st) != 0)
			return -1;
		i = shared_slot(st, addr);
		if (st->segtab.shared_addr[i] == ADDR_NONE)
			st->segtab.shared_n++;
		st->segtab.shared_addr[i] = addr;
		st->segtab.shared_extra[i] = extra;
		return 0;
	}
	if (st->segtab.shared_n == 0)
		return 0;
	i = shared_slot(st, addr);
	if (st->segtab.shared_addr[i] != addr)
		return 0;
	/* remove, then re-place the rest of the cluster */
	mask = st->segtab.shared_cap - 1;
	st->segtab.shared_addr[i] = ADDR_NONE;
	st->segtab.shared_n--;
	for (j = (i + 1) & mask; st->segtab.shared_addr[j] != ADDR_NONE;
	     j = (j + 1) & mask) {
		uint32_t a = st->segtab.shared_addr[j], e = st->segtab.shared_extra[j], k;

		st->segtab.shared_addr[j] = ADDR_NONE;
		k = shared_slot(st, a);
		st->segtab.shared_addr[k] = a;
		st->segtab.shared_extra[k] = e;
	}
	return 0;
}

static int bit_get(const uint64_t *bits, uint32_t page)
{
	return (bits[page / 64] >> (page % 64)) & 1;
}

static void bit_set(uint64_t *bits, uint32_t page, int on)
{
	if (on)
		bits[page / 64] |= 1ull << (page % 64);
	else
		bits[page / 64] &= ~(1ull << (page % 64));
}

/* refs_locked - the references of addr; caller holds segtab.lock */
static uint32_t refs_locked(kvf_store *st, uint32_t addr)
{
	struct seg_info *si = &st->segtab.info[addr_seg(addr, st->page_bits)];
	uint32_t page = addr_page(addr, st->page_bits);

	if (si->live_bits == NULL || !bit_get(si->live_bits, page))
		return 0;
	return 1 + shared_extra(st, addr);
}

uint32_t seg_page_refs(kvf_store *st, uint32_t addr)
{
	uint32_t n;

	pthread_mutex_lock(&st->segtab.lock);
	n = refs_locked(st, addr);
	pthread_mutex_unlock(&st->segtab.lock);
	return n;
}

int seg_ref_full(kvf_store *st, uint32_t addr)
{
	return seg_page_refs(st, addr) >= UINT16_MAX;
}

/* ref_inc_locked - one more reference to addr; -1 when out of memory */
static int ref_inc_locked(kvf_store *st, uint32_t addr)
{
	struct seg_info *si = &st->segtab.info[addr_seg(addr, st->page_bits)];
	uint32_t page = addr_page(addr, st->page_bits);

	if (!bit_get(si->live_bits, page)) {
		bit_set(si->live_bits, page, 1);
		si->live++;
		return 0;
	}
	return shared_set(st, addr, shared_extra(st, addr) + 1);
}

kvf_status seg_ref_inc(kvf_store *st, uint32_t addr)
{
	int rc;

	pthread_mutex_lock(&st->segtab.lock);
	rc = ref_inc_locked(st, addr);
	pthread_mutex_unlock(&st->segtab.lock);
	return rc ? kvf_fail(KVF_ENOMEM, "out of memory for the shared-page map")
		  : KVF_OK;
}

/* ref_dec_locked - one reference less; a segment whose last live page
 * goes becomes dying */
static void ref_dec_locked(kvf_store *st, uint32_t addr)
{
	struct seg_info *si = &st->segtab.info[addr_seg(addr, st->page_bits)];
	uint32_t page = addr_page(addr, st->page_bits);
	uint32_t extra;

	if (si->live_bits == NULL || !bit_get(si->live_bits, page))
		return;
	if ((extra = shared_extra(st, addr)) > 0) {
		shared_set(st, addr, extra - 1); /* shrinking never fails */
		return;
	}
	bit_set(si->live_bits, page, 0);
	if (--si->live == 0 && si->state == SEG_SEALED) {
		si->state = SEG_DYING;
		si->died_epoch = st->segtab.epoch;
		st->segtab.n_dying++;
	}
}

void seg_ref_dec(kvf_store *st, uint32_t addr)
{
	seg_refs_dec(st, &addr, 1);
}

void seg_refs_dec(kvf_store *st, const uint32_t *addrs, uint32_t n)
{
	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t i = 0; i < n; i++)
		ref_dec_locked(st, addrs[i]);
	pthread_mutex_unlock(&st->segtab.lock);
}

void seg_refs_drop_locked(kvf_store *st, uint32_t segid)
{
	struct seg_info *si = &st->segtab.info[segid];

	if (si->live_bits == NULL)
		return;
	for (uint32_t p = 0; p < si->n_data; p++)
		if (bit_get(si->live_bits, p))
			shared_set(st, addr_make(segid, p, st->page_bits), 0);
	memset(si->live_bits, 0, (st->data_per_seg + 63) / 64 * sizeof(uint64_t));
	si->live = 0;
}

/* keep_cap - reclaimed segments of a stripe file left untrimmed, to be
 * reused first: a couple, and half a segment for each segment's worth of
 * live pages, so the files hold at most 1.5 times the live data and two
 * segments.  Trimming every one punched ~20 holes at each of kvbench
 * demo's durable points, and reusing them allocated them again: its syncs
 * took 0.61 s against 0.22 s untrimmed (medians of five, side by side).
 * The flags are not kept across a reopen: a reopened store may hold that
 * many free segments' space until it reuses them.  Caller holds
 * segtab.lock. */
static uint32_t keep_cap(kvf_store *st, uint64_t live_pages)
{
	if (st->hdr.media != KVF_MEDIA_FILE || st->opts.trim == 1)
		return 0;
	return KEEP_MIN + (uint32_t)(live_pages / (2ull * st->data_per_seg));
}

uint32_t seg_reclaim_pick(kvf_store *st, uint64_t upto, struct catalog_batch *b)
{
	uint32_t *ids, n = 0, keep = 0;
	uint64_t live = 0;

	/* Only one reclaim runs at a time (callers hold dur.lock or are
	 * alone at open), and nothing else touches a dying segment. */
	pthread_mutex_lock(&st->segtab.lock);
	ids = st->segtab.reclaim_ids;
	for (uint32_t i = 0; i < st->n_segments; i++) {
		if (st->segtab.info[i].state == SEG_DYING && st->segtab.info[i].died_epoch <= upto)
			ids[n++] = i;
		live += st->segtab.info[i].live;
	}
	/* the first `keep` go back untrimmed (keep_cap); past it, kept
	 * segments (given back unwritten) are trimmed */
	if (st->trim && keep_cap(st, live) > st->segtab.n_kept)
		keep = keep_cap(st, live) - st->segtab.n_kept;
	st->segtab.trim_picked = st->trim && st->segtab.n_kept > keep_cap(st, live)
		? st->segtab.n_kept - keep_cap(st, live) : 0;
	if (keep > n)
		keep = n;
	st->segtab.n_picked = n;
	st->segtab.keep_picked = keep;
	pthread_mutex_unlock(&st->segtab.lock);
	for (uint32_t k = 0; k < n; k++) {
		unsigned char key[5];

		meta_key_u32(key, META_TAG_SEG, ids[k]);
		catalog_batch_delete(b, key, sizeof(key));
	}
	return n;
}

/* KEPT_SKIP - free segments at the head of a stripe's list that trimming
 * leaves alone beside those reserved or promised: the allocation ahead
 * (seg_allocate_next) may be making sure of them */
#define KEPT_SKIP 8u

/* take_kept - up to want kept segments out of the free lists, into ids;
 * how many.  Not those at the head that reservations, promised pages and
 * the allocation ahead count on having space (seg_allocate_ahead), nor
 * more than writers may take.  Caller holds segtab.lock. */
static uint32_t take_kept(kvf_store *st, uint32_t want, uint32_t *ids)
{
	uint32_t cap = (uint32_t)st->hdr.segs_per_stripe, n = 0;
	uint32_t d = st->data_per_seg;

	for (uint32_t s = 0; s < st->hdr.n_stripes && n < want; s++) {
		uint32_t *ring = st->segtab.free_fifo + (uint64_t)s * cap;
		uint32_t head = st->segtab.free_head[s], count = st->segtab.free_count[s];
		uint32_t room = avail_for_writers(st, s, 0), left = 0;
		uint32_t skip = st->segtab.reserved[s] + CLEANER_RESERVE +
				(st->segtab.promised[s] + d - 1) / d + KEPT_SKIP;

		/* the ring closes up over the segments taken out */
		for (uint32_t i = 0; i < count; i++) {
			uint32_t id = ring[(head + i) % cap];

			if (i >= skip && n < want && room > 0 &&
			    st->segtab.info[id].kept) {
				st->segtab.info[id].kept = 0;
				st->segtab.n_kept--;
				ids[n++] = id;
				room--;
				continue;
			}
			ring[(head + left++) % cap] = id;
		}
		st->segtab.n_free -= count - left;
		st->segtab.free_count[s] = left;
	}
	return n;
}

/* trim_kept - trim the kept segments past keep_cap (seg_reclaim_pick
 * counted them): out of the free lists while their space is punched, so
 * that no writer takes one meanwhile, then back at the end (the kept ones
 * still allocated are reused first) */
static kvf_status trim_kept(kvf_store *st)
{
	uint32_t *ids = st->segtab.reclaim_ids, n, done;
	kvf_status rc = KVF_OK;

	pthread_mutex_lock(&st->segtab.lock);
	n = take_kept(st, st->segtab.trim_picked, ids);
	st->segtab.trim_picked = 0;
	pthread_mutex_unlock(&st->segtab.lock);
	for (done = 0; done < n; done++)
		if ((rc = kvf_media_trim_segment(st->media, seg_stripe(st, ids[done]),
						 seg_in_stripe(st, ids[done]))) != KVF_OK)
			break;
	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t k = 0; k < n; k++) {
		if (k >= done) { /* not trimmed: still kept, still first */
			free_push_front(st, ids[k]);
			st->segtab.info[ids[k]].kept = 1;
			st->segtab.n_kept++;
		} else {
			free_push(st, ids[k]);
		}
	}
	pthread_mutex_unlock(&st->segtab.lock);
	return rc;
}

kvf_status seg_reclaim_apply(kvf_store *st)
{
	uint32_t *ids = st->segtab.reclaim_ids, n = st->segtab.n_picked;
	uint32_t keep = st->segtab.keep_picked, done;
	kvf_status rc = KVF_OK;

	/* trim without the lock: a trim can take milliseconds (discard),
	 * and appenders take segtab.lock per page */
	for (done = keep; done < n && st->trim; done++) {
		rc = kvf_media_trim_segment(st->media, seg_stripe(st, ids[done]),
					    seg_in_stripe(st, ids[done]));
		if (rc != KVF_OK)
			break;
	}
	if (!st->trim)
		done = n;
	for (uint32_t k = 0; k < done; k++) /* their addresses are reused */
		tier_drop_segment(st, ids[k]);
	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t k = 0; k < done; k++) {
		struct seg_info *si = &st->segtab.info[ids[k]];

		si->live_bits = NULL;
		si->n_data = 0;
		si->live = 0;
		si->erase_count++;
		st->segtab.n_dying--;
		st->segtab.wear_dirty = 1;
		atomic_fetch_add(&st->c.segments_reclaimed, 1);
		if (st->hdr.media == KVF_MEDIA_FILE)
			free_push_front(st, ids[k]);
		else
			free_push(st, ids[k]);
		if (k < keep && st->trim && !si->kept) {
			si->kept = 1;
			st->segtab.n_kept++;
		}
	}
	st->segtab.n_picked = 0;
	pthread_mutex_unlock(&st->segtab.lock);
	if (rc == KVF_OK && st->segtab.trim_picked > 0)
		rc = trim_kept(st);
	return rc;
}

kvf_status seg_reclaim(kvf_store *st, uint64_t upto, struct catalog_batch *b)
{
	kvf_status rc;

	if (seg_reclaim_pick(st, upto, b) == 0)
		return KVF_OK;
	/* the records go, durably, before a trim can zero their segments:
	 * a crash in between would find a record whose summary is gone,
	 * and take it for damage */
	if ((rc = catalog_commit(st->cat, b, 1)) != KVF_OK) {
		pthread_mutex_lock(&st->segtab.lock);
		st->segtab.n_picked = 0;
		pthread_mutex_unlock(&st->segtab.lock);
		return rc;
	}
	catalog_batch_clear(b);
	return seg_reclaim_apply(st);
}

void seg_wear_record(kvf_store *st, struct catalog_batch *b)
{
	uint32_t *ec = st->segtab.wear_counts;
	unsigned char key = META_TAG_WEAR;

	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t i = 0; i < st->n_segments; i++)
		ec[i] = st->segtab.info[i].erase_count;
	st->segtab.wear_dirty = 0;
	pthread_mutex_unlock(&st->segtab.lock);
	catalog_batch_put(b, &key, 1, ec, (size_t)st->n_segments * sizeof(uint32_t));
}

void seg_sealed(kvf_store *st, uint32_t segid, uint32_t n_data,
		uint64_t seqno, uint64_t write_ns)
{
	struct seg_info *si = &st->segtab.info[segid];

	pthread_mutex_lock(&st->segtab.lock);
	si->state = si->live ? SEG_SEALED : SEG_DYING;
	if (si->state == SEG_DYING) {
		si->died_epoch = st->segtab.epoch;
		st->segtab.n_dying++;
	}
	si->n_data = n_data;
	si->seqno = seqno;
	si->write_ns = write_ns;
	pthread_mutex_unlock(&st->segtab.lock);
}

int seg_cache_written(kvf_store *st, uint32_t segid, uint64_t seqno,
		      unsigned char **buf, unsigned char **held,
		      uint32_t *n_held, uint32_t n,
		      const struct seg_summary_entry *e)
{
	const struct seg_info *si = &st->segtab.info[segid];
	int took = 0;

	/* under the lock, so that the segment cannot be reclaimed (and its
	 * pages dropped from the cache) before they are in it */
	pthread_mutex_lock(&st->segtab.lock);
	if (si->state != SEG_SEALED || si->seqno != seqno) {
		/* reclaimed meanwhile: nothing to cache */
	} else if (*n_held > 0) {
		/* its waiting pages are cache memory already */
		tier_put_held(st, segid, *buf, held, n_held, n, e,
			      PAGE_CHECK_MASK);
	} else if ((uint64_t)n * 2 >= st->data_per_seg) {
		took = tier_put_segment(st, segid, buf, n, e, PAGE_CHECK_MASK);
	} else {
		/* a sync's part-filled segment: its pages by copy, so that
		 * a whole segment's buffer does not hold a few pages (a
		 * small store's memory stays near what it holds) */
		for (uint32_t i = 0; i < n; i++)
			tier_put_read(st, addr_make(segid, i, st->page_bits),
				      (uint32_t)e[i].page_hash & PAGE_CHECK_MASK,
				      *buf + (size_t)i * st->hdr.page_size);
	}
	pthread_mutex_unlock(&st->segtab.lock);
	return took;
}

uint32_t seg_take_open(kvf_store *st, struct seq *seq, uint32_t stripe,
		       int *low)
{
	uint32_t segid = SEG_NONE;

	pthread_mutex_lock(&st->segtab.lock);
	if (seq->reserved[stripe] > 0) {
		seq->reserved[stripe]--;
		st->segtab.reserved[stripe]--;
		segid = free_pop(st, stripe);
	} else if (avail_for_writers(st, stripe, 0) > 0) {
		segid = free_pop(st, stripe);
	}
	*low = st->segtab.free_count[stripe] < st->hdr.segs_per_stripe / 10 + 2;
	if (segid != SEG_NONE) {
		struct seg_info *si = &st->segtab.info[segid];

		si->state = SEG_OPEN;
		si->live_bits = seg_bits_take(st, segid);
		si->n_data = 0;
		si->live = 0;
		si->owner = seq->id;
		st->segtab.n_opened++;
	}
	pthread_mutex_unlock(&st->segtab.lock);
	return segid;
}

void seg_page_born(kvf_store *st, uint32_t segid, uint32_t n)
{
	pthread_mutex_lock(&st->segtab.lock);
	bit_set(st->segtab.info[segid].live_bits, n, 1);
	st->segtab.info[segid].live++;
	pthread_mutex_unlock(&st->segtab.lock);
}

void seg_give_back(kvf_store *st, uint32_t segid)
{
	struct seg_info *si = &st->segtab.info[segid];

	tier_drop_segment(st, segid); /* its pages were never written */
	pthread_mutex_lock(&st->segtab.lock);
	si->live_bits = NULL;
	si->live = 0;
	free_push_front(st, segid);
	/* a stripe file's segment is allocated when taken: it is kept, and
	 * trimmed at a durable point if more are kept than keep_cap allows */
	if (st->trim && st->hdr.media == KVF_MEDIA_FILE && !si->kept) {
		si->kept = 1;
		st->segtab.n_kept++;
	}
	pthread_mutex_unlock(&st->segtab.lock);
}

void seg_promise(kvf_store *st, uint32_t stripe, int32_t pages)
{
	pthread_mutex_lock(&st->segtab.lock);
	st->segtab.promised[stripe] += (uint32_t)pages;
	pthread_mutex_unlock(&st->segtab.lock);
}

int seg_plenty(kvf_store *st)
{
	int plenty = 1;

	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		if (avail_for_writers(st, s, 0) <= st->hdr.segs_per_stripe / 4)
			plenty = 0;
	pthread_mutex_unlock(&st->segtab.lock);
	return plenty;
}
