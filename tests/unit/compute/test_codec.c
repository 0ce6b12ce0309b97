/*
 * test_codec.c - the encoded group format (compute/codec.h): the layout
 * and its sizes, the bytes-per-token targets of issue #25, the encoders'
 * error bounds against the source values (every codec, kind and input
 * dtype), the decoders against a double decoder written from the format's
 * definition (codec_ref.c), scalar and AVX2 making the same bytes and the
 * same decoded bits, and bad input refused with nothing written; all of it
 * in both layout versions (KVC_LAYOUT_F16 and KVC_LAYOUT_KBYTE, whose K
 * scales of INT8 and INT4 are one byte, rounded up from the f16 scale of
 * version 1).  Random tests print their seed.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/status.h"
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
static const uint32_t versions[] = { KVC_LAYOUT_F16, KVC_LAYOUT_KBYTE };

static struct kvc_codec_layout layout(kvf_codec c, kvf_kind k, uint32_t g,
				      uint32_t d, uint32_t ver)
{
	struct kvc_codec_layout l;

	cr_assert(eq(int, kvc_codec_layout(c, k, g, d, ver, &l), KVF_OK),
		  "layout %s %s g %u d %u v%u: %s", kvf_codec_name(c),
		  kvf_kind_name(k), g, d, ver, kvf_last_error());
	cr_assert(eq(u32, l.version, ver));
	return l;
}

/* scale_bytes_of - the bytes of one scale by codec.h's table: FP8 one
 * f32, version 2's K scales of INT8 and INT4 one byte, else an f16. */
static uint32_t scale_bytes_of(kvf_codec c, kvf_kind k, uint32_t ver)
{
	if (c == KVF_CODEC_FP8)
		return 4;
	return ver == KVC_LAYOUT_KBYTE && k == KVF_KIND_K ? 1 : 2;
}

/* ---- layout ------------------------------------------------------------ */

Test(codec_layout, known_sizes)
{
	struct kvc_codec_layout l;

	/* FP8: 16 x 128 codes, one f32 scale, padded to 16 */
	l = layout(KVF_CODEC_FP8, KVF_KIND_K, 16, 128, KVC_LAYOUT_F16);
	cr_assert(eq(u32, l.row_bytes, 128));
	cr_assert(eq(u32, l.scales_off, 2048));
	cr_assert(eq(u32, l.n_scales, 1));
	cr_assert(eq(u32, l.scale_bytes, 4));
	cr_assert(eq(u32, l.group_bytes, 2064));
	/* INT8: K one f16 scale per dim, V one per token */
	l = layout(KVF_CODEC_INT8, KVF_KIND_K, 32, 128, KVC_LAYOUT_F16);
	cr_assert(eq(u32, l.scales_off, 4096));
	cr_assert(eq(u32, l.n_scales, 128));
	cr_assert(eq(u32, l.scale_bytes, 2));
	cr_assert(eq(u32, l.group_bytes, 4352));
	l = layout(KVF_CODEC_INT8, KVF_KIND_V, 32, 128, KVC_LAYOUT_F16);
	cr_assert(eq(u32, l.n_scales, 32));
	cr_assert(eq(u32, l.group_bytes, 4160));
	/* INT4: two codes a byte, then scales, then zero points */
	l = layout(KVF_CODEC_INT4, KVF_KIND_K, 64, 128, KVC_LAYOUT_F16);
	cr_assert(eq(u32, l.row_bytes, 64));
	cr_assert(eq(u32, l.scales_off, 4096));
	cr_assert(eq(u32, l.mins_off, 4096 + 256));
	cr_assert(eq(u32, l.group_bytes, 4608));
	l = layout(KVF_CODEC_INT4, KVF_KIND_V, 64, 128, KVC_LAYOUT_F16);
	cr_assert(eq(u32, l.mins_off, 4096 + 128));
	cr_assert(eq(u32, l.group_bytes, 4352));
	/* odd head_dim: rows of ceil(D/2) bytes, regions realigned */
	l = layout(KVF_CODEC_INT4, KVF_KIND_K, 3, 13, KVC_LAYOUT_F16);
	cr_assert(eq(u32, l.row_bytes, 7));
	cr_assert(eq(u32, l.scales_off, 32));
	cr_assert(eq(u32, l.mins_off, 32 + 26));
	cr_assert(eq(u32, l.group_bytes, 96));
	cr_assert(eq(sz,
		     kvc_codec_group_bytes(KVF_CODEC_INT4, KVF_KIND_K, 3, 13,
					   KVC_LAYOUT_F16),
		     96));
}

/*
 * Version 2 at the same shapes: K's INT8 and INT4 scales one byte each
 * (an INT4 K group's f16 zero points from the next even byte), V and FP8
 * as in version 1.
 */
