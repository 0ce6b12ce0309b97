/*
 * codec_vec_avx2.h - reading the codes of an encoded group into AVX2
 * registers: 8 codes of a row as 8 f32 numbers, scales not applied (the
 * raw numbers of codec_attn.c's raw_row).
 *
 * Include only from files compiled with -mavx2 -mfma -mf16c; everything
 * is always inlined, so a constant codec argument folds the switch away.
 */
#ifndef KVF_COMPUTE_CODEC_VEC_AVX2_H
#define KVF_COMPUTE_CODEC_VEC_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "compute/codec.h"
#include "compute/vec_avx2.h"
#include "kvflash.h"

/*
 * dec8 - codes d .. d + 7 of row (d a multiple of 8) as f32:
 *  FP8   e4m3 / 256: the byte sign-extended to 16 bits and shifted left
 *        by 7 puts the sign in bit 15 and the exponent and mantissa in
 *        f16's fields (bit 14, a copy of the sign, is cleared), then
 *        vcvtph2ps, exact (kvc_e4m3_f16);
 *  INT8  the signed code (sign-extend, convert);
 *  INT4  0..15: the chunk's 8 bytes widened to 8 lanes, masked (dims 0..7
 *        of the chunk) or shifted (dims 8..15); the row's head_dim must
 *        be a multiple of 16 (codec_impl.h's chunks).
 */
KVC_INLINE __m256 dec8(const uint8_t *row, size_t d, kvf_codec codec)
{
	__m128i w;
	__m256i x;

	switch (codec) {
	case KVF_CODEC_FP8:
		w = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(row + d)));
		w = _mm_and_si128(_mm_slli_epi16(w, 7),
				  _mm_set1_epi16((short)0xbfff));
		return _mm256_cvtph_ps(w);
	case KVF_CODEC_INT8:
		return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
			_mm_loadl_epi64((const __m128i *)(row + d))));
	default:
		x = _mm256_cvtepu8_epi32(
			_mm_loadl_epi64((const __m128i *)(row + (d & ~(size_t)15) / 2)));
		x = d & 8 ? _mm256_srli_epi32(x, 4) :
			    _mm256_and_si256(x, _mm256_set1_epi32(0xf));
		return _mm256_cvtepi32_ps(x);
	}
}

/*
 * dec16_fp8 - FP8 codes d .. d + 15 of row as two vectors of f32 (dims d
 * .. d + 7 in *lo, the next 8 in *hi), the same numbers as two dec8: the
 * 16 bytes widen, shift and mask as one 256-bit vector, so a code costs
 * half the integer work of dec8's 128-bit steps.
 */
KVC_INLINE void dec16_fp8(const uint8_t *row, size_t d, __m256 *lo,
			  __m256 *hi)
{
	__m256i w = _mm256_cvtepi8_epi16(
		_mm_loadu_si128((const __m128i *)(row + d)));

	w = _mm256_and_si256(_mm256_slli_epi16(w, 7),
			     _mm256_set1_epi16((short)0xbfff));
	*lo = _mm256_cvtph_ps(_mm256_castsi256_si128(w));
	*hi = _mm256_cvtph_ps(_mm256_extracti128_si256(w, 1));
}

/* kvc_meta8 - f16 numbers i .. i + 7 of the region at byte off of grp
 * (scales, zero points) as f32 */
KVC_INLINE __m256 kvc_meta8(const uint8_t *grp, uint32_t off, size_t i)
{
	return _mm256_cvtph_ps(
		_mm_loadu_si128((const __m128i *)(grp + off + 2 * i)));
}

/* kvc_scales8 - scales i .. i + 7 of an INT8 or INT4 group as f32: f16
 * numbers, or bytes that are an f16's top bits (codec.h, version 2) */
KVC_INLINE __m256 kvc_scales8(const struct kvc_codec_layout *l,
			      const uint8_t *grp, size_t i)
{
	if (l->scale_bytes == 1)
		return _mm256_cvtph_ps(_mm_slli_epi16(
			_mm_cvtepu8_epi16(_mm_loadl_epi64(
				(const __m128i *)(grp + l->scales_off + i))),
			7));
	return kvc_meta8(grp, l->scales_off, i);
}

/* codec_simd_ok - the AVX2 kernels take this head_dim for this codec (8
 * dims a vector; INT4 whole chunks of 16). */
KVC_INLINE int codec_simd_ok(kvf_codec codec, uint32_t head_dim)
{
	return head_dim % (codec == KVF_CODEC_INT4 ? 16 : 8) == 0;
}

#endif /* KVF_COMPUTE_CODEC_VEC_AVX2_H */
