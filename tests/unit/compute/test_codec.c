/*
 * test_codec.c - the encoded group format (compute/codec.h): the layout
 * and its sizes, the bytes-per-token targets of issue #25, the encoders'
 * error bounds against the source values (every codec, kind and input
 * dtype), the decoders against a double decoder written from the format's
 * definition (codec_ref.c), scalar and AVX2 making the same bytes and the
 * same decoded bits, and bad input refused with nothing written.  Random
 * tests print their seed.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_ref.h"
#include "compute/codec.h"
#include "compute/half.h"
#include "kernel_ref.h"
#include "kvflash.h"
#include "testutil.h"

#define NELEM(x) (sizeof(x) / sizeof((x)[0]))

static const kvf_codec codecs[] = { KVF_CODEC_FP8, KVF_CODEC_INT8,
				    KVF_CODEC_INT4 };
static const kvf_kind kinds[] = { KVF_KIND_K, KVF_KIND_V };
static const kvf_dtype dtypes[] = { KVF_DTYPE_F16, KVF_DTYPE_BF16,
				    KVF_DTYPE_F32 };

static struct kvc_codec_layout layout(kvf_codec c, kvf_kind k, uint32_t g,
				      uint32_t d)
{
	struct kvc_codec_layout l;

	cr_assert(eq(int, kvc_codec_layout(c, k, g, d, &l), KVF_OK),
		  "layout %s %s g %u d %u: %s", kvf_codec_name(c),
		  kvf_kind_name(k), g, d, kvf_last_error());
	return l;
}

/* ---- layout ------------------------------------------------------------ */

Test(codec_layout, known_sizes)
{
	struct kvc_codec_layout l;

	/* FP8: 16 x 128 codes, one f32 scale, padded to 16 */
	l = layout(KVF_CODEC_FP8, KVF_KIND_K, 16, 128);
	cr_assert(eq(u32, l.row_bytes, 128));
	cr_assert(eq(u32, l.scales_off, 2048));
	cr_assert(eq(u32, l.n_scales, 1));
	cr_assert(eq(u32, l.group_bytes, 2064));
	/* INT8: K one f16 scale per dim, V one per token */
	l = layout(KVF_CODEC_INT8, KVF_KIND_K, 32, 128);
	cr_assert(eq(u32, l.scales_off, 4096));
	cr_assert(eq(u32, l.n_scales, 128));
	cr_assert(eq(u32, l.group_bytes, 4352));
	l = layout(KVF_CODEC_INT8, KVF_KIND_V, 32, 128);
	cr_assert(eq(u32, l.n_scales, 32));
	cr_assert(eq(u32, l.group_bytes, 4160));
	/* INT4: two codes a byte, then scales, then zero points */
	l = layout(KVF_CODEC_INT4, KVF_KIND_K, 64, 128);
	cr_assert(eq(u32, l.row_bytes, 64));
	cr_assert(eq(u32, l.scales_off, 4096));
	cr_assert(eq(u32, l.mins_off, 4096 + 256));
	cr_assert(eq(u32, l.group_bytes, 4608));
	l = layout(KVF_CODEC_INT4, KVF_KIND_V, 64, 128);
	cr_assert(eq(u32, l.mins_off, 4096 + 128));
	cr_assert(eq(u32, l.group_bytes, 4352));
	/* odd head_dim: rows of ceil(D/2) bytes, regions realigned */
	l = layout(KVF_CODEC_INT4, KVF_KIND_K, 3, 13);
	cr_assert(eq(u32, l.row_bytes, 7));
	cr_assert(eq(u32, l.scales_off, 32));
	cr_assert(eq(u32, l.mins_off, 32 + 26));
	cr_assert(eq(u32, l.group_bytes, 96));
	cr_assert(eq(sz, kvc_codec_group_bytes(KVF_CODEC_INT4, KVF_KIND_K, 3,
					       13),
		     96));
}