Test(codec_layout, known_sizes_kbyte)
{
	const uint32_t v2 = KVC_LAYOUT_KBYTE;
	struct kvc_codec_layout l;

	/* FP8: as version 1, both kinds */
	l = layout(KVF_CODEC_FP8, KVF_KIND_K, 16, 128, v2);
	cr_assert(eq(u32, l.scales_off, 2048));
	cr_assert(eq(u32, l.scale_bytes, 4));
	cr_assert(eq(u32, l.n_scales, 1));
	cr_assert(eq(u32, l.mins_off, 0));
	cr_assert(eq(u32, l.group_bytes, 2064));
	l = layout(KVF_CODEC_FP8, KVF_KIND_V, 16, 128, v2);
	cr_assert(eq(u32, l.scale_bytes, 4));
	cr_assert(eq(u32, l.group_bytes, 2064));
	/* INT8 K: 128 byte scales after 32 x 128 codes */
	l = layout(KVF_CODEC_INT8, KVF_KIND_K, 32, 128, v2);
	cr_assert(eq(u32, l.row_bytes, 128));
	cr_assert(eq(u32, l.scales_off, 4096));
	cr_assert(eq(u32, l.scale_bytes, 1));
	cr_assert(eq(u32, l.n_scales, 128));
	cr_assert(eq(u32, l.mins_off, 0));
	cr_assert(eq(u32, l.group_bytes, 4096 + 128));
	/* INT8 V: f16 scales, as version 1 */
	l = layout(KVF_CODEC_INT8, KVF_KIND_V, 32, 128, v2);
	cr_assert(eq(u32, l.scale_bytes, 2));
	cr_assert(eq(u32, l.n_scales, 32));
	cr_assert(eq(u32, l.group_bytes, 4160));
	/* INT4 K: 128 byte scales, then 128 f16 zero points */
	l = layout(KVF_CODEC_INT4, KVF_KIND_K, 64, 128, v2);
	cr_assert(eq(u32, l.row_bytes, 64));
	cr_assert(eq(u32, l.scales_off, 4096));
	cr_assert(eq(u32, l.scale_bytes, 1));
	cr_assert(eq(u32, l.mins_off, 4096 + 128));
	cr_assert(eq(u32, l.group_bytes, 4096 + 128 + 256));
	/* INT4 V: as version 1 */
	l = layout(KVF_CODEC_INT4, KVF_KIND_V, 64, 128, v2);
	cr_assert(eq(u32, l.scale_bytes, 2));
	cr_assert(eq(u32, l.mins_off, 4096 + 128));
	cr_assert(eq(u32, l.group_bytes, 4352));
	/* odd head_dim: 13 byte scales end on an odd byte (45), the zero
	 * points start on the next even one (46) and end at 72 -> 80 */
	l = layout(KVF_CODEC_INT4, KVF_KIND_K, 3, 13, v2);
	cr_assert(eq(u32, l.row_bytes, 7));
	cr_assert(eq(u32, l.scales_off, 32));
	cr_assert(eq(u32, l.scale_bytes, 1));
	cr_assert(eq(u32, l.mins_off, 46));
	cr_assert(eq(u32, l.group_bytes, 80));
	cr_assert(
		eq(sz,
		   kvc_codec_group_bytes(KVF_CODEC_INT4, KVF_KIND_K, 3, 13, v2),
		   80));
	/* INT8 K, 3 x 13: codes 39 -> scales at 48, 13 bytes -> 64 (version
	 * 1: 26 bytes -> 80) */
	l = layout(KVF_CODEC_INT8, KVF_KIND_K, 3, 13, v2);
	cr_assert(eq(u32, l.scales_off, 48));
	cr_assert(eq(u32, l.group_bytes, 64));
	cr_assert(eq(sz,
		     kvc_codec_group_bytes(KVF_CODEC_INT8, KVF_KIND_K, 3, 13,
					   KVC_LAYOUT_F16),
		     80));
	/* INT4 K, 1 x 2: an even number of byte scales, the zero points
	 * follow at once (16 + 2), end at 22 -> 32 */
	l = layout(KVF_CODEC_INT4, KVF_KIND_K, 1, 2, v2);
	cr_assert(eq(u32, l.scales_off, 16));
	cr_assert(eq(u32, l.mins_off, 18));
	cr_assert(eq(u32, l.group_bytes, 32));
}

/* shape_case - the layout of one shape in version ver against codec.h's
 * table, and against version 1's layout of the same shape. */
static void shape_case(kvf_codec c, kvf_kind k, uint32_t g, uint32_t d,
		       uint32_t ver)
{
	struct kvc_codec_layout l = layout(c, k, g, d, ver);
	struct kvc_codec_layout l1 = layout(c, k, g, d, KVC_LAYOUT_F16);
	uint32_t sb = scale_bytes_of(c, k, ver);
	/* the scales, then (INT4) f16 zero points from an even byte */
	uint32_t sc = sb * l.n_scales, sc2 = (sc + 1) & ~1u;
	uint32_t meta = c == KVF_CODEC_FP8  ? 4 :
			c == KVF_CODEC_INT8 ? sc :
					      sc2 + 2 * l.n_scales;

	cr_assert(eq(u32, l.scale_bytes, sb), "v%u %s %s g %u d %u", ver,
		  kvf_codec_name(c), kvf_kind_name(k), g, d);
	cr_assert(l.group_bytes % KVC_CODEC_ALIGN == 0);
	cr_assert(l.scales_off % KVC_CODEC_ALIGN == 0);
	cr_assert(l.scales_off >= g * l.row_bytes);
	cr_assert(l.scales_off + meta <= l.group_bytes);
	cr_assert(l.group_bytes < l.scales_off + meta + KVC_CODEC_ALIGN);
	cr_assert(eq(u32, l.n_scales,
		     c == KVF_CODEC_FP8 ? 1 :
		     k == KVF_KIND_K    ? d :
					  g));
	if (c == KVF_CODEC_INT4) {
		cr_assert(eq(u32, l.mins_off, l.scales_off + sc2),
			  "v%u %s g %u d %u", ver, kvf_kind_name(k), g, d);
		cr_assert(l.mins_off % 2 == 0);
	} else {
		cr_assert(eq(u32, l.mins_off, 0));
	}
	/* only K's INT8 and INT4 scales shrink; the rest is version 1's */
	cr_assert(eq(u32, l.row_bytes, l1.row_bytes));
	cr_assert(eq(u32, l.scales_off, l1.scales_off));
	if (sb == 1)
		cr_assert(l.group_bytes <= l1.group_bytes);
	else
		cr_assert(eq(u32, l.group_bytes, l1.group_bytes));
	cr_assert(
		eq(sz, kvc_codec_group_bytes(c, k, g, d, ver), l.group_bytes));
}

Test(codec_layout, every_shape_aligned_and_fitting)
{
	static const uint32_t gs[] = { 1, 2, 7, 16, 33, 64, 1000 };

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t k = 0; k < NELEM(kinds); k++)
			for (size_t gi = 0; gi < NELEM(gs); gi++)
				for (uint32_t d = 1; d <= 1024;
				     d += d < 20 ? 1 : 77)
					for (size_t v = 0; v < NELEM(versions);
					     v++)
						shape_case(codecs[c], kinds[k],
							   gs[gi], d,
							   versions[v]);
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
		for (size_t v = 0; v < NELEM(versions); v++) {
			cr_assert(eq(int,
				     kvc_codec_layout(bad[i].c, bad[i].k,
						      bad[i].g, bad[i].d,
						      versions[v], &l),
				     KVF_EINVAL));
			cr_assert(strstr(kvf_last_error(), bad[i].msg) != NULL,
				  "message '%s' lacks '%s'", kvf_last_error(),
				  bad[i].msg);
			cr_assert(memcmp(&l, &before, sizeof(l)) == 0,
				  "refused layout wrote its output");
			cr_assert(eq(sz,
				     kvc_codec_group_bytes(bad[i].c, bad[i].k,
							   bad[i].g, bad[i].d,
							   versions[v]),
				     0));
		}
	}
	for (size_t v = 0; v < NELEM(versions); v++)
		cr_assert(eq(u32,
			     kvc_codec_group_tokens(KVF_CODEC_NONE, KVF_KIND_K,
						    128, versions[v], 4096),
			     0));
}

