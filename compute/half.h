/*
 * half.h - conversions between f32 and the 16-bit storage types f16
 * (IEEE 754 binary16) and bf16 (the upper half of an f32).
 *
 * Narrowing rounds to nearest even and makes NaN quiet; widening is exact
 * (bf16 -> f32 is a plain shift, so a signaling NaN stays signaling).
 * Infinities and signed zeros are kept, f16 subnormals are exact.  Also
 * the element access every kernel family shares (kvc_elt_bytes, kvc_elt):
 * one element of an array of any kvf_dtype.
 */
#ifndef KVF_COMPUTE_HALF_H
#define KVF_COMPUTE_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvflash.h"

static inline uint32_t kvf_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float kvf_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline float kvf_bf16_to_f32(uint16_t h)
{
	return kvf_bits_f32((uint32_t)h << 16);
}

static inline uint16_t kvf_f32_to_bf16(float f)
{
	uint32_t u = kvf_f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

static inline float kvf_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;

	if (exp == 0x1f) /* inf, or NaN made quiet as F16C's vcvtph2ps does */
		return kvf_bits_f32(sign | 0x7f800000u | (man << 13) |
				    (man ? 0x400000u : 0));
	if (exp == 0) { /* zero or subnormal: man * 2^-24 */
		float v = (float)man * (1.0f / 16777216.0f);

		return sign ? -v : v;
	}
	return kvf_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t kvf_f32_to_f16(float f)
{
	uint32_t u = kvf_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t abs = u & 0x7fffffffu;

	if (abs > 0x7f800000u) /* NaN */
		return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
	if (abs >= 0x477ff000u) /* rounds to >= 65520: infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (abs < 0x38800000u) { /* below 2^-14: subnormal or zero */
		/* add 0.5 so the f32 adder rounds to nearest even at 2^-24 */
		float v = kvf_bits_f32(abs) + 0.5f;

		return (uint16_t)(sign | (kvf_f32_bits(v) - 0x3f000000u));
	}
	abs += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((abs >> 13) & 1u);
	return (uint16_t)(sign | (abs >> 13));
}

/* kvc_elt_bytes - bytes per element of dtype. */
static inline size_t kvc_elt_bytes(kvf_dtype dtype)
{
	return dtype == KVF_DTYPE_F32 ? 4 : 2;
}

/* kvc_elt - element i of the array p of dtype, widened exactly to f32. */
static inline float kvc_elt(const void *p, size_t i, kvf_dtype dtype)
{
	const unsigned char *b = (const unsigned char *)p;
	uint16_t h;
	float f;

	if (dtype == KVF_DTYPE_F32) {
		memcpy(&f, b + i * 4, sizeof(f));
		return f;
	}
	memcpy(&h, b + i * 2, sizeof(h));
	return dtype == KVF_DTYPE_F16 ? kvf_f16_to_f32(h) : kvf_bf16_to_f32(h);
}

#endif /* KVF_COMPUTE_HALF_H */
