/*
 * optim_avx2.c - the AVX2+FMA+F16C variant of the optimizer kernels
 * (optim.h), 8 fp32 lanes at a time.
 *
 * Compiled with -mavx2 -mfma -mf16c -ffp-contract=off (compute/
 * CMakeLists.txt); its functions run only when optim.c has seen those CPU
 * features.  Each lane does exactly the scalar variant's fp32 operations,
 * in the same order and without fused multiply-adds (vdivps and vsqrtps
 * round correctly, as the scalar division and sqrtf do), so the updates
 * and params_out equal the scalar variant's bit for bit; the tail of a
 * block that fills no vector runs the shared scalar code of optim_impl.h.
 * Only the double sums of squares differ from scalar, in the order of the
 * additions.  f16 and bf16 convert as compute/half.h does (vcvtph2ps and
 * vcvtps2ph with round-to-nearest-even quiet NaNs the same way).
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compute/optim.h"
#include "compute/optim_impl.h"
#include "compute/vec_avx2.h" /* load8 */

#define OPTIM_INLINE static inline __attribute__((always_inline))

/*
 * to_bf16_8 - 8 floats rounded to bf16 as kvf_f32_to_bf16 does: NaN made
 * quiet (upper half | 0x40), else + 0x7fff + the lowest kept bit, upper
 * half.
 */
OPTIM_INLINE __m128i to_bf16_8(__m256 x)
{
	__m256i u = _mm256_castps_si256(x);
	__m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
	__m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
	__m256i hi = _mm256_srli_epi32(u, 16);
	__m256i odd = _mm256_and_si256(hi, _mm256_set1_epi32(1));
	__m256i r =
		_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
						     odd));
	__m256i q = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));

	r = _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), q, nan);
	/* 32 -> 16 bits: packus works per 128-bit lane, then reorder */
	r = _mm256_packus_epi32(r, r);
	r = _mm256_permute4x64_epi64(r, 0x08);
	return _mm256_castsi256_si128(r);
}

/* store8 - x rounded to dtype into elements i..i+7 of the array p. */
OPTIM_INLINE void store8(void *p, size_t i, kvf_dtype dtype, __m256 x)
{
	unsigned char *b = (unsigned char *)p;

	switch (dtype) {
	case KVF_DTYPE_F16:
		_mm_storeu_si128((__m128i *)(b + i * 2),
				 _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
		break;
	case KVF_DTYPE_BF16:
		_mm_storeu_si128((__m128i *)(b + i * 2), to_bf16_8(x));
		break;
	default:
		_mm256_storeu_ps((float *)(b + i * 4), x);
		break;
	}
}

static void widen_avx2(float *dst, const void *src, size_t n, kvf_dtype dtype,
		       float scale)
{
	__m256 sc = _mm256_set1_ps(scale);
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i,
				 _mm256_mul_ps(load8(src, i, dtype), sc));
	for (; i < n; i++)
		dst[i] = kvc_elt(src, i, dtype) * scale;
}

static void narrow_avx2(void *dst, const float *src, size_t n, kvf_dtype dtype)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		store8(dst, i, dtype, _mm256_loadu_ps(src + i));
	for (; i < n; i++)
		optim_elt_store(dst, i, dtype, src[i]);
}

/* ---- updates: adam_elt, sgd_elt, adagrad_elt of optim_impl.h, 8 wide ----- */

static void adam_avx2(const struct kvc_optim_step *s,
		      const struct kvc_optim_chunk *c, const float *g, size_t n)
{
	const float *pin = c->in[KVC_CHUNK_P], *min = c->in[KVC_CHUNK_M];
	const float *vin = c->in[KVC_CHUNK_V];
	float *p = c->out[KVC_CHUNK_P], *m = c->out[KVC_CHUNK_M];
	float *v = c->out[KVC_CHUNK_V];
	const __m256 l2 = _mm256_set1_ps(s->l2);
	const __m256 decay = _mm256_set1_ps(s->decay);
	const __m256 w = _mm256_set1_ps(s->lerp_w);
	const __m256 wc = _mm256_set1_ps(s->lerp_w_c);
	const __m256 b2 = _mm256_set1_ps(s->beta2);
	const __m256 omb2 = _mm256_set1_ps(s->one_minus_beta2);
	const __m256 bc2s = _mm256_set1_ps(s->bc2_sqrt);
	const __m256 eps = _mm256_set1_ps(s->eps);
	const __m256 ss = _mm256_set1_ps(s->step_size);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 gi = _mm256_loadu_ps(g + i);
		__m256 pi = _mm256_loadu_ps(pin + i);
		__m256 mi = _mm256_loadu_ps(min + i);
		__m256 vi = _mm256_loadu_ps(vin + i);
		__m256 den;

		if (s->l2 != 0.0f)
			gi = _mm256_add_ps(gi, _mm256_mul_ps(l2, pi));
		if (s->decay != 1.0f)
			pi = _mm256_mul_ps(pi, decay);
		if (s->lerp_small)
			mi = _mm256_add_ps(mi,
					   _mm256_mul_ps(w, _mm256_sub_ps(gi,
									  mi)));
		else
			mi = _mm256_sub_ps(gi,
					   _mm256_mul_ps(_mm256_sub_ps(gi, mi),
							 wc));
		vi = _mm256_mul_ps(vi, b2);
		vi = _mm256_add_ps(vi,
				   _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
		den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2s),
				    eps);
		pi = _mm256_sub_ps(pi,
				   _mm256_mul_ps(ss, _mm256_div_ps(mi, den)));
		_mm256_storeu_ps(p + i, pi);
		_mm256_storeu_ps(m + i, mi);
		_mm256_storeu_ps(v + i, vi);
	}
	optim_update_elts(s, c, g, i, n);
}