/*
 * A layout version other than 1 and 2 is refused with arguments that are
 * otherwise good, in every codec and kind: KVF_EINVAL, a message naming
 * it, *out unchanged; group_bytes and group_tokens 0.
 */
Test(codec_layout, unknown_version_refused)
{
	static const uint32_t bad[] = { 0, 3, 0xffffffffu };
	struct kvc_codec_layout l, before;

	memset(&l, 0x5a, sizeof(l));
	before = l;
	for (size_t b = 0; b < NELEM(bad); b++)
		for (size_t c = 0; c < NELEM(codecs); c++)
			for (size_t k = 0; k < NELEM(kinds); k++) {
				char want[64];

				kvf_clear_error();
				cr_assert(eq(int,
					     kvc_codec_layout(codecs[c],
							      kinds[k], 16, 128,
							      bad[b], &l),
					     KVF_EINVAL),
					  "version %u accepted", bad[b]);
				cr_assert(strstr(kvf_last_error(),
						 "layout version") != NULL,
					  "message '%s' lacks 'layout version'",
					  kvf_last_error());
				snprintf(want, sizeof(want),
					 "layout version %u", bad[b]);
				cr_assert(strstr(kvf_last_error(), want) !=
						  NULL,
					  "message '%s' lacks '%s'",
					  kvf_last_error(), want);
				cr_assert(memcmp(&l, &before, sizeof(l)) == 0,
					  "refused layout wrote its output");
				cr_assert(eq(sz,
					     kvc_codec_group_bytes(codecs[c],
								   kinds[k], 16,
								   128, bad[b]),
					     0));
				cr_assert(
					eq(u32,
					   kvc_codec_group_tokens(codecs[c],
								  kinds[k], 128,
								  bad[b], 4096),
					   0));
			}
	/* the same arguments in version 1 and 2 are taken */
	for (size_t v = 0; v < NELEM(versions); v++)
		cr_assert(eq(int,
			     kvc_codec_layout(KVF_CODEC_INT4, KVF_KIND_K, 16,
					      128, versions[v], &l),
			     KVF_OK));
}

/* tokens_case - group_tokens of one shape and page is the largest g
 * whose group fits. */
static void tokens_case(kvf_codec c, kvf_kind k, uint32_t d, size_t page,
			uint32_t ver)
{
	uint32_t g = kvc_codec_group_tokens(c, k, d, ver, page);

	if (g)
		cr_assert(kvc_codec_group_bytes(c, k, g, d, ver) <= page);
	cr_assert(kvc_codec_group_bytes(c, k, g + 1, d, ver) > page,
		  "v%u %s %s d %u page %zu: g %u", ver, kvf_codec_name(c),
		  kvf_kind_name(k), d, page, g);
}

Test(codec_layout, group_tokens_is_the_largest_fitting)
{
	static const size_t pages[] = { 16, 100, 4096, 8192, 65536 };
	static const uint32_t dims[] = { 1, 13, 64, 128, 1024 };

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t k = 0; k < NELEM(kinds); k++)
			for (size_t p = 0; p < NELEM(pages); p++)
				for (size_t di = 0; di < NELEM(dims); di++)
					for (size_t v = 0; v < NELEM(versions);
					     v++)
						tokens_case(codecs[c], kinds[k],
							    dims[di], pages[p],
							    versions[v]);
	/* a 4 KiB page at head_dim 128: INT8 K holds 30 tokens */
	cr_assert(eq(u32,
		     kvc_codec_group_tokens(KVF_CODEC_INT8, KVF_KIND_K, 128,
					    KVC_LAYOUT_F16, 4096),
		     30));
}

/*
 * What version 2 is for: a 4 KiB page at head_dim 128 holds 31 INT8 K
 * tokens (31 * 128 codes + 128 byte scales = 4096; version 1: 30) and 58
 * INT4 K ones (58 * 64 codes = 3712, + 128 byte scales = 3840, + 256 bytes
 * of zero points = 4096; version 1: 56).  V and FP8 are unchanged: INT8 V
 * 31 (31 * 130 = 4030 -> 4032), INT4 V 60 (60 * 68 = 4080), FP8 31 (31 *
 * 128 + 16).
 */
