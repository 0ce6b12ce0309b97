/*
 * seq_truncate.c - kvf_seq_truncate: a sequence keeps the first n tokens
 * of every layer (K, V, X and K^T) and gives the rest up, for speculative
 * decoding, beam search and edited chats.
 *
 * Pages are never changed in place: whole groups past the cut lose this
 * sequence's reference (a fork or a prefix sharer keeps its own, so its
 * data stays as it was), and the group the cut falls in becomes the
 * stream's tail group again, copied into its group buffer.  Its page in
 * the index stays where it is, holding the kept tokens (and dropped ones
 * past them), until an append seals the group anew or a sync writes it
 * as a partial page; the K^T block the cut falls in is rebuilt from K.
 *
 * Durability (docs/store.md, "Truncation"): the cut commits in the catalog
 * before any page reference is dropped, as kvf_seq_free does, but only
 * when it reaches below the lengths the catalog holds: the "S" record
 * then states min(n, recorded length) per layer.  Every group below the
 * recorded length has a committed page holding at least its tokens below
 * that length, so the record never claims a token the media does not
 * hold.  A cut of tokens appended since the last sync commits nothing:
 * recovery ignores the pages past the recorded length anyway.  The pages
 * dropped free their segments after the next durable point, as a free's.
 *
 * Two passes: the first reads every group and K^T block the cut needs
 * into new buffers and commits the record (a failure there changes
 * nothing); the second, which cannot fail, applies the cut in memory.
 *
 * Locking: dur.lock (no sync writes the sequence half cut), world shared,
 * the sequence's lock.
 */
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/fatal.h"
#include "engine/base/group.h"
#include "engine/base/key.h"
#include "engine/base/store_state.h"
#include "engine/reads/kt_read.h"
#include "engine/reads/readpath.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/segments/writer.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/prefix.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/writes/writeback.h"

/* The cut of one stream, planned by the first pass. */
struct cut {
	struct stream *s;     /* NULL: the stream keeps all it has */
	uint64_t tokens;      /* it holds now (K^T: its layer's K tokens) */
	uint64_t keep;        /* it keeps */
	struct stream fresh;  /* .gbuf: its new tail group (or K^T block),
			       * NULL to cut the current one in place */
};

/* plan_group - the K/V/X stream of cut c: a new tail buffer holding the
 * kept tokens of the group the cut falls in, unless the cut stays inside
 * the tail group already in memory */
static kvf_status plan_group(kvf_store *st, struct seq *seq, struct cut *c)
{
	uint32_t G = st->group_tokens, rb = st->row_bytes;
	uint64_t g = c->keep / G, tail = c->keep % G;
	kvf_status rc;

	if (tail == 0 ||
	    (g == c->tokens / G && c->tokens % G && c->s->gbuf != NULL))
		return KVF_OK;
	if ((rc = stream_gbuf_alloc(st, &c->fresh, group_buf_bytes(st))) != KVF_OK)
		return rc;
	rc = stream_group_copy(st, seq, c->s, c->tokens, g, c->fresh.gbuf);
	if (rc == KVF_OK)
		memset(c->fresh.gbuf + tail * rb, 0, (G - tail) * rb);
	return rc;
}

/* plan_kt - the K^T stream of K head `head` of a layer: the open block
 * after the cut, rebuilt from the kept K tokens when the cut leaves the
 * block in memory */
static kvf_status plan_kt(kvf_store *st, struct seq *seq, struct cut *c,
			  uint32_t layer, uint32_t head)
{
	uint32_t T = st->kt_tokens;
	kvf_status rc;

	if (c->keep % T == 0 ||
	    (c->keep / T == c->tokens / T && c->s->gbuf != NULL))
		return KVF_OK;
	rc = stream_gbuf_alloc(st, &c->fresh, st->kt_groups * st->hdr.page_size);
	if (rc != KVF_OK)
		return rc;
	return kt_block_fill(st, seq, layer, head, c->tokens, c->keep,
			     c->fresh.gbuf);
}

/* drop_range - give up s's index entries [from, to) */
static void drop_range(kvf_store *st, struct stream *s, uint64_t from,
		       uint64_t to)
{
	for (uint64_t g = from; g < to && g < s->n_groups; g++) {
		uint32_t a = stream_page(s, g).addr;

		if (a != ADDR_NONE)
			seg_ref_dec(st, a);
		stream_set_page(s, g, (struct page_ref){ ADDR_NONE, 0 });
	}
}

