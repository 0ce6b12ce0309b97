/*
 * codec_impl.h - what the codec variants share inside compute/: the
 * arithmetic of the formats in one place (so scalar and AVX2 encoders make
 * the same bytes), the accessors of an encoded group, and the variants'
 * function declarations for the tables in dispatch.c.
 *
 * The per-group metadata (scales, zero points) is always computed here, by
 * scalar code, from statistics (max |x|, min, max) that both variants
 * compute exactly; only the per-element work is vectorized.
 *
 * Only compute/codec*.c and dispatch.c include this file; the engine uses
 * codec.h.
 */
#ifndef KVF_COMPUTE_CODEC_IMPL_H
#define KVF_COMPUTE_CODEC_IMPL_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compute/codec.h"
#include "compute/half.h"

/* The largest E4M3 code magnitude (448 = 1.75 * 2^8); 0x7f is NaN. */
#define KVC_E4M3_MAX 448.0f
#define KVC_E4M3_MAX_CODE 0x7e
/* E4M3 magnitudes below 2^-6 are subnormal: multiples of 2^-9. */
#define KVC_E4M3_MIN_NORMAL_BITS 0x3c800000u

/* ---- f16 with directed rounding (the scales and zero points) ---------- */

/* f16_up - the smallest f16 >= x, for finite x of magnitude <= 65504. */
static inline uint16_t kvc_f16_up(float x)
{
	uint16_t h = kvf_f32_to_f16(x);

	if (kvf_f16_to_f32(h) < x)
		h = (h & 0x8000u) ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
	if (h == 0x8000u) /* -0: keep +0, one encoding of zero */
		h = 0;
	return h;
}

/* f16_down - the largest f16 <= x, for finite x of magnitude <= 65504. */
static inline uint16_t kvc_f16_down(float x)
{
	uint16_t h = kvc_f16_up(-x);

	return h ? (uint16_t)(h ^ 0x8000u) : 0;
}

/* ---- the metadata of a group, from exact statistics -------------------- */

/* fp8_scale - the f32 scale of an FP8 group of largest magnitude amax:
 * amax / 448, or 0 (all codes 0) when that is not a normal float. */
static inline float kvc_fp8_scale(float amax)
{
	float s = amax / KVC_E4M3_MAX;

	return s >= FLT_MIN ? s : 0.0f;
}

/* int8_scale - the f16 scale of a symmetric INT8 channel or token of
 * largest magnitude amax: amax / 127 rounded up, so no code passes 127. */
static inline uint16_t kvc_int8_scale(float amax)
{
	return kvc_f16_up(amax / 127.0f);
}

/* scale_grid - the f16 scale h (>= 0, rounded up) as layout l stores it:
 * a one-byte scale keeps the f16's exponent and top 3 mantissa bits, so
 * h rounds up once more (no code passes its range either way).  The
 * largest scale a codec makes (INT4's 131008 / 15) stays far from f16's
 * infinity. */
static inline uint16_t kvc_scale_grid(const struct kvc_codec_layout *l,
				      uint16_t h)
{
	if (l->scale_bytes == 1 && (h & 0x7fu))
		h = (uint16_t)((h | 0x7fu) + 1u);
	return h;
}

/* int4_meta - the f16 zero point (min rounded down, so every x - zero >=
 * 0) and scale ((max - zero) / 15 rounded up, on l's grid) of an INT4
 * channel or token with values in [mn, mx]. */
static inline void kvc_int4_meta(const struct kvc_codec_layout *l, float mn,
				 float mx, uint16_t *scale, uint16_t *zero)
{
	*zero = kvc_f16_down(mn);
	*scale = kvc_scale_grid(
		l, kvc_f16_up((mx - kvf_f16_to_f32(*zero)) / 15.0f));
}

/* ---- per element -------------------------------------------------------- */

/* e4m3_code - the E4M3 code of y (|y| <= about 464; larger clamps to
 * 448), rounded to nearest even: below 2^-6 a multiple of 2^-9 (its
 * count is the code), else the f32 mantissa rounded to 3 bits, whose
 * exponent field then lines up with E4M3's (bias 7 against 127). */
static inline uint8_t kvc_e4m3_code(float y)
{
	uint32_t u = kvf_f32_bits(y);
	uint32_t sign = (u >> 24) & 0x80u;
	uint32_t a = u & 0x7fffffffu, code;

	if (a < KVC_E4M3_MIN_NORMAL_BITS) {
		code = (uint32_t)rintf(kvf_bits_f32(a) * 512.0f);
	} else {
		a += 0x7ffffu + ((a >> 20) & 1u);
		code = (a >> 20) - (120u << 3);
	}
	if (code > KVC_E4M3_MAX_CODE)
		code = KVC_E4M3_MAX_CODE;
	return (uint8_t)(sign | code);
}

/* e4m3_f16 - the f16 bits whose value is e4m3(c) / 256: E4M3's exponent
 * and mantissa fields, moved into f16's (bias 15 against 7, the 2^8 of
 * the difference folded into the group scale), subnormals included. */
static inline uint16_t kvc_e4m3_f16(uint8_t c)
{
	return (uint16_t)(((c & 0x80u) << 8) | ((c & 0x7fu) << 7));
}

/* int8_code - round(x / s) in [-127, 127]; 0 when s is 0. */
static inline int8_t kvc_int8_code(float x, float s)
{
	float r;

	if (s == 0.0f)
		return 0;
	r = rintf(x / s);
	r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
	return (int8_t)r;
}