Test(codec_layout, every_shape_aligned_and_fitting)
{
	static const uint32_t gs[] = { 1, 2, 7, 16, 33, 64, 1000 };

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t k = 0; k < NELEM(kinds); k++)
			for (size_t gi = 0; gi < NELEM(gs); gi++)
				for (uint32_t d = 1; d <= 1024; d += d < 20 ? 1 : 77) {
					struct kvc_codec_layout l =
						layout(codecs[c], kinds[k],
						       gs[gi], d);
					uint32_t meta = l.codec == KVF_CODEC_FP8 ?
								4 :
							l.codec == KVF_CODEC_INT8 ?
								2 * l.n_scales :
								4 * l.n_scales;

					cr_assert(l.group_bytes % KVC_CODEC_ALIGN == 0);
					cr_assert(l.scales_off % KVC_CODEC_ALIGN == 0);
					cr_assert(l.scales_off >= gs[gi] * l.row_bytes);
					cr_assert(l.scales_off + meta <= l.group_bytes);
					cr_assert(l.group_bytes <
						  l.scales_off + meta + KVC_CODEC_ALIGN);
					cr_assert(eq(u32, l.n_scales,
						     l.codec == KVF_CODEC_FP8 ? 1 :
						     kinds[k] == KVF_KIND_K ? d :
									      gs[gi]));
				}
}

Test(codec_layout, bad_arguments)
{
	struct kvc_codec_layout l, before;
	struct {
		kvf_codec c;
		kvf_kind k;
		uint32_t g, d;
		const char *msg;
	} bad[] = {
		{ KVF_CODEC_NONE, KVF_KIND_K, 16, 128, "codec 0 (none)" },
		{ (kvf_codec)7, KVF_KIND_K, 16, 128, "codec 7 (unknown)" },
		{ KVF_CODEC_INT8, KVF_KIND_X, 16, 128, "kind 2 (x)" },
		{ KVF_CODEC_INT8, KVF_KIND_KT, 16, 128, "kind 3 (kt)" },
		{ KVF_CODEC_INT8, KVF_KIND_K, 0, 128, "group of 0 tokens" },
		{ KVF_CODEC_INT8, KVF_KIND_K, 65537, 128, "group of 65537" },
		{ KVF_CODEC_INT4, KVF_KIND_V, 16, 0, "head_dim 0 (1..1024)" },
		{ KVF_CODEC_FP8, KVF_KIND_V, 16, 1025, "head_dim 1025" },
	};

	memset(&l, 0x5a, sizeof(l));
	before = l;
	for (size_t i = 0; i < NELEM(bad); i++) {
		cr_assert(eq(int,
			     kvc_codec_layout(bad[i].c, bad[i].k, bad[i].g,
					      bad[i].d, &l),
			     KVF_EINVAL));
		cr_assert(strstr(kvf_last_error(), bad[i].msg) != NULL,
			  "message '%s' lacks '%s'", kvf_last_error(),
			  bad[i].msg);
		cr_assert(memcmp(&l, &before, sizeof(l)) == 0,
			  "refused layout wrote its output");
		cr_assert(eq(sz,
			     kvc_codec_group_bytes(bad[i].c, bad[i].k,
						   bad[i].g, bad[i].d),
			     0));
	}
	cr_assert(eq(u32, kvc_codec_group_tokens(KVF_CODEC_NONE, KVF_KIND_K,
						 128, 4096),
		     0));
}

Test(codec_layout, group_tokens_is_the_largest_fitting)
{
	static const size_t pages[] = { 16, 100, 4096, 8192, 65536 };
	static const uint32_t dims[] = { 1, 13, 64, 128, 1024 };

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t k = 0; k < NELEM(kinds); k++)
			for (size_t p = 0; p < NELEM(pages); p++)
				for (size_t di = 0; di < NELEM(dims); di++) {
					uint32_t g = kvc_codec_group_tokens(
						codecs[c], kinds[k], dims[di],
						pages[p]);

					if (g)
						cr_assert(kvc_codec_group_bytes(
								  codecs[c], kinds[k],
								  g, dims[di]) <=
							  pages[p]);
					cr_assert(kvc_codec_group_bytes(
							  codecs[c], kinds[k], g + 1,
							  dims[di]) > pages[p]);
				}
	/* a 4 KiB page at head_dim 128: INT8 K holds 30 tokens */
	cr_assert(eq(u32, kvc_codec_group_tokens(KVF_CODEC_INT8, KVF_KIND_K,
						 128, 4096),
		     30));
}

/*
 * Issue #25's byte targets, scales included: INT8 <= 0.53 and INT4 <=
 * 0.28 of f16 per token (K + V), at head_dim 128 with groups of 32 (INT8)
 * and 64 (INT4) tokens, and FP8 (not targeted) about a half at 16.
 */
