/*
 * codec_avx2.c - the encoder and decoder of codec.h, AVX2+FMA+F16C.
 * Compiled with -mavx2 -mfma -mf16c -ffp-contract=off; reached only
 * through dispatch.c's codec table on a CPU that has all three.
 *
 * Same bytes and bits as codec.c: the statistics of a channel or token
 * (max |x|, min, max) are exact whatever the order, the scales and zero
 * points come from them through the scalar code of codec_impl.h, and
 * each code is the same IEEE division and round-to-nearest-even as the
 * scalar rintf(x / s).  Vectors run along the dims, 8 at a time; K's
 * per-channel statistics take one pass down the G tokens per 8 dims.  A
 * head_dim that is not a multiple of 8 (of 16 for INT4) goes to the
 * scalar code.
 */
#include <assert.h>
#include <immintrin.h>
#include <string.h>

#include "compute/codec.h"
#include "compute/codec_impl.h"
#include "compute/codec_vec_avx2.h"
#include "compute/vec_avx2.h"

/* abs8 - |x| per lane. */
KVC_INLINE __m256 abs8(__m256 x)
{
	return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
}

/* hmin8 - the smallest of the 8 lanes of x. */
KVC_INLINE float hmin8(__m256 x)
{
	__m128 s = _mm_min_ps(_mm256_castps256_ps128(x),
			      _mm256_extractf128_ps(x, 1));

	s = _mm_min_ps(s, _mm_movehl_ps(s, s));
	s = _mm_min_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* round8 - to nearest even, as rintf does under the default mode. */
KVC_INLINE __m256 round8(__m256 x)
{
	return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT |
					  _MM_FROUND_NO_EXC);
}

/* store8_u8, store8_i8 - 8 int32 lanes (in range) as 8 bytes at p. */
KVC_INLINE void store8_u8(uint8_t *p, __m256i v)
{
	__m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v),
				     _mm256_extracti128_si256(v, 1));

	_mm_storel_epi64((__m128i *)p, _mm_packus_epi16(w, w));
}

KVC_INLINE void store8_i8(uint8_t *p, __m256i v)
{
	__m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v),
				    _mm256_extracti128_si256(v, 1));

	_mm_storel_epi64((__m128i *)p, _mm_packs_epi16(w, w));
}

/* store16_nib - the 16 codes 0..15 of the chunk of dims d..d+15 (d a
 * multiple of 16): byte i holds dim d + i in its low nibble and dim
 * d + 8 + i in its high one (codec_impl.h's chunks). */
KVC_INLINE void store16_nib(uint8_t *row, size_t d, __m256i lo, __m256i hi)
{
	store8_u8(row + d / 2, _mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)));
}

/* e4m3_8 - kvc_e4m3_code per lane, as int32 lanes 0..255. */
KVC_INLINE __m256i e4m3_8(__m256 y)
{
	__m256i u = _mm256_castps_si256(y);
	__m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24),
					_mm256_set1_epi32(0x80));
	__m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
	__m256i cs = _mm256_cvttps_epi32(round8(
		_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(512.0f))));
	__m256i an = _mm256_add_epi32(
		a, _mm256_add_epi32(_mm256_set1_epi32(0x7ffff),
				    _mm256_and_si256(_mm256_srli_epi32(a, 20),
						     _mm256_set1_epi32(1))));
	__m256i cn = _mm256_sub_epi32(_mm256_srli_epi32(an, 20),
				      _mm256_set1_epi32(120 << 3));
	__m256i sub = _mm256_cmpgt_epi32(
		_mm256_set1_epi32((int)KVC_E4M3_MIN_NORMAL_BITS), a);
	__m256i code = _mm256_blendv_epi8(cn, cs, sub);

	code = _mm256_min_epi32(code, _mm256_set1_epi32(KVC_E4M3_MAX_CODE));
	return _mm256_or_si256(code, sign);
}

/* int8_8 - kvc_int8_code per lane (s lanes 0 give code 0). */
KVC_INLINE __m256i int8_8(__m256 x, __m256 s)
{
	__m256 zero = _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_EQ_OQ);
	__m256 r = round8(_mm256_div_ps(x, s));

	r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)),
			  _mm256_set1_ps(127.0f));
	return _mm256_cvttps_epi32(_mm256_andnot_ps(zero, r));
}