Test(codec_layout, group_tokens_kbyte_pinned)
{
	struct {
		kvf_codec c;
		kvf_kind k;
		uint32_t v1, v2;
	} t[] = {
		{ KVF_CODEC_INT8, KVF_KIND_K, 30, 31 },
		{ KVF_CODEC_INT8, KVF_KIND_V, 31, 31 },
		{ KVF_CODEC_INT4, KVF_KIND_K, 56, 58 },
		{ KVF_CODEC_INT4, KVF_KIND_V, 60, 60 },
		{ KVF_CODEC_FP8, KVF_KIND_K, 31, 31 },
		{ KVF_CODEC_FP8, KVF_KIND_V, 31, 31 },
	};
	static const uint32_t dims[] = { 1, 7, 13, 64, 96, 128, 256, 1024 };
	static const size_t pages[] = { 64, 4096, 16384 };

	for (size_t i = 0; i < NELEM(t); i++) {
		uint32_t g1 = kvc_codec_group_tokens(t[i].c, t[i].k, 128,
						     KVC_LAYOUT_F16, 4096);
		uint32_t g2 = kvc_codec_group_tokens(t[i].c, t[i].k, 128,
						     KVC_LAYOUT_KBYTE, 4096);

		cr_assert(eq(u32, g1, t[i].v1), "%s %s v1",
			  kvf_codec_name(t[i].c), kvf_kind_name(t[i].k));
		cr_assert(eq(u32, g2, t[i].v2), "%s %s v2",
			  kvf_codec_name(t[i].c), kvf_kind_name(t[i].k));
	}
	/* INT8 K and INT4 K fill the page exactly in version 2 */
	cr_assert(eq(sz,
		     kvc_codec_group_bytes(KVF_CODEC_INT8, KVF_KIND_K, 31, 128,
					   KVC_LAYOUT_KBYTE),
		     4096));
	cr_assert(eq(sz,
		     kvc_codec_group_bytes(KVF_CODEC_INT4, KVF_KIND_K, 58, 128,
					   KVC_LAYOUT_KBYTE),
		     4096));
	/* V and FP8 hold as many tokens in version 2 as in 1 at any shape,
	 * K's INT8 and INT4 at least as many */
	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t k = 0; k < NELEM(kinds); k++)
			for (size_t di = 0; di < NELEM(dims); di++)
				for (size_t p = 0; p < NELEM(pages); p++) {
					uint32_t g1 = kvc_codec_group_tokens(
						codecs[c], kinds[k], dims[di],
						KVC_LAYOUT_F16, pages[p]);
					uint32_t g2 = kvc_codec_group_tokens(
						codecs[c], kinds[k], dims[di],
						KVC_LAYOUT_KBYTE, pages[p]);
					const char *cn = kvf_codec_name(codecs[c]);

					if (codecs[c] == KVF_CODEC_FP8 ||
					    kinds[k] == KVF_KIND_V)
						cr_assert(eq(u32, g2, g1));
					else
						cr_assert(g2 >= g1,
							  "%s d %u page %zu: "
							  "%u < %u",
							  cn, dims[di], pages[p],
							  g2, g1);
				}
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

	for (size_t v = 0; v < NELEM(versions); v++)
		for (size_t i = 0; i < NELEM(t); i++) {
			double per_token =
				(double)(kvc_codec_group_bytes(t[i].c,
							       KVF_KIND_K,
							       t[i].g, 128,
							       versions[v]) +
					 kvc_codec_group_bytes(t[i].c,
							       KVF_KIND_V,
							       t[i].g, 128,
							       versions[v])) /
				t[i].g;
			double ratio = per_token / (2 * 128 * 2);

			cr_assert(ratio > 0 && ratio <= t[i].limit,
				  "v%u %s at G %u: %.4f x f16 > %.3f",
				  versions[v], kvf_codec_name(t[i].c), t[i].g,
				  ratio, t[i].limit);
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
 * every variant in both layout versions, decode, check the bounds and the
 * codes' ranges. */
static void bounds_case(uint64_t *rng, kvf_codec c, kvf_kind k, kvf_dtype dt,
			uint32_t g, uint32_t d, int style)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	size_t n = (size_t)g * d;
	void *src = kr_xmalloc(n * 4);
	double *x = kr_xmalloc(n * sizeof(double));
	float *dec = kr_xmalloc(n * sizeof(float));
	char what[128];

	fill_mixed(rng, dt, src, x, g, d, style);
	for (size_t ver = 0; ver < NELEM(versions); ver++) {
		struct kvc_codec_layout l = layout(c, k, g, d, versions[ver]);
		uint8_t *grp = kr_xmalloc(l.group_bytes);

		for (int vi = 0; vi < nv; vi++) {
			snprintf(what, sizeof(what),
				 "%s v%u %s %s %s g %u d %u style %d",
				 v[vi]->name, versions[ver], kvf_codec_name(c),
				 kvf_kind_name(k), kr_dtype_name(dt), g, d,
				 style);
			cr_assert(eq(int, v[vi]->encode(&l, src, dt, grp),
				     KVF_OK),
				  "%s: %s", what, kvf_last_error());
			v[vi]->decode(&l, grp, 0, g, KVF_DTYPE_F32, dec);
			check_bound(&l, grp, x, dec, what);
			for (uint32_t i = 0; i < g * l.row_bytes; i++) {
				uint8_t b = grp[i];

				cr_assert(c != KVF_CODEC_FP8 ||
						  (b & 0x7f) != 0x7f,
					  "%s: NaN code", what);
				cr_assert(c != KVF_CODEC_INT8 || b != 0x80,
					  "%s: code -128", what);
				cr_assert(c != KVF_CODEC_INT4 || d % 2 == 0 ||
						  i % l.row_bytes !=
							  l.row_bytes - 1 ||
						  b >> 4 == 0,
					  "%s: odd row's pad nibble", what);
			}
		}
		free(grp);
	}
	free(src);
	free(x);
	free(dec);
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

/* const_case - a group of 16 x 64 f16 values, all want, decodes as want
 * (kk, c, k in layout version ver). */
static void const_case(const struct kvc_codec_kernels *kk, kvf_codec c,
		       kvf_kind k, uint32_t ver, float want)
{
	struct kvc_codec_layout l = layout(c, k, 16, 64, ver);
	uint16_t src[16 * 64];
	float dec[16 * 64];
	uint8_t grp[8192];

	for (size_t i = 0; i < NELEM(src); i++)
		src[i] = kvf_f32_to_f16(want);
	cr_assert(eq(int, kk->encode(&l, src, KVF_DTYPE_F16, grp), KVF_OK));
	kk->decode(&l, grp, 0, 16, KVF_DTYPE_F32, dec);
	for (size_t i = 0; i < NELEM(dec); i++)
		cr_assert(dec[i] == want, "%s v%u %s %s: %g decodes as %g",
			  kk->name, ver, kvf_codec_name(c), kvf_kind_name(k),
			  want, dec[i]);
}

/* An all-zero group decodes as zeros (scale 0, codes 0) in every codec;
 * a constant one exactly in INT4 (the zero point, scale 0). */
Test(codec_encode, zeros_and_constants)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t k = 0; k < NELEM(kinds); k++)
			for (int vi = 0; vi < nv; vi++)
				for (size_t ver = 0; ver < NELEM(versions);
				     ver++) {
					const_case(v[vi], codecs[c], kinds[k],
						   versions[ver], 0.0f);
					if (codecs[c] == KVF_CODEC_INT4)
						const_case(v[vi], codecs[c],
							   kinds[k],
							   versions[ver],
							   -3.25f);
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
			for (int vi = 0; vi < nv; vi++)
				for (size_t ver = 0; ver < NELEM(versions);
				     ver++) {
					struct kvc_codec_layout l =
						layout(codecs[c], kinds[k], 8,
						       16, versions[ver]);

					cr_assert(eq(int,
						     v[vi]->encode(&l, src,
								   KVF_DTYPE_F32,
								   grp),
						     KVF_OK),
						  "%s", kvf_last_error());
					v[vi]->decode(&l, grp, 0, 8,
						      KVF_DTYPE_F32, dec);
					check_bound(&l, grp, x, dec,
						    v[vi]->name);
				}
}

/* refuse_case - a K group of 16 x 24 values of dt holding x at token 11
 * dim 17 is refused (kk, c, layout version ver) with msg, dst untouched. */