Test(codec_layout, bytes_per_token_targets)
{
	struct {
		kvf_codec c;
		uint32_t g;
		double limit;
	} t[] = {
		{ KVF_CODEC_FP8, 16, 0.505 },
		{ KVF_CODEC_INT8, 32, 0.53 },
		{ KVF_CODEC_INT4, 64, 0.28 },
	};

	for (size_t i = 0; i < NELEM(t); i++) {
		double per_token =
			(double)(kvc_codec_group_bytes(t[i].c, KVF_KIND_K,
						       t[i].g, 128) +
				 kvc_codec_group_bytes(t[i].c, KVF_KIND_V,
						       t[i].g, 128)) /
			t[i].g;
		double ratio = per_token / (2 * 128 * 2);

		cr_assert(ratio <= t[i].limit, "%s at G %u: %.4f x f16 > %.3f",
			  kvf_codec_name(t[i].c), t[i].g, ratio, t[i].limit);
	}
}

/* ---- encode and decode ---------------------------------------------------- */

/*
 * fill_mixed - g x d values of dt into src (their exact values in x):
 * mostly uniform in [-a, a] with a per-channel offset, plus (style 1) a
 * few channels 30x larger, or (style 2) magnitudes spread over 2^-20 ..
 * 2^15 with zeros and negative zeros among them (the edges of every
 * format: f16 subnormal scales, E4M3 subnormals, clamping).
 */
static void fill_mixed(uint64_t *rng, kvf_dtype dt, void *src, double *x,
		       uint32_t g, uint32_t d, int style)
{
	for (uint32_t t = 0; t < g; t++)
		for (uint32_t j = 0; j < d; j++) {
			size_t i = (size_t)t * d + j;
			double v = kr_uniform(rng, -1, 1) + 0.3 * ((int)(j % 5) - 2);

			if (style == 1 && j % 17 == 3)
				v *= 30;
			if (style == 2) {
				uint64_t r = rng_next(rng);

				v = ldexp(kr_uniform(rng, 0.5, 1),
					  (int)(r % 36) - 20);
				v = r & 64 ? -v : v;
				if (r % 11 == 0)
					v = r & 128 ? -0.0 : 0.0;
			}
			x[i] = kr_store(src, i, dt, v);
		}
}

/* check_bound - decoded values (dec, f32) within the format's rounding
 * of the source values x. */
static void check_bound(const struct kvc_codec_layout *l, const void *grp,
			const double *x, const float *dec, const char *what)
{
	uint32_t D = l->head_dim;

	for (uint32_t t = 0; t < l->group_tokens; t++)
		for (uint32_t d = 0; d < D; d++) {
			size_t i = (size_t)t * D + d;
			uint32_t si = l->kind == KVF_KIND_K ? d : t;
			double s = cr_scale_of(l, grp, si);
			double z = cr_zero_of(l, grp, si), bound;
			double ref = cr_decode(l, grp, t, d, NULL);

			/* the decoder clamps to what an encoder takes */
			ref = ref > KVC_CODEC_MAX_ABS ? KVC_CODEC_MAX_ABS :
			      ref < -KVC_CODEC_MAX_ABS ? -KVC_CODEC_MAX_ABS :
							 ref;

			switch (l->codec) {
			case KVF_CODEC_FP8:
				bound = fabs(x[i]) / 16 + s * 0x1p-10;
				break;
			case KVF_CODEC_INT8:
				bound = s * 0.5;
				break;
			default:
				bound = s * 0.5;
				break;
			}
			bound = bound * (1 + 1e-5) +
				1e-6 * (fabs(x[i]) + fabs(z) + 16 * s);
			cr_assert(fabs(dec[i] - x[i]) <= bound,
				  "%s: token %u dim %u: %.9g decodes as %.9g "
				  "(bound %.3g, scale %.3g, zero %.3g)",
				  what, t, d, x[i], dec[i], bound, s, z);
			/* the decoder is the format's f32 arithmetic: one
			 * rounding of the exact decoded value at most,
			 * clamped */
			cr_assert(fabs(dec[i] - ref) <=
					  (fabs(ref) + fabs(z)) * 0x1p-23,
				  "%s: token %u dim %u: decoder %.9g, format "
				  "%.9g",
				  what, t, d, dec[i], ref);
		}
}

