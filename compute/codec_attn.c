/*
 * codec_attn.c - attention over encoded groups, scalar: raw scores of an
 * encoded K group and the streaming-softmax fold over encoded K and V.
 * The oracle for codec_attn_avx2.c, following the same plan.
 *
 * A K group's scales never touch its codes one by one: per call and group
 * of up to 8 query heads, the query takes them in (qk_d = q_d * scale_d
 * for INT8 and INT4, whose K scales are per channel) and INT4's zero
 * points become one constant per head (c0 = q . zero), so a score is
 *	c0 + kmul * (qk . codes_t),
 * with kmul the FP8 group scale (times 256, see codec_impl.h) and 1
 * otherwise.  V's scales are per token (or per group), so they go into
 * the softmax weight: acc += (p_t * scale_t) * codes_t, and INT4's zero
 * points add sum_t p_t * zero_t to every dim once per block.  The
 * softmax itself is attn.c's: per block of KVC_BLOCK_TOKENS tokens one
 * rescale when the max rises, then exp.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "compute/codec.h"
#include "compute/codec_impl.h"
#include "compute/kern_impl.h"

#define B KVC_BLOCK_TOKENS
#define GROUP 8 /* query heads per pass over the group */

/* The query side of one pass: heads h0 .. h0 + g - 1. */
struct kq {
	float qk[GROUP * KVC_CODEC_MAX_DIM]; /* [g][D] q with K's scales */
	float c0[GROUP];                     /* INT4: q . zero; else 0 */
	float kmul;                          /* FP8: group scale * 256; 1 */
};

/* kq_make - fold the scales and zero points of K group kg into the g
 * query rows q ([g][D], pre-scaled). */
static void kq_make(struct kq *kq, const struct kvc_codec_layout *kl,
		    const void *kg, const float *q, uint32_t g)
{
	uint32_t D = kl->head_dim;

	kq->kmul = 1.0f;
	for (uint32_t h = 0; h < g; h++) {
		const float *qh = q + (size_t)h * D;
		float *o = kq->qk + (size_t)h * D;
		float c0 = 0.0f;

		for (uint32_t d = 0; d < D; d++) {
			if (kl->codec == KVF_CODEC_FP8) {
				o[d] = qh[d];
				continue;
			}
			o[d] = qh[d] * kvc_scale_at(kl, kg, d);
			if (kl->codec == KVF_CODEC_INT4)
				c0 += qh[d] * kvc_f16_at(kg, kl->mins_off, d);
		}
		kq->c0[h] = c0;
	}
	if (kl->codec == KVF_CODEC_FP8)
		kq->kmul = kvc_fp8_group_mul(kg, kl);
}

/* raw_row - the codes of token t as numbers (FP8: e4m3 / 256; INT8: the
 * signed code; INT4: 0..15), scales not applied. */
static void raw_row(const struct kvc_codec_layout *l, const void *grp,
		    uint32_t t, float *w)
{
	const uint8_t *row = kvc_codes_row(l, grp, t);

	for (uint32_t d = 0; d < l->head_dim; d++) {
		switch (l->codec) {
		case KVF_CODEC_FP8:
			w[d] = kvf_f16_to_f32(kvc_e4m3_f16(row[d]));
			break;
		case KVF_CODEC_INT8:
			w[d] = (float)(int8_t)row[d];
			break;
		default:
			w[d] = (float)kvc_int4_nibble(row, d, l->head_dim);
			break;
		}
	}
}

/* block_scores - s[h * B + j] for the g heads of kq and the nt listed
 * tokens tb + tl[j] of the K group. */
static void block_scores(const struct kq *kq, uint32_t g,
			 const struct kvc_codec_layout *kl, const void *kg,
			 uint32_t tb, const uint8_t *tl, uint32_t nt, float *s)
{
	uint32_t D = kl->head_dim;
	float w[KVC_CODEC_MAX_DIM];

	for (uint32_t j = 0; j < nt; j++) {
		raw_row(kl, kg, tb + tl[j], w);
		for (uint32_t h = 0; h < g; h++)
			s[h * B + j] = kq->c0[h] +
				       kq->kmul *
					       kvc_dot_row(kq->qk + (size_t)h * D,
							   w, D, KVF_DTYPE_F32);
	}
}

