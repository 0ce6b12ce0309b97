/*
 * append.c - the write path: kvf_append, kvf_append_x, and the sealing of
 * partial groups at sync.
 *
 * An append first plans: which groups it completes and on which stripes
 * their pages land, and reserves the segments that needs, loading any
 * tail group it must extend.  Only then does it copy a single byte, so a
 * refused append (KVF_ENOSPC, KVF_ENOMEM, KVF_ECORRUPT) changes nothing.
 * Copying fills each stream's group buffer; a full group is sealed into a
 * page of the sequence's open segment (engine/segments/openseg.c).
 */
#include "engine/writes/append.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "compute/codec.h"
#include "compute/half.h"
#include "compute/kernels.h"
#include "engine/cleaning/cleaner.h"
#include "engine/base/fatal.h"
#include "engine/base/group.h"
#include "engine/base/key.h"
#include "engine/writes/kt.h"
#include "engine/segments/openseg.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/prefix.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "engine/writes/writeback.h"

#define SRC_ON_STACK 32 /* K/V streams of a layer kept on the stack */

/* One stream an append writes to, and where its rows come from. */
struct src_stream {
	struct stream *s;          /* destination */
	uint32_t sid;              /* its stream id */
	const unsigned char *src;  /* row of the first new token */
	size_t stride;             /* bytes between a token's rows */
	int waits;                 /* its sealed groups wait for write-back */
};

/* seal - place n_pages pages of src as stream s's index entries e0.. on
 * media */
static kvf_status seal(kvf_store *st, struct seq *seq, struct stream *s,
		       uint32_t sid, uint64_t e0, const unsigned char *src,
		       uint32_t n_pages)
{
	kvf_status rc = KVF_OK;

	for (uint32_t p = 0; p < n_pages && rc == KVF_OK; p++) {
		uint64_t e = e0 + p;
		struct page_key key = page_key_make(seq->id, sid, (uint32_t)e);
		uint32_t replaces = e < s->n_groups ? stream_page(s, e).addr
						    : ADDR_NONE;
		struct page_ref ref;

		rc = openseg_place(st, seq, stream_stripe(st, sid, e),
				   src + (size_t)p * st->hdr.page_size, key,
				   replaces, &ref);
		if (rc == KVF_OK)
			stream_set_group(s, e, ref);
	}
	return rc;
}

/* group_sealed_form - the pages stream s's full group, which its group
 * buffer holds, is sealed as (*pg): its rows, or encoded into enc (P
 * pages, zero past the group) for K and V of a codec store */
static kvf_status group_sealed_form(kvf_store *st, const struct stream *s,
				    unsigned char *enc, const unsigned char **pg)
{
	const struct kvc_codec_layout *lay = stream_codec(st, s);

	*pg = s->gbuf;
	if (lay == NULL)
		return KVF_OK;
	/* the values were checked when appended (codec_check) */
	/* K's and V's groups differ in size: clear what the last one left
	 * past this one, so a page's bytes are its own */
	memset(enc + lay->group_bytes, 0,
	       (size_t)st->group_pages * st->hdr.page_size - lay->group_bytes);
	*pg = enc;
	return st->ck->encode(lay, s->gbuf, (kvf_dtype)st->hdr.dtype, enc);
}

/* seal_group - place stream s's full group g, which its group buffer
 * holds, on media: plain rows, or encoded through enc (P pages, zero past
 * the group) for K and V of a codec store */
static kvf_status seal_group(kvf_store *st, struct seq *seq, struct stream *s,
			     uint32_t sid, uint64_t g, unsigned char *enc)
{
	uint32_t n = group_sealed_pages(st, s);
	const unsigned char *pg;
	kvf_status rc;

	/* the plain pages a sync wrote of an encoded group stay the
	 * record's until one states the group sealed (seq_record_done) */
	if ((rc = group_sealed_form(st, s, enc, &pg)) == KVF_OK)
		rc = seal(st, seq, s, sid, group_sealed_entry(st, s, g), pg, n);
	if (rc == KVF_OK)
		atomic_fetch_add(&st->c.data_bytes, (uint64_t)n * st->hdr.page_size);
	return rc;
}