static void refuse_case(const struct kvc_codec_kernels *kk, kvf_codec c,
			uint32_t ver, kvf_dtype dt, float bad, const char *msg)
{
	struct kvc_codec_layout l = layout(c, KVF_KIND_K, 16, 24, ver);
	uint8_t src[16 * 24 * 4], grp[4096], want[4096];
	char full[64];

	for (size_t i = 0; i < 16 * 24; i++)
		kr_store(src, i, dt, (double)((int)i % 7 - 3));
	kr_store(src, 11 * 24 + 17, dt, bad);
	memset(grp, 0xa5, sizeof(grp));
	memcpy(want, grp, sizeof(grp));
	cr_assert(eq(int, kk->encode(&l, src, dt, grp), KVF_ERANGE));
	snprintf(full, sizeof(full), "token 11 dim 17 %s", msg);
	cr_assert(strstr(kvf_last_error(), full) != NULL, "%s: '%s' lacks '%s'",
		  kk->name, kvf_last_error(), full);
	cr_assert(memcmp(grp, want, sizeof(grp)) == 0,
		  "%s v%u %s: refused encode wrote dst", kk->name, ver,
		  kvf_codec_name(c));
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

	for (size_t b = 0; b < NELEM(bad); b++)
		for (size_t c = 0; c < NELEM(codecs); c++)
			for (int vi = 0; vi < nv; vi++)
				for (size_t ver = 0; ver < NELEM(versions);
				     ver++)
					refuse_case(v[vi], codecs[c],
						    versions[ver], bad[b].dt,
						    bad[b].x, bad[b].msg);
}

/* put_raw - element i of the array p of dtype dt gets the bits given (the
 * low 16 for f16 and bf16), so NaN payloads and edges are exact. */
static void put_raw(void *p, size_t i, kvf_dtype dt, uint32_t bits)
{
	if (dt == KVF_DTYPE_F32) {
		memcpy((char *)p + 4 * i, &bits, 4);
	} else {
		uint16_t h = (uint16_t)bits;

		memcpy((char *)p + 2 * i, &h, 2);
	}
}

/* raw_ok - the rule in_range checks, from the element's value */
static int raw_ok(kvf_dtype dt, uint32_t bits)
{
	float x;

	if (dt == KVF_DTYPE_F32)
		memcpy(&x, &bits, 4);
	else if (dt == KVF_DTYPE_BF16)
		x = kvf_bf16_to_f32((uint16_t)bits);
	else
		x = kvf_f16_to_f32((uint16_t)bits);
	return fabsf(x) <= KVC_CODEC_MAX_ABS; /* false for NaN */
}

/*
 * in_range, the check an append on a codec store makes before it changes
 * anything: every variant says what the rule says, for arrays of every
 * length from 1 to 70 (whole vectors and the ends past them) with one
 * value at each position drawn from the edges of each dtype (the largest
 * taken, the smallest refused, infinities, NaNs, -0, subnormals).
 */
Test(codec_encode, in_range_is_the_rule)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	static const uint32_t f16_edges[] = { 0x7bff, 0xfbff, 0x7c00, 0xfc00,
					      0x7e00, 0xfd01, 0x8000, 0x0001,
					      0x3c00 };
	static const uint32_t bf16_edges[] = { 0x477f, 0xc77f, 0x4780, 0xc780,
					       0x7f80, 0xff80, 0x7fc0, 0xffc1,
					       0x8000, 0x0001, 0x3f80 };
	static const uint32_t f32_edges[] = { 0x477fe000, 0xc77fe000,
					      0x477fe001, 0xc77fe001,
					      0x7f800000, 0xff800000,
					      0x7fc00000, 0xffc00001,
					      0x80000000, 0x00000001,
					      0x3f800000 };
	struct {
		kvf_dtype dt;
		const uint32_t *e;
		size_t n;
	} cases[] = {
		{ KVF_DTYPE_F16, f16_edges, NELEM(f16_edges) },
		{ KVF_DTYPE_BF16, bf16_edges, NELEM(bf16_edges) },
		{ KVF_DTYPE_F32, f32_edges, NELEM(f32_edges) },
	};
	uint32_t one_f16 = 0x3c00, one_bf16 = 0x3f80, one_f32 = 0x3f800000;

	for (size_t c = 0; c < NELEM(cases); c++) {
		kvf_dtype dt = cases[c].dt;
		uint32_t one = dt == KVF_DTYPE_F16 ? one_f16 :
			       dt == KVF_DTYPE_BF16 ? one_bf16 : one_f32;

		for (size_t n = 1; n <= 70; n++) {
			void *a = kr_xmalloc(n * 4);

			for (size_t i = 0; i < n; i++)
				put_raw(a, i, dt, one);
			for (int vi = 0; vi < nv; vi++)
				cr_assert(eq(int, v[vi]->in_range(a, n, dt), 1),
					  "%s: %s n %zu all 1.0", v[vi]->name,
					  kr_dtype_name(dt), n);
			for (size_t at = 0; at < n; at++)
				for (size_t k = 0; k < cases[c].n; k++) {
					int want = raw_ok(dt, cases[c].e[k]);

					put_raw(a, at, dt, cases[c].e[k]);
					for (int vi = 0; vi < nv; vi++)
						cr_assert(eq(int,
							     v[vi]->in_range(a, n, dt),
							     want),
							  "%s: %s n %zu: %#x at %zu",
							  v[vi]->name,
							  kr_dtype_name(dt), n,
							  cases[c].e[k], at);
					put_raw(a, at, dt, one);
				}
			free(a);
		}
	}
}

/* agree_case - scalar and AVX2 encodings of one group byte for byte, and
 * their decodings of an inner token range in every dtype bit for bit, in
 * both layout versions. */
