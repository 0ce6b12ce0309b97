/*
 * segment.c - the segment table and the per-sequence segment writer.
 *
 * Free segments wait in one FIFO per stripe, so erases spread evenly over
 * each stripe's segments.  A page's reference count is the number of
 * index slots that point at it (several after a fork); a sealed segment
 * whose last reference goes becomes DYING, and seg_reclaim makes it FREE
 * once a sync has made its death durable (see segment.h).
 *
 * Locking: seg_lock guards st->segs, the free FIFOs and the counts; it is
 * taken inside seq->lock, never the other way round.
 */
#include "engine/segment.h"

#include <string.h>
#include <xxh_x86dispatch.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/cleaner.h"
#include "engine/writer.h"

uint64_t page_hash(const void *page, uint32_t page_size)
{
	return XXH3_64bits_dispatch(page, page_size); /* AVX2 where present */
}

uint32_t page_check(const void *page, uint32_t page_size)
{
	return (uint32_t)page_hash(page, page_size) & PAGE_CHECK_MASK;
}

kvf_status seg_table_init(kvf_store *st)
{
	uint32_t ns = st->hdr.n_stripes;

	st->segs = kvf_calloc(st->n_segments, sizeof(*st->segs));
	st->free_fifo = kvf_calloc(st->n_segments, sizeof(uint32_t));
	st->free_head = kvf_calloc(ns, sizeof(uint32_t));
	st->free_count = kvf_calloc(ns, sizeof(uint32_t));
	st->reserved = kvf_calloc(ns, sizeof(uint32_t));
	st->live_words = kvf_calloc((size_t)st->n_segments *
					    ((st->data_per_seg + 63) / 64),
				    sizeof(uint64_t));
	st->reclaim_ids = kvf_calloc(st->n_segments, sizeof(uint32_t));
	st->wear_counts = kvf_calloc(st->n_segments, sizeof(uint32_t));
	if (!st->segs || !st->free_fifo || !st->free_head || !st->free_count ||
	    !st->reserved || !st->live_words || !st->reclaim_ids ||
	    !st->wear_counts) {
		seg_table_free(st);
		return kvf_fail(KVF_ENOMEM,
				"kvf_open: out of memory for the table of %u segments",
				st->n_segments);
	}
	return KVF_OK;
}

void seg_table_free(kvf_store *st)
{
	kvf_free(st->live_words); /* the segments' live_bits point into it */
	st->live_words = NULL;
	kvf_free(st->reclaim_ids);
	kvf_free(st->wear_counts);
	st->reclaim_ids = st->wear_counts = NULL;
	kvf_free(st->shared_addr);
	kvf_free(st->shared_extra);
	st->shared_addr = st->shared_extra = NULL;
	st->shared_cap = st->shared_n = 0;
	kvf_free(st->segs);
	kvf_free(st->free_fifo);
	kvf_free(st->free_head);
	kvf_free(st->free_count);
	kvf_free(st->reserved);
	st->segs = NULL;
	st->free_fifo = st->free_head = st->free_count = st->reserved = NULL;
}

/* the FIFO of stripe s occupies free_fifo[s * segs_per_stripe ...] */
static void free_push(kvf_store *st, uint32_t segid)
{
	uint32_t s = seg_stripe(st, segid);
	uint32_t cap = (uint32_t)st->hdr.segs_per_stripe;
	uint32_t tail = (st->free_head[s] + st->free_count[s]) % cap;

	st->free_fifo[(uint64_t)s * cap + tail] = segid;
	st->free_count[s]++;
	st->n_free++;
	st->segs[segid].state = SEG_FREE;
}

static uint32_t free_pop(kvf_store *st, uint32_t s)
{
	uint32_t cap = (uint32_t)st->hdr.segs_per_stripe;
	uint32_t segid;

	if (st->free_count[s] == 0)
		return SEG_NONE;
	segid = st->free_fifo[(uint64_t)s * cap + st->free_head[s]];
	st->free_head[s] = (st->free_head[s] + 1) % cap;
	st->free_count[s]--;
	st->n_free--;
	return segid;
}

/* avail_for_writers - free segments of stripe s that writers may still
 * take: not promised to another writer, not the cleaner's reserve */