/* drop_entries - give up s's index entries [from, n_groups) */
static void drop_entries(kvf_store *st, struct stream *s, uint64_t from)
{
	drop_range(st, s, from, s->n_groups);
	if (s->n_groups > from)
		s->n_groups = (uint32_t)from;
}

/* take_fresh - s's group buffer becomes c's new one */
static void take_fresh(kvf_store *st, struct stream *s, struct cut *c)
{
	stream_gbuf_free(st, s);
	s->gbuf = c->fresh.gbuf;
	s->gbuf_bytes = c->fresh.gbuf_bytes;
	s->gbuf_page = c->fresh.gbuf_page;
	c->fresh.gbuf = NULL;
	c->fresh.gbuf_bytes = 0;
	c->fresh.gbuf_page = 0;
}

/* placed_tokens - of the first `tail` tokens of the whole plain group at
 * entries e.., those whose rows lie in pages placed on media: a run of
 * write-back can end inside a group of several pages, leaving its later
 * pages waiting (and the cut drops what waits) */
static uint32_t placed_tokens(kvf_store *st, const struct stream *s,
			      uint64_t e, uint64_t tail)
{
	uint32_t np = group_fill_pages(st, tail), p = 0;
	uint64_t n;

	while (p < np && e + p < s->n_groups && stream_waiting(s, e + p) == NULL &&
	       stream_page(s, e + p).addr != ADDR_NONE)
		p++;
	n = (uint64_t)p * st->hdr.page_size / st->row_bytes;
	return (uint32_t)(n < tail ? n : tail);
}

/* apply_group - the second pass on a K/V/X stream */
static void apply_group(kvf_store *st, struct cut *c)
{
	uint32_t G = st->group_tokens, rb = st->row_bytes;
	struct stream *s = c->s;
	uint64_t g = c->keep / G, tail = c->keep % G, e = group_plain_entry(st, g);
	uint32_t written;

	/* how many kept tokens the pages the index has for group g hold: a
	 * group waiting for write-back has its older pages there (the
	 * partial pages of a sync, or none); a whole group those of its
	 * pages placed on media.  A sync writes the tail from the first
	 * page past them (append.c, seal_tail) */
	if (tail == 0)
		written = 0;
	else if (g == c->tokens / G && c->tokens % G)
		written = s->tail_written < tail ? s->tail_written : (uint32_t)tail;
	else if (!s->enc)
		written = placed_tokens(st, s, e, tail);
	else
		written = 0; /* encoded: its kept tokens are plain again */
	stream_wb_cut(st, s, group_entry(st, g)); /* e, or g's encoded pages */
	/* the kept tail's pages stay (they hold its first `written` tokens);
	 * a group of several pages drops those past them, a codec store's
	 * encoded group the pages of its encoded form */
	drop_entries(st, s, tokens_entries(st, c->keep));
	if (s->enc && tail)
		drop_range(st, s, group_entry(st, g), e);
	if (s->enc && s->plain_lo > g) /* its plain pages, once it seals */
		s->plain_lo = (uint32_t)g;
	if (c->fresh.gbuf)
		take_fresh(st, s, c);
	else if (s->gbuf)
		memset(s->gbuf + tail * rb, 0, (G - tail) * rb);
	s->tail_written = written;
}

/* apply_kt - the second pass on a K^T stream */
static void apply_kt(kvf_store *st, struct cut *c)
{
	uint32_t T = st->kt_tokens, eb = st->elt_bytes, ps = st->hdr.page_size;
	struct stream *s = c->s;
	uint64_t p = c->keep % T;

	drop_entries(st, s, c->keep / T * st->kt_groups);
	if (c->fresh.gbuf) {
		take_fresh(st, s, c);
		return;
	}
	if (s->gbuf == NULL)
		return;
	/* [E][T] per page: clear positions p.. of each dim */
	for (uint32_t d = 0; d < st->kt_groups * st->kt_dims; d++)
		memset(s->gbuf + (size_t)(d / st->kt_dims) * ps +
			       ((size_t)(d % st->kt_dims) * T + p) * eb,
		       0, (size_t)(T - p) * eb);
}

