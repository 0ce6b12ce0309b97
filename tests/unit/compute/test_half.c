/*
 * test_half.c - f16 and bf16 conversions of compute/half.h against slow
 * references written from the definitions.
 *
 * The references work in double, where every f32, f16 and bf16 value and
 * every scaling by a power of two used here is exact, so rounding happens
 * in one visible place (ref_rne) instead of in the arithmetic:
 *  - decode: f16 is (-1)^s * man * 2^-24 (exp 0) or (1024 + man) *
 *    2^(exp - 25); bf16 is (-1)^s * man * 2^-133 or (128 + man) *
 *    2^(exp - 134); exp all ones is infinity (man 0) or NaN.
 *  - encode: round |x| to a multiple of the target's ulp at x's binade
 *    (never finer than the subnormal ulp), ties to even; a result at or
 *    past 2^(emax + 1) is infinity.
 *
 * Every one of the 65536 bit patterns of each type is decoded, checked,
 * and encoded back to itself (NaN stays a NaN of the same sign, made
 * quiet).  Encoding is checked on every f32 rounding boundary of the
 * target (just below, at, and just above each midpoint, in every binade,
 * both signs, subnormals included), on named edge values (65504, 65520,
 * ties, the smallest subnormals) and on seeded random f32 bit patterns.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "compute/half.h"
#include "testutil.h"

#define N_RANDOM 2000000 /* random f32 bit patterns per target type */

/* A 16-bit float format: f16 or bf16. */
struct fmt {
	const char *name;            /* for messages */
	int man_bits;                /* stored mantissa bits */
	int bias;                    /* exponent bias */
	uint16_t (*encode)(float f); /* the code under test */
	float (*decode)(uint16_t h); /* the code under test */
	int quiet_decode;            /* decode makes NaNs quiet */
};

static uint16_t f16_encode(float f)
{
	return kvf_f32_to_f16(f);
}

static float f16_decode(uint16_t h)
{
	return kvf_f16_to_f32(h);
}

static uint16_t bf16_encode(float f)
{
	return kvf_f32_to_bf16(f);
}

static float bf16_decode(uint16_t h)
{
	return kvf_bf16_to_f32(h);
}

/*
 * f16 decode quiets a signaling NaN, as F16C's vcvtph2ps does, so the
 * scalar path can be the oracle of the SIMD one.  bf16 decode is a plain
 * shift, in scalar and SIMD code alike, and keeps the NaN's payload as is.
 */
static const struct fmt f16 = { "f16", 10, 15, f16_encode, f16_decode, 1 };
static const struct fmt bf16 = { "bf16", 7, 127, bf16_encode, bf16_decode, 0 };

static uint16_t exp_mask(const struct fmt *t)
{
	return (uint16_t)(0x7fffu & ~((1u << t->man_bits) - 1));
}

static uint16_t inf_bits(const struct fmt *t)
{
	return exp_mask(t);
}

static int is_nan16(const struct fmt *t, uint16_t h)
{
	return (h & 0x7fffu) > inf_bits(t);
}

static int is_quiet16(const struct fmt *t, uint16_t h)
{
	return (h >> (t->man_bits - 1)) & 1u;
}

/* ref_decode - the value of a non-NaN pattern, from the definition. */
static double ref_decode(const struct fmt *t, uint16_t h)
{
	unsigned man = h & ((1u << t->man_bits) - 1);
	unsigned exp = (h & 0x7fffu) >> t->man_bits;
	double v;

	if ((h & 0x7fffu) == inf_bits(t))
		v = INFINITY;
	else if (exp == 0)
		v = ldexp(man, 1 - t->bias - t->man_bits);
	else
		v = ldexp((1u << t->man_bits) + man,
			  (int)exp - t->bias - t->man_bits);
	return (h & 0x8000u) ? -v : v;
}

/* ref_rne - q rounded to an integer, ties to even. */
static double ref_rne(double q)
{
	double fl = floor(q);
	double diff = q - fl;

	if (diff > 0.5 || (diff == 0.5 && fmod(fl, 2.0) != 0.0))
		return fl + 1.0;
	return fl;
}

/* ref_encode - the pattern an f32 (given by its bits) must become. */
static uint16_t ref_encode(const struct fmt *t, uint32_t u)
{
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t abs = u & 0x7fffffffu;
	int emin = 1 - t->bias;
	double x, r;
	uint32_t bits;
	int e;

	if (abs >= 0x7f800000u) /* infinity (callers handle NaN apart) */
		return sign | inf_bits(t);
	if (abs == 0)
		return sign;
	x = (double)kvf_bits_f32(abs);
	frexp(x, &e);
	e -= 1; /* x in [2^e, 2^(e+1)) */
	if (e < emin)
		e = emin; /* subnormal: the ulp stops shrinking */
	r = ref_rne(ldexp(x, t->man_bits - e)); /* x / ulp, rounded */
	/* r in [2^man_bits, 2^(man_bits+1)]: the carry into the exponent
	 * falls out of the addition, and subnormals (e == emin, r below
	 * 2^man_bits) come out as plain r */
	bits = ((uint32_t)(e + t->bias) << t->man_bits) + (uint32_t)r -
	       (1u << t->man_bits);
	if (bits >= inf_bits(t))
		bits = inf_bits(t);
	return sign | (uint16_t)bits;
}