/* bounds_case - encode g x d values of dt (style of fill_mixed) with
 * every variant, decode, check the bounds and the codes' ranges. */
static void bounds_case(uint64_t *rng, kvf_codec c, kvf_kind k, kvf_dtype dt,
			uint32_t g, uint32_t d, int style)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	struct kvc_codec_layout l = layout(c, k, g, d);
	size_t n = (size_t)g * d;
	void *src = kr_xmalloc(n * 4);
	double *x = kr_xmalloc(n * sizeof(double));
	float *dec = kr_xmalloc(n * sizeof(float));
	uint8_t *grp = kr_xmalloc(l.group_bytes);
	char what[128];

	fill_mixed(rng, dt, src, x, g, d, style);
	for (int vi = 0; vi < nv; vi++) {
		snprintf(what, sizeof(what), "%s %s %s %s g %u d %u style %d",
			 v[vi]->name, kvf_codec_name(c), kvf_kind_name(k),
			 kr_dtype_name(dt), g, d, style);
		cr_assert(eq(int, v[vi]->encode(&l, src, dt, grp), KVF_OK),
			  "%s: %s", what, kvf_last_error());
		v[vi]->decode(&l, grp, 0, g, KVF_DTYPE_F32, dec);
		check_bound(&l, grp, x, dec, what);
		for (uint32_t i = 0; i < g * l.row_bytes; i++) {
			uint8_t b = grp[i];

			cr_assert(c != KVF_CODEC_FP8 || (b & 0x7f) != 0x7f,
				  "%s: NaN code", what);
			cr_assert(c != KVF_CODEC_INT8 || b != 0x80,
				  "%s: code -128", what);
			cr_assert(c != KVF_CODEC_INT4 || d % 2 == 0 ||
					  i % l.row_bytes != l.row_bytes - 1 ||
					  b >> 4 == 0,
				  "%s: odd row's pad nibble", what);
		}
	}
	free(src);
	free(x);
	free(dec);
	free(grp);
}

Test(codec_encode, error_bounds_every_codec)
{
	uint64_t rng = rng_seed("codec_encode.error_bounds_every_codec");
	static const uint32_t shapes[][2] = { { 1, 8 },   { 5, 12 },
					      { 16, 13 }, { 16, 64 },
					      { 64, 128 }, { 33, 7 } };

	for (size_t s = 0; s < NELEM(shapes); s++)
		for (size_t c = 0; c < NELEM(codecs); c++)
			for (size_t k = 0; k < NELEM(kinds); k++)
				for (size_t dt = 0; dt < NELEM(dtypes); dt++)
					for (int style = 0; style < 3; style++)
						bounds_case(&rng, codecs[c],
							    kinds[k], dtypes[dt],
							    shapes[s][0],
							    shapes[s][1], style);
}

/* An all-zero group decodes as zeros (scale 0, codes 0) in every codec;
 * a constant one exactly in INT4 (the zero point, scale 0). */
Test(codec_encode, zeros_and_constants)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	uint16_t src[16 * 64];
	float dec[16 * 64];
	uint8_t grp[8192];

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t k = 0; k < NELEM(kinds); k++)
			for (int vi = 0; vi < nv; vi++)
				for (int konst = 0; konst < 2; konst++) {
					struct kvc_codec_layout l =
						layout(codecs[c], kinds[k], 16, 64);
					float want = konst ? -3.25f : 0.0f;

					if (konst && codecs[c] != KVF_CODEC_INT4)
						continue;

					for (size_t i = 0; i < NELEM(src); i++)
						src[i] = kvf_f32_to_f16(want);
					cr_assert(eq(int,
						     v[vi]->encode(&l, src,
								   KVF_DTYPE_F16, grp),
						     KVF_OK));
					v[vi]->decode(&l, grp, 0, 16, KVF_DTYPE_F32,
						      dec);
					for (size_t i = 0; i < NELEM(dec); i++)
						cr_assert(dec[i] == want,
							  "%s %s %s: %g decodes as %g",
							  v[vi]->name,
							  kvf_codec_name(codecs[c]),
							  kvf_kind_name(kinds[k]),
							  want, dec[i]);
				}
}

