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

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/key.h"
#include "engine/base/meta.h"
#include "engine/segments/segtable.h"
#include "engine/base/store_state.h"
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

/* openseg_open - take a free segment of stripe for os */
static kvf_status openseg_open(kvf_store *st, struct seq *seq,
			       struct open_seg *os, uint32_t stripe)
{
	uint32_t segid;
	int low;

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
