/*
 * openseg.c - the segments a sequence is filling, one per stripe: pages
 * are placed into the open segment's buffer, and a full segment (or every
 * one at sync) goes to the writer, which writes data and summary in one
 * media write and commits the segment's catalog record.
 *
 * Locking: the caller holds seq->lock; the segment table's lock is taken
 * inside (engine/segments/segtable.c).
 */
#include "engine/segments/openseg.h"

#include <assert.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/key.h"
#include "engine/base/fatal.h"
#include "engine/base/meta.h"
#include "engine/segments/segtable.h"
#include "engine/base/store_state.h"
#include "engine/base/tier.h"
#include "engine/base/wake.h"
#include "engine/segments/writer.h"

kvf_status openseg_reserve(kvf_store *st, struct seq *seq,
			   const uint32_t *pages, const uint32_t *own,
			   const char *call)
{
	uint32_t ns = st->hdr.n_stripes, d = st->data_per_seg;
	uint32_t need[KVF_MEDIA_MAX_STRIPES] = { 0 };
	struct prof_mark m = prof_begin(&st->prof);
	kvf_status rc;

	for (uint32_t s = 0; s < ns; s++) {
		const struct open_seg *os = &seq->open[s];
		uint32_t room = os->segid != SEG_NONE ? d - os->n_pages : 0;

		if (pages[s] > room)
			need[s] = (pages[s] - room + d - 1) / d;
	}
	rc = seg_reserve(st, seq, need, own);
	prof_end(&st->prof, PROF_SEGMENT, m);
	if (rc != KVF_OK)
		return kvf_fail_wrap(rc, call);
	return KVF_OK;
}

/* new_segments - segments placing pages[s] more pages on stripe s opens */
static uint32_t new_segments(kvf_store *st, const struct seq *seq,
			     const uint32_t *pages)
{
	uint32_t d = st->data_per_seg, n = 0;

	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		const struct open_seg *os = &seq->open[s];
		uint32_t room = os->segid != SEG_NONE ? d - os->n_pages : 0;

		if (pages[s] > room)
			n += (pages[s] - room + d - 1) / d;
	}
	return n;
}

kvf_status openseg_stash(kvf_store *st, struct seq *seq,
			 const uint32_t *pages, const char *call)
{
	uint32_t n = new_segments(st, seq, pages);

	while (seq->n_stash < n) {
		struct segbuf *sb = segbuf_get(st);

		if (sb == NULL) {
			openseg_unstash(st, seq);
			return kvf_fail_wrap(KVF_ENOMEM, call);
		}
		sb->next = seq->stash;
		seq->stash = sb;
		seq->n_stash++;
	}
	return KVF_OK;
}

void openseg_unstash(kvf_store *st, struct seq *seq)
{
	while (seq->stash) {
		struct segbuf *sb = seq->stash;

		seq->stash = sb->next;
		segbuf_put(st, sb);
	}
	seq->n_stash = 0;
}

/* openseg_open - take a free segment of stripe for os */
static kvf_status openseg_open(kvf_store *st, struct seq *seq,
			       struct open_seg *os, uint32_t stripe)
{
	uint32_t segid;
	int low;

	if (os->sb == NULL && seq->stash) {
		os->sb = seq->stash;
		seq->stash = os->sb->next;
		seq->n_stash--;
	}
	if (os->sb == NULL && (os->sb = segbuf_get(st)) == NULL)
		return KVF_ENOMEM;
	segid = seg_take_open(st, seq, stripe, &low);
	/* the cleaner also watches eviction's high watermark */
	if ((low || st->opts.evict_policy != KVF_EVICT_NONE) && st->cleaner.running)
		wake_ring(&st->cleaner.bell);
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
	/* what was just written is read next: the buffer goes to the
	 * memory tier once written (seg_cache_written) */
	job->cache = seq->ns == SEQ_NS_USER;
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

	if (os->segid == SEG_NONE) {
		struct prof_mark m = prof_begin(&st->prof);

		rc = openseg_open(st, seq, os, stripe);
		prof_end(&st->prof, PROF_SEGMENT, m);
		if (rc != KVF_OK)
			return rc;
	}
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
	struct prof_mark m = prof_begin(&st->prof);
	uint64_t h = page_hash(os->sb->buf + (size_t)os->n_pages * st->hdr.page_size,
			       st->hdr.page_size);

	prof_end(&st->prof, PROF_HASH, m);
	return openseg_fill_hashed(st, seq, stripe, key, replaces, h, out);
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
	seg_page_born(st, os->segid, n);
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
	struct prof_mark m;
	unsigned char *dst;
	kvf_status rc = openseg_slot(st, seq, stripe, &dst);

	if (rc != KVF_OK)
		return rc;
	m = prof_begin(&st->prof);
	memcpy(dst, page, st->hdr.page_size);
	prof_end(&st->prof, PROF_COPY, m);
	return openseg_fill(st, seq, stripe, key, replaces, out);
}

