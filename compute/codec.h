/*
 * codec.h - compressed KV: the encoded form of one token group of one
 * head (G tokens x head_dim elements of K or of V), its encoder and
 * decoder, and attention computed on encoded groups, decoding in
 * registers (docs/compression.md describes the formats).
 *
 * An encoded group is one buffer: the codes of its tokens first, row by
 * row, then the scales (and for INT4 the zero points), each region
 * starting on a KVC_CODEC_ALIGN boundary of the group and the whole
 * group a multiple of it, so groups laid end to end stay aligned:
 *
 *	codec  codes (G rows of)         scales                 zero points
 *	FP8    D bytes, E4M3             1 f32 (the group's)    -
 *	INT8   D bytes, int8             K: D f16, V: G f16     -
 *	INT4   ceil(D/2) bytes, 2/byte   K: D f16, V: G f16     K: D f16, V: G f16
 *
 * in layout version 1 (KVC_LAYOUT_F16).  Version 2 (KVC_LAYOUT_KBYTE)
 * keeps K's per-channel scales of INT8 and INT4 in one byte each: an f16's
 * exponent and top 3 mantissa bits (the f16 is the byte shifted left by
 * 7), rounded up once more; everything else is as in version 1.  At
 * head_dim 128 that is what lets a 4 KiB page hold 31 INT8 tokens (30)
 * or 58 INT4 ones (56).
 *
 * (D = head_dim; an INT4 row is chunks of 16 dims in 8 bytes, byte i
 * holding dim i in its low nibble and dim i + 8 in its high one; a last
 * chunk of r < 16 dims pairs dim i with dim i + ceil(r/2) the same way;
 * codec_impl.h).  A decoded element is
 *	FP8   e4m3(code) * scale
 *	INT8  code * scale[channel or token]
 *	INT4  zero[c or t] + code * scale[c or t], code in 0..15
 * where K takes the channel's (dim's) entry and V the token's, then
 * clamped to +-KVC_CODEC_MAX_ABS: a scale rounds up, so code * scale can
 * pass the largest value taken by a little (INT8 of 65504: 127 * 516, or
 * 114 * 576 with a byte scale), and a decoded tail (after a cut or a
 * fork) is encoded again.  Every value is computed in f32 in that order,
 * no fused multiply-add, so the scalar and AVX2 decoders give the same
 * bits, and so do the encoders.
 *
 * Encoders take finite values of magnitude <= KVC_CODEC_MAX_ABS (65504,
 * the f16 range, which holds the f16 scales); anything else is refused
 * with KVF_ERANGE and nothing is written.  An f16 input always fits.
 *
 * The kernels here are pure functions over caller buffers; the engine
 * computes the layout of its store once (kvc_codec_layout) and hands it
 * to every call.  Dispatch follows kernels.h: AVX2+FMA+F16C when the CPU
 * has it (head_dim a multiple of 8, of 16 for INT4, else the scalar code
 * runs), scalar otherwise or when KVF_SIMD=scalar.
 */
#ifndef KVF_COMPUTE_CODEC_H
#define KVF_COMPUTE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "compute/kernels.h"
#include "kvflash.h"

#define KVC_CODEC_ALIGN 16          /* bytes; region and group boundary */
#define KVC_CODEC_MAX_ABS 65504.0f  /* largest magnitude an encoder takes */

/* kvc_clamp - a decoded value within what an encoder takes */
static inline float kvc_clamp(float x)
{
	return x > KVC_CODEC_MAX_ABS ? KVC_CODEC_MAX_ABS :
	       x < -KVC_CODEC_MAX_ABS ? -KVC_CODEC_MAX_ABS : x;
}
#define KVC_CODEC_MAX_DIM 1024u     /* head_dim limit (kvf_model's) */
#define KVC_CODEC_MAX_TOKENS 65536u /* tokens per group limit */

/* Layout versions (a store records its own: engine/base/segfmt.h). */
#define KVC_LAYOUT_F16 1u   /* every scale and zero point an f16 */
#define KVC_LAYOUT_KBYTE 2u /* K's INT8 and INT4 scales one byte each */

/* The encoded layout of one group: fixed per (codec, kind, G, head_dim,
 * version). */
struct kvc_codec_layout {
	kvf_codec codec;       /* FP8, INT8 or INT4 (never NONE) */
	kvf_kind kind;         /* KVF_KIND_K or KVF_KIND_V */
	uint32_t group_tokens; /* G: tokens of the group */
	uint32_t head_dim;     /* D: elements per token */
	uint32_t version;      /* KVC_LAYOUT_F16 or KVC_LAYOUT_KBYTE */
	uint32_t row_bytes;    /* bytes of codes per token */
	uint32_t scales_off;   /* byte offset of the scales */
	uint32_t scale_bytes;  /* bytes a scale takes: 4 (FP8), 2 or 1 */
	uint32_t n_scales;     /* scales (and zero points): 1, D or G */
	uint32_t mins_off;     /* INT4: byte offset of the zero points; 0 */
	uint32_t group_bytes;  /* bytes of the whole group, aligned */
};

/*
 * kvc_codec_layout - the layout of a group of g tokens of head_dim
 * elements of kind for codec, in layout version `version`.
 * Return: KVF_OK with *out filled; KVF_EINVAL (message naming the value)
 * for a codec other than FP8, INT8, INT4 (KVF_CODEC_NONE has no encoded
 * form: groups stay in the store dtype), a kind other than K or V, g not
 * in 1..KVC_CODEC_MAX_TOKENS, head_dim not in 1..KVC_CODEC_MAX_DIM or a
 * version that is neither KVC_LAYOUT_F16 nor KVC_LAYOUT_KBYTE; *out is
 * then unchanged.
 */