static uint32_t avail_for_writers(kvf_store *st, uint32_t s)
{
	uint32_t held = st->reserved[s] + CLEANER_RESERVE;

	return st->free_count[s] > held ? st->free_count[s] - held : 0;
}

/* set when the last KVF_ENOSPC of this thread came from the file system
 * (seg_fs_full_take) */
static _Thread_local int fs_full;

/* seg_allocate_ahead - the media space of the free segments of stripe s
 * that writers take next (the free lists are FIFO): those promised
 * already, need more, and the cleaner's reserve.  Stripe files grow as
 * segments are used, so a full file system is found here, before an
 * append places anything (KVF_ENOSPC).  Caller holds seg_lock. */
static kvf_status seg_allocate_ahead(kvf_store *st, uint32_t s, uint32_t need)
{
	uint32_t cap = (uint32_t)st->hdr.segs_per_stripe;
	uint32_t n = st->reserved[s] + need + CLEANER_RESERVE;
	kvf_status rc = KVF_OK;

	if (n > st->free_count[s])
		n = st->free_count[s];
	for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
		uint32_t *fi = &st->free_fifo[(uint64_t)s * cap +
					      (st->free_head[s] + i) % cap];

		rc = kvf_media_allocate_segment(st->media, s,
						seg_in_stripe(st, *fi));
		/* the file system is full: a free segment further on whose
		 * space exists (one used before) takes this one's place */
		for (uint32_t j = i + 1; rc == KVF_ENOSPC && j < st->free_count[s]; j++) {
			uint32_t *fj = &st->free_fifo[(uint64_t)s * cap +
						      (st->free_head[s] + j) % cap];
			uint32_t t = *fj;

			if (kvf_media_allocate_segment(st->media, s,
						       seg_in_stripe(st, t)) == KVF_OK) {
				*fj = *fi;
				*fi = t;
				rc = KVF_OK;
			}
		}
	}
	if (rc == KVF_ENOSPC)
		fs_full = 1;
	return rc;
}

int seg_fs_full_take(void)
{
	int was = fs_full;

	fs_full = 0;
	return was;
}

kvf_status seg_reserve(kvf_store *st, struct seq *seq, const uint32_t *need)
{
	uint32_t ns = st->hdr.n_stripes, s;

	pthread_mutex_lock(&st->seg_lock);
	for (s = 0; s < ns; s++)
		if (need[s] > avail_for_writers(st, s))
			break;
	if (s < ns) {
		uint32_t avail = avail_for_writers(st, s);

		pthread_mutex_unlock(&st->seg_lock);
		return kvf_fail(KVF_ENOSPC,
				"needs %u free segments on stripe %u, %u are free (%u segments of %llu bytes per stripe)",
				need[s], s, avail,
				(uint32_t)st->hdr.segs_per_stripe,
				(unsigned long long)st->hdr.segment_size);
	}
	for (s = 0; s < ns; s++) {
		kvf_status rc = need[s] ? seg_allocate_ahead(st, s, need[s]) : KVF_OK;

		if (rc != KVF_OK) {
			pthread_mutex_unlock(&st->seg_lock);
			return rc;
		}
	}
	for (s = 0; s < ns; s++) {
		st->reserved[s] += need[s];
		seq->reserved[s] += need[s];
	}
	pthread_mutex_unlock(&st->seg_lock);
	return KVF_OK;
}

kvf_status openseg_reserve(kvf_store *st, struct seq *seq,
			   const uint32_t *pages, const char *call)
{
	uint32_t ns = st->hdr.n_stripes, d = st->data_per_seg;
	uint32_t need[KVF_MEDIA_MAX_STRIPES] = { 0 };
	kvf_status rc;

	for (uint32_t s = 0; s < ns; s++) {
		const struct open_seg *os = &seq->open[s];
		uint32_t room = os->segid != SEG_NONE ? d - os->n_pages : 0;

		if (pages[s] > room)
			need[s] = (pages[s] - room + d - 1) / d;
	}
	rc = seg_reserve(st, seq, need);
	if (rc != KVF_OK)
		return kvf_fail_wrap(rc, call);
	return KVF_OK;
}