static void agree_case(uint64_t *rng, const struct kvc_codec_kernels *v[2],
		       kvf_codec c, kvf_kind k, kvf_dtype dt, uint32_t g,
		       uint32_t d, int style)
{
	size_t n = (size_t)g * d;
	void *src = kr_xmalloc(n * 4);
	double *x = kr_xmalloc(n * sizeof(double));
	uint8_t *da = kr_xmalloc(n * 4 + 1), *db = kr_xmalloc(n * 4 + 1);
	uint32_t t0 = g > 2 ? 1 : 0, nt = g - t0 - (g > 3 ? 1 : 0);

	fill_mixed(rng, dt, src, x, g, d, style);
	for (size_t vv = 0; vv < NELEM(versions); vv++) {
		uint32_t ver = versions[vv];
		struct kvc_codec_layout l = layout(c, k, g, d, ver);
		uint8_t *a = kr_xmalloc(l.group_bytes);
		uint8_t *b = kr_xmalloc(l.group_bytes);

		memset(a, 0x11, l.group_bytes);
		memset(b, 0x22, l.group_bytes);
		cr_assert(eq(int, v[0]->encode(&l, src, dt, a), KVF_OK));
		cr_assert(eq(int, v[1]->encode(&l, src, dt, b), KVF_OK));
		for (uint32_t i = 0; i < l.group_bytes; i++)
			cr_assert(a[i] == b[i],
				  "v%u %s %s %s g %u d %u style %d: byte %u: "
				  "scalar %02x, avx2 %02x",
				  ver, kvf_codec_name(c), kvf_kind_name(k),
				  kr_dtype_name(dt), g, d, style, i, a[i],
				  b[i]);
		for (size_t o = 0; o < NELEM(dtypes); o++) {
			size_t bytes = (size_t)nt * d * kr_elt_bytes(dtypes[o]);

			memset(da, 0x33, n * 4 + 1);
			memset(db, 0x44, n * 4 + 1);
			v[0]->decode(&l, a, t0, nt, dtypes[o], da);
			v[1]->decode(&l, a, t0, nt, dtypes[o], db);
			cr_assert(memcmp(da, db, bytes) == 0,
				  "v%u %s %s g %u d %u: decode to %s differs",
				  ver, kvf_codec_name(c), kvf_kind_name(k), g,
				  d, kr_dtype_name(dtypes[o]));
			cr_assert(da[bytes] == 0x33 && db[bytes] == 0x44,
				  "decode wrote past its %u tokens", nt);
		}
		free(a);
		free(b);
	}
	free(src);
	free(x);
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

/* narrow_case - decoding a 16 x 32 group (kk, c, k, layout version ver)
 * to f16 and bf16 gives the f32 decoding rounded to nearest even. */
static void narrow_case(uint64_t *rng, const struct kvc_codec_kernels *kk,
			kvf_codec c, kvf_kind k, uint32_t ver)
{
	struct kvc_codec_layout l = layout(c, k, 16, 32, ver);
	uint16_t src[16 * 32], h[16 * 32], bf[16 * 32];
	double x[16 * 32];
	float f[16 * 32];
	uint8_t grp[4096];

	fill_mixed(rng, KVF_DTYPE_F16, src, x, 16, 32, 1);
	cr_assert(eq(int, kk->encode(&l, src, KVF_DTYPE_F16, grp), KVF_OK));
	kk->decode(&l, grp, 0, 16, KVF_DTYPE_F32, f);
	kk->decode(&l, grp, 0, 16, KVF_DTYPE_F16, h);
	kk->decode(&l, grp, 0, 16, KVF_DTYPE_BF16, bf);
	for (size_t i = 0; i < NELEM(f); i++) {
		cr_assert(eq(u16, h[i], kvf_f32_to_f16(f[i])));
		cr_assert(eq(u16, bf[i], kvf_f32_to_bf16(f[i])));
	}
}

/* Decoding to f16 and bf16 is the f32 value rounded to nearest even. */
Test(codec_encode, decode_narrowing)
{
	uint64_t rng = rng_seed("codec_encode.decode_narrowing");
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t k = 0; k < NELEM(kinds); k++)
			for (int vi = 0; vi < nv; vi++)
				for (size_t ver = 0; ver < NELEM(versions);
				     ver++)
					narrow_case(&rng, v[vi], codecs[c],
						    kinds[k], versions[ver]);
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

/* ---- version 2's byte scales ------------------------------------------ */

/* f16_bits_at - f16 number i of the region at off of grp, as bits. */
static uint16_t f16_bits_at(const uint8_t *grp, uint32_t off, uint32_t i)
{
	uint16_t h;

	memcpy(&h, grp + off + 2 * (size_t)i, 2);
	return h;
}

/*
 * Known byte scales: a K group whose every channel holds lo and hi (two
 * tokens, 16 dims, so the AVX2 encoder runs its own code).  Version 1
 * stores the f16 scale h1 (amax / 127 or (max - zero) / 15 rounded up),
 * version 2 the byte of h1 rounded up to a multiple of 128 (the f16 of
 * bits byte << 7): 516 -> 576 at 65504, 1.0 kept (already on the grid),
 * 1.0088 -> 1.125 (11.5% more), 1.999 -> 2.0 (a carry into the
 * exponent), the smallest f16 scale 2^-24 -> 2^-17 (the smallest byte
 * scale), 0 kept; the zero points of INT4 are version 1's f16.
 */
Test(codec_kbyte, known_scales)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	struct {
		kvf_codec c;
		float lo, hi;
		uint16_t h1; /* version 1's f16 scale */
		uint8_t b2;  /* version 2's byte */
		double s2;   /* its value */
		uint16_t z;  /* INT4: the f16 zero point */
	} t[] = {
		{ KVF_CODEC_INT8, -65504.0f, 65504.0f, 0x6008, 0xc1, 576.0, 0 },
		{ KVF_CODEC_INT8, 0.0f, 127.0f, 0x3c00, 0x78, 1.0, 0 },
		{ KVF_CODEC_INT8, 0.0f, 128.0f, 0x3c09, 0x79, 1.125, 0 },
		{ KVF_CODEC_INT8, 0.0f, 127.0f * 2047.0f / 1024.0f, 0x3fff,
		  0x80, 2.0, 0 },
		{ KVF_CODEC_INT8, 0.0f, 127.0f * 0x1p-24f, 0x0001, 0x01,
		  0x1p-17, 0 },
		{ KVF_CODEC_INT8, -0x1p-30f, 0x1p-40f, 0x0001, 0x01, 0x1p-17,
		  0 },
		{ KVF_CODEC_INT8, 0.0f, 0.0f, 0x0000, 0x00, 0.0, 0 },
		{ KVF_CODEC_INT4, -65504.0f, 65504.0f, 0x7044, 0xe1, 9216.0,
		  0xfbff },
		{ KVF_CODEC_INT4, -1.0f, 1.0f, 0x3045, 0x61, 0.140625, 0xbc00 },
		{ KVF_CODEC_INT4, 0.0f, 15.0f, 0x3c00, 0x78, 1.0, 0x0000 },
		{ KVF_CODEC_INT4, 65472.0f, 65504.0f, 0x4045, 0x81, 2.25,
		  0x7bfe },
		{ KVF_CODEC_INT4, 1.0f, 1.0f, 0x0000, 0x00, 0.0, 0x3c00 },
	};
	float src[2 * 16];
	uint8_t g1[256], g2[256];

	for (size_t i = 0; i < NELEM(t); i++)
		for (int vi = 0; vi < nv; vi++) {
			struct kvc_codec_layout l1 = layout(t[i].c, KVF_KIND_K,
							    2, 16,
							    KVC_LAYOUT_F16);
			struct kvc_codec_layout l2 = layout(t[i].c, KVF_KIND_K,
							    2, 16,
							    KVC_LAYOUT_KBYTE);

			for (int d = 0; d < 16; d++) {
				src[d] = d % 2 ? t[i].lo : t[i].hi;
				src[16 + d] = d % 2 ? t[i].hi : t[i].lo;
			}
			cr_assert(eq(int,
				     v[vi]->encode(&l1, src, KVF_DTYPE_F32, g1),
				     KVF_OK));
			cr_assert(eq(int,
				     v[vi]->encode(&l2, src, KVF_DTYPE_F32, g2),
				     KVF_OK));
			for (uint32_t d = 0; d < 16; d++) {
				cr_assert(eq(u16,
					     f16_bits_at(g1, l1.scales_off, d),
					     t[i].h1),
					  "%s %s [%g, %g] dim %u: v1 scale",
					  v[vi]->name, kvf_codec_name(t[i].c),
					  (double)t[i].lo, (double)t[i].hi, d);
				cr_assert(eq(u8, g2[l2.scales_off + d],
					     t[i].b2),
					  "%s %s [%g, %g] dim %u: v2 byte",
					  v[vi]->name, kvf_codec_name(t[i].c),
					  (double)t[i].lo, (double)t[i].hi, d);
				cr_assert(cr_scale_of(&l2, g2, d) == t[i].s2);
				if (t[i].c != KVF_CODEC_INT4)
					continue;
				cr_assert(eq(u16,
					     f16_bits_at(g1, l1.mins_off, d),
					     t[i].z));
				cr_assert(eq(u16,
					     f16_bits_at(g2, l2.mins_off, d),
					     t[i].z));
			}
		}
}

