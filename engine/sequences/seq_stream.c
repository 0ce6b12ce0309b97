/*
 * seq_stream.c - the streams of a sequence and its catalog records: where
 * stream i or stream sid is, how many entries it must have, the X, K^T,
 * H2O and mean-of-V arrays made on first use, an index's growth, the
 * stripe a group goes to, and the "S" and "V" records.  A file of its
 * own: it is the layout of one sequence, which the append, read, fork and
 * recovery paths all use, apart from the table that holds sequences.
 * Callers hold the sequence's lock.
 *
 * Stripe placement: group g of a stream goes to stripe
 * (g + stream offset) % n_stripes, so consecutive groups of one head land
 * on consecutive stripes and a head's read fans out over all of them; the
 * offset spreads the heads' first groups too.
 */

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/group.h"
#include "engine/base/key.h"
#include "engine/base/meta.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "engine/base/tier.h"

uint32_t seq_n_kv_streams(kvf_store *st)
{
	return st->hdr.n_layers * 2 * st->hdr.n_kv_heads;
}

uint32_t seq_n_x_streams(kvf_store *st)
{
	return st->hdr.n_layers * st->hdr.n_q_heads;
}
struct stream *seq_kv_stream(kvf_store *st, struct seq *seq, uint32_t layer,
			     enum kv_kind kind, uint32_t head)
{
	uint32_t h = st->hdr.n_kv_heads;

	return &seq->kv[((size_t)layer * 2 + (uint32_t)kind) * h + head];
}