void seg_unreserve(kvf_store *st, struct seq *seq)
{
	pthread_mutex_lock(&st->seg_lock);
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		st->reserved[s] -= seq->reserved[s];
		seq->reserved[s] = 0;
	}
	pthread_mutex_unlock(&st->seg_lock);
}

uint32_t seg_free_count(kvf_store *st)
{
	uint32_t n;

	pthread_mutex_lock(&st->seg_lock);
	n = st->n_free;
	pthread_mutex_unlock(&st->seg_lock);
	return n;
}

kvf_status seg_mark_sealed(kvf_store *st, uint32_t segid,
			   const struct meta_seg *rec)
{
	struct seg_info *si = &st->segs[segid];

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
		struct seg_info *si = &st->segs[i];

		if (si->state == SEG_SEALED && si->live == 0) {
			si->state = SEG_DYING;
			si->died_epoch = 0;
			st->n_dying++;
		} else if (si->state == SEG_FREE) {
			free_push(st, i);
		}
	}
}

/* ---- page references ----------------------------------------------------
 * A page's reference count is its live bit plus, for pages a fork shares,
 * an entry in the shared map holding the references beyond the first, so
 * the common unshared page costs one bit.  All under seg_lock.
 */

uint64_t *seg_bits_take(kvf_store *st, uint32_t segid)
{
	size_t words = (st->data_per_seg + 63) / 64;
	uint64_t *bits = st->live_words + (size_t)segid * words;

	memset(bits, 0, words * sizeof(uint64_t));
	return bits;
}

static uint32_t shared_slot(kvf_store *st, uint32_t addr)
{
	uint32_t mask = st->shared_cap - 1;
	uint32_t i = (addr * 2654435761u) & mask;

	while (st->shared_addr[i] != ADDR_NONE && st->shared_addr[i] != addr)
		i = (i + 1) & mask;
	return i;
}

/* shared_extra - references of addr beyond the first */
static uint32_t shared_extra(kvf_store *st, uint32_t addr)
{
	uint32_t i;

	if (st->shared_n == 0)
		return 0;
	i = shared_slot(st, addr);
	return st->shared_addr[i] == addr ? st->shared_extra[i] : 0;
}

static int shared_grow(kvf_store *st)
{
	uint32_t old_cap = st->shared_cap, cap = old_cap ? old_cap * 2 : 64;
	uint32_t *oa = st->shared_addr, *oe = st->shared_extra;
	uint32_t *na = kvf_malloc((size_t)cap * sizeof(uint32_t));
	uint32_t *ne = kvf_malloc((size_t)cap * sizeof(uint32_t));

	if (na == NULL || ne == NULL) {
		kvf_free(na);
		kvf_free(ne);
		return -1;
	}
	memset(na, 0xff, (size_t)cap * sizeof(uint32_t)); /* ADDR_NONE */
	st->shared_addr = na;
	st->shared_extra = ne;
	st->shared_cap = cap;
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
		if (st->shared_n > 0) { /* present: update in place */
			i = shared_slot(st, addr);
			if (st->shared_addr[i] == addr) {
				st->shared_extra[i] = extra;
				return 0;
			}
		}
		if ((st->shared_n + 1) * 4 > st->shared_cap * 3 &&
		    shared_grow(st) != 0)
			return -1;
		i = shared_slot(st, addr);
		if (st->shared_addr[i] == ADDR_NONE)
			st->shared_n++;
		st->shared_addr[i] = addr;
		st->shared_extra[i] = extra;
		return 0;
	}
	if (st->shared_n == 0)
		return 0;
	i = shared_slot(st, addr);
	if (st->shared_addr[i] != addr)
		return 0;
	/* remove, then re-place the rest of the cluster */
	mask = st->shared_cap - 1;
	st->shared_addr[i] = ADDR_NONE;
	st->shared_n--;
	for (j = (i + 1) & mask; st->shared_addr[j] != ADDR_NONE;
	     j = (j + 1) & mask) {
		uint32_t a = st->shared_addr[j], e = st->shared_extra[j], k;

		st->shared_addr[j] = ADDR_NONE;
		k = shared_slot(st, a);
		st->shared_addr[k] = a;
		st->shared_extra[k] = e;
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

/* refs_locked - the references of addr; caller holds seg_lock */
static uint32_t refs_locked(kvf_store *st, uint32_t addr)
{
	struct seg_info *si = &st->segs[addr_seg(addr, st->page_bits)];
	uint32_t page = addr_page(addr, st->page_bits);

	if (si->live_bits == NULL || !bit_get(si->live_bits, page))
		return 0;
	return 1 + shared_extra(st, addr);
}

uint32_t seg_page_refs(kvf_store *st, uint32_t addr)
{
	uint32_t n;

	pthread_mutex_lock(&st->seg_lock);
	n = refs_locked(st, addr);
	pthread_mutex_unlock(&st->seg_lock);
	return n;
}

int seg_ref_full(kvf_store *st, uint32_t addr)
{
	return seg_page_refs(st, addr) >= UINT16_MAX;
}

/* ref_inc_locked - one more reference to addr; -1 when out of memory */
static int ref_inc_locked(kvf_store *st, uint32_t addr)
{
	struct seg_info *si = &st->segs[addr_seg(addr, st->page_bits)];
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

	pthread_mutex_lock(&st->seg_lock);
	rc = ref_inc_locked(st, addr);
	pthread_mutex_unlock(&st->seg_lock);
	return rc ? kvf_fail(KVF_ENOMEM, "out of memory for the shared-page map")
		  : KVF_OK;
}

/* ref_dec_locked - one reference less; a segment whose last live page
 * goes becomes dying */
static void ref_dec_locked(kvf_store *st, uint32_t addr)
{
	struct seg_info *si = &st->segs[addr_seg(addr, st->page_bits)];
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
		si->died_epoch = st->epoch;
		st->n_dying++;
	}
}

