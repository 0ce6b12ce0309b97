/*
 * seq_pack.c - a sequence's open segments at a durable point: those of at
 * most half a segment join the store's packs, so that the tails of many
 * short sequences share segments (engine/segments/openseg.c, "packs"),
 * and the index entries of pages copied into a pack point at their new
 * place before the pages move.
 *
 * Locking: dur.lock (the packs), seq->lock (its streams and open
 * segments).
 */
#include "engine/sequences/seq_pack.h"

#include "engine/base/key.h"
#include "engine/base/store_state.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/segments/writer.h"
#include "engine/sequences/seq_stream.h"

/* run_slot - the stream of run r and whether its i-th page's slot holds
 * old; NULL when not */
static struct stream *run_slot(kvf_store *st, struct seq *seq,
			       const struct meta_run *r, uint32_t i,
			       uint32_t old)
{
	struct stream *s = seq_stream_of(st, seq, r->stream);
	uint64_t g = (uint64_t)r->group + (uint64_t)i * r->stride;

	if (s == NULL || r->seq != seq->id || g >= s->n_groups ||
	    stream_page(s, g).addr != old)
		return NULL;
	return s;
}

/* movable - every page of os is its own slot's, and none replaces a page
 * of os itself: its index entries can follow its pages elsewhere */
static int movable(kvf_store *st, struct seq *seq, const struct open_seg *os)
{
	const struct segbuf *sb = os->sb;
	uint32_t covered = 0;

	for (uint32_t k = 0; k < os->n_runs; k++) {
		const struct meta_run *r = &sb->runs[k];

		for (uint32_t i = 0; i < r->n; i++)
			if (run_slot(st, seq, r, i,
				     addr_make(os->segid, r->page + i,
					       st->page_bits)) == NULL)
				return 0;
		covered += r->n;
	}
	for (uint32_t k = 0; k < os->n_superseded; k++)
		if (addr_seg(sb->superseded[k], st->page_bits) == os->segid)
			return 0;
	return covered == os->n_pages;
}

/* repoint - the slots of os's pages point at `to` + their page */
static void repoint(kvf_store *st, struct seq *seq, const struct open_seg *os,
		    uint32_t to)
{
	uint32_t seg = addr_seg(to, st->page_bits), base = addr_page(to, st->page_bits);

	for (uint32_t k = 0; k < os->n_runs; k++) {
		const struct meta_run *r = &os->sb->runs[k];

		for (uint32_t i = 0; i < r->n; i++) {
			uint64_t g = (uint64_t)r->group + (uint64_t)i * r->stride;
			struct stream *s = seq_stream_of(st, seq, r->stream);
			struct page_ref ref = stream_page(s, g);

			ref.addr = addr_make(seg, base + r->page + i, st->page_bits);
			stream_set_page(s, g, ref);
		}
	}
}

kvf_status seq_flush_packed(kvf_store *st, struct seq *seq)
{
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		struct open_seg *os = &seq->open[s];
		uint32_t to = openseg_pack_where(st, seq, s);
		kvf_status rc;

		if (to == ADDR_NONE ||
		    (to != addr_make(os->segid, 0, st->page_bits) &&
		     !movable(st, seq, os))) {
			rc = openseg_flush_stripe(st, seq, s);
		} else {
			if (to != addr_make(os->segid, 0, st->page_bits))
				repoint(st, seq, os, to);
			rc = openseg_pack_move(st, seq, s);
		}
		if (rc != KVF_OK)
			return rc;
	}
	return seq_jobs_reap(st, seq, 1);
}

kvf_status seq_pack_small(kvf_store *st, struct seq *seq)
{
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		struct open_seg *os = &seq->open[s];
		uint32_t to = openseg_pack_where(st, seq, s);
		kvf_status rc;

		if (to == ADDR_NONE)
			continue; /* none, or more than half a segment */
		if (to != addr_make(os->segid, 0, st->page_bits)) {
			if (!movable(st, seq, os))
				continue;
			repoint(st, seq, os, to);
		}
		if ((rc = openseg_pack_move(st, seq, s)) != KVF_OK)
			return rc;
	}
	return seq_jobs_reap(st, seq, 1);
}