/* check_encode - one f32 through the code under test and the reference. */
static void check_encode(const struct fmt *t, uint32_t u)
{
	float f = kvf_bits_f32(u);
	uint16_t got = t->encode(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) {
		if (!is_nan16(t, got) || !is_quiet16(t, got) ||
		    (got & 0x8000u) != ((u >> 16) & 0x8000u))
			cr_fatal("%s: f32 NaN 0x%08x became 0x%04x, not a quiet NaN of the same sign",
				 t->name, u, got);
		return;
	}
	if (got != ref_encode(t, u))
		cr_assert(eq(u16, got, ref_encode(t, u)), "%s: f32 0x%08x (%a)",
			  t->name, u, (double)f);
}

static void check_all_patterns(const struct fmt *t)
{
	for (uint32_t i = 0; i <= 0xffffu; i++) {
		uint16_t h = (uint16_t)i;
		float f = t->decode(h);
		uint16_t back = t->encode(f);

		if (is_nan16(t, h)) {
			if (!isnan(f) || !!signbit(f) != !!(h & 0x8000u))
				cr_fatal("%s 0x%04x: decoded to %a, not a NaN of the same sign",
					 t->name, h, (double)f);
			if (t->quiet_decode && !(kvf_f32_bits(f) & 0x00400000u))
				cr_fatal("%s 0x%04x: decoded to f32 0x%08x, a signaling NaN",
					 t->name, h, kvf_f32_bits(f));
			if (!is_nan16(t, back) ||
			    (back & 0x8000u) != (h & 0x8000u))
				cr_fatal("%s 0x%04x: NaN came back as 0x%04x",
					 t->name, h, back);
			continue;
		}
		if ((double)f != ref_decode(t, h) ||
		    !!signbit(f) != !!(h & 0x8000u))
			cr_fatal("%s 0x%04x: decoded to %a, want %a", t->name,
				 h, (double)f, ref_decode(t, h));
		if (back != h)
			cr_assert(eq(u16, back, h), "%s 0x%04x round trip",
				  t->name, h);
	}
}

Test(half, f16_every_pattern_decodes_and_round_trips)
{
	check_all_patterns(&f16);
}

Test(half, bf16_every_pattern_decodes_and_round_trips)
{
	check_all_patterns(&bf16);
}

/*
 * check_boundaries - for every f32 whose bits below the target's ulp are
 * one of a few patterns: exact, one above exact, just below the midpoint,
 * the midpoint (a tie), just above it, just below the next value.  With
 * all the higher bits (sign, exponent, the target's mantissa) enumerated,
 * every normal rounding boundary of the target is hit.
 */
static void check_boundaries(const struct fmt *t, uint64_t *rng)
{
	int low = 23 - t->man_bits; /* f32 bits below the target's ulp */
	uint32_t half = 1u << (low - 1), mask = (1u << low) - 1;
	uint32_t lows[8] = { 0, 1, half - 1, half, half + 1, mask, 0, 0 };

	for (uint32_t hi = 0; hi < (1u << (32 - low)); hi++) {
		lows[6] = (uint32_t)rng_next(rng) & mask;
		lows[7] = (uint32_t)rng_next(rng) & mask;
		for (int i = 0; i < 8; i++)
			check_encode(t, (hi << low) | lows[i]);
	}
}

Test(half, f16_encode_at_every_rounding_boundary)
{
	uint64_t rng = rng_seed("half/f16_encode_at_every_rounding_boundary");

	check_boundaries(&f16, &rng);
}

Test(half, bf16_encode_at_every_rounding_boundary)
{
	uint64_t rng = rng_seed("half/bf16_encode_at_every_rounding_boundary");

	check_boundaries(&bf16, &rng);
}

/*
 * f16 subnormals are spaced 2^-24 apart, but an f32 below 2^-14 has its
 * own, finer binade, so the midpoints are not at a fixed f32 bit.  Walk
 * them: each k * 2^-24 + 2^-25, and its f32 neighbours on both sides.
 */
Test(half, f16_encode_at_every_subnormal_midpoint)
{
	for (int k = 0; k <= 1024; k++) {
		float mid = ldexpf((float)(2 * k + 1), -25);
		uint32_t u = kvf_f32_bits(mid);

		for (uint32_t d = 0; d <= 2; d++) {
			check_encode(&f16, u - 1 + d);
			check_encode(&f16, (u - 1 + d) | 0x80000000u);
		}
	}
}

static void check_random(const struct fmt *t, uint64_t *rng)
{
	for (int i = 0; i < N_RANDOM; i++) {
		uint32_t u = (uint32_t)rng_next(rng);

		check_encode(t, u);
		/* and one in or near the target's finite range */
		u = (u & 0x807fffffu) | (uint32_t)(100 + rng_below(rng, 50))
						<< 23;
		check_encode(t, u);
	}
}

