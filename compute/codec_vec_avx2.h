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

#include "compute/vec_avx2.h"
#include "kvflash.h"

/*
 * dec8 - codes d .. d + 7 of row (d a multiple of 8) as f32:
 *  FP8   e4m3 / 256: sign and the 7 other bits moved into f16's fields
 *        (kvc_e4m3_f16), then vcvtph2ps, exact;
 *  INT8  the signed code (sign-extend, convert);
 *  INT4  0..15: the 4 bytes of the 8 nibbles split into low and high
 *        nibbles, interleaved back into dim order, widened.
 */
KVC_INLINE __m256 dec8(const uint8_t *row, size_t d, kvf_codec codec)
{
	switch (codec) {
	case KVF_CODEC_FP8: {
		__m128i w = _mm_cvtepu8_epi16(
			_mm_loadl_epi64((const __m128i *)(row + d)));
		__m128i bits = _mm_or_si128(
			_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)),
				       8),
			_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7f)),
				       7));

		return _mm256_cvtph_ps(bits);
	}
	case KVF_CODEC_INT8:
		return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
			_mm_loadl_epi64((const __m128i *)(row + d))));
	default: {
		const __m128i m = _mm_set1_epi8(0x0f);
		int32_t u;
		__m128i x, lo, hi;

		memcpy(&u, row + d / 2, 4);
		x = _mm_cvtsi32_si128(u);
		lo = _mm_and_si128(x, m);
		hi = _mm_and_si128(_mm_srli_epi16(x, 4), m);
		return _mm256_cvtepi32_ps(
			_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
	}
	}
}

#endif /* KVF_COMPUTE_CODEC_VEC_AVX2_H */
