/*
 * kt_read.c - reading K^T: the pages of complete blocks, and the block
 * being filled, which is rebuilt from the K tokens when it is not in
 * memory (after a reopen or a fork; see engine/writes/kt.h).
 */
#include "engine/reads/kt_read.h"

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/reads/kt_layout.h"
#include "engine/segments/openseg.h"
#include "engine/reads/readpath.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

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
		kt_scatter(c->st, c->buf, rows + (size_t)i * c->st->row_bytes,
			(uint32_t)(first + i - c->block_start));
	return KVF_OK;
}

kvf_status kt_block_fill(kvf_store *st, struct seq *seq, uint32_t layer,
			 uint32_t head, uint64_t tokens, uint64_t upto,
			 unsigned char *buf)
{
	struct fill_ctx c = { st, buf, upto / st->kt_tokens * st->kt_tokens };

	/* a dropped group's columns stay as they are (zero): masked */
	return stream_read_spans_kept(st, seq, dropmark_lane(st, layer, head),
				      seq_kv_stream(st, seq, layer, KIND_K, head),
				      tokens, c.block_start, upto, fill_rows, NULL,
				      &c);
}

/* kt_buffer - make the K^T stream's buffer hold the open block of a K
 * head holding `tokens` tokens, rebuilding it from K if needed */
static kvf_status kt_buffer(kvf_store *st, struct seq *seq, uint32_t layer,
			    uint32_t head, uint64_t tokens)
{
	struct stream *s = kt_stream(st, seq, layer, head);
	kvf_status rc;

	if (s->gbuf)
		return KVF_OK;
	rc = stream_gbuf_alloc(st, s, st->kt_groups * st->hdr.page_size);
	if (rc != KVF_OK)
		return rc;
	rc = kt_block_fill(st, seq, layer, head, tokens, tokens, s->gbuf);
	if (rc != KVF_OK)
		stream_gbuf_free(st, s);
	return rc;
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
				rc = page_read_verified(st, seq, &r, page, "reading K^T");
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
