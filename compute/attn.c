/*
 * attn.c - dense decode attention, scalar: the streaming-softmax state,
 * its fold over token blocks, finish, and the log-sum-exp merge.
 *
 * The fold is the oracle for attn_avx2.c and follows the same plan: per
 * block of KVC_BLOCK_TOKENS tokens and group of up to 8 heads, the
 * block's scores, per head one rescale of (l, acc) by exp(m_old - m_new)
 * if the block raises the max, then p_t = exp(s_t - m) added into l and
 * p_t * v_t into acc.  Each K and V element is widened to f32 once per
 * block (64 dims at a time) and used by every head of the group; the
 * block stays in cache while the groups take their turns, so K and V
 * come from memory once per call.  Masked tokens are skipped before
 * their K or V is read.  Raw scores (kvc_scores_scalar) share the code.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "compute/kern_impl.h"
#include "compute/kernels.h"

void kvc_attn_state_init(struct kvc_attn_state *st, uint32_t n_q,
			 uint32_t head_dim, float *buf)
{
	assert(n_q >= 1 && head_dim >= 1 && buf);
	st->n_q = n_q;
	st->head_dim = head_dim;
	st->acc = buf;
	st->m = buf + (size_t)n_q * head_dim;
	st->l = st->m + n_q;
	kvc_attn_state_reset(st);
}

void kvc_attn_state_reset(struct kvc_attn_state *st)
{
	memset(st->acc, 0, (size_t)st->n_q * st->head_dim * sizeof(float));
	for (uint32_t h = 0; h < st->n_q; h++) {
		st->m[h] = -INFINITY;
		st->l[h] = 0.0f;
	}
}

struct kvc_attn_state kvc_attn_state_head(const struct kvc_attn_state *st,
					  uint32_t h)
{
	struct kvc_attn_state v = *st;

	assert(h < st->n_q);
	v.n_q = 1;
	v.acc = st->acc + (size_t)h * st->head_dim;
	v.m = st->m + h;
	v.l = st->l + h;
	return v;
}

void kvc_attn_finish(const struct kvc_attn_state *st, float *out, float *lse)
{
	uint32_t hd = st->head_dim;

	for (uint32_t h = 0; h < st->n_q; h++) {
		const float *acc = st->acc + (size_t)h * hd;
		float *o = out + (size_t)h * hd;
		float l = st->l[h];

		if (l > 0.0f) {
			float inv = 1.0f / l;

			for (uint32_t d = 0; d < hd; d++)
				o[d] = acc[d] * inv;
		} else if (isnan(l)) {
			/* a NaN score (q, or a stored key, holds a NaN or
			 * an infinity the dot product made one): no
			 * softmax, so no answer; not the empty one */
			for (uint32_t d = 0; d < hd; d++)
				o[d] = NAN;
		} else {
			memset(o, 0, hd * sizeof(float));
		}
		if (lse)
			lse[h] = l > 0.0f ? st->m[h] + logf(l)
			       : isnan(l) ? NAN : -INFINITY;
	}
}

void kvc_attn_merge(float *out, float *lse, const float *out_a,
		    const float *lse_a, const float *out_b, const float *lse_b,
		    uint32_t n_q, uint32_t head_dim)
{
	for (uint32_t h = 0; h < n_q; h++) {
		size_t off = (size_t)h * head_dim;
		float la = lse_a[h], lb = lse_b[h];
		float mx = la > lb ? la : lb;
		float wa, wb, sum;

		if (isnan(la) || isnan(lb)) { /* a side with no answer */
			for (uint32_t d = 0; d < head_dim; d++)
				out[off + d] = NAN;
			lse[h] = NAN;
			continue;
		}
		if (mx == -INFINITY) { /* both empty */
			memset(out + off, 0, head_dim * sizeof(float));
			lse[h] = -INFINITY;
			continue;
		}
		wa = expf(la - mx); /* exp(-INF) = 0 for an empty side */
		wb = expf(lb - mx);
		sum = wa + wb;
		wa /= sum;
		wb /= sum;
		for (uint32_t d = 0; d < head_dim; d++)
			out[off + d] =
				wa * out_a[off + d] + wb * out_b[off + d];
		lse[h] = mx + logf(sum);
	}
}

/* Dims widened to f32 at a time (a stack buffer); head group size. */
#define PIECE 64
#define GROUP 8

/* widen - n elements of row from element d0, as f32, into w. */
static void widen(float *w, const void *row, uint32_t d0, uint32_t n,
		  kvf_dtype dtype)
{
	switch (dtype) {
	case KVF_DTYPE_F16:
		for (uint32_t d = 0; d < n; d++)
			w[d] = kvc_elt(row, d0 + d, KVF_DTYPE_F16);
		break;
	case KVF_DTYPE_BF16:
		for (uint32_t d = 0; d < n; d++)
			w[d] = kvc_elt(row, d0 + d, KVF_DTYPE_BF16);
		break;
	default:
		memcpy(w, (const float *)row + d0, n * sizeof(float));
		break;
	}
}

/*
 * block_scores - s[h * ss + j] = q_h . k_{tl[j]} for the g (<= GROUP)
 * heads at q (rows of hd floats) and the nt listed rows of the block k:
 * each K element is widened once and used by every head.
 */
