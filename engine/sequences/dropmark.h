/*
 * dropmark.h - the token groups of a sequence that kvf_h2o_evict dropped
 * (docs/store.md, "H2O eviction"): one bit per (lane, token group), a
 * lane being one KV head of one layer (lane = layer * n_kv_heads + head),
 * covering its K and V streams.  A dropped group has no page in the
 * lane's index; every read and attention path skips it as if its tokens
 * were masked; its "D" record (meta.h) brings the marks back at open,
 * where they keep the group's older pages out of the index.  The
 * sequence's length is unchanged: positions stay.
 *
 * Every function needs the sequence's lock held by the caller.
 */
#ifndef KVF_ENGINE_DROPMARK_H
#define KVF_ENGINE_DROPMARK_H

#include <stdint.h>

#include "api/status.h"
#include "engine/base/store_state.h"
#include "engine/sequences/seq_state.h"

struct catalog_batch;

/* dropmark_lane - the lane of KV head `head` of `layer` */
static inline uint32_t dropmark_lane(const kvf_store *st, uint32_t layer,
				     uint32_t head)
{
	return layer * st->hdr.n_kv_heads + head;
}

/* dropmark_is - token group g of lane's K and V is dropped */
static inline int dropmark_is(const struct seq *seq, uint32_t lane, uint64_t g)
{
	return seq->drop && g / 64 < seq->drop_words &&
	       (seq->drop[(size_t)lane * seq->drop_words + g / 64] >> (g % 64) & 1);
}

/* dropmark_held - dropmark_is for a group wholly below its layer's length:
 * at open, before trim_drops (recovery.c) clears them, a mark on the
 * tail group or past it holds nothing (a crash took the length back
 * below a drop that was not synced) */
static inline int dropmark_held(const kvf_store *st, const struct seq *seq,
				uint32_t lane, uint64_t g)
{
	return (g + 1) * st->group_tokens <= seq->len[lane / st->hdr.n_kv_heads] &&
	       dropmark_is(seq, lane, g);
}

/* DROP_ANY - dropmark_any: any lane */
#define DROP_ANY UINT32_MAX

/* dropmark_any - lane has a dropped group (DROP_ANY: any lane) */
int dropmark_any(const kvf_store *st, const struct seq *seq, uint32_t lane);

/* dropmark_set - mark group g of lane dropped (room grown as needed) */
kvf_status dropmark_set(kvf_store *st, struct seq *seq, uint32_t lane,
			uint64_t g);

/* dropmark_cut - clear the marks of groups g >= first_group, every lane
 * (a truncation gave them up) */
void dropmark_cut(kvf_store *st, struct seq *seq, uint64_t first_group);

/* dropmark_trim - clear the marks of each lane's groups from its layer's
 * tail group (part-filled or not begun) on; 1 if there was one */
int dropmark_trim(const kvf_store *st, struct seq *seq);

/* dropmark_inside - the dropped group that token n falls strictly inside
 * (a cut or fork at n would make it a tail), on some lane; UINT64_MAX if
 * none.  *lane gets its lane. */
uint64_t dropmark_inside(const kvf_store *st, const struct seq *seq,
			 uint64_t n, uint32_t *lane);

/* dropmark_first - the first dropped token in [t0, t1) of lane, or
 * UINT64_MAX */
uint64_t dropmark_first(const kvf_store *st, const struct seq *seq,
			uint32_t lane, uint64_t t0, uint64_t t1);

/* dropmark_run - the next run [*a, *b) of tokens kept (not dropped) of
 * lane at or after t, within t1: 1 if there is one, else 0 */
int dropmark_run(const kvf_store *st, const struct seq *seq, uint32_t lane,
		 uint64_t t, uint64_t t1, uint64_t *a, uint64_t *b);

/* dropmark_kept - tokens of lane below t that are not dropped */
uint64_t dropmark_kept(const kvf_store *st, const struct seq *seq,
		       uint32_t lane, uint64_t t);

/* dropmark_at_kept - the position past the first n kept tokens of lane
 * below t1 (the token where the (n+1)-th kept one is; t1 if there are
 * no more than n) */
uint64_t dropmark_at_kept(const kvf_store *st, const struct seq *seq,
			  uint32_t lane, uint64_t n, uint64_t t1);

/* dropmark_copy - child (empty of marks) takes parent's marks of the
 * groups below n_groups */
kvf_status dropmark_copy(kvf_store *st, struct seq *child,
			 const struct seq *parent, uint64_t n_groups);

/* A copy of a sequence's marks (dropmark_save), put back by
 * dropmark_restore when the change that followed fails.  Room grown
 * since (a larger drop_words) is no matter. */
struct dropmark_saved {
	uint64_t *bits; /* [lane][words]; NULL: seq had no marks */
	uint32_t words; /* per lane */
};

/* dropmark_save - sv = seq's marks, every lane */
kvf_status dropmark_save(const kvf_store *st, const struct seq *seq,
			 struct dropmark_saved *sv);

/* dropmark_differs - seq's marks are not those of sv, on some lane */
int dropmark_differs(const kvf_store *st, const struct seq *seq,
		     const struct dropmark_saved *sv);

/* dropmark_restore - seq's marks back to sv, every lane */
void dropmark_restore(const kvf_store *st, struct seq *seq,
		      const struct dropmark_saved *sv);

/* dropmark_saved_free - give sv's copy back */
void dropmark_saved_free(struct dropmark_saved *sv);

/* dropmark_record - put seq's "D" record into b (a delete if it has no
 * mark left) */
kvf_status dropmark_record(kvf_store *st, const struct seq *seq,
			   struct catalog_batch *b);

/* dropmark_load - the "D" record of sequence id back into seq at open
 * (after the "S" and "V" records; seq NULL: freed since, only checked).
 * Marks past the length stay until recovery's trim_drops, which also
 * writes the record again without them. */
kvf_status dropmark_load(kvf_store *st, uint64_t id, struct seq *seq,
			 const void *val, size_t vlen);

#endif /* KVF_ENGINE_DROPMARK_H */