kvf_status openseg_adopt(kvf_store *st, struct seq *seq, uint32_t stripe,
			 unsigned char *page, struct page_key key,
			 uint32_t replaces, struct page_ref *out)
{
	struct open_seg *os = &seq->open[stripe];
	struct prof_mark m;
	unsigned char *dst;
	uint64_t h;
	kvf_status rc;

	if (!tier_may_place(st)) {
		/* a copy; the page goes back once the segment holds it */
		rc = openseg_place(st, seq, stripe, page, key, replaces, out);
		if (out->addr != ADDR_NONE)
			tier_page_give(st, page);
		return rc;
	}
	if ((rc = openseg_slot(st, seq, stripe, &dst)) != KVF_OK)
		return rc;
	m = prof_begin(&st->prof);
	h = page_hash(page, st->hdr.page_size);
	prof_end(&st->prof, PROF_HASH, m);
	os->sb->held[os->n_pages] = page;
	os->sb->n_held++;
	tier_page_placed(st);
	return openseg_fill_hashed(st, seq, stripe, key, replaces, h, out);
}

kvf_status openseg_flush_all(kvf_store *st, struct seq *seq)
{
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		kvf_status rc = openseg_flush(st, seq, &seq->open[s]);

		if (rc != KVF_OK)
			return rc;
	}
	/* pages of seq a sync moved into its packs count as in flight
	 * until the packs are recorded (a fork's record may not name them
	 * sooner); the sync needs seq's lock no more meanwhile */
	writer_wait_mark(st, &st->pack.done, seq->pack_epoch);
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
	if (os->sb->held[page])
		return os->sb->held[page];
	return os->sb->buf + (size_t)page * st->hdr.page_size;
}

void openseg_release(kvf_store *st, struct seq *seq)
{
	openseg_unstash(st, seq);
	if (seq->open == NULL)
		return;
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		struct open_seg *os = &seq->open[s];

		/* the index gave up its references to these pages when it
		 * moved to this segment; drop them now it never commits */
		for (uint32_t i = 0; i < os->n_superseded; i++)
			seg_ref_dec(st, os->sb->superseded[i]);
		if (os->segid != SEG_NONE)
			seg_give_back(st, os->segid);
		segbuf_put(st, os->sb);
		os->sb = NULL;
		os->segid = SEG_NONE;
		os->n_pages = 0;
		os->n_superseded = 0;
		os->n_runs = 0;
	}
}

/* ---- packs: the tails of many sequences in one segment ------------------
 *
 * Before packs, every sequence's open segment went to the media at each
 * durable point however little it held, taking a whole segment: 10,000
 * sequences of 32 tokens and one kvf_sync needed 10,000 segments.  Now
 * an open segment of at most half a segment's data pages goes into the
 * stripe's pack: the first one becomes the pack (adopted, its pages stay
 * where they are), later ones are copied after it, and their index
 * entries move with them (seq_pack.c).  A pack's pages are written to the
 * media as they join, under their sequence's lock, so a reader never
 * needs the pack's buffer; the summary and the record follow at the end
 * of the durable point (openseg_pack_end), before its media sync.
 *
 * Order: a pack gets its seqno when it is adopted, so a later segment of
 * any sequence in it is newer (recovery keeps the newest entry of a
 * group).  A sequence created after that seqno does not join it (recovery
 * would take its pages for an earlier sequence's with the same id): the
 * pack is written and the sequence's segment becomes the next one.
 */

static_assert(KVF_PACK_MAX_STRIPES == KVF_MEDIA_MAX_STRIPES, "pack stripes");

void openseg_pack_init(kvf_store *st)
{
	for (uint32_t s = 0; s < KVF_PACK_MAX_STRIPES; s++)
		st->pack.open[s] = (struct open_seg){ .segid = SEG_NONE };
	st->pack.jobs = NULL;
	st->pack.epoch = 1;
	st->pack.done = 0;
}

/* pack_small - whether os is small enough for a pack */
static int pack_small(kvf_store *st, const struct open_seg *os)
{
	return os->segid != SEG_NONE && os->n_pages > 0 &&
	       os->n_pages <= st->data_per_seg / 2;
}

/* pack_joins - whether seq's open segment on stripe fits the pack there
 * (else it is adopted as the next pack) */
static int pack_joins(kvf_store *st, struct seq *seq, uint32_t stripe)
{
	const struct open_seg *p = &st->pack.open[stripe];

	return p->segid != SEG_NONE &&
	       st->data_per_seg - p->n_pages >= seq->open[stripe].n_pages &&
	       p->sb->job.seqno > seq->create_seqno;
}

uint32_t openseg_pack_where(kvf_store *st, struct seq *seq, uint32_t stripe)
{
	const struct open_seg *os = &seq->open[stripe];
	const struct open_seg *p = &st->pack.open[stripe];

	if (!pack_small(st, os))
		return ADDR_NONE;
	if (pack_joins(st, seq, stripe))
		return addr_make(p->segid, p->n_pages, st->page_bits);
	return addr_make(os->segid, 0, st->page_bits);
}