static void block_scores(const float *q, uint32_t g, uint32_t hd,
			 const unsigned char *k, size_t row_bytes,
			 kvf_dtype dtype, const uint8_t *tl, uint32_t nt,
			 float *s, size_t ss)
{
	float w[PIECE];

	for (uint32_t j = 0; j < nt; j++) {
		const unsigned char *row = k + tl[j] * row_bytes;
		float acc[GROUP] = { 0 };

		for (uint32_t d0 = 0; d0 < hd; d0 += PIECE) {
			uint32_t np = hd - d0 < PIECE ? hd - d0 : PIECE;

			widen(w, row, d0, np, dtype);
			for (uint32_t h = 0; h < g; h++)
				acc[h] += kvc_dot_row(q + (size_t)h * hd + d0,
						      w, np, KVF_DTYPE_F32);
		}
		for (uint32_t h = 0; h < g; h++)
			s[h * ss + j] = acc[h];
	}
}

/* fold_group - fold the nt listed tokens of one block into heads h0 ..
 * h0 + g - 1: scores, softmax, then each V element widened once and
 * added into every head's acc.  s keeps the raw scores ([GROUP][B]). */
static void fold_group(struct kvc_attn_state *st, uint32_t h0, uint32_t g,
		       const float *q, const unsigned char *kb,
		       const unsigned char *vb, size_t row_bytes,
		       kvf_dtype dtype, const uint8_t *tl, uint32_t nt,
		       float *s)
{
	uint32_t hd = st->head_dim;
	float p[GROUP * KVC_BLOCK_TOKENS], w[PIECE];

	block_scores(q + (size_t)h0 * hd, g, hd, kb, row_bytes, dtype, tl, nt,
		     s, KVC_BLOCK_TOKENS);
	for (uint32_t h = 0; h < g; h++)
		softmax_head(st, h0 + h, s + h * KVC_BLOCK_TOKENS,
			     p + h * KVC_BLOCK_TOKENS, nt);
	for (uint32_t j = 0; j < nt; j++) {
		const unsigned char *row = vb + tl[j] * row_bytes;

		for (uint32_t d0 = 0; d0 < hd; d0 += PIECE) {
			uint32_t np = hd - d0 < PIECE ? hd - d0 : PIECE;

			widen(w, row, d0, np, dtype);
			for (uint32_t h = 0; h < g; h++)
				kvc_axpy_row(st->acc + (size_t)(h0 + h) * hd +
						     d0,
					     p[h * KVC_BLOCK_TOKENS + j], w, np,
					     KVF_DTYPE_F32);
		}
	}
}

void kvc_attn_fold_scalar(struct kvc_attn_state *st, const float *q,
			  const void *k, const void *v, uint32_t n,
			  kvf_dtype dtype, const uint8_t *mask, float *scores,
			  size_t scores_stride)
{
	size_t row_bytes = st->head_dim * kvc_elt_bytes(dtype);
	uint8_t tl[KVC_BLOCK_TOKENS];
	float s[GROUP * KVC_BLOCK_TOKENS];

	assert(n == 0 || (k && v && q));
	for (uint32_t t0 = 0; t0 < n; t0 += KVC_BLOCK_TOKENS) {
		uint32_t nb = n - t0 < KVC_BLOCK_TOKENS ? n - t0 :
							  KVC_BLOCK_TOKENS;
		const unsigned char *kb =
			(const unsigned char *)k + t0 * row_bytes;
		const unsigned char *vb =
			(const unsigned char *)v + t0 * row_bytes;
		uint32_t nt = kvc_list_tokens(mask, t0, nb, tl);

		for (uint32_t h0 = 0, g; h0 < st->n_q; h0 += g) {
			g = st->n_q - h0 < GROUP ? st->n_q - h0 : GROUP;
			if (nt)
				fold_group(st, h0, g, q, kb, vb, row_bytes,
					   dtype, tl, nt, s);
			if (scores)
				kvc_put_scores(scores + h0 * scores_stride + t0,
					   scores_stride, s, g, tl, nt, nb);
		}
	}
}

void kvc_scores_scalar(const float *q, uint32_t n_q, uint32_t head_dim,
		       const void *k, uint32_t n, kvf_dtype dtype,
		       const uint8_t *mask, float *out, size_t out_stride)
{
	size_t row_bytes = head_dim * kvc_elt_bytes(dtype);
	uint8_t tl[KVC_BLOCK_TOKENS];
	float s[GROUP * KVC_BLOCK_TOKENS];

	for (uint32_t t0 = 0; t0 < n; t0 += KVC_BLOCK_TOKENS) {
		uint32_t nb = n - t0 < KVC_BLOCK_TOKENS ? n - t0 :
							  KVC_BLOCK_TOKENS;
		const unsigned char *kb =
			(const unsigned char *)k + t0 * row_bytes;
		uint32_t nt = kvc_list_tokens(mask, t0, nb, tl);

		for (uint32_t h0 = 0, g; h0 < n_q; h0 += g) {
			g = n_q - h0 < GROUP ? n_q - h0 : GROUP;
			block_scores(q + (size_t)h0 * head_dim, g, head_dim, kb,
				     row_bytes, dtype, tl, nt, s,
				     KVC_BLOCK_TOKENS);
			kvc_put_scores(out + h0 * out_stride + t0, out_stride, s, g,
				   tl, nt, nb);
		}
	}
}