/* kb_value - value t of a K channel of profile p (chan: random bits drawn
 * once for the channel), made to reach the edges of the byte scales: 65504
 * and the f16 and f32 bottoms, scales on and just above the byte grid,
 * carries, wide and narrow ranges. */
#define KB_PROFILES 13
static double kb_value(uint64_t *rng, uint64_t chan, uint32_t p, uint32_t t)
{
	double sign = rng_next(rng) & 1 ? -1.0 : 1.0;

	switch (p) {
	case 0: /* both ends of the range */
		return t % 2 ? -65504.0 : 65504.0;
	case 1: /* a narrow range at the top */
		return 65504.0 - 32.0 * (double)rng_below(rng, 3);
	case 2: /* one huge value, the rest small */
		return t == 0 ? -65504.0 : kr_uniform(rng, -1, 1);
	case 3: /* f16 subnormals */
		return sign * ldexp((double)rng_below(rng, 8), -24);
	case 4: /* the smallest f16, else zeros of either sign */
		return t == 0 ? 0x1p-24 : t % 2 ? -0.0 : 0.0;
	case 5: /* below f16: zero in f16, tiny in bf16 and f32 */
		return sign * ldexp(kr_uniform(rng, 1, 2), -100);
	case 6: /* an f32 subnormal among zeros */
		return t == 0 ? sign * 1e-40 : 0.0;
	case 7: /* INT8 scale exactly 1: on both grids */
		return t == 0 ? 127.0 : kr_uniform(rng, -127, 127);
	case 8: /* INT8 scale 128 / 127 -> f16 0x3c09, off the byte grid */
		return t == 0 ? 128.0 : kr_uniform(rng, -128, 128);
	case 9: /* a scale near the top of its binade (the byte carries) */
		return kr_uniform(rng, -1, 1) * 127 * 1.999;
	case 10: /* an INT4 range whose max - zero rounds in f32 */
		return t == 0 ? -15.0 :
		       t == 1 ? 0x1p-24 :
				kr_uniform(rng, -15, 0);
	case 11: /* one random magnitude a channel, with an offset */
		return ldexp(kr_uniform(rng, -1, 1) + 0.5,
			     (int)(chan % 42) - 26);
	default: /* magnitudes spread over 2^-26 .. 2^15 */
		return sign * ldexp(kr_uniform(rng, 0.5, 1),
				    (int)(rng_next(rng) % 42) - 26);
	}
}

/*
 * kb_case - a K group of g x d values of dt (channel j of profile (j +
 * shift) % KB_PROFILES) encoded in both versions by kk: every
 * version-2 scale is version 1's rounded up to the byte grid, so never
 * below the exact scale: INT8 127 * scale >= max |x|; INT4 zero <= min and
 * zero + 15 * scale >= max (up to the f32 rounding of max - zero, which
 * the encoder computes in f32, version 1 alike: see the comment below);
 * and the decoded values are within check_bound's bound of the stored
 * scale.
 */
