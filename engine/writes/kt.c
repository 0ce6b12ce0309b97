/*
 * kt.c - K^T pages: the transposed copy of K, written as blocks complete.
 *
 * Block b of K head h of a layer occupies index entries
 * [b * kt_groups, (b + 1) * kt_groups) of its K^T stream, entry
 * b * kt_groups + d being dim group d.  Each entry's key group field is
 * that index, so summaries and the catalog treat K^T pages like any other.
 * Consecutive entries go to consecutive stripes (stream_stripe), so one
 * block's dim groups, and one dim group's blocks, spread over the stripes.
 */
#include "engine/writes/kt.h"

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/key.h"
#include "engine/segments/openseg.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

kvf_status kt_plan(kvf_store *st, struct seq *seq, uint32_t layer,
		   uint64_t tokens, uint32_t n, uint32_t *pages)
{
	uint32_t T = st->kt_tokens, ng = st->kt_groups;
	uint64_t b0, kb;
	kvf_status rc;

	if (st->kt_dims == 0)
		return KVF_OK;
	b0 = tokens / T;
	kb = (tokens % T + n) / T;
	if ((rc = seq_kt_alloc(st, seq)) != KVF_OK)
		return rc;
	for (uint32_t h = 0; h < st->hdr.n_kv_heads; h++) {
		struct stream *s = kt_stream(st, seq, layer, h);
		uint32_t sid = stream_id(layer, KIND_KT, h);

		for (uint64_t i = b0 * ng; i < (b0 + kb) * ng; i++)
			pages[stream_stripe(st, sid, i)]++;
		if ((rc = stream_reserve(st, s, (b0 + kb) * ng + 1)) != KVF_OK)
			return rc;
		if (s->gbuf == NULL) {
			/* a part-filled block is loaded by whatever made it
			 * part-filled (open, fork): only an empty one is new */
			if (tokens % T != 0)
				return kvf_fail(KVF_ECORRUPT,
						"the part-filled K^T block of layer %u head %u of sequence %llu could not be rebuilt when the store was opened (a K page is damaged: see kvf_verify); the sequence cannot grow",
						layer, h, (unsigned long long)seq->id);
			if ((rc = stream_gbuf_alloc(st, s, ng * st->hdr.page_size)) != KVF_OK)
				return rc;
		}
	}
	return KVF_OK;
}

/* seal_block - place the kt_groups pages of a complete block */
static kvf_status seal_block(kvf_store *st, struct seq *seq, struct stream *s,
			     uint32_t sid, uint64_t block)
{
	uint32_t ps = st->hdr.page_size;

	for (uint32_t d = 0; d < st->kt_groups; d++) {
		uint64_t idx = block * st->kt_groups + d;
		struct page_key key = page_key_make(seq->id, sid, (uint32_t)idx);
		kvf_status rc;

		struct page_ref ref;

		rc = openseg_place(st, seq, stream_stripe(st, sid, idx),
				   s->gbuf + (size_t)d * ps, key, ADDR_NONE, &ref);
		if (rc != KVF_OK)
			return rc;
		stream_set_page(s, idx, ref);
		s->n_groups = (uint32_t)idx + 1;
		atomic_fetch_add(&st->c.kt_bytes, ps);
	}
	memset(s->gbuf, 0, (size_t)st->kt_groups * ps);
	return KVF_OK;
}

kvf_status kt_append(kvf_store *st, struct seq *seq, uint32_t layer,
		     uint64_t tokens, uint32_t n, const unsigned char *k,
		     size_t stride)
{
	uint32_t T = st->kt_tokens;

	if (st->kt_dims == 0)
		return KVF_OK;
	for (uint32_t h = 0; h < st->hdr.n_kv_heads; h++) {
		struct stream *s = kt_stream(st, seq, layer, h);
		uint32_t sid = stream_id(layer, KIND_KT, h);

		for (uint32_t i = 0; i < n; i++) {
			uint64_t t = tokens + i;

			kt_scatter(st, s->gbuf,
				k + (size_t)h * st->row_bytes + (size_t)i * stride,
				(uint32_t)(t % T));
			if (t % T == T - 1) {
				kvf_status rc = seal_block(st, seq, s, sid, t / T);

				if (rc != KVF_OK)
					return rc;
			}
		}
	}
	return KVF_OK;
}