/* seal_waiting - stream s's full group g, which its group buffer holds,
 * waits for write-back (wb_prepare said so) in its sealed form */
static kvf_status seal_waiting(kvf_store *st, struct seq *seq,
			       struct stream *s, uint32_t sid, uint64_t g,
			       unsigned char *enc)
{
	uint64_t e = group_sealed_entry(st, s, g);
	const unsigned char *pg;
	struct prof_mark pm;
	kvf_status rc;

	rc = group_sealed_form(st, s, enc, &pg); /* the encode: a copy */
	pm = prof_begin(&st->prof);
	for (uint32_t p = 0; p < group_sealed_pages(st, s) && rc == KVF_OK; p++)
		rc = wb_seal(st, seq, s, sid, e + p,
			     pg + (size_t)p * st->hdr.page_size);
	prof_end(&st->prof, PROF_TIER, pm);
	return rc;
}

/* seal_direct - gather G rows (stride bytes apart) into a page of the
 * open segment as stream s's group g (a group of one page) */
static kvf_status seal_direct(kvf_store *st, struct seq *seq, struct stream *s,
			      uint32_t sid, uint64_t g, const unsigned char *rows,
			      size_t stride)
{
	uint32_t stripe = stream_stripe(st, sid, g), rb = st->row_bytes;
	struct page_ref ref;
	unsigned char *dst;
	kvf_status rc;

	if ((rc = openseg_slot(st, seq, stripe, &dst)) != KVF_OK)
		return rc;
	for (uint32_t r = 0; r < st->group_tokens; r++)
		memcpy(dst + (size_t)r * rb, rows + (size_t)r * stride, rb);
	rc = openseg_fill(st, seq, stripe, page_key_make(seq->id, sid, (uint32_t)g),
			  ADDR_NONE, &ref);
	if (rc != KVF_OK)
		return rc;
	stream_set_group(s, g, ref);
	atomic_fetch_add(&st->c.data_bytes, st->hdr.page_size);
	return rc;
}

/*
 * tail_buffer - s's group buffer, for a stream holding `tokens` tokens.
 * The append path reads nothing: a part-filled tail group is in memory
 * since whatever made it (an append, the open that loaded it, the fork
 * that copied it), so only an empty group gets a new buffer here.
 */
static kvf_status tail_buffer(kvf_store *st, struct seq *seq, struct stream *s,
			      uint32_t sid, uint64_t tokens)
{
	if (s->gbuf)
		return KVF_OK;
	if (tokens % st->group_tokens != 0) {
		uint32_t addr = stream_page(s, group_plain_entry(st, tokens / st->group_tokens)).addr;
		uint32_t segid = addr_seg(addr, st->page_bits);

		return kvf_fail(KVF_ECORRUPT,
				"the part-filled tail group of stream %u of sequence %llu, segment %u (stripe %u) page %u, failed its check when the store was opened (see kvf_verify); the sequence cannot grow",
				sid, (unsigned long long)seq->id, segid,
				seg_stripe(st, segid),
				addr_page(addr, st->page_bits));
	}
	return stream_gbuf_alloc(st, s, group_buf_bytes(st));
}

/*
 * append_streams - append n tokens to each of the n_src streams, which
 * hold `tokens` tokens each now.  For a K/V append kt_layer is the layer
 * (src[2h] and src[2h + 1] are head h's K and V; src[0], K head 0, starts
 * the caller's K rows) and K^T pages follow the K tokens; otherwise it is
 * UINT32_MAX.
 */