static void kb_case(uint64_t *rng, const struct kvc_codec_kernels *kk,
		    kvf_codec c, kvf_dtype dt, uint32_t g, uint32_t d,
		    uint32_t shift)
{
	struct kvc_codec_layout l1 =
		layout(c, KVF_KIND_K, g, d, KVC_LAYOUT_F16);
	struct kvc_codec_layout l2 =
		layout(c, KVF_KIND_K, g, d, KVC_LAYOUT_KBYTE);
	size_t n = (size_t)g * d;
	void *src = kr_xmalloc(n * 4);
	double *x = kr_xmalloc(n * sizeof(double));
	float *dec = kr_xmalloc(n * sizeof(float));
	uint8_t *g1 = kr_xmalloc(l1.group_bytes);
	uint8_t *g2 = kr_xmalloc(l2.group_bytes);
	char what[128];

	snprintf(what, sizeof(what), "%s v2 %s k %s g %u d %u shift %u",
		 kk->name, kvf_codec_name(c), kr_dtype_name(dt), g, d, shift);
	for (uint32_t j = 0; j < d; j++) {
		uint32_t p = (j + shift) % KB_PROFILES;
		uint64_t chan = rng_next(rng);

		for (uint32_t t = 0; t < g; t++) {
			size_t i = (size_t)t * d + j;
			double v = kb_value(rng, chan, p, t), xs;

			xs = kr_store(src, i, dt, v);
			/* bf16 rounds 65504 up to 65536: take its largest
			 * value below instead */
			if (fabs(xs) > KVC_CODEC_MAX_ABS)
				xs = kr_store(src, i, dt, copysign(65280.0, v));
			x[i] = xs;
		}
	}
	cr_assert(eq(int, kk->encode(&l1, src, dt, g1), KVF_OK), "%s: %s", what,
		  kvf_last_error());
	cr_assert(eq(int, kk->encode(&l2, src, dt, g2), KVF_OK), "%s: %s", what,
		  kvf_last_error());
	for (uint32_t j = 0; j < d; j++) {
		double amax = 0, mn = INFINITY, mx = -INFINITY, s1, s2;
		uint16_t h1 = f16_bits_at(g1, l1.scales_off, j);
		uint8_t b2 = g2[l2.scales_off + j];

		for (uint32_t t = 0; t < g; t++) {
			double xv = x[(size_t)t * d + j];

			amax = fabs(xv) > amax ? fabs(xv) : amax;
			mn = xv < mn ? xv : mn;
			mx = xv > mx ? xv : mx;
		}
		s1 = cr_f16(h1);
		s2 = cr_scale_of(&l2, g2, j);
		cr_assert(h1 < 0x7c00, "%s dim %u: v1 scale bits %04x", what, j,
			  h1);
		/* the byte is the f16 scale rounded up to a multiple of 128 */
		cr_assert(eq(u32, b2, (uint32_t)(h1 + 127) >> 7),
			  "%s dim %u: v1 scale %04x (%.9g), v2 byte %02x", what,
			  j, h1, s1, b2);
		cr_assert(s2 >= s1, "%s dim %u: %.9g < %.9g", what, j, s2, s1);
		/* a normal f16 scale grows by at most 127 steps of 1024 */
		if (h1 >= 0x0400)
			cr_assert(s2 <= s1 * 1.125,
				  "%s dim %u: %.9g > 1.125 x %.9g", what, j, s2,
				  s1);
		if (c == KVF_CODEC_INT8) {
			cr_assert(s2 * 127.0 >= amax,
				  "%s dim %u: 127 x %.9g < max |x| %.9g", what,
				  j, s2, amax);
			for (uint32_t t = 0; t < g; t++)
				cr_assert(g2[(size_t)t * l2.row_bytes + j] !=
						  0x80,
					  "%s dim %u token %u: code -128", what,
					  j, t);
		} else {
			double z = cr_zero_of(&l2, g2, j);
			/* the encoder's max - zero, in f32 */
			float r = (float)mx - (float)z;

			cr_assert(eq(u16, f16_bits_at(g2, l2.mins_off, j),
				     f16_bits_at(g1, l1.mins_off, j)),
				  "%s dim %u: zero points differ", what, j);
			cr_assert(z <= mn, "%s dim %u: zero %.9g > min %.9g",
				  what, j, z, mn);
			cr_assert(s2 * 15.0 >= (double)r,
				  "%s dim %u: 15 x %.9g < max - zero %.9g",
				  what, j, s2, (double)r);
			/*
			 * Exactly, zero + 15 * scale can fall short of max
			 * by the f32 rounding of max - zero, in version 1
			 * too: min -15, max 2^-24 make max - zero 15 in f32,
			 * scale 1 and zero + 15 * scale 0 < 2^-24 (profile
			 * 10).  Never by more than half an f32 ulp of max -
			 * zero.
			 */
			cr_assert(z + 15.0 * s2 >= mx - (mx - z) * 0x1p-24,
				  "%s dim %u: zero %.9g + 15 x %.9g < max %.9g",
				  what, j, z, s2, mx);
		}
	}
	kk->decode(&l2, g2, 0, g, KVF_DTYPE_F32, dec);
	check_bound(&l2, g2, x, dec, what);
	free(src);
	free(x);
	free(dec);
	free(g1);
	free(g2);
}

Test(codec_kbyte, scales_round_up_and_bound_holds)
{
	uint64_t rng = rng_seed("codec_kbyte.scales_round_up_and_bound_holds");
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	static const uint32_t shapes[][2] = {
		{ 1, 16 }, { 2, 13 }, { 8, 16 }, { 33, 7 }, { 64, 128 }
	};
	static const kvf_codec kc[] = { KVF_CODEC_INT8, KVF_CODEC_INT4 };

	for (int vi = 0; vi < nv; vi++)
		for (size_t s = 0; s < NELEM(shapes); s++)
			for (size_t c = 0; c < NELEM(kc); c++)
				for (size_t dt = 0; dt < NELEM(dtypes); dt++)
					for (uint32_t sh = 0; sh < KB_PROFILES;
					     sh += 3)
						kb_case(&rng, v[vi], kc[c],
							dtypes[dt],
							shapes[s][0],
							shapes[s][1], sh);
}

/*
 * The shortfall kb_case allows, pinned: an INT4 K channel of min -15 and
 * max 2^-24 (an f16) gets zero -15 and scale 1 in both versions, so its
 * largest code (15) decodes as 0, 2^-24 below max: within half a step,
 * but zero + 15 * scale < max.  (Should the encoder compute max - zero
 * rounded up, this test says so and its expectation changes.)
 */
Test(codec_kbyte, int4_max_minus_zero_rounds_in_f32)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	uint16_t src[2 * 16];
	float dec[2 * 16];
	uint8_t grp[256];

	for (size_t ver = 0; ver < NELEM(versions); ver++)
		for (int vi = 0; vi < nv; vi++) {
			struct kvc_codec_layout l = layout(KVF_CODEC_INT4,
							   KVF_KIND_K, 2, 16,
							   versions[ver]);

			for (int d = 0; d < 16; d++) {
				src[d] = kvf_f32_to_f16(-15.0f);
				src[16 + d] = 0x0001; /* 2^-24 */
			}
			cr_assert(eq(int,
				     v[vi]->encode(&l, src, KVF_DTYPE_F16, grp),
				     KVF_OK));
			v[vi]->decode(&l, grp, 0, 2, KVF_DTYPE_F32, dec);
			for (uint32_t d = 0; d < 16; d++) {
				cr_assert(cr_zero_of(&l, grp, d) == -15.0);
				cr_assert(cr_scale_of(&l, grp, d) == 1.0);
				cr_assert(dec[d] == -15.0f);
				cr_assert(dec[16 + d] == 0.0f, "%s v%u: %g",
					  v[vi]->name, versions[ver],
					  (double)dec[16 + d]);
			}
		}
}