/* int4_8 - kvc_int4_code per lane. */
KVC_INLINE __m256i int4_8(__m256 x, __m256 s, __m256 z)
{
	__m256 zero = _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_EQ_OQ);
	__m256 r = round8(_mm256_div_ps(_mm256_sub_ps(x, z), s));

	r = _mm256_min_ps(_mm256_max_ps(r, _mm256_setzero_ps()),
			  _mm256_set1_ps(15.0f));
	return _mm256_cvttps_epi32(_mm256_andnot_ps(zero, r));
}

/* values_ok - every element finite with |x| <= KVC_CODEC_MAX_ABS (n a
 * multiple of 8).  A finite f16 is always in range, so f16 input is
 * checked on its bits, 16 at a time: an exponent field of all ones is
 * an infinity or a NaN. */
KVC_INLINE int values_ok(const void *src, size_t n, kvf_dtype dt)
{
	const __m256 lim = _mm256_set1_ps(KVC_CODEC_MAX_ABS);
	__m256 bad = _mm256_setzero_ps();

	if (dt == KVF_DTYPE_F16) {
		const __m256i e = _mm256_set1_epi16(0x7c00);
		__m256i b16 = _mm256_setzero_si256();
		__m128i last = _mm_setzero_si128();
		size_t i = 0;

		for (; i + 16 <= n; i += 16)
			b16 = _mm256_or_si256(
				b16, _mm256_cmpeq_epi16(
					     _mm256_and_si256(
						     _mm256_loadu_si256(
							     (const __m256i *)((const uint16_t *)src + i)),
						     e),
					     e));
		if (i < n) /* the last 8 */
			last = _mm_cmpeq_epi16(
				_mm_and_si128(_mm_loadu_si128(
						      (const __m128i *)((const uint16_t *)src + i)),
					      _mm256_castsi256_si128(e)),
				_mm256_castsi256_si128(e));
		return _mm256_testz_si256(b16, b16) && _mm_testz_si128(last, last);
	}
	for (size_t i = 0; i < n; i += 8)
		bad = _mm256_or_ps(bad, _mm256_cmp_ps(abs8(load8(src, i, dt)),
						      lim, _CMP_NLE_UQ));
	return _mm256_movemask_ps(bad) == 0;
}

int kvc_codec_in_range_avx2(const void *src, size_t n, kvf_dtype dtype)
{
	size_t whole = n & ~(size_t)7;

	if (whole == n) /* src may be NULL for n == 0 */
		return values_ok(src, n, dtype);
	return values_ok(src, whole, dtype) &&
	       kvc_codec_in_range_scalar(
		       (const unsigned char *)src + whole * kvc_elt_bytes(dtype),
		       n - whole, dtype);
}

static void put_f16(uint8_t *grp, uint32_t off, uint32_t i, uint16_t h)
{
	memcpy(grp + off + 2 * (size_t)i, &h, 2);
}

KVC_INLINE void encode_fp8(const struct kvc_codec_layout *l, const void *src,
			   kvf_dtype dt, uint8_t *dst)
{
	size_t n = (size_t)l->group_tokens * l->head_dim;
	__m256 mx = _mm256_setzero_ps(), sv;
	float s;

	for (size_t i = 0; i < n; i += 8)
		mx = _mm256_max_ps(mx, abs8(load8(src, i, dt)));
	s = kvc_fp8_scale(hmax8(mx));
	memcpy(dst + l->scales_off, &s, sizeof(s));
	if (s == 0.0f)
		return; /* the codes stay 0 */
	sv = _mm256_set1_ps(s);
	for (size_t i = 0; i < n; i += 8)
		store8_u8(dst + i,
			  e4m3_8(_mm256_div_ps(load8(src, i, dt), sv)));
}

/*
 * f16_up8 - kvc_f16_up per lane (finite lanes of magnitude <= 65504), as
 * 8 f16: the conversion rounds to nearest even as kvf_f32_to_f16 does,
 * then a lane that came out below x steps one f16 up (down in magnitude
 * for a negative), and -0 becomes +0.
 */