/* int4_code - round((x - z) / s) in [0, 15]; 0 when s is 0. */
static inline uint8_t kvc_int4_code(float x, float s, float z)
{
	float r;

	if (s == 0.0f)
		return 0;
	r = rintf((x - z) / s);
	r = r > 15.0f ? 15.0f : r < 0.0f ? 0.0f : r;
	return (uint8_t)r;
}

/* ---- an encoded group ---------------------------------------------------- */

/* codes_row - the codes of token t. */
static inline const uint8_t *kvc_codes_row(const struct kvc_codec_layout *l,
					   const void *grp, uint32_t t)
{
	return (const uint8_t *)grp + (size_t)t * l->row_bytes;
}

/* f16_at - f16 number i of the region at byte off of grp, as f32. */
static inline float kvc_f16_at(const void *grp, uint32_t off, uint32_t i)
{
	uint16_t h;

	memcpy(&h, (const uint8_t *)grp + off + 2 * (size_t)i, 2);
	return kvf_f16_to_f32(h);
}

/* put_scale - store scale i (f16 bits on l's grid, kvc_scale_grid) of an
 * INT8 or INT4 group. */
static inline void kvc_put_scale(const struct kvc_codec_layout *l,
				 uint8_t *grp, uint32_t i, uint16_t h)
{
	if (l->scale_bytes == 1)
		grp[l->scales_off + i] = (uint8_t)(h >> 7);
	else
		memcpy(grp + l->scales_off + 2 * (size_t)i, &h, 2);
}

/* scale_at - scale i of an INT8 or INT4 group, as f32. */
static inline float kvc_scale_at(const struct kvc_codec_layout *l,
				 const void *grp, uint32_t i)
{
	if (l->scale_bytes == 1)
		return kvf_f16_to_f32(
			(uint16_t)(((const uint8_t *)grp)[l->scales_off + i]
				   << 7));
	return kvc_f16_at(grp, l->scales_off, i);
}

/* fp8_group_mul - an FP8 group's scale times 256 (e4m3_f16's factor). */
static inline float kvc_fp8_group_mul(const void *grp,
				      const struct kvc_codec_layout *l)
{
	float s;

	memcpy(&s, (const uint8_t *)grp + l->scales_off, sizeof(s));
	return s * 256.0f;
}

/*
 * INT4 rows are chunks of 16 dims in 8 bytes: byte i of a chunk holds dim
 * i in its low nibble and dim i + 8 in its high one, so 8 bytes widened to
 * 8 lanes give dims 0..7 by a mask and dims 8..15 by a shift.  A last
 * chunk of r < 16 dims (head_dim not a multiple of 16) follows the same
 * rule with h = ceil(r / 2) bytes: byte i holds dims i and i + h (the
 * high nibble of byte h - 1 is 0 when r is odd).  A row is ceil(D/2)
 * bytes.
 */
static inline uint32_t kvc_int4_at(uint32_t d, uint32_t D, uint32_t *shift)
{
	uint32_t base = d & ~15u, r = D - base < 16 ? D - base : 16;
	uint32_t h = (r + 1) / 2, i = d - base;

	*shift = i < h ? 0 : 4;
	return base / 2 + (i < h ? i : i - h);
}

/* int4_nibble - code d of an INT4 row of D dims. */
static inline uint32_t kvc_int4_nibble(const uint8_t *row, uint32_t d,
				       uint32_t D)
{
	uint32_t sh, b = kvc_int4_at(d, D, &sh);

	return (row[b] >> sh) & 0xfu;
}

/* int4_put - set code d (0..15) of a zeroed INT4 row of D dims. */
static inline void kvc_int4_put(uint8_t *row, uint32_t d, uint32_t D,
				uint32_t code)
{
	uint32_t sh, b = kvc_int4_at(d, D, &sh);

	row[b] |= (uint8_t)(code << sh);
}

/*
 * codec_check - KVF_OK when every element of src ([G][D] of dtype) is
 * finite with |x| <= KVC_CODEC_MAX_ABS, else KVF_ERANGE naming the first
 * that is not.  The AVX2 encoder calls it only when its own check failed,
 * for the message.
 */
kvf_status kvc_codec_check(const struct kvc_codec_layout *l, const void *src,
			   kvf_dtype dtype);

/* The scalar variant (codec.c, codec_attn.c). */
kvc_codec_encode_fn kvc_codec_encode_scalar;
kvc_codec_decode_fn kvc_codec_decode_scalar;
kvc_codec_scores_fn kvc_codec_scores_scalar;
kvc_codec_fold_fn kvc_codec_fold_scalar;
kvc_codec_in_range_fn kvc_codec_in_range_scalar;

/* The AVX2 variant (codec_avx2.c, codec_attn_avx2.c): only built, and
 * only referenced, when KVC_HAVE_AVX2 is 1 (dispatch.c). */
kvc_codec_encode_fn kvc_codec_encode_avx2;
kvc_codec_decode_fn kvc_codec_decode_avx2;
kvc_codec_scores_fn kvc_codec_scores_avx2;
kvc_codec_fold_fn kvc_codec_fold_avx2;
kvc_codec_in_range_fn kvc_codec_in_range_avx2;

#endif /* KVF_COMPUTE_CODEC_IMPL_H */
