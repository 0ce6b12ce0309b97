/*
 * codec_ref.h - what the codec tests share: the codec kernel variants to
 * test, and a decoder of encoded groups written from the format's
 * definition (docs/compression.md) in double, apart from compute/'s own.
 */
#ifndef KVF_TEST_CODEC_REF_H
#define KVF_TEST_CODEC_REF_H

#include <stddef.h>
#include <stdint.h>

#include "compute/codec.h"

/* cr_codec_variants - scalar, then AVX2 when the CPU has it; returns the
 * number of tables in v (1 or 2). */
int cr_codec_variants(const struct kvc_codec_kernels *v[2]);

/* cr_e4m3 - the value of an E4M3 (FN) byte: sign, 4 exponent bits of
 * bias 7, 3 mantissa bits; exponent 0 is subnormal (m / 8 * 2^-6). */
double cr_e4m3(uint8_t c);

/*
 * cr_decode - element (t, d) of an encoded group, in double, from the
 * definition: FP8 e4m3(code) * scale, INT8 code * scale, INT4 zero +
 * code * scale (K: the dim's scale and zero, V: the token's).  *mag (when
 * not NULL) gets |zero| + |code * scale| (the magnitude the kernels'
 * rounding scales with: they add the two parts apart).
 */
double cr_decode(const struct kvc_codec_layout *l, const void *grp,
		 uint32_t t, uint32_t d, double *mag);

/* cr_f16 - the value of f16 bits h, from the format (not half.h). */
double cr_f16(uint16_t h);

/* cr_byte_scales - 1 when l's scales are one byte each by the format's
 * definition (layout version 2, K, INT8 or INT4; codec.h), else 0.  Read
 * from the version, not from l->scale_bytes. */
int cr_byte_scales(const struct kvc_codec_layout *l);

/* cr_scale_of - the scale (FP8: the group's; else entry i) as double: an
 * f16, or in version 2 a K scale's byte b as the f16 of bits b << 7. */
double cr_scale_of(const struct kvc_codec_layout *l, const void *grp,
		   uint32_t i);
/* cr_zero_of - INT4 zero point i as double (0 for other codecs). */
double cr_zero_of(const struct kvc_codec_layout *l, const void *grp,
		  uint32_t i);

#endif /* KVF_TEST_CODEC_REF_H */