KVC_INLINE __m128i f16_up8(__m256 x)
{
	__m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT |
					       _MM_FROUND_NO_EXC);
	__m256i lt = _mm256_castps_si256(
		_mm256_cmp_ps(_mm256_cvtph_ps(h), x, _CMP_LT_OQ));
	__m128i lt16 = _mm_packs_epi32(_mm256_castsi256_si128(lt),
				       _mm256_extracti128_si256(lt, 1));
	__m128i step = _mm_or_si128(_mm_srai_epi16(h, 15), _mm_set1_epi16(1));

	h = _mm_add_epi16(h, _mm_and_si128(lt16, step));
	return _mm_andnot_si128(
		_mm_cmpeq_epi16(h, _mm_set1_epi16((short)0x8000)), h);
}

/* scale_grid8 - kvc_scale_grid per lane. */
KVC_INLINE __m128i scale_grid8(const struct kvc_codec_layout *l, __m128i h)
{
	const __m128i low = _mm_set1_epi16(0x7f);
	__m128i on_grid;

	if (l->scale_bytes != 1)
		return h;
	on_grid = _mm_cmpeq_epi16(_mm_and_si128(h, low), _mm_setzero_si128());
	return _mm_blendv_epi8(_mm_add_epi16(_mm_or_si128(h, low),
					     _mm_set1_epi16(1)),
			       h, on_grid);
}

/* put_scales8 - kvc_put_scale of scales i0 .. i0 + 7 (f16 bits h). */
KVC_INLINE void put_scales8(const struct kvc_codec_layout *l, uint8_t *grp,
			    uint32_t i0, __m128i h)
{
	if (l->scale_bytes == 1)
		_mm_storel_epi64((__m128i *)(void *)(grp + l->scales_off + i0),
				 _mm_packus_epi16(_mm_srli_epi16(h, 7),
						  _mm_setzero_si128()));
	else
		_mm_storeu_si128((__m128i *)(void *)(grp + l->scales_off +
						     2 * (size_t)i0),
				 h);
}

/* int8_scales8 - the INT8 scales of 8 channels from their max |x|
 * (kvc_int8_scale on l's grid): stored at d0.., returned as f32. */
KVC_INLINE __m256 int8_scales8(const struct kvc_codec_layout *l, uint8_t *dst,
			       uint32_t d0, __m256 amax)
{
	__m128i h = scale_grid8(
		l, f16_up8(_mm256_div_ps(amax, _mm256_set1_ps(127.0f))));

	put_scales8(l, dst, d0, h);
	return _mm256_cvtph_ps(h);
}

KVC_INLINE void encode_int8(const struct kvc_codec_layout *l, const void *src,
			    kvf_dtype dt, uint8_t *dst)
{
	size_t D = l->head_dim, G = l->group_tokens, rb = l->row_bytes;

	if (l->kind == KVF_KIND_K) {
		for (size_t d = 0; d < D; d += 8) {
			__m256 mx = _mm256_setzero_ps(), sv;

			for (size_t t = 0; t < G; t++)
				mx = _mm256_max_ps(mx,
						   abs8(load8(src, t * D + d, dt)));
			sv = int8_scales8(l, dst, (uint32_t)d, mx);
			for (size_t t = 0; t < G; t++)
				store8_i8(dst + t * rb + d,
					  int8_8(load8(src, t * D + d, dt), sv));
		}
		return;
	}
	for (size_t t = 0; t < G; t++) {
		__m256 mx = _mm256_setzero_ps(), sv;
		uint16_t h;

		for (size_t d = 0; d < D; d += 8)
			mx = _mm256_max_ps(mx, abs8(load8(src, t * D + d, dt)));
		h = kvc_scale_grid(l, kvc_int8_scale(hmax8(mx)));
		kvc_put_scale(l, dst, (uint32_t)t, h);
		sv = _mm256_set1_ps(kvf_f16_to_f32(h));
		for (size_t d = 0; d < D; d += 8)
			store8_i8(dst + t * rb + d,
				  int8_8(load8(src, t * D + d, dt), sv));
	}
}

/* int4_meta8 - kvc_int4_meta of 8 channels from their min and max: the
 * zero point is the negated f16_up of -min (+0 stays +0), stored at
 * index i0.. of both regions, returned as f32. */