void seg_ref_dec(kvf_store *st, uint32_t addr)
{
	seg_refs_dec(st, &addr, 1);
}

void seg_refs_dec(kvf_store *st, const uint32_t *addrs, uint32_t n)
{
	pthread_mutex_lock(&st->seg_lock);
	for (uint32_t i = 0; i < n; i++)
		ref_dec_locked(st, addrs[i]);
	pthread_mutex_unlock(&st->seg_lock);
}

void seg_refs_drop_locked(kvf_store *st, uint32_t segid)
{
	struct seg_info *si = &st->segs[segid];

	if (si->live_bits == NULL)
		return;
	for (uint32_t p = 0; p < si->n_data; p++)
		if (bit_get(si->live_bits, p))
			shared_set(st, addr_make(segid, p, st->page_bits), 0);
	memset(si->live_bits, 0, (st->data_per_seg + 63) / 64 * sizeof(uint64_t));
	si->live = 0;
}

kvf_status seg_reclaim(kvf_store *st, uint64_t upto, struct catalog_batch *b)
{
	uint32_t *ids, n = 0, done = 0;
	kvf_status rc = KVF_OK;

	/* pick them under the lock, trim without it: a trim can take
	 * milliseconds (discard), and appenders take seg_lock per page.
	 * Only one reclaim runs at a time (callers hold sync_lock or are
	 * alone at open), and nothing else touches a dying segment. */
	pthread_mutex_lock(&st->seg_lock);
	ids = st->reclaim_ids;
	for (uint32_t i = 0; i < st->n_segments && n < st->n_dying; i++)
		if (st->segs[i].state == SEG_DYING && st->segs[i].died_epoch <= upto)
			ids[n++] = i;
	pthread_mutex_unlock(&st->seg_lock);
	if (n == 0)
		return KVF_OK;
	for (done = 0; done < n && st->trim; done++) {
		rc = kvf_media_trim_segment(st->media, seg_stripe(st, ids[done]),
					    seg_in_stripe(st, ids[done]));
		if (rc != KVF_OK)
			break;
	}
	if (!st->trim)
		done = n;
	pthread_mutex_lock(&st->seg_lock);
	for (uint32_t k = 0; k < done; k++) {
		struct seg_info *si = &st->segs[ids[k]];
		unsigned char key[5];

		meta_key_u32(key, META_TAG_SEG, ids[k]);
		catalog_batch_delete(b, key, sizeof(key));
		si->live_bits = NULL;
		si->n_data = 0;
		si->live = 0;
		si->erase_count++;
		st->n_dying--;
		st->wear_dirty = 1;
		atomic_fetch_add(&st->c.segments_reclaimed, 1);
		free_push(st, ids[k]);
	}
	pthread_mutex_unlock(&st->seg_lock);
	return rc;
}