static kvf_status append_streams(kvf_store *st, struct seq *seq,
				 struct src_stream *src, uint32_t n_src,
				 uint64_t tokens, uint32_t n, uint32_t kt_layer,
				 const char *call)
{
	uint32_t G = st->group_tokens, rb = st->row_bytes, P = st->group_pages;
	uint32_t pages[KVF_MEDIA_MAX_STRIPES] = { 0 };
	uint32_t own[KVF_MEDIA_MAX_STRIPES] = { 0 };
	uint32_t stay[KVF_MEDIA_MAX_STRIPES] = { 0 };
	uint32_t placed[KVF_MEDIA_MAX_STRIPES] = { 0 };
	uint64_t g0 = tokens / G, k = (tokens % G + n) / G;
	/* entries for the groups sealed and a part-filled tail, none more:
	 * the index is most of the store's memory */
	uint64_t n_groups = (tokens + n + G - 1) / G;
	unsigned char *enc = NULL;
	struct prof_mark cm;
	int sealing = 0;
	kvf_status rc = KVF_OK;

	/* plan, and everything that can fail without changing anything */
	for (uint32_t i = 0; i < n_src; i++)
		src[i].waits = 0;
	if (k > 0 && st->codec != KVF_CODEC_NONE &&
	    (enc = kvf_calloc(P, st->hdr.page_size)) == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory to encode a group",
				call);
	for (uint32_t i = 0; i < n_src && rc == KVF_OK; i++) {
		if ((rc = stream_reserve(st, src[i].s, n_groups * st->group_stride)) == KVF_OK &&
		    (rc = tail_buffer(st, seq, src[i].s, src[i].sid, tokens)) == KVF_OK &&
		    k > 0) {
			struct prof_mark m = prof_begin(&st->prof);

			rc = wb_prepare(st, seq, src[i].s, src[i].sid,
					k * group_sealed_pages(st, src[i].s),
					&src[i].waits);
			prof_end(&st->prof, PROF_TIER, m);
		}
	}
	/* after every wb_prepare: one may have admitted seq, which decides
	 * whether a full run goes out (wb_plan as wb_seal will) */
	for (uint32_t i = 0; i < n_src && rc == KVF_OK; i++)
		wb_plan(st, seq, src[i].s, src[i].sid, g0, k, src[i].waits,
			pages, own, stay);
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		sealing |= pages[s] > 0;
	if (rc == KVF_OK && kt_layer != UINT32_MAX && st->kt_dims) {
		rc = kt_plan(st, seq, kt_layer, tokens, n, pages);
		sealing |= (tokens % st->kt_tokens + n) >= st->kt_tokens;
	}
	/* most decode appends complete no group: nothing to reserve */
	if (rc == KVF_OK && sealing)
		rc = openseg_reserve(st, seq, pages, own, call);
	/* a group that waits takes its group buffer along (wb_seal), so
	 * once one has, nothing may fail: the buffers of the segments the
	 * pages placed now open are taken first */
	for (uint32_t i = 0; i < n_src && rc == KVF_OK && sealing; i++)
		if (src[i].waits) {
			for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
				placed[s] = pages[s] - stay[s];
			if ((rc = openseg_stash(st, seq, placed, call)) != KVF_OK)
				seg_unreserve(st, seq);
			break;
		}
	if (rc != KVF_OK) {
		for (uint32_t i = 0; i < n_src; i++)
			wb_unprepare(st, src[i].s);
		kvf_free(enc);
		return rc;
	}

	cm = prof_begin(&st->prof);
	for (uint32_t i = 0; i < n_src && rc == KVF_OK; i++) {
		struct stream *s = src[i].s;
		int waits = src[i].waits;
		uint64_t t = tokens;

		/* a long append writes its groups itself, after the waiting */
		if (k > 0 && !waits)
			rc = wb_flush(st, seq, s, src[i].sid);
		for (uint32_t done = 0; done < n && rc == KVF_OK;) {
			uint32_t at = (uint32_t)(t % G);
			uint32_t m = G - at < n - done ? G - at : n - done;

			if (at == 0 && m == G && !waits && st->group_stride == 1) {
				/* a whole group: gather it straight into the
				 * segment, skipping the group buffer */
				rc = seal_direct(st, seq, s, src[i].sid, t / G,
						 src[i].src + (size_t)done * src[i].stride,
						 src[i].stride);
				done += G;
				t += G;
				continue;
			}

			for (uint32_t r = 0; r < m; r++)
				memcpy(s->gbuf + (size_t)(at + r) * rb,
				       src[i].src + (size_t)(done + r) * src[i].stride,
				       rb);
			done += m;
			t += m;
			if (at + m == G && waits) {
				rc = seal_waiting(st, seq, s, src[i].sid,
						  t / G - 1, enc);
				s->tail_written = 0;
			} else if (at + m == G) {
				rc = seal_group(st, seq, s, src[i].sid, t / G - 1,
						enc);
				s->tail_written = 0;
			}
		}
	}
	if (rc == KVF_OK && kt_layer != UINT32_MAX)
		rc = kt_append(st, seq, kt_layer, tokens, n, src[0].src,
			       src[0].stride);
	prof_end(&st->prof, PROF_COPY, cm);
	if (k > 0) {
		struct prof_mark m = prof_begin(&st->prof);

		for (uint32_t i = 0; i < n_src; i++)
			wb_unprepare(st, src[i].s); /* what a failure left unused */
		prof_end(&st->prof, PROF_TIER, m);
	}
	if (sealing) {
		openseg_unstash(st, seq);
		seg_unreserve(st, seq);
	}
	if (rc == KVF_OK)
		atomic_fetch_add(&st->c.user_bytes, (uint64_t)n * n_src * rb);
	kvf_free(enc);
	return rc;
}