/* The largest magnitudes taken: +-65504 in every codec and dtype. */
Test(codec_encode, range_edges_accepted)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	float src[8 * 16];
	double x[8 * 16];
	float dec[8 * 16];
	uint8_t grp[1024];

	for (size_t i = 0; i < NELEM(src); i++) {
		src[i] = i % 3 == 0 ? 65504.0f : i % 3 == 1 ? -65504.0f : 1.0f;
		x[i] = src[i];
	}
	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t k = 0; k < NELEM(kinds); k++)
			for (int vi = 0; vi < nv; vi++) {
				struct kvc_codec_layout l =
					layout(codecs[c], kinds[k], 8, 16);

				cr_assert(eq(int,
					     v[vi]->encode(&l, src, KVF_DTYPE_F32,
							   grp),
					     KVF_OK),
					  "%s", kvf_last_error());
				v[vi]->decode(&l, grp, 0, 8, KVF_DTYPE_F32, dec);
				check_bound(&l, grp, x, dec, v[vi]->name);
			}
}

/* NaN, infinities and magnitudes past 65504 are refused, dst untouched. */
Test(codec_encode, bad_values_refused)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	struct {
		kvf_dtype dt;
		float x;
		const char *msg;
	} bad[] = {
		{ KVF_DTYPE_F32, NAN, "holds nan" },
		{ KVF_DTYPE_F32, INFINITY, "holds inf" },
		{ KVF_DTYPE_F32, -INFINITY, "holds -inf" },
		{ KVF_DTYPE_F32, 65505.0f, "holds 65505" },
		{ KVF_DTYPE_BF16, 1e5f, "holds 99840" },
		{ KVF_DTYPE_BF16, -NAN, "holds -nan" },
		{ KVF_DTYPE_F16, INFINITY, "holds inf" },
	};
	uint8_t src[16 * 24 * 4], grp[4096], want[4096];

	for (size_t b = 0; b < NELEM(bad); b++)
		for (size_t c = 0; c < NELEM(codecs); c++)
			for (int vi = 0; vi < nv; vi++) {
				struct kvc_codec_layout l =
					layout(codecs[c], KVF_KIND_K, 16, 24);
				char msg[64];

				for (size_t i = 0; i < 16 * 24; i++)
					kr_store(src, i, bad[b].dt,
						 (double)((int)i % 7 - 3));
				kr_store(src, 11 * 24 + 17, bad[b].dt, bad[b].x);
				memset(grp, 0xa5, sizeof(grp));
				memcpy(want, grp, sizeof(grp));
				cr_assert(eq(int,
					     v[vi]->encode(&l, src, bad[b].dt, grp),
					     KVF_ERANGE));
				snprintf(msg, sizeof(msg), "token 11 dim 17 %s",
					 bad[b].msg);
				cr_assert(strstr(kvf_last_error(), msg) != NULL,
					  "%s: '%s' lacks '%s'", v[vi]->name,
					  kvf_last_error(), msg);
				cr_assert(memcmp(grp, want, sizeof(grp)) == 0,
					  "%s %s: refused encode wrote dst",
					  v[vi]->name, kvf_codec_name(codecs[c]));
			}
}

/* agree_case - scalar and AVX2 encodings of one group byte for byte, and
 * their decodings of an inner token range in every dtype bit for bit. */