void seg_wear_record(kvf_store *st, struct catalog_batch *b)
{
	uint32_t *ec = st->wear_counts;
	unsigned char key = META_TAG_WEAR;

	pthread_mutex_lock(&st->seg_lock);
	for (uint32_t i = 0; i < st->n_segments; i++)
		ec[i] = st->segs[i].erase_count;
	st->wear_dirty = 0;
	pthread_mutex_unlock(&st->seg_lock);
	catalog_batch_put(b, &key, 1, ec, (size_t)st->n_segments * sizeof(uint32_t));
}

/* openseg_open - take a free segment of stripe for os */
static kvf_status openseg_open(kvf_store *st, struct seq *seq,
			       struct open_seg *os, uint32_t stripe)
{
	struct seg_info *si;
	uint32_t segid;
	int low;

	if (os->sb == NULL && (os->sb = segbuf_get(st)) == NULL)
		return KVF_ENOMEM;
	pthread_mutex_lock(&st->seg_lock);
	if (seq->reserved[stripe] > 0) {
		seq->reserved[stripe]--;
		st->reserved[stripe]--;
		segid = free_pop(st, stripe);
	} else if (avail_for_writers(st, stripe) > 0) {
		segid = free_pop(st, stripe);
	} else {
		segid = SEG_NONE;
	}
	low = st->free_count[stripe] < st->hdr.segs_per_stripe / 10 + 2;
	if (segid != SEG_NONE) {
		si = &st->segs[segid];
		si->state = SEG_OPEN;
		si->live_bits = seg_bits_take(st, segid);
		si->n_data = 0;
		si->live = 0;
		si->owner = seq->id;
	}
	pthread_mutex_unlock(&st->seg_lock);
	if (low)
		cleaner_kick(st);
	if (segid == SEG_NONE) {
		return kvf_fail(KVF_ENOSPC,
				"no free segment on stripe %u (%u segments of %llu bytes per stripe, all in use)",
				stripe, (uint32_t)st->hdr.segs_per_stripe,
				(unsigned long long)st->hdr.segment_size);
	}
	os->segid = segid;
	os->n_pages = 0;
	os->n_superseded = 0;
	os->n_runs = 0;
	return KVF_OK;
}

void seg_sealed(kvf_store *st, uint32_t segid, uint32_t n_data,
		uint64_t seqno, uint64_t write_ns)
{
	struct seg_info *si = &st->segs[segid];

	pthread_mutex_lock(&st->seg_lock);
	si->state = si->live ? SEG_SEALED : SEG_DYING;
	if (si->state == SEG_DYING) {
		si->died_epoch = st->epoch;
		st->n_dying++;
	}
	si->n_data = n_data;
	si->seqno = seqno;
	si->write_ns = write_ns;
	pthread_mutex_unlock(&st->seg_lock);
}

/* openseg_flush - hand os to the writer; the sequence keeps reading its
 * pages from the job until the write is done */
static kvf_status openseg_flush(kvf_store *st, struct seq *seq,
				struct open_seg *os)
{
	struct flush_job *job;

	if (os->segid == SEG_NONE || os->n_pages == 0)
		return KVF_OK;
	job = &os->sb->job;
	memset(job, 0, sizeof(*job));
	atomic_init(&job->done, 0);
	job->sb = os->sb;
	job->segid = os->segid;
	job->n_pages = os->n_pages;
	job->n_superseded = os->n_superseded;
	job->n_runs = os->n_runs;
	writer_seqno(st, job);
	job->owner = seq->id;
	os->sb = NULL;
	os->segid = SEG_NONE;
	os->n_pages = 0;
	os->n_superseded = 0;
	os->n_runs = 0;
	writer_submit(st, seq, job);
	return seq_jobs_reap(st, seq, 0);
}

kvf_status openseg_slot(kvf_store *st, struct seq *seq, uint32_t stripe,
			unsigned char **page)
{
	struct open_seg *os = &seq->open[stripe];
	kvf_status rc;

	if (os->segid == SEG_NONE &&
	    (rc = openseg_open(st, seq, os, stripe)) != KVF_OK)
		return rc;
	*page = os->sb->buf + (size_t)os->n_pages * st->hdr.page_size;
	return KVF_OK;
}

