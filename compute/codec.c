/*
 * codec.c - the encoded group layout and the scalar encoder and decoder
 * (codec.h); dispatch.c holds the variants' tables and the choice.
 *
 * The scalar code is the oracle: codec_avx2.c makes the same bytes and
 * the same decoded bits.  Both are compiled with -ffp-contract=off so
 * that no multiply and add are fused behind the formats' backs.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "api/status.h"
#include "compute/codec.h"
#include "compute/codec_impl.h"
#include "compute/half.h"

/* align_up - n rounded up to a multiple of KVC_CODEC_ALIGN. */
static uint32_t align_up(uint32_t n)
{
	return (n + KVC_CODEC_ALIGN - 1) & ~(uint32_t)(KVC_CODEC_ALIGN - 1);
}

/* make_layout - the layout of arguments already checked. */
static void make_layout(kvf_codec codec, kvf_kind kind, uint32_t g,
			uint32_t d, uint32_t version,
			struct kvc_codec_layout *l)
{
	uint32_t end;

	memset(l, 0, sizeof(*l));
	l->codec = codec;
	l->kind = kind;
	l->group_tokens = g;
	l->head_dim = d;
	l->version = version;
	l->row_bytes = codec == KVF_CODEC_INT4 ? (d + 1) / 2 : d;
	l->scales_off = align_up(g * l->row_bytes);
	if (codec == KVF_CODEC_FP8) {
		l->n_scales = 1;
		l->scale_bytes = (uint32_t)sizeof(float);
		end = l->scales_off + l->scale_bytes;
	} else {
		l->n_scales = kind == KVF_KIND_K ? d : g;
		l->scale_bytes = version == KVC_LAYOUT_KBYTE &&
						 kind == KVF_KIND_K
					 ? 1
					 : 2;
		end = l->scales_off + l->scale_bytes * l->n_scales;
		if (codec == KVF_CODEC_INT4) {
			/* f16 zero points on an even byte */
			l->mins_off = (end + 1) & ~1u;
			end = l->mins_off + 2 * l->n_scales;
		}
	}
	l->group_bytes = align_up(end);
}

/* layout_valid - arguments kvc_codec_layout takes (no message). */
static int layout_valid(kvf_codec codec, kvf_kind kind, uint32_t g,
			uint32_t d, uint32_t version)
{
	return (codec == KVF_CODEC_FP8 || codec == KVF_CODEC_INT8 ||
		codec == KVF_CODEC_INT4) &&
	       (kind == KVF_KIND_K || kind == KVF_KIND_V) && g >= 1 &&
	       g <= KVC_CODEC_MAX_TOKENS && d >= 1 &&
	       d <= KVC_CODEC_MAX_DIM &&
	       (version == KVC_LAYOUT_F16 || version == KVC_LAYOUT_KBYTE);
}

kvf_status kvc_codec_layout(kvf_codec codec, kvf_kind kind, uint32_t g,
			    uint32_t head_dim, uint32_t version,
			    struct kvc_codec_layout *out)
{
	if (codec != KVF_CODEC_FP8 && codec != KVF_CODEC_INT8 &&
	    codec != KVF_CODEC_INT4)
		return kvf_fail(KVF_EINVAL,
				"kvc_codec_layout: codec %d (%s) has no encoded "
				"group (use fp8, int8 or int4)",
				(int)codec, kvf_codec_name(codec));
	if (kind != KVF_KIND_K && kind != KVF_KIND_V)
		return kvf_fail(KVF_EINVAL,
				"kvc_codec_layout: kind %d (%s) is not k or v",
				(int)kind, kvf_kind_name(kind));
	if (g < 1 || g > KVC_CODEC_MAX_TOKENS)
		return kvf_fail(KVF_EINVAL,
				"kvc_codec_layout: group of %u tokens (1..%u)",
				g, KVC_CODEC_MAX_TOKENS);
	if (head_dim < 1 || head_dim > KVC_CODEC_MAX_DIM)
		return kvf_fail(KVF_EINVAL,
				"kvc_codec_layout: head_dim %u (1..%u)",
				head_dim, KVC_CODEC_MAX_DIM);
	if (version != KVC_LAYOUT_F16 && version != KVC_LAYOUT_KBYTE)
		return kvf_fail(KVF_EINVAL,
				"kvc_codec_layout: layout version %u (%u or %u)",
				version, KVC_LAYOUT_F16, KVC_LAYOUT_KBYTE);
	make_layout(codec, kind, g, head_dim, version, out);
	return KVF_OK;
}

size_t kvc_codec_group_bytes(kvf_codec codec, kvf_kind kind, uint32_t g,
			     uint32_t head_dim, uint32_t version)
{
	struct kvc_codec_layout l;

	if (!layout_valid(codec, kind, g, head_dim, version))
		return 0;
	make_layout(codec, kind, g, head_dim, version, &l);
	return l.group_bytes;
}