KVC_INLINE void int4_meta8(const struct kvc_codec_layout *l, uint8_t *dst,
			   uint32_t i0, __m256 mn, __m256 mx, __m256 *sv,
			   __m256 *zv)
{
	__m128i hz = f16_up8(_mm256_xor_ps(mn, _mm256_set1_ps(-0.0f))), hs;

	hz = _mm_andnot_si128(_mm_cmpeq_epi16(hz, _mm_setzero_si128()),
			      _mm_xor_si128(hz, _mm_set1_epi16((short)0x8000)));
	*zv = _mm256_cvtph_ps(hz);
	hs = scale_grid8(l, f16_up8(_mm256_div_ps(_mm256_sub_ps(mx, *zv),
						  _mm256_set1_ps(15.0f))));
	put_scales8(l, dst, i0, hs);
	_mm_storeu_si128((__m128i *)(void *)(dst + l->mins_off + 2 * (size_t)i0),
			 hz);
	*sv = _mm256_cvtph_ps(hs);
}

KVC_INLINE void encode_int4(const struct kvc_codec_layout *l, const void *src,
			    kvf_dtype dt, uint8_t *dst)
{
	size_t D = l->head_dim, G = l->group_tokens, rb = l->row_bytes;

	if (l->kind == KVF_KIND_K) {
		for (size_t d = 0; d < D; d += 16) { /* a chunk of 16 dims */
			__m256 mn0 = _mm256_set1_ps(INFINITY), mn1 = mn0;
			__m256 mx0 = _mm256_set1_ps(-INFINITY), mx1 = mx0;
			__m256 s0, z0, s1, z1;

			for (size_t t = 0; t < G; t++) {
				__m256 x0 = load8(src, t * D + d, dt);
				__m256 x1 = load8(src, t * D + d + 8, dt);

				mn0 = _mm256_min_ps(mn0, x0);
				mx0 = _mm256_max_ps(mx0, x0);
				mn1 = _mm256_min_ps(mn1, x1);
				mx1 = _mm256_max_ps(mx1, x1);
			}
			int4_meta8(l, dst, (uint32_t)d, mn0, mx0, &s0, &z0);
			int4_meta8(l, dst, (uint32_t)d + 8, mn1, mx1, &s1, &z1);
			for (size_t t = 0; t < G; t++)
				store16_nib(dst + t * rb, d,
					    int4_8(load8(src, t * D + d, dt), s0,
						   z0),
					    int4_8(load8(src, t * D + d + 8, dt),
						   s1, z1));
		}
		return;
	}
	for (size_t t = 0; t < G; t++) {
		__m256 mn = _mm256_set1_ps(INFINITY);
		__m256 mx = _mm256_set1_ps(-INFINITY), sv, zv;
		uint16_t hs, hz;

		for (size_t d = 0; d < D; d += 8) {
			__m256 x = load8(src, t * D + d, dt);

			mn = _mm256_min_ps(mn, x);
			mx = _mm256_max_ps(mx, x);
		}
		kvc_int4_meta(l, hmin8(mn), hmax8(mx), &hs, &hz);
		kvc_put_scale(l, dst, (uint32_t)t, hs);
		put_f16(dst, l->mins_off, (uint32_t)t, hz);
		sv = _mm256_set1_ps(kvf_f16_to_f32(hs));
		zv = _mm256_set1_ps(kvf_f16_to_f32(hz));
		for (size_t d = 0; d < D; d += 16)
			store16_nib(dst + t * rb, d,
				    int4_8(load8(src, t * D + d, dt), sv, zv),
				    int4_8(load8(src, t * D + d + 8, dt), sv,
					   zv));
	}
}

KVC_INLINE kvf_status encode_dt(const struct kvc_codec_layout *l,
				const void *src, kvf_dtype dt, uint8_t *dst)
{
	if (!values_ok(src, (size_t)l->group_tokens * l->head_dim, dt))
		return kvc_codec_check(l, src, dt); /* for the message */
	memset(dst, 0, l->group_bytes);
	switch (l->codec) {
	case KVF_CODEC_FP8:
		encode_fp8(l, src, dt, dst);
		break;
	case KVF_CODEC_INT8:
		encode_int8(l, src, dt, dst);
		break;
	default:
		encode_int4(l, src, dt, dst);
		break;
	}
	return KVF_OK;
}

kvf_status kvc_codec_encode_avx2(const struct kvc_codec_layout *l,
				 const void *src, kvf_dtype dtype, void *dst)
{
	if (!codec_simd_ok(l->codec, l->head_dim))
		return kvc_codec_encode_scalar(l, src, dtype, dst);
	switch (dtype) {
	case KVF_DTYPE_F16:
		return encode_dt(l, src, KVF_DTYPE_F16, dst);
	case KVF_DTYPE_BF16:
		return encode_dt(l, src, KVF_DTYPE_BF16, dst);
	default:
		return encode_dt(l, src, KVF_DTYPE_F32, dst);
	}
}