uint32_t openseg_room(kvf_store *st, struct seq *seq, uint32_t stripe)
{
	const struct open_seg *os = &seq->open[stripe];

	return os->segid == SEG_NONE ? 0 : st->data_per_seg - os->n_pages;
}

kvf_status openseg_fill(kvf_store *st, struct seq *seq, uint32_t stripe,
			struct page_key key, uint32_t replaces,
			struct page_ref *out)
{
	const struct open_seg *os = &seq->open[stripe];

	return openseg_fill_hashed(st, seq, stripe, key, replaces,
				   page_hash(os->sb->buf + (size_t)os->n_pages *
							   st->hdr.page_size,
					     st->hdr.page_size),
				   out);
}

kvf_status openseg_fill_hashed(kvf_store *st, struct seq *seq, uint32_t stripe,
			       struct page_key key, uint32_t replaces,
			       uint64_t h, struct page_ref *out)
{
	struct open_seg *os = &seq->open[stripe];
	uint32_t n = os->n_pages;

	os->sb->entries[n] = (struct seg_summary_entry){ key.hi, key.lo, h };
	meta_run_add(os->sb->runs, &os->n_runs,
		     (struct meta_run){ .seq = seq->id, .family = seq->family,
					.stream = page_key_stream(key),
					.group = page_key_group(key),
					.page = n, .ns = (uint8_t)seq->ns, .stride = 1,
					.n = 1 });
	if (replaces != ADDR_NONE)
		os->sb->superseded[os->n_superseded++] = replaces;
	pthread_mutex_lock(&st->seg_lock);
	bit_set(st->segs[os->segid].live_bits, n, 1);
	st->segs[os->segid].live++;
	pthread_mutex_unlock(&st->seg_lock);
	out->addr = addr_make(os->segid, n, st->page_bits);
	out->check = (uint32_t)h & PAGE_CHECK_MASK;
	os->n_pages = n + 1;
	if (os->n_pages == st->data_per_seg)
		return openseg_flush(st, seq, os);
	return KVF_OK;
}

kvf_status openseg_place(kvf_store *st, struct seq *seq, uint32_t stripe,
			 const void *page, struct page_key key,
			 uint32_t replaces, struct page_ref *out)
{
	unsigned char *dst;
	kvf_status rc = openseg_slot(st, seq, stripe, &dst);

	if (rc != KVF_OK)
		return rc;
	memcpy(dst, page, st->hdr.page_size);
	return openseg_fill(st, seq, stripe, key, replaces, out);
}

kvf_status openseg_flush_all(kvf_store *st, struct seq *seq)
{
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		kvf_status rc = openseg_flush(st, seq, &seq->open[s]);

		if (rc != KVF_OK)
			return rc;
	}
	return seq_jobs_reap(st, seq, 1);
}

const unsigned char *openseg_page(kvf_store *st, struct seq *seq,
				  uint32_t addr)
{
	uint32_t segid = addr_seg(addr, st->page_bits);
	struct open_seg *os = &seq->open[seg_stripe(st, segid)];
	uint32_t page = addr_page(addr, st->page_bits);

	if (os->segid != segid || page >= os->n_pages)
		return seq_job_page(st, seq, addr);
	return os->sb->buf + (size_t)page * st->hdr.page_size;
}

void openseg_release(kvf_store *st, struct seq *seq)
{
	if (seq->open == NULL)
		return;
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		struct open_seg *os = &seq->open[s];

		/* the index gave up its references to these pages when it
		 * moved to this segment; drop them now it never commits */
		for (uint32_t i = 0; i < os->n_superseded; i++)
			seg_ref_dec(st, os->sb->superseded[i]);
		if (os->segid != SEG_NONE) {
			pthread_mutex_lock(&st->seg_lock);
			st->segs[os->segid].live_bits = NULL;
			st->segs[os->segid].live = 0;
			free_push(st, os->segid);
			pthread_mutex_unlock(&st->seg_lock);
		}
		segbuf_put(st, os->sb);
		os->sb = NULL;
		os->segid = SEG_NONE;
		os->n_pages = 0;
		os->n_superseded = 0;
		os->n_runs = 0;
	}
}