/* v_scale - the scale V token t's codes take (FP8: the group's * 256). */
static float v_scale(const struct kvc_codec_layout *vl, const void *vg,
		     uint32_t t)
{
	if (vl->codec == KVF_CODEC_FP8)
		return kvc_fp8_group_mul(vg, vl);
	return kvc_scale_at(vl, vg, t);
}

/* accumulate_v - acc[h] += sum_j p[h][j] * v_{tb + tl[j]} for g heads
 * (acc rows of D floats). */
static void accumulate_v(float *acc, uint32_t g,
			 const struct kvc_codec_layout *vl, const void *vg,
			 uint32_t tb, const uint8_t *tl, uint32_t nt,
			 const float *p)
{
	uint32_t D = vl->head_dim;
	float w[KVC_CODEC_MAX_DIM];

	for (uint32_t j = 0; j < nt; j++) {
		float vs = v_scale(vl, vg, tb + tl[j]);

		raw_row(vl, vg, tb + tl[j], w);
		for (uint32_t h = 0; h < g; h++)
			kvc_axpy_row(acc + (size_t)h * D, p[h * B + j] * vs, w,
				     D, KVF_DTYPE_F32);
	}
	if (vl->codec != KVF_CODEC_INT4)
		return;
	for (uint32_t h = 0; h < g; h++) {
		float bias = 0.0f;

		for (uint32_t j = 0; j < nt; j++)
			bias += p[h * B + j] *
				kvc_f16_at(vg, vl->mins_off, tb + tl[j]);
		for (uint32_t d = 0; d < D; d++)
			acc[(size_t)h * D + d] += bias;
	}
}

void kvc_codec_fold_scalar(struct kvc_attn_state *st, const float *q,
			   const struct kvc_codec_layout *kl, const void *kg,
			   const struct kvc_codec_layout *vl, const void *vg,
			   uint32_t t0, uint32_t n, const uint8_t *mask,
			   float *scores, size_t scores_stride)
{
	uint32_t D = st->head_dim;
	struct kq kq;
	uint8_t tl[B];
	float s[GROUP * B], p[GROUP * B];

	assert(kl->head_dim == D && vl->head_dim == D);
	assert(t0 + n <= kl->group_tokens && t0 + n <= vl->group_tokens);
	for (uint32_t h0 = 0, g; h0 < st->n_q; h0 += g) {
		g = st->n_q - h0 < GROUP ? st->n_q - h0 : GROUP;
		kq_make(&kq, kl, kg, q + (size_t)h0 * D, g);
		for (uint32_t b0 = 0; b0 < n; b0 += B) {
			uint32_t nb = n - b0 < B ? n - b0 : B;
			uint32_t nt = kvc_list_tokens(mask, b0, nb, tl);

			if (nt) {
				block_scores(&kq, g, kl, kg, t0 + b0, tl, nt, s);
				for (uint32_t h = 0; h < g; h++)
					softmax_head(st, h0 + h, s + h * B,
						     p + h * B, nt);
				accumulate_v(st->acc + (size_t)h0 * D, g, vl,
					     vg, t0 + b0, tl, nt, p);
			}
			if (scores)
				kvc_put_scores(scores + h0 * scores_stride + b0,
					       scores_stride, s, g, tl, nt, nb);
		}
	}
}

void kvc_codec_scores_scalar(const struct kvc_codec_layout *kl,
			     const float *q, uint32_t n_q, const void *kg,
			     uint32_t t0, uint32_t n, const uint8_t *mask,
			     float *out, size_t out_stride)
{
	uint32_t D = kl->head_dim;
	struct kq kq;
	uint8_t tl[B];
	float s[GROUP * B];

	assert(t0 + n <= kl->group_tokens);
	for (uint32_t h0 = 0, g; h0 < n_q; h0 += g) {
		g = n_q - h0 < GROUP ? n_q - h0 : GROUP;
		kq_make(&kq, kl, kg, q + (size_t)h0 * D, g);
		for (uint32_t b0 = 0; b0 < n; b0 += B) {
			uint32_t nb = n - b0 < B ? n - b0 : B;
			uint32_t nt = kvc_list_tokens(mask, b0, nb, tl);

			block_scores(&kq, g, kl, kg, t0 + b0, tl, nt, s);
			kvc_put_scores(out + h0 * out_stride + b0, out_stride,
				       s, g, tl, nt, nb);
		}
	}
}
