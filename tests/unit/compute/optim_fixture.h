/*
 * optim_fixture.h - what the optimizer kernel tests share
 * (test_optim_golden.c, test_optim_variants.c, test_optim_sparse.c,
 * test_optim_norm.c, test_optim_config.c): the kernel variants of this
 * CPU, the gradient dtypes with element access, the rule and option sets
 * of the random tests, and a random state and gradient placed so that no
 * vector load is aligned.
 *
 * Compiled into unit_compute; it uses Criterion's assertions.
 */
#ifndef KVF_TEST_OPTIM_FIXTURE_H
#define KVF_TEST_OPTIM_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "compute/optim.h"
#include "kernel_ref.h" /* kr_dtype_name */
#include "kvflash.h"

static const kvf_dtype dtypes[3] = { KVF_DTYPE_F16, KVF_DTYPE_BF16,
				     KVF_DTYPE_F32 };

/* ofx_variants - scalar, then AVX2 when this CPU has it; the count. */
int ofx_variants(const struct kvc_optim *v[2]);
/* ofx_elt_bytes - bytes of one element of dt */
size_t ofx_elt_bytes(kvf_dtype dt);
/* ofx_put - element i of the dtype array buf = f (rounded to nearest
 * even). */
void ofx_put(void *buf, size_t i, kvf_dtype dt, float f);
/* ofx_get - element i of the dtype array buf, widened. */
float ofx_get(const void *buf, size_t i, kvf_dtype dt);
/* ofx_xmalloc - malloc that fails the test when out of memory */
void *ofx_xmalloc(size_t bytes);

/* A rule and option set for the random tests. */
struct rcfg {
	const char *name;
	kvf_opt_kind kind;
	float lr, beta1, beta2, eps, wd, momentum, dampening;
	uint32_t nesterov;
	float lr_decay, iav;
};

static const struct rcfg rcfgs[] = {
	{ "adam", KVF_OPT_ADAM, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 0, 0, 0, 0, 0 },
	{ "adam_wd", KVF_OPT_ADAM, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 0, 0, 0,
	  0, 0 },
	{ "adam_b0.3", KVF_OPT_ADAM, 1e-2f, 0.3f, 0.5f, 1e-3f, 0, 0, 0, 0, 0,
	  0 },
	{ "adamw", KVF_OPT_ADAMW, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0, 0, 0, 0,
	  0 },
	{ "sgd", KVF_OPT_SGD, 0.1f, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
	{ "sgd_wd", KVF_OPT_SGD, 0.1f, 0, 0, 0, 0.01f, 0, 0, 0, 0, 0 },
	{ "sgd_m", KVF_OPT_SGD, 0.1f, 0, 0, 0, 0.01f, 0.9f, 0.1f, 0, 0, 0 },
	{ "sgd_nesterov", KVF_OPT_SGD, 0.1f, 0, 0, 0, 0.01f, 0.9f, 0, 1, 0, 0 },
	{ "adagrad", KVF_OPT_ADAGRAD, 0.1f, 0, 0, 1e-10f, 0, 0, 0, 0, 0, 0 },
	{ "adagrad_all", KVF_OPT_ADAGRAD, 0.1f, 0, 0, 1e-10f, 0.01f, 0, 0, 0,
	  0.01f, 0.1f },
};
#define N_RCFGS (sizeof(rcfgs) / sizeof(rcfgs[0]))

/* ofx_rcfg_config - *cfg for rule set r writing params_out as out */
void ofx_rcfg_config(const struct rcfg *r, kvf_dtype out, kvf_opt_config *cfg);

/* The state and gradient of a random test: arrays placed one element past
 * an aligned allocation, so no vector load is aligned. */
struct rstate {
	size_t n;
	float *p, *m, *v; /* [n] state */
	void *g;          /* [n] dense gradient, grad dtype, zeros filled */
	uint32_t *idx;    /* [nnz] the nonzero positions */
	void *val;        /* [nnz] their values, grad dtype */
	size_t nnz;
	void *out;    /* [n] params_out, out dtype */
	void *mem[7]; /* the allocations */
};

/* ofx_rstate_make - n elements of random state, and a gradient of dtype
 * gdt with density_pct percent nonzero, dense and as a Top-K list;
 * params_out of dtype odt */
void ofx_rstate_make(struct rstate *r, uint64_t *rng, size_t n, kvf_dtype gdt,
		     kvf_dtype odt, unsigned density_pct);
void ofx_rstate_free(struct rstate *r);
/* ofx_same_bits - the bytes of a and b are identical. */
void ofx_same_bits(const void *a, const void *b, size_t bytes, const char *what,
		   const char *ctx);
/* ofx_compare_states - p, m, v and params_out of a and b are identical */
void ofx_compare_states(const struct rstate *a, const struct rstate *b,
			kvf_dtype odt, const char *ctx);

static const size_t lengths[] = { 0, 1, 7, 8, 9, 1000, 1003 };
#define N_LENGTHS (sizeof(lengths) / sizeof(lengths[0]))

#endif /* KVF_TEST_OPTIM_FIXTURE_H */