/* pack_submit - hand stripe's pack to the writer (summary and record) */
static void pack_submit(kvf_store *st, uint32_t stripe)
{
	struct open_seg *p = &st->pack.open[stripe];
	struct flush_job *job;

	if (p->segid == SEG_NONE)
		return;
	job = &p->sb->job; /* seqno, epoch and owner set at adoption */
	atomic_init(&job->done, 0);
	job->sb = p->sb;
	job->segid = p->segid;
	job->n_pages = p->n_pages;
	job->n_superseded = p->n_superseded;
	job->n_runs = p->n_runs;
	job->data_written = 1;
	job->cache = 0; /* its pages went to media as they joined */
	job->given = NULL;
	job->seq_next = st->pack.jobs;
	st->pack.jobs = job;
	*p = (struct open_seg){ .segid = SEG_NONE };
	writer_enqueue(st, job);
}

/* pack_write - put n pages of buf at page `page` of segid on the media */
static kvf_status pack_write(kvf_store *st, uint32_t segid, uint32_t page,
			     uint32_t n, unsigned char *buf)
{
	struct kvf_media_io io = { .stripe = seg_stripe(st, segid),
				   .seg = seg_in_stripe(st, segid),
				   .page = page, .n_pages = n, .buf = buf };
	kvf_status rc = kvf_media_write(st->media, &io, 1);

	if (rc != KVF_OK) /* the index may point there already */
		return store_set_fatal(st, rc, "pack write");
	return KVF_OK;
}

kvf_status openseg_pack_move(kvf_store *st, struct seq *seq, uint32_t stripe)
{
	struct open_seg *os = &seq->open[stripe], *p = &st->pack.open[stripe];
	uint32_t n = os->n_pages, base;
	kvf_status rc;

	/* a pack's pages are written from the buffer */
	segbuf_gather(st, os->sb, n);
	segbuf_give_held(st, os->sb);
	if (!pack_joins(st, seq, stripe)) { /* os becomes the pack */
		struct flush_job *job = &os->sb->job;

		pack_submit(st, stripe);
		if ((rc = pack_write(st, os->segid, 0, n, os->sb->buf)) != KVF_OK)
			return rc;
		memset(job, 0, sizeof(*job));
		writer_seqno(st, job);
		job->owner = seq->id;
		*p = *os;
		*os = (struct open_seg){ .segid = SEG_NONE };
		seq->pack_epoch = st->pack.epoch;
		st->pack.n_packed++;
		return KVF_OK;
	}
	base = p->n_pages;
	if ((rc = pack_write(st, p->segid, base, n, os->sb->buf)) != KVF_OK)
		return rc;
	memcpy(p->sb->entries + base, os->sb->entries,
	       (size_t)n * sizeof(*os->sb->entries));
	for (uint32_t r = 0; r < os->n_runs; r++) {
		struct meta_run run = os->sb->runs[r];

		run.page += base;
		p->sb->runs[p->n_runs++] = run;
	}
	memcpy(p->sb->superseded + p->n_superseded, os->sb->superseded,
	       (size_t)os->n_superseded * sizeof(uint32_t));
	p->n_superseded += os->n_superseded;
	p->sb->job.owner = KVF_SEQ_NONE; /* several sequences' pages */
	for (uint32_t i = 0; i < n; i++) {
		seg_page_born(st, p->segid, base + i);
		if (seq->ns == SEQ_NS_USER)
			tier_put_read(st, addr_make(p->segid, base + i, st->page_bits),
					 (uint32_t)os->sb->entries[i].page_hash &
						 PAGE_CHECK_MASK,
					 os->sb->buf + (size_t)i * st->hdr.page_size);
	}
	p->n_pages = base + n;
	/* the pages left os's segment: it goes back unwritten */
	seg_give_back(st, os->segid);
	segbuf_put(st, os->sb);
	*os = (struct open_seg){ .segid = SEG_NONE };
	seq->pack_epoch = st->pack.epoch;
	st->pack.n_packed++;
	return KVF_OK;
}

kvf_status openseg_flush_stripe(kvf_store *st, struct seq *seq,
				uint32_t stripe)
{
	return openseg_flush(st, seq, &seq->open[stripe]);
}

kvf_status openseg_pack_end(kvf_store *st)
{
	struct flush_job *j;

	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		pack_submit(st, s);
	writer_wait_jobs(st, st->pack.jobs);
	while ((j = st->pack.jobs) != NULL) {
		st->pack.jobs = j->seq_next;
		job_free(st, j);
	}
	/* forks waiting for their parent's packs go on (openseg_flush_all) */
	writer_mark(st, &st->pack.done, st->pack.epoch++);
	if (atomic_load(&st->fatal.on))
		return store_check(st, "pack write");
	return KVF_OK;
}