/* sgd_momentum_avx2 - SGD with momentum != 0 (the buffer m is kept). */
static void sgd_momentum_avx2(const struct kvc_optim_step *s,
			      const struct kvc_optim_chunk *c, const float *g,
			      size_t n)
{
	const float *pin = c->in[KVC_CHUNK_P], *min = c->in[KVC_CHUNK_M];
	float *p = c->out[KVC_CHUNK_P], *m = c->out[KVC_CHUNK_M];
	const __m256 l2 = _mm256_set1_ps(s->l2);
	const __m256 lr = _mm256_set1_ps(s->lr);
	const __m256 mom = _mm256_set1_ps(s->momentum);
	const __m256 omd = _mm256_set1_ps(s->one_minus_damp);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 gi = _mm256_loadu_ps(g + i);
		__m256 pi = _mm256_loadu_ps(pin + i);
		__m256 buf;

		if (s->l2 != 0.0f)
			gi = _mm256_add_ps(gi, _mm256_mul_ps(l2, pi));
		if (s->first) {
			buf = gi;
		} else {
			buf = _mm256_mul_ps(_mm256_loadu_ps(min + i), mom);
			buf = _mm256_add_ps(buf, _mm256_mul_ps(omd, gi));
		}
		_mm256_storeu_ps(m + i, buf);
		gi = s->nesterov ? _mm256_add_ps(gi, _mm256_mul_ps(mom, buf)) :
				   buf;
		_mm256_storeu_ps(p + i,
				 _mm256_sub_ps(pi, _mm256_mul_ps(lr, gi)));
	}
	optim_update_elts(s, c, g, i, n);
}

/* sgd_plain_avx2 - SGD without momentum (no buffer). */
static void sgd_plain_avx2(const struct kvc_optim_step *s,
			   const struct kvc_optim_chunk *c, const float *g,
			   size_t n)
{
	const float *pin = c->in[KVC_CHUNK_P];
	float *p = c->out[KVC_CHUNK_P];
	const __m256 l2 = _mm256_set1_ps(s->l2);
	const __m256 lr = _mm256_set1_ps(s->lr);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 gi = _mm256_loadu_ps(g + i);
		__m256 pi = _mm256_loadu_ps(pin + i);

		if (s->l2 != 0.0f)
			gi = _mm256_add_ps(gi, _mm256_mul_ps(l2, pi));
		_mm256_storeu_ps(p + i,
				 _mm256_sub_ps(pi, _mm256_mul_ps(lr, gi)));
	}
	optim_update_elts(s, c, g, i, n);
}

static void adagrad_avx2(const struct kvc_optim_step *s,
			 const struct kvc_optim_chunk *c, const float *g,
			 size_t n)
{
	const float *pin = c->in[KVC_CHUNK_P], *vin = c->in[KVC_CHUNK_V];
	float *p = c->out[KVC_CHUNK_P], *v = c->out[KVC_CHUNK_V];
	const __m256 l2 = _mm256_set1_ps(s->l2);
	const __m256 eps = _mm256_set1_ps(s->eps);
	const __m256 clr = _mm256_set1_ps(s->clr);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 gi = _mm256_loadu_ps(g + i);
		__m256 pi = _mm256_loadu_ps(pin + i);
		__m256 sum, std;

		if (s->l2 != 0.0f)
			gi = _mm256_add_ps(gi, _mm256_mul_ps(l2, pi));
		sum = _mm256_add_ps(_mm256_loadu_ps(vin + i),
				    _mm256_mul_ps(gi, gi));
		std = _mm256_add_ps(_mm256_sqrt_ps(sum), eps);
		_mm256_storeu_ps(v + i, sum);
		_mm256_storeu_ps(p + i,
				 _mm256_sub_ps(pi,
					       _mm256_mul_ps(clr,
							     _mm256_div_ps(gi,
									   std))));
	}
	optim_update_elts(s, c, g, i, n);
}

