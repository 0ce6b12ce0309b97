/*
 * codec_ref.c - the codec tests' shared helpers (codec_ref.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codec_ref.h"

int cr_codec_variants(const struct kvc_codec_kernels *v[2])
{
	static int warned;

	v[0] = kvc_codec_kernels_scalar();
	v[1] = kvc_codec_kernels_avx2();
	if (v[1])
		return 2;
	if (!warned++)
		fprintf(stderr, "codec tests: no AVX2+FMA+F16C here: AVX2 "
				"codec kernels skipped, scalar only\n");
	return 1;
}

double cr_e4m3(uint8_t c)
{
	int e = (c >> 3) & 0xf, m = c & 7;
	double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);

	return (c & 0x80) ? -v : v;
}

/* sign, 5 exponent bits of bias 15, 10 mantissa bits; exponent 0 is
 * subnormal (m * 2^-24) */
double cr_f16(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v;

	if (e == 31)
		v = m ? NAN : INFINITY;
	else if (e)
		v = ldexp(1024 + m, e - 25);
	else
		v = ldexp(m, -24);
	return (h & 0x8000) ? -v : v;
}

static double f16_at(const void *grp, uint32_t off, uint32_t i)
{
	uint16_t h;

	memcpy(&h, (const uint8_t *)grp + off + 2 * (size_t)i, 2);
	return cr_f16(h);
}

int cr_byte_scales(const struct kvc_codec_layout *l)
{
	return l->version == KVC_LAYOUT_KBYTE && l->kind == KVF_KIND_K &&
	       (l->codec == KVF_CODEC_INT8 || l->codec == KVF_CODEC_INT4);
}

double cr_scale_of(const struct kvc_codec_layout *l, const void *grp,
		   uint32_t i)
{
	float s;

	if (l->codec == KVF_CODEC_FP8) {
		memcpy(&s, (const uint8_t *)grp + l->scales_off, 4);
		return s;
	}
	if (cr_byte_scales(l)) {
		/* one byte: bits 14..7 of an f16, the rest 0 */
		uint8_t b = ((const uint8_t *)grp)[l->scales_off + i];

		return cr_f16((uint16_t)(b << 7));
	}
	return f16_at(grp, l->scales_off, i);
}

double cr_zero_of(const struct kvc_codec_layout *l, const void *grp,
		  uint32_t i)
{
	return l->codec == KVF_CODEC_INT4 ? f16_at(grp, l->mins_off, i) : 0;
}

double cr_decode(const struct kvc_codec_layout *l, const void *grp,
		 uint32_t t, uint32_t d, double *mag)
{
	const uint8_t *row = (const uint8_t *)grp + (size_t)t * l->row_bytes;
	uint32_t i = l->kind == KVF_KIND_K ? d : t;
	double s = cr_scale_of(l, grp, i), z = cr_zero_of(l, grp, i), c;

	switch (l->codec) {
	case KVF_CODEC_FP8:
		c = cr_e4m3(row[d]);
		break;
	case KVF_CODEC_INT8:
		c = (int8_t)row[d];
		break;
	default: {
		/* chunks of 16 dims in 8 bytes, byte i = dims i | i + h << 4,
		 * h = 8, or ceil(r / 2) in a last chunk of r dims */
		uint32_t base = d / 16 * 16, r = l->head_dim - base, h, k;

		r = r < 16 ? r : 16;
		h = (r + 1) / 2;
		k = d - base;
		c = k < h ? row[base / 2 + k] & 0xf : row[base / 2 + k - h] >> 4;
		break;
	}
	}
	if (mag)
		*mag = fabs(z) + fabs(c * s);
	return z + c * s;
}