/* apply_means - means of V and H2O scores that covered dropped tokens */
static void apply_means(kvf_store *st, struct seq *seq, uint64_t n)
{
	uint32_t H = st->hdr.n_kv_heads, D = st->hdr.head_dim;

	for (uint32_t i = 0; i < st->hdr.n_layers * H; i++) {
		if (seq->vbar && seq->vbar_n[i] > dropmark_kept(st, seq, i, n)) {
			/* SparF catches a mean of no tokens up from V */
			seq->vbar_n[i] = 0;
			memset(seq->vbar + (size_t)i * D, 0, D * sizeof(float));
			seq->vbar_changes++;
		}
		if (seq->h2o && seq->h2o[i].len > n)
			seq->h2o[i].len = n;
	}
}

/* record - put the cut's records in b, if it needs any: the "S" record
 * when it reaches below the recorded lengths, the "T" record when token
 * ids go, the "D" record when marks of dropped groups go (drops_cut: seq's
 * marks are the cut's already).  *any says whether it put one. */
static kvf_status record(kvf_store *st, struct seq *seq, uint64_t n,
			 int drops_cut, struct catalog_batch *b, int *any)
{
	uint32_t nl = st->hdr.n_layers;
	uint64_t *lens = kvf_malloc(2 * (size_t)nl * sizeof(uint64_t));
	int below = 0;
	kvf_status rc = KVF_OK;

	*any = 0;
	if (lens == NULL)
		return KVF_ENOMEM;
	for (uint32_t i = 0; i < 2 * nl; i++) {
		uint64_t now = i < nl ? seq->len[i] : seq->x_len[i - nl];
		uint64_t keep = now < n ? now : n, G = st->group_tokens;

		lens[i] = keep < seq->rec_len[i] ? keep : seq->rec_len[i];
		below |= keep < seq->rec_len[i];
		/* a codec store's cut inside a group the record has sealed:
		 * the media holds that group encoded, not its kept tokens
		 * plain, until a sync writes them; until then the record
		 * keeps the whole groups only (docs/compression.md) */
		if (i < nl && st->codec != KVF_CODEC_NONE &&
		    lens[i] == keep && keep % G && keep / G < seq->rec_len[i] / G)
			lens[i] = keep - keep % G;
	}
	if (below) {
		rc = seq_record_lens(st, seq, lens, lens + nl, b);
		*any = 1;
	}
	if (rc == KVF_OK && drops_cut) {
		rc = dropmark_record(st, seq, b);
		*any = 1;
	}
	if (rc == KVF_OK && seq->prefix && seq->prefix->n_tokens > n) {
		rc = prefix_record(b, seq->id, seq->create_seqno,
				   seq->prefix->tokens, n, NULL, 0);
		*any = 1;
	}
	kvf_free(lens);
	return rc;
}

/* cuts_free - the first pass's buffers that the second did not take */
static void cuts_free(kvf_store *st, struct cut *cuts, uint32_t n)
{
	for (uint32_t i = 0; cuts && i < n; i++)
		stream_gbuf_free(st, &cuts[i].fresh);
	kvf_free(cuts);
}

/*
 * commit_open - the open segments of seq holding a page that the cut to n
 * gives up or opens again go to the writer now.  Recovery applies segment
 * records in commit order, newest last; a group sealed, cut and sealed
 * anew before a flush may have its two pages in open segments of two
 * stripes (write-back runs pick their own), and the older one must not
 * commit after the newer.  Committing early changes nothing else.
 */
static kvf_status commit_open(kvf_store *st, struct seq *seq, uint64_t n)
{
	uint32_t n_streams = seq_n_kv_streams(st) + seq_n_x_streams(st);
	uint64_t from = group_entry(st, n / st->group_tokens);
	kvf_status rc = KVF_OK;

	for (uint32_t i = 0; seq->open && i < n_streams && rc == KVF_OK; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);

		/* only write-back picks a stripe that is not the entry's */
		if (s == NULL || !wb_enabled(st, seq, sid))
			continue;
		for (uint64_t e = from; e < s->n_groups && rc == KVF_OK; e++) {
			uint32_t a = stream_page(s, e).addr, segid, stripe;

			if (a == ADDR_NONE)
				continue;
			segid = addr_seg(a, st->page_bits);
			stripe = seg_stripe(st, segid);
			if (seq->open[stripe].segid == segid)
				rc = openseg_flush_stripe(st, seq, stripe);
		}
	}
	return rc;
}