uint32_t kvc_codec_group_tokens(kvf_codec codec, kvf_kind kind,
				uint32_t head_dim, uint32_t version,
				size_t page_bytes)
{
	uint32_t lo = 0, hi = KVC_CODEC_MAX_TOKENS;

	if (!layout_valid(codec, kind, 1, head_dim, version))
		return 0;
	/* group_bytes grows with g: the last g that fits, by bisection */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;

		if (kvc_codec_group_bytes(codec, kind, mid, head_dim,
					  version) <= page_bytes)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

kvf_status kvc_codec_check(const struct kvc_codec_layout *l, const void *src,
			   kvf_dtype dtype)
{
	size_t n = (size_t)l->group_tokens * l->head_dim;

	for (size_t i = 0; i < n; i++) {
		float x = kvc_elt(src, i, dtype);

		if (!(fabsf(x) <= KVC_CODEC_MAX_ABS))
			return kvf_fail(KVF_ERANGE,
					"kvc_codec_encode: token %zu dim %zu "
					"holds %g; %s groups take finite values "
					"of magnitude <= 65504",
					i / l->head_dim, i % l->head_dim,
					(double)x, kvf_codec_name(l->codec));
	}
	return KVF_OK;
}

/* in_range_scalar - every one of the n values at p (of dt) is finite and
 * of magnitude <= KVC_CODEC_MAX_ABS: its bits, sign cleared, at most the
 * largest such value's, top (NaN and infinities have larger ones).  The
 * 16-bit types four at a time: (bits & 0x7fff) + (0x7fff - top) reaches
 * bit 15 of its lane exactly when bits & 0x7fff > top, and never
 * carries out of it.  Converting each value cost more than the encode
 * (kvbench append --codec) */
int kvc_codec_in_range_scalar(const void *p, size_t n, kvf_dtype dt)
{
	uint64_t bad = 0;
	size_t i = 0;

	if (dt == KVF_DTYPE_F32) {
		const unsigned char *b = p;
		float lim = KVC_CODEC_MAX_ABS;
		uint32_t top;

		memcpy(&top, &lim, sizeof(top));
		for (; i < n; i++) {
			uint32_t w; /* the bits, not a float read as them */

			memcpy(&w, b + 4 * i, sizeof(w));
			bad |= (w & 0x7fffffffu) > top;
		}
	} else {
		/* f16: every finite value is <= 65504 (0x7bff; 0x7c00 is
		 * infinity); bf16: 0x477f is 65280, the next 65536 */
		const unsigned char *b = p;
		uint64_t top = dt == KVF_DTYPE_F16 ? 0x7bff : 0x477f;
		uint64_t add = (0x7fff - top) * 0x0001000100010001ull;

		for (; i + 4 <= n; i += 4) {
			uint64_t w;

			memcpy(&w, b + 2 * i, sizeof(w));
			bad |= (w & 0x7fff7fff7fff7fffull) + add;
		}
		bad &= 0x8000800080008000ull;
		for (; i < n; i++) {
			uint16_t h;

			memcpy(&h, b + 2 * i, sizeof(h));
			bad |= (uint64_t)((h & 0x7fffu) > top);
		}
	}
	return bad == 0;
}

/* ---- scalar encoder ----------------------------------------------------- */

/* x_at - element (t, d) of the source group. */
static float x_at(const void *src, kvf_dtype dt, uint32_t D, uint32_t t,
		  uint32_t d)
{
	return kvc_elt(src, (size_t)t * D + d, dt);
}

static void put_f16(uint8_t *grp, uint32_t off, uint32_t i, uint16_t h)
{
	memcpy(grp + off + 2 * (size_t)i, &h, 2);
}

static void encode_fp8(const struct kvc_codec_layout *l, const void *src,
		       kvf_dtype dt, uint8_t *dst)
{
	size_t n = (size_t)l->group_tokens * l->head_dim;
	float amax = 0.0f, s;

	for (size_t i = 0; i < n; i++) {
		float a = fabsf(kvc_elt(src, i, dt));

		amax = a > amax ? a : amax;
	}
	s = kvc_fp8_scale(amax);
	for (size_t i = 0; i < n; i++)
		dst[i] = s == 0.0f ? 0 : kvc_e4m3_code(kvc_elt(src, i, dt) / s);
	memcpy(dst + l->scales_off, &s, sizeof(s));
}

/* members - how many values share scale i: a K scale covers one dim over
 * the G tokens, a V scale one token over the D dims; member j of scale
 * i is element (*t, *d). */
static uint32_t members(const struct kvc_codec_layout *l)
{
	return l->kind == KVF_KIND_K ? l->group_tokens : l->head_dim;
}

static void member(const struct kvc_codec_layout *l, uint32_t i, uint32_t j,
		   uint32_t *t, uint32_t *d)
{
	*t = l->kind == KVF_KIND_K ? j : i;
	*d = l->kind == KVF_KIND_K ? i : j;
}

static void encode_int8(const struct kvc_codec_layout *l, const void *src,
			kvf_dtype dt, uint8_t *dst)
{
	uint32_t D = l->head_dim, n = members(l), t, d;

	for (uint32_t i = 0; i < l->n_scales; i++) {
		float amax = 0.0f, s;
		uint16_t h;

		for (uint32_t j = 0; j < n; j++) {
			float a;

			member(l, i, j, &t, &d);
			a = fabsf(x_at(src, dt, D, t, d));
			amax = a > amax ? a : amax;
		}
		h = kvc_scale_grid(l, kvc_int8_scale(amax));
		kvc_put_scale(l, dst, i, h);
		s = kvf_f16_to_f32(h);
		for (uint32_t j = 0; j < n; j++) {
			int8_t c;

			member(l, i, j, &t, &d);
			c = kvc_int8_code(x_at(src, dt, D, t, d), s);
			memcpy(dst + (size_t)t * l->row_bytes + d, &c, 1);
		}
	}
}

static void encode_int4(const struct kvc_codec_layout *l, const void *src,
			kvf_dtype dt, uint8_t *dst)
{
	uint32_t D = l->head_dim, n = members(l), t, d;

	for (uint32_t i = 0; i < l->n_scales; i++) {
		float mn = INFINITY, mx = -INFINITY, s, z;
		uint16_t hs, hz;

		for (uint32_t j = 0; j < n; j++) {
			float x;

			member(l, i, j, &t, &d);
			x = x_at(src, dt, D, t, d);
			mn = x < mn ? x : mn;
			mx = x > mx ? x : mx;
		}
		kvc_int4_meta(l, mn, mx, &hs, &hz);
		kvc_put_scale(l, dst, i, hs);
		put_f16(dst, l->mins_off, i, hz);
		s = kvf_f16_to_f32(hs);
		z = kvf_f16_to_f32(hz);
		for (uint32_t j = 0; j < n; j++) {
			uint8_t c;

			member(l, i, j, &t, &d);
			c = kvc_int4_code(x_at(src, dt, D, t, d), s, z);
			kvc_int4_put(dst + (size_t)t * l->row_bytes, d, D, c);
		}
	}
}

kvf_status kvc_codec_encode_scalar(const struct kvc_codec_layout *l,
				   const void *src, kvf_dtype dtype, void *dst)
{
	kvf_status rc;

	if ((rc = kvc_codec_check(l, src, dtype)) != KVF_OK)
		return rc;
	memset(dst, 0, l->group_bytes);
	switch (l->codec) {
	case KVF_CODEC_FP8:
		encode_fp8(l, src, dtype, dst);
		break;
	case KVF_CODEC_INT8:
		encode_int8(l, src, dtype, dst);
		break;
	default:
		encode_int4(l, src, dtype, dst);
		break;
	}
	return KVF_OK;
}

/* ---- scalar decoder ----------------------------------------------------- */

/* put_value - element i of dst in dtype, from its f32 value. */
static void put_value(void *dst, size_t i, kvf_dtype dt, float x)
{
	uint16_t h;

	if (dt == KVF_DTYPE_F32) {
		memcpy((uint8_t *)dst + 4 * i, &x, 4);
		return;
	}
	h = dt == KVF_DTYPE_F16 ? kvf_f32_to_f16(x) : kvf_f32_to_bf16(x);
	memcpy((uint8_t *)dst + 2 * i, &h, 2);
}

/* value_at - the f32 value of element (t, d) of an encoded group. */
static float value_at(const struct kvc_codec_layout *l, const void *grp,
		      uint32_t t, uint32_t d)
{
	const uint8_t *row = kvc_codes_row(l, grp, t);
	uint32_t i = l->kind == KVF_KIND_K ? d : t;

	switch (l->codec) {
	case KVF_CODEC_FP8:
		return kvf_f16_to_f32(kvc_e4m3_f16(row[d])) *
		       kvc_fp8_group_mul(grp, l);
	case KVF_CODEC_INT8:
		return (float)(int8_t)row[d] * kvc_scale_at(l, grp, i);
	default:
		return kvc_f16_at(grp, l->mins_off, i) +
		       (float)kvc_int4_nibble(row, d, l->head_dim) *
			       kvc_scale_at(l, grp, i);
	}
}

void kvc_codec_decode_scalar(const struct kvc_codec_layout *l,
			     const void *grp, uint32_t t0, uint32_t n,
			     kvf_dtype dtype, void *dst)
{
	uint32_t D = l->head_dim;

	assert(t0 + n <= l->group_tokens);
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t d = 0; d < D; d++)
			put_value(dst, (size_t)t * D + d, dtype,
				  kvc_clamp(value_at(l, grp, t0 + t, d)));
}