/* append_checks - what kvf_append and kvf_append_x check first */
static kvf_status append_checks(kvf_store *st, const char *call,
				uint32_t layer, uint32_t n_tokens,
				const void *a, const void *b)
{
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	if (n_tokens > 0 && (a == NULL || b == NULL))
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				a == NULL ? "the first buffer" : "the second buffer");
	return KVF_OK;
}

#define VBAR_RUN 16u /* V rows folded at a time */

/* vbar_fold - on a store kept for SparF, fold the n appended V rows into
 * each head's running mean while they are at hand, so that SparF need not
 * read V back for it; a mean that is behind is caught up by SparF itself */
static void vbar_fold(kvf_store *st, struct seq *seq, uint32_t layer,
		      uint32_t n, const void *v)
{
	const struct kvc_kernels *k = kvc_kernels();
	uint32_t H = st->hdr.n_kv_heads, D = st->hdr.head_dim;
	/* kt_pages stores have head_dim <= 512 (kvf_open) */
	unsigned char run[VBAR_RUN * 512 * sizeof(float)];

	if (st->kt_dims == 0 || (seq->vbar == NULL && seq->len[layer] > 0))
		return;
	if (seq->vbar == NULL && seq_vbar_alloc(st, seq) != KVF_OK)
		return; /* no memory: SparF reads V for the mean instead */
	for (uint32_t h = 0; h < H; h++) {
		uint32_t lane = dropmark_lane(st, layer, h);
		size_t lh = (size_t)layer * H + h;

		/* the mean covers the kept tokens: all of them, or all but
		 * the groups kvf_h2o_evict dropped */
		if (seq->vbar_n[lh] != (dropmark_any(st, seq, lane) ?
						dropmark_kept(st, seq, lane,
							      seq->len[layer]) :
						seq->len[layer]))
			continue;
		/* the head's rows are strided in v: gather a run, fold it */
		for (uint32_t t0 = 0; t0 < n; t0 += VBAR_RUN) {
			uint32_t m = n - t0 < VBAR_RUN ? n - t0 : VBAR_RUN;

			for (uint32_t t = 0; t < m; t++)
				memcpy(run + (size_t)t * st->row_bytes,
				       (const unsigned char *)v +
					       ((size_t)(t0 + t) * H + h) * st->row_bytes,
				       st->row_bytes);
			k->vmean_fold(seq->vbar + lh * D, seq->vbar_n[lh], run, m, D,
				      (kvf_dtype)st->hdr.dtype);
			seq->vbar_n[lh] += m;
		}
	}
	seq->vbar_changes++;
}

kvf_status append_codec_check(kvf_store *st, const char *call,
			      uint64_t first, uint32_t n, const void *k,
			      const void *v)
{
	uint32_t H = st->hdr.n_kv_heads, D = st->hdr.head_dim;
	kvf_dtype dt = (kvf_dtype)st->hdr.dtype;
	size_t per = (size_t)H * D;

	if (st->codec == KVF_CODEC_NONE || n == 0)
		return KVF_OK;
	if (st->ck->in_range(k, (size_t)n * per, dt) &&
	    st->ck->in_range(v, (size_t)n * per, dt))
		return KVF_OK;
	/* one is not: find it, for the message */
	for (int kind = 0; kind < 2; kind++)
		for (size_t i = 0; i < (size_t)n * per; i++) {
			float x = kvc_elt(kind ? v : k, i, dt);

			if (!(fabsf(x) <= KVC_CODEC_MAX_ABS))
				return kvf_fail(KVF_ERANGE,
						"%s: %s of token %llu, head %zu, dim %zu is %g; a store of codec %s takes finite values of magnitude <= 65504",
						call, kind ? "v" : "k",
						(unsigned long long)(first + i / per),
						i % per / D, i % D, (double)x,
						kvf_codec_name(st->codec));
		}
	return KVF_OK;
}