Test(half, f16_encode_random)
{
	uint64_t rng = rng_seed("half/f16_encode_random");

	check_random(&f16, &rng);
}

Test(half, bf16_encode_random)
{
	uint64_t rng = rng_seed("half/bf16_encode_random");

	check_random(&bf16, &rng);
}

Test(half, encode_nan_payloads)
{
	static const uint32_t nans[] = {
		0x7f800001u, 0x7f801fffu, 0x7f802000u, 0x7fbfffffu,
		0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00000u,
		0xffffffffu, 0x7f810000u, 0x7f80ffffu,
	};

	for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
		check_encode(&f16, nans[i]);
		check_encode(&bf16, nans[i]);
	}
}

/* Edge values whose answers are worked out by hand, not by the reference. */
Test(half, f16_named_values)
{
	static const struct {
		float f;
		uint16_t h;
	} cases[] = {
		{ 0.0f, 0x0000 },
		{ -0.0f, 0x8000 },
		{ 1.0f, 0x3c00 },
		{ -2.0f, 0xc000 },
		{ 65504.0f, 0x7bff },   /* largest finite */
		{ 65519.996f, 0x7bff }, /* just below the overflow tie */
		{ 65520.0f, 0x7c00 },   /* tie with 65536: even is inf */
		{ 65536.0f, 0x7c00 },
		{ -65520.0f, 0xfc00 },
		{ FLT_MAX, 0x7c00 },
		{ INFINITY, 0x7c00 },
		{ -INFINITY, 0xfc00 },
		{ 0x1p-14f, 0x0400 },        /* smallest normal */
		{ 0x1p-24f, 0x0001 },        /* smallest subnormal */
		{ 0x1p-25f, 0x0000 },        /* tie with 0: even is 0 */
		{ 0x1.000002p-25f, 0x0001 }, /* just above that tie */
		{ 0x3p-25f, 0x0002 },        /* tie 1|2: even is 2 */
		{ 0x5p-25f, 0x0002 },        /* tie 2|3: even is 2 */
		{ 0x7ffp-25f, 0x0400 },      /* tie 1023|1024: even is 1024 */
		{ FLT_TRUE_MIN, 0x0000 },
		{ -FLT_TRUE_MIN, 0x8000 },
		{ 0x1.002p0f, 0x3c00 },    /* 1 + 2^-11: tie, even is 1 */
		{ 0x1.006p0f, 0x3c02 },    /* 1 + 3 * 2^-11: tie, even up */
		{ 0x1.002002p0f, 0x3c01 }, /* just above the tie */
		{ 0.1f, 0x2e66 },
		{ 3.14159265f, 0x4248 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert(eq(u16, kvf_f32_to_f16(cases[i].f), cases[i].h), "%a",
			  (double)cases[i].f);
	cr_assert(eq(flt, kvf_f16_to_f32(0x7bff), 65504.0f));
	cr_assert(eq(flt, kvf_f16_to_f32(0x0001), 0x1p-24f));
	cr_assert(eq(flt, kvf_f16_to_f32(0x03ff), 0x3ffp-24f));
}

Test(half, bf16_named_values)
{
	static const struct {
		float f;
		uint16_t h;
	} cases[] = {
		{ 0.0f, 0x0000 },
		{ -0.0f, 0x8000 },
		{ 1.0f, 0x3f80 },
		{ -2.0f, 0xc000 },
		{ 0x1.01p0f, 0x3f80 },       /* 1 + 2^-8: tie, even is 1 */
		{ 0x1.03p0f, 0x3f82 },       /* 1 + 3 * 2^-8: tie, even up */
		{ 0x1.010002p0f, 0x3f81 },   /* just above the tie */
		{ 0x1.fep127f, 0x7f7f },     /* largest finite bf16 */
		{ 0x1.fefffep127f, 0x7f7f }, /* just below the overflow tie */
		{ 0x1.ffp127f, 0x7f80 },     /* tie with 2^128: even is inf */
		{ FLT_MAX, 0x7f80 },
		{ -FLT_MAX, 0xff80 },
		{ INFINITY, 0x7f80 },
		{ FLT_MIN, 0x0080 },      /* smallest normal */
		{ FLT_TRUE_MIN, 0x0000 }, /* f32 subnormal below bf16's */
		{ 0x1p-133f, 0x0001 },    /* smallest bf16 subnormal */
		{ 0x1p-134f, 0x0000 },    /* tie with 0 */
		{ 0x3p-134f, 0x0002 },    /* tie 1|2 */
		{ 0.1f, 0x3dcd },
		{ 3.14159265f, 0x4049 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert(eq(u16, kvf_f32_to_bf16(cases[i].f), cases[i].h),
			  "%a", (double)cases[i].f);
}

Test(half, bits_round_trip)
{
	static const uint32_t u[] = { 0,           0x80000000u, 0x3f800000u,
				      0x7f800000u, 0x00000001u, 0x7f7fffffu };

	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
		cr_assert(eq(u32, kvf_f32_bits(kvf_bits_f32(u[i])), u[i]));
	cr_assert(eq(u32, kvf_f32_bits(1.0f), 0x3f800000u));
}