kvf_status seq_x_alloc(kvf_store *st, struct seq *seq)
{
	if (seq->x)
		return KVF_OK;
	seq->x = kvf_calloc(seq_n_x_streams(st), sizeof(struct stream));
	if (seq->x == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for X streams");
	return KVF_OK;
}

struct stream *seq_x_stream(kvf_store *st, struct seq *seq, uint32_t layer,
			    uint32_t slice)
{
	return &seq->x[(size_t)layer * st->hdr.n_q_heads + slice];
}

uint32_t seq_n_kt_streams(kvf_store *st)
{
	return st->kt_dims ? st->hdr.n_layers * st->hdr.n_kv_heads : 0;
}

uint32_t seq_n_streams(kvf_store *st)
{
	return seq_n_kv_streams(st) + seq_n_x_streams(st) + seq_n_kt_streams(st) +
	       OPTIM_STREAMS;
}

struct stream *seq_stream_at(kvf_store *st, struct seq *seq, uint32_t i,
			     uint32_t *sid)
{
	uint32_t nkv = seq_n_kv_streams(st), h = st->hdr.n_kv_heads;
	uint32_t q = st->hdr.n_q_heads;

	if (i < nkv) {
		uint32_t layer = i / (2 * h), kind = (i / h) % 2, head = i % h;

		*sid = stream_id(layer, (enum kv_kind)kind, head);
		return &seq->kv[i];
	}
	i -= nkv;
	if (i < seq_n_x_streams(st)) {
		*sid = stream_id(i / q, KIND_X, i % q);
		return seq->x ? &seq->x[i] : NULL;
	}
	i -= seq_n_x_streams(st);
	if (i < seq_n_kt_streams(st)) {
		*sid = stream_id(i / h, KIND_KT, i % h);
		return seq->kt ? &seq->kt[i] : NULL;
	}
	i -= seq_n_kt_streams(st);
	*sid = stream_id(0, KIND_OPTIM, i);
	return seq->optim ? &seq->optim[i] : NULL;
}

struct stream *seq_stream_placed(kvf_store *st, struct seq *seq, uint32_t i,
				 uint32_t *sid)
{
	uint32_t h = st->hdr.n_kv_heads;

	if (i < seq_n_kv_streams(st)) { /* seq_stream_at: a layer's K, then V */
		uint32_t r = i % (2 * h);

		i += (r % 2) * h + r / 2 - r;
	}
	return seq_stream_at(st, seq, i, sid);
}

struct stream *seq_stream_of(kvf_store *st, struct seq *seq, uint32_t sid)
{
	uint32_t layer = stream_layer(sid), head = stream_head(sid);
	enum kv_kind kind = stream_kind(sid);

	if (layer >= st->hdr.n_layers)
		return NULL;
	switch (kind) {
	case KIND_K:
	case KIND_V:
		return head < st->hdr.n_kv_heads
			       ? seq_kv_stream(st, seq, layer, kind, head) : NULL;
	case KIND_X:
		return seq->x && head < st->hdr.n_q_heads
			       ? seq_x_stream(st, seq, layer, head) : NULL;
	case KIND_KT:
		return seq->kt && head < st->hdr.n_kv_heads
			       ? &seq->kt[(size_t)layer * st->hdr.n_kv_heads + head]
			       : NULL;
	case KIND_OPTIM:
		return seq->optim && layer == 0 && head < OPTIM_STREAMS
			       ? &seq->optim[head] : NULL;
	default:
		return NULL;
	}
}

uint64_t seq_stream_groups(kvf_store *st, struct seq *seq, uint32_t sid)
{
	enum kv_kind kind = stream_kind(sid);
	uint64_t tokens = seq_tokens(seq, kind, stream_layer(sid));

	if (kind == KIND_KT)
		return tokens / st->kt_tokens * st->kt_groups;
	if (kind == KIND_OPTIM) /* only the committed generation of the
				 * states the rule keeps counts */
		return stream_head(sid) % 2 == seq->optim_gen &&
				       (seq->optim_kept >> (stream_head(sid) / 2) & 1)
			       ? seq->optim_chunks
			       : 0;
	return tokens_entries(st, tokens);
}

uint64_t seq_tokens(struct seq *seq, enum kv_kind kind, uint32_t layer)
{
	return kind == KIND_X ? seq->x_len[layer] : seq->len[layer];
}

kvf_status seq_h2o_alloc(kvf_store *st, struct seq *seq)
{
	if (seq->h2o)
		return KVF_OK;
	seq->h2o = kvf_calloc((size_t)st->hdr.n_layers * st->hdr.n_kv_heads,
			      sizeof(*seq->h2o));
	if (seq->h2o == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for H2O scores");
	return KVF_OK;
}

kvf_status seq_vbar_alloc(kvf_store *st, struct seq *seq)
{
	size_t lh = (size_t)st->hdr.n_layers * st->hdr.n_kv_heads;

	if (seq->vbar)
		return KVF_OK;
	seq->vbar = kvf_calloc(lh * st->hdr.head_dim, sizeof(float));
	seq->vbar_n = kvf_calloc(lh, sizeof(uint64_t));
	if (seq->vbar == NULL || seq->vbar_n == NULL) {
		kvf_free(seq->vbar);
		kvf_free(seq->vbar_n);
		seq->vbar = NULL;
		seq->vbar_n = NULL;
		return kvf_fail(KVF_ENOMEM, "out of memory for the means of V");
	}
	return KVF_OK;
}

kvf_status seq_kt_alloc(kvf_store *st, struct seq *seq)
{
	if (seq->kt || st->kt_dims == 0)
		return KVF_OK;
	seq->kt = kvf_calloc(seq_n_kt_streams(st), sizeof(struct stream));
	if (seq->kt == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for K^T streams");
	return KVF_OK;
}

kvf_status stream_gbuf_alloc(kvf_store *st, struct stream *s, uint32_t bytes)
{
	kvf_status rc;

	/* a group of one page fills a page of the tier: memory the cache
	 * has made, which a group that waits for write-back takes along */
	if (bytes == st->hdr.page_size && tier_page_take(st, &s->gbuf) == KVF_OK) {
		memset(s->gbuf, 0, bytes);
		s->gbuf_bytes = bytes;
		s->gbuf_page = 1;
		return KVF_OK;
	}
	if ((rc = tier_hold(st, bytes, "a group buffer")) != KVF_OK)
		return rc;
	s->gbuf = kvf_calloc(1, bytes);
	if (s->gbuf == NULL) {
		tier_release(st, bytes);
		return kvf_fail(KVF_ENOMEM, "out of memory for a group buffer");
	}
	s->gbuf_bytes = bytes;
	return KVF_OK;
}

void stream_gbuf_free(kvf_store *st, struct stream *s)
{
	if (s->gbuf == NULL)
		return;
	if (s->gbuf_page) {
		tier_page_give(st, s->gbuf);
	} else {
		kvf_free(s->gbuf);
		tier_release(st, s->gbuf_bytes);
	}
	s->gbuf = NULL;
	s->gbuf_bytes = 0;
	s->gbuf_page = 0;
}

void stream_wb_free(kvf_store *st, struct stream *s)
{
	if (s->wb == NULL)
		return;
	if (s->wb->n)
		seg_promise(st, s->wb->stripe, -(int32_t)s->wb->n);
	atomic_fetch_add(&st->c.dram_only_bytes,
			 (uint64_t)s->wb->n * st->hdr.page_size);
	for (uint32_t i = 0; i < s->wb->n; i++) {
		tier_page_give(st, s->wb->page[i]);
		atomic_fetch_sub(&st->c.wb_bytes, st->hdr.page_size);
	}
	for (uint32_t i = 0; i < s->wb->n_spare; i++)
		tier_page_give(st, s->wb->spare[i]);
	tier_release(st, (size_t)s->wb->cap * 2 * sizeof(s->wb->page[0]));
	kvf_free(s->wb->page);
	kvf_free(s->wb->spare);
	kvf_free(s->wb);
	tier_release(st, sizeof(*s->wb));
	s->wb = NULL;
}

void stream_wb_cut(kvf_store *st, struct stream *s, uint64_t e)
{
	uint32_t keep;

	if (s->wb == NULL || (keep = wb_below(s->wb, e)) == s->wb->n)
		return;
	seg_promise(st, s->wb->stripe, -(int32_t)(s->wb->n - keep));
	atomic_fetch_add(&st->c.dram_only_bytes,
			 (uint64_t)(s->wb->n - keep) * st->hdr.page_size);
	for (uint32_t i = keep; i < s->wb->n; i++) {
		tier_page_give(st, s->wb->page[i]);
		atomic_fetch_sub(&st->c.wb_bytes, st->hdr.page_size);
	}
	s->wb->n = keep;
}

void streams_free(kvf_store *st, struct stream *s, uint32_t n)
{
	if (s == NULL)
		return;
	for (uint32_t i = 0; i < n; i++) {
		stream_wb_free(st, &s[i]);
		stream_gbuf_free(st, &s[i]);
		kvf_free(s[i].pages);
		tier_release(st, (uint64_t)s[i].n_alloc * PAGE_REF_BYTES);
	}
	kvf_free(s);
}

kvf_status stream_reserve(kvf_store *st, struct stream *s, uint64_t n_groups)
{
	unsigned char *p;
	uint64_t cap;
	kvf_status rc;

	if (n_groups <= s->n_alloc)
		return KVF_OK;
	if (n_groups > UINT32_MAX - 1)
		return kvf_fail(KVF_ERANGE, "%llu token groups is past the limit of one stream",
				(unsigned long long)n_groups);
	/* a stream's index is most of the store's memory: start at what is
	 * asked (a short sequence holds a group or two a stream), then grow
	 * by an eighth (at least 8 groups), so the slack stays under 0.03 %
	 * of the bytes the stream maps; growing by half, as it once did,
	 * made the index 0.28 % of the KV where its entries are 0.17 % */
	cap = s->n_alloc ? (uint64_t)s->n_alloc +
				   (s->n_alloc / 8 > 8 ? s->n_alloc / 8 : 8)
			 : n_groups;
	if (cap < n_groups)
		cap = n_groups;
	if (cap > UINT32_MAX - 1)
		cap = UINT32_MAX - 1;
	if ((rc = tier_hold(st, (cap - s->n_alloc) * PAGE_REF_BYTES,
			    "the index of a stream")) != KVF_OK)
		return rc;
	p = kvf_realloc(s->pages, cap * PAGE_REF_BYTES);
	if (p == NULL) {
		tier_release(st, (cap - s->n_alloc) * PAGE_REF_BYTES);
		return kvf_fail(KVF_ENOMEM, "out of memory for the index of a stream");
	}
	memset(p + (size_t)s->n_alloc * PAGE_REF_BYTES, 0xff, /* ADDR_NONE */
	       (size_t)(cap - s->n_alloc) * PAGE_REF_BYTES);
	s->pages = p;
	s->n_alloc = (uint32_t)cap;
	return KVF_OK;
}

uint32_t stream_stripe(kvf_store *st, uint32_t sid, uint64_t g)
{
	uint32_t off = stream_head(sid) * 2 + (uint32_t)stream_kind(sid) +
		       stream_layer(sid);

	return (uint32_t)((g + off) % st->hdr.n_stripes);
}

kvf_status seq_record(kvf_store *st, struct seq *seq, struct catalog_batch *b)
{
	return seq_record_lens(st, seq, seq->len, seq->x_len, b);
}

kvf_status seq_record_lens(kvf_store *st, struct seq *seq, const uint64_t *len,
			   const uint64_t *x_len, struct catalog_batch *b)
{
	uint32_t nl = st->hdr.n_layers;
	size_t len_bytes = sizeof(struct meta_seq) + 2 * (size_t)nl * sizeof(uint64_t);
	unsigned char *val = kvf_malloc(len_bytes);
	struct meta_seq m = { .create_seqno = seq->create_seqno,
			      .family = seq->family, .parent = seq->parent,
			      .n_layers = nl };
	unsigned char key[9];

	if (val == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for a sequence record");
	memcpy(val, &m, sizeof(m));
	memcpy(val + sizeof(m), len, nl * sizeof(uint64_t));
	memcpy(val + sizeof(m) + nl * sizeof(uint64_t), x_len,
	       nl * sizeof(uint64_t));
	meta_key_u64(key, seq->ns == SEQ_NS_OPTIM ? META_TAG_OPTIM_SEQ : META_TAG_SEQ,
		     seq->id);
	catalog_batch_put(b, key, sizeof(key), val, len_bytes);
	kvf_free(val);
	/* what the record says, once it commits (seq_record_done) */
	memcpy(seq->rec_len + 2 * nl, len, nl * sizeof(uint64_t));
	memcpy(seq->rec_len + 3 * nl, x_len, nl * sizeof(uint64_t));
	return KVF_OK;
}

/*
 * drop_sealed_plain - a codec store's K/V stream s, whose committed
 * record holds `len` tokens: the plain pages a sync wrote of groups that
 * have sealed since (engine/base/group.h) are no longer the record's, so
 * their references go.  Until this record they were: a crash brought the
 * group back as the tail those pages hold (the encoded pages sit at other
 * entries and hold nothing a tail can be read from).
 */
static void drop_sealed_plain(kvf_store *st, struct stream *s, uint64_t len)
{
	uint64_t upto = len / st->group_tokens;

	for (uint64_t g = s->plain_lo; g < upto; g++) {
		uint64_t e0 = group_plain_entry(st, g);

		for (uint64_t e = e0; e < e0 + st->group_stride - st->plain_off &&
				      e < s->n_groups; e++) {
			uint32_t a = stream_page(s, e).addr;

			if (a != ADDR_NONE)
				seg_ref_dec(st, a);
			stream_set_page(s, e, (struct page_ref){ ADDR_NONE, 0 });
		}
	}
	if (upto > s->plain_lo)
		s->plain_lo = (uint32_t)upto;
}

void seq_record_done(kvf_store *st, struct seq *seq)
{
	uint32_t nl = st->hdr.n_layers, H = st->hdr.n_kv_heads;

	memcpy(seq->rec_len, seq->rec_len + 2 * nl, 2 * nl * sizeof(uint64_t));
	if (st->codec == KVF_CODEC_NONE || seq->ns != SEQ_NS_USER)
		return;
	for (uint32_t l = 0; l < nl; l++)
		for (uint32_t k = 0; k < 2 * H; k++)
			drop_sealed_plain(st, &seq->kv[((size_t)l * 2) * H + k],
					  seq->rec_len[l]);
}

kvf_status seq_vbar_record(kvf_store *st, struct seq *seq,
			   struct catalog_batch *b)
{
	size_t lh = (size_t)st->hdr.n_layers * st->hdr.n_kv_heads;
	size_t row = sizeof(uint64_t) + (size_t)st->hdr.head_dim * sizeof(float);
	unsigned char *val, key[9];

	if (seq->vbar == NULL || seq->vbar_changes == seq->vbar_synced)
		return KVF_OK;
	/* the record only saves reading V again: without memory, skip it */
	if ((val = kvf_malloc(lh * row)) == NULL)
		return KVF_OK;
	for (size_t i = 0; i < lh; i++) {
		memcpy(val + i * row, &seq->vbar_n[i], sizeof(uint64_t));
		memcpy(val + i * row + sizeof(uint64_t),
		       seq->vbar + i * st->hdr.head_dim, row - sizeof(uint64_t));
	}
	meta_key_u64(key, META_TAG_VBAR, seq->id);
	catalog_batch_put(b, key, sizeof(key), val, lh * row);
	kvf_free(val);
	/* counts as written only once the batch commits (sync_done) */
	seq->vbar_capture = seq->vbar_changes;
	seq->vbar_capture_gen = st->dur.gen;
	return KVF_OK;
}

kvf_status seq_vbar_load(kvf_store *st, uint64_t id, struct seq *seq,
			 const void *val, size_t vlen)
{
	size_t lh = (size_t)st->hdr.n_layers * st->hdr.n_kv_heads;
	size_t row = sizeof(uint64_t) + (size_t)st->hdr.head_dim * sizeof(float);
	const unsigned char *v = val;
	kvf_status rc;

	if (vlen != lh * row)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: the means of V of sequence %llu are %zu bytes, not %zu",
				(unsigned long long)id, vlen, lh * row);
	if (seq == NULL)
		return KVF_OK; /* freed since */
	if ((rc = seq_vbar_alloc(st, seq)) == KVF_OK)
		for (size_t i = 0; i < lh; i++) {
			memcpy(&seq->vbar_n[i], v + i * row, sizeof(uint64_t));
			memcpy(seq->vbar + i * st->hdr.head_dim,
			       v + i * row + sizeof(uint64_t), row - sizeof(uint64_t));
			/* a mean of more tokens than survived is of no use */
			if (seq->vbar_n[i] > seq->len[i / st->hdr.n_kv_heads])
				seq->vbar_n[i] = 0;
		}
	return rc;
}

kvf_status seq_use_record(kvf_store *st, struct seq *seq,
			  struct catalog_batch *b)
{
	struct meta_use m = { .create_seqno = seq->create_seqno };
	unsigned char key[9];

	if (seq->ns != SEQ_NS_USER)
		return KVF_OK; /* optimizers are never evicted */
	m.last_use = atomic_load(&seq->last_use);
	m.uses = atomic_load(&seq->uses);
	if (m.last_use == seq->use_synced)
		return KVF_OK; /* not used since: the record stands */
	meta_key_u64(key, META_TAG_USE, seq->id);
	catalog_batch_put(b, key, sizeof(key), &m, sizeof(m));
	seq->use_capture = m.last_use;
	seq->use_capture_gen = st->dur.gen;
	return KVF_OK;
}

kvf_status seq_use_load(kvf_store *st, uint64_t id, struct seq *seq,
			const void *val, size_t vlen, uint64_t base,
			uint64_t *clock)
{
	struct meta_use m;
	uint64_t stamp;

	(void)st;
	if (vlen != sizeof(m))
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: the use record of sequence %llu is %zu bytes, not %zu",
				(unsigned long long)id, vlen, sizeof(m));
	memcpy(&m, val, sizeof(m));
	if (seq == NULL || m.create_seqno != seq->create_seqno)
		return KVF_OK; /* of a sequence freed since, or an earlier one */
	stamp = base + m.last_use;
	atomic_store(&seq->last_use, stamp);
	atomic_store(&seq->uses, m.uses);
	seq->use_synced = stamp;
	if (stamp > *clock)
		*clock = stamp;
	return KVF_OK;
}
