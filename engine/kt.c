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
#include "engine/kt.h"

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/readpath.h"
#include "engine/segtable.h"
#include "engine/seq.h"
#include "engine/store.h"

uint32_t kt_choose_dims(uint32_t head_dim)
{
	uint32_t e = 8;

	while (e > 1 && head_dim % e != 0)
		e /= 2;
	return e;
}

static struct stream *kt_stream(kvf_store *st, struct seq *seq,
				uint32_t layer, uint32_t head)
{
	return &seq->kt[(size_t)layer * st->hdr.n_kv_heads + head];
}

/* scatter - put one K row (token at position p of the block) into the
 * block buffer: dim d goes to page d / E, element (d % E) * T + p */
static void scatter(kvf_store *st, unsigned char *buf, const unsigned char *row,
		    uint32_t p)
{
	uint32_t E = st->kt_dims, T = st->kt_tokens, eb = st->elt_bytes;
	uint32_t ps = st->hdr.page_size;

	for (uint32_t d = 0; d < st->hdr.head_dim; d++)
		memcpy(buf + (size_t)(d / E) * ps +
			       ((size_t)(d % E) * T + p) * eb,
		       row + (size_t)d * eb, eb);
}

struct fill_ctx {
	kvf_store *st;
	unsigned char *buf;
	uint64_t block_start;
};

static kvf_status fill_rows(void *arg, uint64_t first, uint32_t n,
			    const unsigned char *rows)
{
	struct fill_ctx *c = arg;

	for (uint32_t i = 0; i < n; i++)
		scatter(c->st, c->buf, rows + (size_t)i * c->st->row_bytes,
			(uint32_t)(first + i - c->block_start));
	return KVF_OK;
}

/* kt_buffer - make the K^T stream's buffer hold the open block of a K
 * head holding `tokens` tokens, rebuilding it from K if needed */
static kvf_status kt_buffer(kvf_store *st, struct seq *seq, uint32_t layer,
			    uint32_t head, uint64_t tokens)
{
	struct stream *s = kt_stream(st, seq, layer, head);
	struct fill_ctx c = { st, NULL, tokens / st->kt_tokens * st->kt_tokens };
	kvf_status rc;

	if (s->gbuf)
		return KVF_OK;
	c.buf = kvf_calloc(st->kt_groups, st->hdr.page_size);
	if (c.buf == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for a K^T block buffer");
	rc = stream_read_spans(st, seq, seq_kv_stream(st, seq, layer, KIND_K, head),
			       tokens, c.block_start, tokens, fill_rows, &c);
	if (rc != KVF_OK) {
		kvf_free(c.buf);
		return rc;
	}
	s->gbuf = c.buf;
	return KVF_OK;
}

kvf_status kt_open_block(kvf_store *st, struct seq *seq, uint32_t layer,
			 uint32_t head, const unsigned char **buf)
{
	kvf_status rc;

	if (st->kt_dims == 0)
		return kvf_fail(KVF_ENOTSUP, "K^T pages are off in this store");
	if ((rc = seq_kt_alloc(st, seq)) != KVF_OK)
		return rc;
	rc = kt_buffer(st, seq, layer, head, seq->len[layer]);
	if (rc == KVF_OK)
		*buf = kt_stream(st, seq, layer, head)->gbuf;
	return rc;
}

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
		if ((rc = stream_reserve(s, (b0 + kb) * ng + 1)) != KVF_OK ||
		    (rc = kt_buffer(st, seq, layer, h, tokens)) != KVF_OK)
			return rc;
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

			scatter(st, s->gbuf,
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

kvf_status kt_read(kvf_store *st, struct seq *seq, uint32_t layer,
		   uint32_t head, uint32_t dg, uint64_t t0, uint64_t t1,
		   void *out)
{
	uint32_t E = st->kt_dims, T = st->kt_tokens, eb = st->elt_bytes;
	uint32_t ps = st->hdr.page_size;
	uint64_t tokens = seq->len[layer], n = t1 - t0;
	unsigned char *page, *dst = out;
	struct stream *s;
	kvf_status rc = KVF_OK;

	if (st->kt_dims == 0 || seq->kt == NULL)
		return kvf_fail(KVF_ENOTSUP, "K^T pages are off in this store");
	s = kt_stream(st, seq, layer, head);
	page = kvf_aligned_alloc(KVF_MEDIA_ALIGN, ps);
	if (page == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory");
	for (uint64_t b = t0 / T; t0 < t1 && b <= (t1 - 1) / T && rc == KVF_OK; b++) {
		uint64_t first = b * T;
		uint64_t a = t0 > first ? t0 : first;
		uint64_t z = t1 < first + T ? t1 : first + T;
		const unsigned char *src;

		if (b == tokens / T) {
			if ((rc = kt_buffer(st, seq, layer, head, tokens)) != KVF_OK)
				break;
			src = s->gbuf + (size_t)dg * ps;
		} else {
			struct page_ref r = stream_page(s, b * st->kt_groups + dg);

			src = openseg_page(st, seq, r.addr);
			if (src == NULL) {
				rc = page_read_verified(st, &r, page, "reading K^T");
				src = page;
			}
		}
		for (uint32_t e = 0; e < E && rc == KVF_OK; e++)
			memcpy(dst + ((size_t)e * n + (a - t0)) * eb,
			       src + ((size_t)e * T + (a - first)) * eb,
			       (size_t)(z - a) * eb);
	}
	kvf_free(page);
	return rc;
}