/* ---- decoder ------------------------------------------------------------- */

/* store_dt - 8 f32 values as elements i.. of dst in dtype (RNE). */
KVC_INLINE void store_dt(void *dst, size_t i, kvf_dtype dt, __m256 v)
{
	uint8_t *b = dst;

	switch (dt) {
	case KVF_DTYPE_F32:
		_mm256_storeu_ps((float *)(void *)(b + 4 * i), v);
		break;
	case KVF_DTYPE_F16:
		_mm_storeu_si128((__m128i *)(b + 2 * i),
				 _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT |
							    _MM_FROUND_NO_EXC));
		break;
	default: {
		float f[8];

		_mm256_storeu_ps(f, v);
		for (int k = 0; k < 8; k++) {
			uint16_t h = kvf_f32_to_bf16(f[k]);

			memcpy(b + 2 * (i + k), &h, 2);
		}
		break;
	}
	}
}

KVC_INLINE void decode_cd(const struct kvc_codec_layout *l, const uint8_t *g,
			  uint32_t t0, uint32_t n, kvf_codec c, kvf_dtype dt,
			  void *dst)
{
	size_t D = l->head_dim;
	int k = l->kind == KVF_KIND_K;
	const __m256 hi = _mm256_set1_ps(KVC_CODEC_MAX_ABS);
	const __m256 lo = _mm256_set1_ps(-KVC_CODEC_MAX_ABS);

	for (uint32_t j = 0; j < n; j++) {
		uint32_t t = t0 + j;
		const uint8_t *row = kvc_codes_row(l, g, t);
		__m256 s = _mm256_setzero_ps(), z = _mm256_setzero_ps();

		if (c == KVF_CODEC_FP8)
			s = _mm256_set1_ps(kvc_fp8_group_mul(g, l));
		else if (!k)
			s = _mm256_set1_ps(kvc_scale_at(l, g, t));
		if (c == KVF_CODEC_INT4 && !k)
			z = _mm256_set1_ps(kvc_f16_at(g, l->mins_off, t));
		for (size_t d = 0; d < D; d += 8) {
			__m256 v;

			if (k && c != KVF_CODEC_FP8)
				s = kvc_scales8(l, g, d);
			if (k && c == KVF_CODEC_INT4)
				z = kvc_meta8(g, l->mins_off, d);
			v = _mm256_mul_ps(dec8(row, d, c), s);
			if (c == KVF_CODEC_INT4)
				v = _mm256_add_ps(z, v);
			v = _mm256_min_ps(_mm256_max_ps(v, lo), hi); /* kvc_clamp */
			store_dt(dst, (size_t)j * D + d, dt, v);
		}
	}
}

KVC_INLINE void decode_c(const struct kvc_codec_layout *l, const uint8_t *g,
			 uint32_t t0, uint32_t n, kvf_codec c, kvf_dtype dt,
			 void *dst)
{
	switch (dt) {
	case KVF_DTYPE_F32:
		decode_cd(l, g, t0, n, c, KVF_DTYPE_F32, dst);
		break;
	case KVF_DTYPE_F16:
		decode_cd(l, g, t0, n, c, KVF_DTYPE_F16, dst);
		break;
	default:
		decode_cd(l, g, t0, n, c, KVF_DTYPE_BF16, dst);
		break;
	}
}

void kvc_codec_decode_avx2(const struct kvc_codec_layout *l, const void *grp,
			   uint32_t t0, uint32_t n, kvf_dtype dtype, void *dst)
{
	assert(t0 + n <= l->group_tokens);
	if (!codec_simd_ok(l->codec, l->head_dim)) {
		kvc_codec_decode_scalar(l, grp, t0, n, dtype, dst);
		return;
	}
	switch (l->codec) {
	case KVF_CODEC_FP8:
		decode_c(l, grp, t0, n, KVF_CODEC_FP8, dtype, dst);
		break;
	case KVF_CODEC_INT8:
		decode_c(l, grp, t0, n, KVF_CODEC_INT8, dtype, dst);
		break;
	default:
		decode_c(l, grp, t0, n, KVF_CODEC_INT4, dtype, dst);
		break;
	}
}