/* truncate_locked - the cut of seq (locked) to n tokens */
static kvf_status truncate_locked(kvf_store *st, struct seq *seq, uint64_t n,
				  const char *call)
{
	uint32_t n_streams = seq_n_kv_streams(st) + seq_n_x_streams(st) +
			     seq_n_kt_streams(st);
	struct catalog_batch *b = NULL;
	struct cut *cuts;
	struct dropmark_saved marks = { 0 }; /* before the cut, to restore */
	int any = 0, drops_cut = 0;
	kvf_status rc;

	/* every page committed before its reference can be dropped */
	if ((rc = commit_open(st, seq, n)) != KVF_OK ||
	    (rc = seq_jobs_reap(st, seq, 1)) != KVF_OK)
		return kvf_fail_wrap(rc, call);
	cuts = kvf_calloc(n_streams, sizeof(*cuts));
	if (cuts == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	for (uint32_t i = 0; i < n_streams && rc == KVF_OK; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);
		enum kv_kind kind = stream_kind(sid);
		uint32_t layer = stream_layer(sid);
		struct cut *c = &cuts[i];

		if (s == NULL)
			continue;
		c->tokens = seq_tokens(seq, kind == KIND_KT ? KIND_K : kind, layer);
		c->keep = c->tokens < n ? c->tokens : n;
		if (c->keep == c->tokens)
			continue;
		c->s = s;
		rc = kind == KIND_KT ? plan_kt(st, seq, c, layer, stream_head(sid))
				     : plan_group(st, seq, c);
	}
	if (rc != KVF_OK) {
		kvf_fail_wrap(rc, call);
		goto out;
	}
	/* the marks of dropped groups past the cut go with it */
	if ((rc = dropmark_save(st, seq, &marks)) != KVF_OK) {
		kvf_fail_wrap(rc, call);
		goto out;
	}
	dropmark_cut(st, seq, n / st->group_tokens);
	drops_cut = dropmark_differs(st, seq, &marks);
	if ((b = catalog_batch_new()) == NULL ||
	    record(st, seq, n, drops_cut, b, &any) != KVF_OK) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	if (any && (rc = catalog_commit(st->cat, b, 0)) != KVF_OK) {
		rc = store_set_fatal(st, rc, call);
		goto out;
	}
	dropmark_saved_free(&marks);
	if (any)
		seq_record_done(st, seq);
	for (uint32_t i = 0; i < n_streams; i++) {
		uint32_t sid;

		if (cuts[i].s == NULL)
			continue;
		(void)seq_stream_at(st, seq, i, &sid);
		if (stream_kind(sid) == KIND_KT)
			apply_kt(st, &cuts[i]);
		else
			apply_group(st, &cuts[i]);
	}
	for (uint32_t l = 0; l < st->hdr.n_layers; l++) {
		seq->len[l] = n;
		if (seq->x_len[l] > n)
			seq->x_len[l] = n;
	}
	apply_means(st, seq, n);
	prefix_truncate(st, seq, n);
	seq->changes++;
out:
	if (marks.bits) /* failed: the marks as they were */
		dropmark_restore(st, seq, &marks);
	dropmark_saved_free(&marks);
	catalog_batch_free(b);
	cuts_free(st, cuts, n_streams);
	return rc;
}

kvf_status kvf_seq_truncate(kvf_store *st, uint64_t id, uint64_t n_tokens)
{
	const char *call = "kvf_seq_truncate";
	struct seq *seq;
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&st->dur.lock);
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, id, &seq)) != KVF_OK)
		goto out;
	for (uint32_t l = 0; l < st->hdr.n_layers; l++)
		if (seq->len[l] < n_tokens) {
			rc = kvf_fail(KVF_ERANGE,
				      "%s: n_tokens %llu past the end of sequence %llu (layer %u has %llu tokens)",
				      call, (unsigned long long)n_tokens,
				      (unsigned long long)id, l,
				      (unsigned long long)seq->len[l]);
			break;
		}
	if (rc == KVF_OK) {
		uint32_t l;
		uint64_t g = dropmark_inside(st, seq, n_tokens, &l);

		if (g != UINT64_MAX)
			rc = kvf_fail(KVF_ERANGE,
				      "%s: n_tokens %llu falls inside token group %llu of layer %u KV head %u, which kvf_h2o_evict dropped; cut at its start (%llu) or its end (%llu)",
				      call, (unsigned long long)n_tokens,
				      (unsigned long long)g, l / st->hdr.n_kv_heads,
				      l % st->hdr.n_kv_heads,
				      (unsigned long long)(g * st->group_tokens),
				      (unsigned long long)((g + 1) * st->group_tokens));
	}
	if (rc == KVF_OK)
		rc = truncate_locked(st, seq, n_tokens, call);
	seq_unlock_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->dur.lock);
	return rc;
}