kvf_status kvc_codec_layout(kvf_codec codec, kvf_kind kind, uint32_t g,
			    uint32_t head_dim, uint32_t version,
			    struct kvc_codec_layout *out);

/*
 * kvc_codec_group_bytes - the bytes of an encoded group (codes, scales,
 * zero points, padding), or 0 for arguments kvc_codec_layout refuses
 * (no message is set).  For sizing pages.
 */
size_t kvc_codec_group_bytes(kvf_codec codec, kvf_kind kind, uint32_t g,
			     uint32_t head_dim, uint32_t version);

/*
 * kvc_codec_group_tokens - the largest G (<= KVC_CODEC_MAX_TOKENS) whose
 * encoded group fits in page_bytes, or 0 when not even one token's does
 * (or the arguments are refused).
 */
uint32_t kvc_codec_group_tokens(kvf_codec codec, kvf_kind kind,
				uint32_t head_dim, uint32_t version,
				size_t page_bytes);

/*
 * encode - encode one whole group.
 * @lay: from kvc_codec_layout.
 * @src: [G][D] elements of dtype, rows contiguous.
 * @dst: lay->group_bytes bytes; every byte is written (padding zero), so
 *       equal inputs give equal groups.
 * Return: KVF_OK; KVF_ERANGE when an element is NaN, infinite or larger
 * in magnitude than KVC_CODEC_MAX_ABS (the message names its token and
 * dim), with dst not written.
 */
typedef kvf_status kvc_codec_encode_fn(const struct kvc_codec_layout *lay,
				       const void *src, kvf_dtype dtype,
				       void *dst);

/*
 * decode - tokens [t0, t0 + n) of an encoded group (t0 + n <= G) as
 * [n][D] elements of dtype: the f32 value of the format (above), rounded
 * to nearest even for f16 and bf16.
 */
typedef void kvc_codec_decode_fn(const struct kvc_codec_layout *lay,
				 const void *grp, uint32_t t0, uint32_t n,
				 kvf_dtype dtype, void *dst);

/*
 * scores - raw scores out[h * out_stride + j] = q_h . k_{t0+j} for the n
 * tokens [t0, t0 + n) of one encoded K group (-INFINITY where mask[j] ==
 * 0), as kernels.h's scores does for dense rows.
 * @kl: layout of kind K, head_dim = the q rows' length.
 * @q: [n_q][D] fp32, pre-scaled.  @mask: NULL or [n].
 */
typedef void kvc_codec_scores_fn(const struct kvc_codec_layout *kl,
				 const float *q, uint32_t n_q, const void *kgrp,
				 uint32_t t0, uint32_t n, const uint8_t *mask,
				 float *out, size_t out_stride);

/*
 * fold - attn_fold (kernels.h) over the tokens [t0, t0 + n) of one
 * encoded K group and its V group: the same streaming softmax in blocks
 * of KVC_BLOCK_TOKENS, into the same state, so dense and encoded groups
 * may be folded into one state in any order.  The codes are decoded in
 * registers: per-channel scales and zero points of K go into the query
 * once per call (q_d * scale_d, and q . zero), per-token ones of V into
 * the softmax weight, so a token costs what a dense one does plus the
 * code conversion.
 * @kl, @vl: the layouts of the two groups (same codec, G and D as st).
 * @mask, @scores, @scores_stride: as attn_fold, over the n tokens.
 * Uses up to about 45 KiB of stack (the query of 8 heads of up to
 * KVC_CODEC_MAX_DIM dims with K's scales folded in), no allocation.
 */
typedef void kvc_codec_fold_fn(struct kvc_attn_state *st, const float *q,
			       const struct kvc_codec_layout *kl,
			       const void *kgrp,
			       const struct kvc_codec_layout *vl,
			       const void *vgrp, uint32_t t0, uint32_t n,
			       const uint8_t *mask, float *scores,
			       size_t scores_stride);

/*
 * in_range - 1 when every one of the n values at src (of dtype) is one an
 * encoder takes: finite, of magnitude at most KVC_CODEC_MAX_ABS; else 0.
 * A codec store checks an append's values with it before it changes
 * anything (their groups are encoded later, when they seal).
 */
typedef int kvc_codec_in_range_fn(const void *src, size_t n, kvf_dtype dtype);

/* One variant of the codec kernels; tables are static and const. */
struct kvc_codec_kernels {
	const char *name;             /* "scalar" or "avx2" */
	kvc_codec_encode_fn *encode;  /* values -> encoded group */
	kvc_codec_decode_fn *decode;  /* encoded group -> values */
	kvc_codec_scores_fn *scores;  /* q . k over an encoded K group */
	kvc_codec_fold_fn *fold;      /* attention over encoded K and V */
	kvc_codec_in_range_fn *in_range; /* values an encoder takes */
};

/*
 * kvc_codec_kernels - the table for this process, chosen as kvc_kernels()
 * chooses (KVF_SIMD=scalar forces scalar).
 * Concurrency: any thread, any time; so are the kernels (they keep no
 * state; each call writes only its outputs).
 */
const struct kvc_codec_kernels *kvc_codec_kernels(void);

/* kvc_codec_kernels_scalar - the portable table (the test oracle). */
const struct kvc_codec_kernels *kvc_codec_kernels_scalar(void);

/* kvc_codec_kernels_avx2 - the AVX2 table, or NULL when this CPU or this
 * build lacks it.  Ignores KVF_SIMD. */
const struct kvc_codec_kernels *kvc_codec_kernels_avx2(void);

#endif /* KVF_COMPUTE_CODEC_H */