/* at_pos - an append that states its position finds the layer there */
static kvf_status at_pos(const char *call, struct seq *seq, uint32_t layer,
			 uint64_t pos)
{
	if (pos == KVF_POS_ANY || seq->len[layer] == pos)
		return KVF_OK;
	return kvf_fail(KVF_ERANGE,
			"%s: layer %u of sequence %llu holds %llu tokens, not the position %llu the append expects",
			call, layer, (unsigned long long)seq->id,
			(unsigned long long)seq->len[layer],
			(unsigned long long)pos);
}

/* append_once - one try of an append at pos (KVF_POS_ANY: at the end);
 * again: a retry after waiting for room, which counts no second use of
 * the sequence */
static kvf_status append_once(kvf_store *st, const char *call, uint64_t seq_id,
			      uint32_t layer, uint64_t pos, uint32_t n_tokens,
			      const void *k, const void *v, int again)
{
	struct src_stream src_stack[SRC_ON_STACK], *src;
	struct prof_mark lm;
	struct seq *seq;
	uint32_t H;
	kvf_status rc;

	if ((rc = append_checks(st, call, layer, n_tokens, k, v)) != KVF_OK ||
	    (rc = append_codec_check(st, call, 0, n_tokens, k, v)) != KVF_OK)
		return rc;
	H = st->hdr.n_kv_heads;
	src = 2 * H <= SRC_ON_STACK ? src_stack
				    : kvf_calloc(2 * (size_t)H, sizeof(*src));
	if (src == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	lm = prof_begin(&st->prof);
	pthread_rwlock_rdlock(&st->world);
	rc = (again ? seq_find_locked : seq_get_locked)(st, call, seq_id, &seq);
	prof_end(&st->prof, PROF_LOCK, lm);
	if (rc != KVF_OK)
		goto out;
	if ((rc = at_pos(call, seq, layer, pos)) == KVF_OK && n_tokens > 0) {
		/* head by head, K then V: a prefill lays a head's K and V
		 * runs side by side, so reading the head back is one run */
		for (uint32_t h = 0; h < H; h++)
			for (uint32_t kind = 0; kind < 2; kind++) {
				struct src_stream *x = &src[h * 2 + kind];

				x->s = seq_kv_stream(st, seq, layer,
						     (enum kv_kind)kind, h);
				x->sid = stream_id(layer, (enum kv_kind)kind, h);
				x->src = (const unsigned char *)(kind ? v : k) +
					 (size_t)h * st->row_bytes;
				x->stride = (size_t)H * st->row_bytes;
			}
		rc = wb_admit(st, seq, seq->len[layer] + n_tokens, call);
		if (rc == KVF_OK)
			rc = append_streams(st, seq, src, 2 * H, seq->len[layer],
					    n_tokens, layer, call);
		if (rc == KVF_OK) {
			vbar_fold(st, seq, layer, n_tokens, v);
			seq->len[layer] += n_tokens;
			seq->changes++;
			if (seq->prefix) /* whole chunks become reusable */
				prefix_publish(st, seq);
		}
	}
	seq_unlock_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	if (src != src_stack)
		kvf_free(src);
	return rc;
}

static kvf_status append_x_once(kvf_store *st, const char *call,
				uint64_t seq_id, uint32_t layer,
				uint32_t n_tokens, const void *x, int again)
{
	struct src_stream *src;
	struct seq *seq;
	uint32_t Q;
	kvf_status rc;

	if ((rc = append_checks(st, call, layer, n_tokens, x, x)) != KVF_OK)
		return rc;
	Q = st->hdr.n_q_heads;
	src = kvf_calloc(Q, sizeof(*src));
	if (src == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	pthread_rwlock_rdlock(&st->world);
	if ((rc = (again ? seq_find_locked : seq_get_locked)(st, call, seq_id,
							     &seq)) != KVF_OK)
		goto out;
	if (n_tokens > 0 && (rc = seq_x_alloc(st, seq)) == KVF_OK) {
		for (uint32_t q = 0; q < Q; q++) {
			src[q].s = seq_x_stream(st, seq, layer, q);
			src[q].sid = stream_id(layer, KIND_X, q);
			src[q].src = (const unsigned char *)x +
				     (size_t)q * st->row_bytes;
			src[q].stride = (size_t)Q * st->row_bytes;
		}
		rc = wb_admit(st, seq, seq->x_len[layer] + n_tokens, call);
		if (rc == KVF_OK)
			rc = append_streams(st, seq, src, Q, seq->x_len[layer],
					    n_tokens, UINT32_MAX, call);
		if (rc == KVF_OK) {
			seq->x_len[layer] += n_tokens;
			seq->changes++;
		}
	}
	seq_unlock_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	kvf_free(src);
	return rc;
}

/* make_room - the append to seq_id was refused: whether to try again
 * (cleaner_make_room) */
static int make_room(kvf_store *st, int attempt, const char *call,
		     uint64_t seq_id, kvf_status *rc)
{
	char what[64];

	if (*rc != KVF_ENOSPC)
		return 0;
	snprintf(what, sizeof(what), "%s: sequence %llu", call,
		 (unsigned long long)seq_id);
	return cleaner_make_room(st, attempt, 1, seq_id, what, rc);
}

kvf_status kvf_append(kvf_store *st, uint64_t seq_id, uint32_t layer,
		      uint32_t n_tokens, const void *k, const void *v)
{
	struct prof_mark m = { 0, 0 };
	kvf_status rc;

	if (st) /* NULL is refused below */
		m = prof_begin(&st->prof);

	for (int i = 0;; i++) {
		rc = append_once(st, "kvf_append", seq_id, layer, KVF_POS_ANY,
				 n_tokens, k, v, i > 0);
		if (!make_room(st, i, "kvf_append", seq_id, &rc))
			break;
	}
	if (st)
		prof_end(&st->prof, PROF_APPEND, m);
	return rc;
}

kvf_status append_kv_as(kvf_store *st, const char *call, uint64_t seq_id,
			uint32_t layer, uint64_t pos, uint32_t n_tokens,
			const void *k, const void *v)
{
	kvf_status rc;

	for (int i = 0;; i++) {
		rc = append_once(st, call, seq_id, layer, pos, n_tokens, k, v,
				 i > 0);
		if (!make_room(st, i, call, seq_id, &rc))
			return rc;
	}
}

kvf_status kvf_append_at(kvf_store *st, uint64_t seq_id, uint32_t layer,
			 uint64_t pos, uint32_t n_tokens, const void *k,
			 const void *v)
{
	return append_kv_as(st, "kvf_append_at", seq_id, layer, pos, n_tokens,
			    k, v);
}

kvf_status append_x_as(kvf_store *st, const char *call, uint64_t seq_id,
		       uint32_t layer, uint32_t n_tokens, const void *x)
{
	struct prof_mark m = { 0, 0 };
	kvf_status rc;

	if (st) /* NULL is refused below */
		m = prof_begin(&st->prof);

	for (int i = 0;; i++) {
		rc = append_x_once(st, call, seq_id, layer, n_tokens, x, i > 0);
		if (!make_room(st, i, call, seq_id, &rc))
			break;
	}
	if (st)
		prof_end(&st->prof, PROF_APPEND, m);
	return rc;
}

kvf_status kvf_append_x(kvf_store *st, uint64_t seq_id, uint32_t layer,
			uint32_t n_tokens, const void *x)
{
	return append_x_as(st, "kvf_append_x", seq_id, layer, n_tokens, x);
}

/* struct tail_span - the pages of a stream's tail group a sync writes:
 * entries e .. e + n - 1, from page p0 of the group */
struct tail_span {
	uint64_t e;    /* the first entry written */
	uint32_t p0;   /* its page in the group */
	uint32_t n;    /* pages written */
	uint32_t tail; /* tokens of the tail group */
};

/*
 * tail_span - whether stream s (of `tokens` tokens) has tail tokens not
 * yet in a page on media, and the pages a sync writes for them (*tp):
 * from the first page holding such a token, as the pages before it hold
 * only tokens an earlier sync put on media, unchanged since (a truncation
 * lowers tail_written), so they stay where they are.  The reservation of
 * seq_seal_partials and seal_tail both count from here.
 */
static int tail_span(const kvf_store *st, const struct stream *s,
		     uint64_t tokens, struct tail_span *tp)
{
	uint32_t tail = (uint32_t)(tokens % st->group_tokens);

	if (s == NULL || tail == 0 || s->gbuf == NULL || s->tail_written >= tail)
		return 0;
	tp->tail = tail;
	tp->p0 = (uint32_t)((uint64_t)s->tail_written * st->row_bytes /
			    st->hdr.page_size);
	tp->n = group_fill_pages(st, tail) - tp->p0;
	tp->e = group_plain_entry(st, tokens / st->group_tokens) + tp->p0;
	return 1;
}

/* seal_tail - write stream s's part-filled tail group, if it has tokens
 * not on media yet, as the pages they reach (room reserved) */
static kvf_status seal_tail(kvf_store *st, struct seq *seq, struct stream *s,
			    uint32_t sid)
{
	uint64_t tokens = seq_tokens(seq, stream_kind(sid), stream_layer(sid));
	struct tail_span tp;
	kvf_status rc;

	if (!tail_span(st, s, tokens, &tp))
		return KVF_OK;
	/* zero the rest of the group: only whole pages go out */
	memset(s->gbuf + (size_t)tp.tail * st->row_bytes, 0,
	       group_buf_bytes(st) - (size_t)tp.tail * st->row_bytes);
	rc = seal(st, seq, s, sid, tp.e,
		  s->gbuf + (size_t)tp.p0 * st->hdr.page_size, tp.n);
	if (rc == KVF_OK) {
		s->tail_written = tp.tail;
		atomic_fetch_add(&st->c.padding_bytes,
				 (uint64_t)tp.n * st->hdr.page_size);
	}
	return rc;
}

kvf_status seq_seal_partials(kvf_store *st, struct seq *seq)
{
	/* K/V and X streams; a K^T block is never written partial */
	uint32_t nkv = seq_n_kv_streams(st), n = nkv + seq_n_x_streams(st);
	uint32_t pages[KVF_MEDIA_MAX_STRIPES] = { 0 };
	uint32_t own[KVF_MEDIA_MAX_STRIPES] = { 0 };
	kvf_status rc;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);
		uint64_t tokens = seq_tokens(seq, stream_kind(sid), stream_layer(sid));
		struct tail_span tp;

		wb_flush_plan(s, pages, own);
		if (tail_span(st, s, tokens, &tp))
			for (uint32_t p = 0; p < tp.n; p++)
				pages[stream_stripe(st, sid, tp.e + p)]++;
	}
	rc = openseg_reserve(st, seq, pages, own, "partial groups");
	if (rc != KVF_OK)
		return rc;
	/* what waits for write-back goes first (a sync makes it all
	 * durable), a layer's runs before its tails, so that a head's K and
	 * V runs lie side by side and read back in one request */
	for (uint32_t b = 0, blk; b < n && rc == KVF_OK; b += blk) {
		blk = b < nkv ? 2 * st->hdr.n_kv_heads : st->hdr.n_q_heads;
		for (uint32_t i = b; i < b + blk && rc == KVF_OK; i++) {
			uint32_t sid;
			struct stream *s = seq_stream_placed(st, seq, i, &sid);

			rc = wb_flush(st, seq, s, sid);
		}
		for (uint32_t i = b; i < b + blk && rc == KVF_OK; i++) {
			uint32_t sid;
			struct stream *s = seq_stream_placed(st, seq, i, &sid);

			rc = seal_tail(st, seq, s, sid);
		}
	}
	seg_unreserve(st, seq);
	return rc;
}