static void agree_case(uint64_t *rng, const struct kvc_codec_kernels *v[2],
		       kvf_codec c, kvf_kind k, kvf_dtype dt, uint32_t g,
		       uint32_t d, int style)
{
	struct kvc_codec_layout l = layout(c, k, g, d);
	size_t n = (size_t)g * d;
	void *src = kr_xmalloc(n * 4);
	double *x = kr_xmalloc(n * sizeof(double));
	uint8_t *a = kr_xmalloc(l.group_bytes), *b = kr_xmalloc(l.group_bytes);
	uint8_t *da = kr_xmalloc(n * 4 + 1), *db = kr_xmalloc(n * 4 + 1);
	uint32_t t0 = g > 2 ? 1 : 0, nt = g - t0 - (g > 3 ? 1 : 0);

	fill_mixed(rng, dt, src, x, g, d, style);
	memset(a, 0x11, l.group_bytes);
	memset(b, 0x22, l.group_bytes);
	cr_assert(eq(int, v[0]->encode(&l, src, dt, a), KVF_OK));
	cr_assert(eq(int, v[1]->encode(&l, src, dt, b), KVF_OK));
	for (uint32_t i = 0; i < l.group_bytes; i++)
		cr_assert(a[i] == b[i],
			  "%s %s %s g %u d %u style %d: byte %u: scalar %02x, "
			  "avx2 %02x",
			  kvf_codec_name(c), kvf_kind_name(k), kr_dtype_name(dt),
			  g, d, style, i, a[i], b[i]);
	for (size_t o = 0; o < NELEM(dtypes); o++) {
		size_t bytes = (size_t)nt * d * kr_elt_bytes(dtypes[o]);

		memset(da, 0x33, n * 4 + 1);
		memset(db, 0x44, n * 4 + 1);
		v[0]->decode(&l, a, t0, nt, dtypes[o], da);
		v[1]->decode(&l, a, t0, nt, dtypes[o], db);
		cr_assert(memcmp(da, db, bytes) == 0,
			  "%s %s g %u d %u: decode to %s differs",
			  kvf_codec_name(c), kvf_kind_name(k), g, d,
			  kr_dtype_name(dtypes[o]));
		cr_assert(da[bytes] == 0x33 && db[bytes] == 0x44,
			  "decode wrote past its %u tokens", nt);
	}
	free(src);
	free(x);
	free(a);
	free(b);
	free(da);
	free(db);
}

/*
 * Scalar and AVX2 make the same bytes from the same values, and decode
 * them to the same bits in every output dtype, for any token range.
 */
Test(codec_encode, variants_agree_bit_for_bit)
{
	uint64_t rng = rng_seed("codec_encode.variants_agree_bit_for_bit");
	static const uint32_t shapes[][2] = {
		{ 1, 8 }, { 16, 64 }, { 64, 128 }, { 3, 1024 }, { 5, 12 }
	};
	const struct kvc_codec_kernels *v[2];

	if (cr_codec_variants(v) < 2)
		cr_skip_test("no AVX2 on this CPU");
	for (size_t s = 0; s < NELEM(shapes); s++)
		for (size_t c = 0; c < NELEM(codecs); c++)
			for (size_t k = 0; k < NELEM(kinds); k++)
				for (size_t dt = 0; dt < NELEM(dtypes); dt++)
					for (int style = 0; style < 3; style++)
						agree_case(&rng, v, codecs[c],
							   kinds[k], dtypes[dt],
							   shapes[s][0],
							   shapes[s][1], style);
}

/* Decoding to f16 and bf16 is the f32 value rounded to nearest even. */
Test(codec_encode, decode_narrowing)
{
	uint64_t rng = rng_seed("codec_encode.decode_narrowing");
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	uint16_t src[16 * 32], h[16 * 32], bf[16 * 32];
	double x[16 * 32];
	float f[16 * 32];
	uint8_t grp[4096];

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (int vi = 0; vi < nv; vi++) {
			struct kvc_codec_layout l =
				layout(codecs[c], KVF_KIND_V, 16, 32);

			fill_mixed(&rng, KVF_DTYPE_F16, src, x, 16, 32, 1);
			cr_assert(eq(int,
				     v[vi]->encode(&l, src, KVF_DTYPE_F16, grp),
				     KVF_OK));
			v[vi]->decode(&l, grp, 0, 16, KVF_DTYPE_F32, f);
			v[vi]->decode(&l, grp, 0, 16, KVF_DTYPE_F16, h);
			v[vi]->decode(&l, grp, 0, 16, KVF_DTYPE_BF16, bf);
			for (size_t i = 0; i < NELEM(f); i++) {
				cr_assert(eq(u16, h[i], kvf_f32_to_f16(f[i])));
				cr_assert(eq(u16, bf[i], kvf_f32_to_bf16(f[i])));
			}
		}
}

/* The dispatched table is one of the two, and scalar under KVF_SIMD. */
Test(codec_encode, dispatch)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	const struct kvc_codec_kernels *k = kvc_codec_kernels();

	cr_assert(k == v[0] || (nv == 2 && k == v[1]));
	cr_assert(eq(str, (char *)v[0]->name, "scalar"));
	if (nv == 2)
		cr_assert(eq(str, (char *)v[1]->name, "avx2"));
}
