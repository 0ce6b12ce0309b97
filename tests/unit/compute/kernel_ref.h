/*
 * kernel_ref.h - what the compute kernel tests share: the kernel variants
 * to test, random K/V/q data in each dtype with its exact decoded values,
 * and double-precision references written from the definitions.
 *
 * Every random input is a value of its dtype (made by rounding a random
 * f32 to the dtype), and the references use the decoded value, so a
 * reference sees exactly the numbers the kernel sees and all error is
 * the kernel's own rounding.
 */
#ifndef KVF_TEST_KERNEL_REF_H
#define KVF_TEST_KERNEL_REF_H

#include <stddef.h>
#include <stdint.h>

#include "compute/kernels.h"

#define KR_U 5.9604644775390625e-8 /* fp32 unit roundoff, 2^-24 */

/*
 * kr_variants - the tables to test: scalar, then AVX2 when the CPU has it
 * (when not, says so once on stderr: the AVX2 side is skipped).
 * Return: the number of tables in v (1 or 2).
 */
int kr_variants(const struct kvc_kernels *v[2]);

/* kr_dtype_name - "f16", "bf16" or "f32". */
const char *kr_dtype_name(kvf_dtype dt);

/* kr_uniform - a double uniform in [lo, hi). */
double kr_uniform(uint64_t *rng, double lo, double hi);

/* kr_store - write x (rounded to dtype) as element i of buf; returns the
 * value stored, decoded exactly. */
double kr_store(void *buf, size_t i, kvf_dtype dt, double x);

/* kr_fill - count random dtype values in [lo, hi) into buf, their exact
 * values into dec. */
void kr_fill(uint64_t *rng, kvf_dtype dt, void *buf, double *dec, size_t count,
	     double lo, double hi);

/* kr_fill_f32 - count random floats in [lo, hi). */
void kr_fill_f32(uint64_t *rng, float *q, size_t count, double lo, double hi);

/*
 * kr_attention - the attention of n_q heads q ([n_q][hd], pre-scaled)
 * over the n rows of k and v ([n][hd] exact values) where mask (NULL =
 * all) is nonzero: out [n_q][hd], lse [n_q] (-INFINITY, out 0 when no
 * token counts), and per head smax[h] = max over counted t of
 * sum_d |q_hd k_td| (the magnitude a score's rounding scales with).
 */
void kr_attention(const float *q, uint32_t n_q, uint32_t hd, const double *k,
		  const double *v, uint32_t n, const uint8_t *mask, double *out,
		  double *lse, double *smax);

/* kr_score - q_h . k_t in double. */
double kr_score(const float *qh, const double *kt, uint32_t hd);

/*
 * kr_attn_tol - the tolerance of an attention output (relative to
 * max|v|) for n tokens, head_dim hd and score magnitude smax: rounding
 * errors behave like random walks (SIMD and chunking change only their
 * order), so the error of the n-term sums of p*v and p is about
 * sqrt(n) u, a score's error about sqrt(hd) u smax (which moves its
 * weight by as much, relatively), and exp, the rescales and the final
 * division a few u.  Allowing 8 times their sum keeps the tests free of
 * false alarms (seen errors stay below 3% of it: on random data the
 * errors largely cancel) while one token dropped out of 5000 (about 6e-4
 * of max|v|, 10 times the tolerance) is still caught; test_attn.c checks
 * that margin.
 */
double kr_attn_tol(uint32_t n, uint32_t hd, double smax);

/* One attention problem: inputs in the dtype and their exact values. */
struct kr_prob {
	kvf_dtype dt;  /* of k, v, kt */
	uint32_t n_q;  /* query heads */
	uint32_t hd;   /* head_dim */
	uint32_t n;    /* tokens */
	float *q;      /* [n_q][hd], pre-scaled */
	void *k, *v;   /* [n][hd] in dt */
	void *kt;      /* [hd][n] in dt: K transposed (unmasked values) */
	double *kd;    /* [n][hd] exact values of k */
	double *vd;    /* [n][hd] exact values of v */
	uint8_t *mask; /* NULL or [n] */
};

/*
 * kr_prob_make - random q in [-qs, qs] / sqrt(hd), K and V in [-1, 1];
 * trend > 0 adds trend * t / n along sign(q_0) to K row t, so scores rise
 * through the sequence and the running max moves block after block;
 * masked != 0: about 30% of tokens masked, their K and V rows NaN bytes.
 */
void kr_prob_make(struct kr_prob *p, uint64_t *rng, kvf_dtype dt, uint32_t n_q,
		  uint32_t hd, uint32_t n, int masked, double qs, double trend);
void kr_prob_free(struct kr_prob *p);

/* kr_elt_bytes - bytes per element of dt. */
size_t kr_elt_bytes(kvf_dtype dt);

/* kr_max_abs - max |x[i]| over count doubles. */
double kr_max_abs(const double *x, size_t count);

/* kr_xmalloc - calloc that fails the test on NULL. */
void *kr_xmalloc(size_t bytes);

#endif /* KVF_TEST_KERNEL_REF_H */