static void update_avx2(const struct kvc_optim_step *s,
			const struct kvc_optim_chunk *c, const float *g,
			size_t n)
{
	switch (s->kind) {
	case KVF_OPT_ADAM:
	case KVF_OPT_ADAMW:
		adam_avx2(s, c, g, n);
		break;
	case KVF_OPT_SGD:
		if (s->momentum != 0.0f)
			sgd_momentum_avx2(s, c, g, n);
		else
			sgd_plain_avx2(s, c, g, n);
		break;
	case KVF_OPT_ADAGRAD:
		adagrad_avx2(s, c, g, n);
		break;
	}
}

/* ---- gradient checks ----------------------------------------------------- */

/* add_sq - acc += x^2 for the 8 lanes of x, in two 4-lane double sums
 * (each square of an fp32 value is exact in double, so fmadd = mul + add). */
OPTIM_INLINE void add_sq(__m256d *lo, __m256d *hi, __m256 x)
{
	__m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
	__m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));

	*lo = _mm256_fmadd_pd(a, a, *lo);
	*hi = _mm256_fmadd_pd(b, b, *hi);
}

static double sumsq_avx2(const void *g, size_t n, kvf_dtype dtype)
{
	__m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
	__m256d s2 = _mm256_setzero_pd(), s3 = _mm256_setzero_pd();
	__m128d h;
	double sum;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		add_sq(&s0, &s1, load8(g, i, dtype));
		add_sq(&s2, &s3, load8(g, i + 8, dtype));
	}
	for (; i + 8 <= n; i += 8)
		add_sq(&s0, &s1, load8(g, i, dtype));
	s0 = _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3));
	h = _mm_add_pd(_mm256_castpd256_pd128(s0),
		       _mm256_extractf128_pd(s0, 1));
	sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
	for (; i < n; i++) {
		double x = kvc_elt(g, i, dtype);

		sum += x * x;
	}
	return sum;
}

/* nonfinite16 - any of the 16-bit elements [0, n) of h has all of mask's
 * exponent bits set (f16: 0x7c00, bf16: 0x7f80). */
static bool nonfinite16(const void *h, size_t n, uint16_t mask)
{
	const unsigned char *b = (const unsigned char *)h;
	const __m256i mk = _mm256_set1_epi16((short)mask);
	__m256i any = _mm256_setzero_si256();
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(b + i * 2));

		any = _mm256_or_si256(any,
				      _mm256_cmpeq_epi16(_mm256_and_si256(x,
									  mk),
							 mk));
		if ((i & 1023) == 0 && !_mm256_testz_si256(any, any))
			return true;
	}
	if (!_mm256_testz_si256(any, any))
		return true;
	for (; i < n; i++) {
		uint16_t x;

		memcpy(&x, b + i * 2, sizeof(x));
		if ((x & mask) == mask)
			return true;
	}
	return false;
}

static bool nonfinite32(const void *f, size_t n)
{
	const unsigned char *b = (const unsigned char *)f;
	const __m256i mk = _mm256_set1_epi32(0x7f800000);
	__m256i any = _mm256_setzero_si256();
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(b + i * 4));

		any = _mm256_or_si256(any,
				      _mm256_cmpeq_epi32(_mm256_and_si256(x,
									  mk),
							 mk));
		if ((i & 1023) == 0 && !_mm256_testz_si256(any, any))
			return true;
	}
	if (!_mm256_testz_si256(any, any))
		return true;
	for (; i < n; i++) {
		uint32_t u;

		memcpy(&u, b + i * 4, sizeof(u));
		if ((u & 0x7f800000u) == 0x7f800000u)
			return true;
	}
	return false;
}

static bool nonfinite_avx2(const void *g, size_t n, kvf_dtype dtype)
{
	switch (dtype) {
	case KVF_DTYPE_F16:
		return nonfinite16(g, n, 0x7c00u);
	case KVF_DTYPE_BF16:
		return nonfinite16(g, n, 0x7f80u);
	default:
		return nonfinite32(g, n);
	}
}

const struct kvc_optim kvc_optim_avx2_table = {
	.name = "avx2",
	.widen = widen_avx2,
	.update = update_avx2,
	.narrow = narrow_avx2,
	.sumsq = sumsq_avx2,
	.nonfinite = nonfinite_avx2,
};
