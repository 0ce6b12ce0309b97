/*
 * attn.c - dense decode attention, scalar: the streaming-softmax state,
 * its fold over token blocks, finish, and the log-sum-exp merge.
 *
 * The fold is the oracle for attn_avx2.c and follows the same plan: per
 * block of KVC_BLOCK_TOKENS tokens and per head, the block's scores, one
 * rescale of (l, acc) by exp(m_old - m_new) if the block raises the max,
 * then p_t = exp(s_t - m) added into l and p_t * v_t into acc.  Masked
 * tokens are skipped before their K or V is read.  The block stays in
 * cache while the n_q heads take their turns, so K and V come from
 * memory once per call.
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
		} else {
			memset(o, 0, hd * sizeof(float));
		}
		if (lse)
			lse[h] = l > 0.0f ? st->m[h] + logf(l) : -INFINITY;
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

/* fold_head_block - fold the nt listed tokens tl[] of one block (rows
 * relative to k, v) into head h of st. */
static void fold_head_block(struct kvc_attn_state *st, uint32_t h,
			    const float *q, const unsigned char *k,
			    const unsigned char *v, size_t row_bytes,
			    kvf_dtype dtype, const uint8_t *tl, uint32_t nt,
			    float *s)
{
	uint32_t hd = st->head_dim;
	float *acc = st->acc + (size_t)h * hd;
	float bm = -INFINITY, mn;

	for (uint32_t j = 0; j < nt; j++) {
		s[j] = kvc_dot_row(q, k + tl[j] * row_bytes, hd, dtype);
		if (s[j] > bm)
			bm = s[j];
	}
	mn = bm > st->m[h] ? bm : st->m[h];
	if (mn > st->m[h]) {
		float c = expf(st->m[h] - mn);

		st->l[h] *= c;
		for (uint32_t d = 0; d < hd; d++)
			acc[d] *= c;
		st->m[h] = mn;
	}
	for (uint32_t j = 0; j < nt; j++) {
		const unsigned char *row = v + tl[j] * row_bytes;
		float p = expf(s[j] - mn);

		st->l[h] += p;
		for (uint32_t d = 0; d < hd; d++)
			acc[d] += p * kvc_elt(row, d, dtype);
	}
}

void kvc_attn_fold_scalar(struct kvc_attn_state *st, const float *q,
			  const void *k, const void *v, uint32_t n,
			  kvf_dtype dtype, const uint8_t *mask, float *scores,
			  size_t scores_stride)
{
	size_t row_bytes = st->head_dim * kvc_elt_bytes(dtype);
	uint8_t tl[KVC_BLOCK_TOKENS];
	float s[KVC_BLOCK_TOKENS];

	assert(n == 0 || (k && v && q));
	for (uint32_t t0 = 0; t0 < n; t0 += KVC_BLOCK_TOKENS) {
		uint32_t nb = n - t0 < KVC_BLOCK_TOKENS ? n - t0 :
							  KVC_BLOCK_TOKENS;
		const unsigned char *kb =
			(const unsigned char *)k + t0 * row_bytes;
		const unsigned char *vb =
			(const unsigned char *)v + t0 * row_bytes;
		uint32_t nt = 0;

		for (uint32_t t = 0; t < nb; t++)
			if (!mask || mask[t0 + t])
				tl[nt++] = (uint8_t)t;
		for (uint32_t h = 0; h < st->n_q; h++) {
			const float *qh = q + (size_t)h * st->head_dim;

			if (nt)
				fold_head_block(st, h, qh, kb, vb, row_bytes,
						dtype, tl, nt, s);
			if (!scores)
				continue;
			float *row = scores + h * scores_stride + t0;

			for (uint32_t t = 0; t < nb; t++)
				row[t] = -INFINITY;
			for (uint32_t j = 0; j < nt; j++)
				row[tl[j]] = s[j];
		}
	}
}
