/*
 * optim_fixture.c - the helpers the optimizer kernel tests share; see
 * optim_fixture.h.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_fixture.h"

#include "compute/half.h"
#include "compute/optim.h"
#include "testutil.h"

/* variants - scalar, then AVX2 when this CPU has it; returns the count. */
int ofx_variants(const struct kvc_optim *v[2])
{
	v[0] = kvc_optim_scalar();
	v[1] = kvc_optim_avx2();
	if (!v[1])
		fprintf(stderr, "optim: no AVX2 here; scalar only\n");
	return v[1] ? 2 : 1;
}

size_t ofx_elt_bytes(kvf_dtype dt)
{
	return dt == KVF_DTYPE_F32 ? 4 : 2;
}

/* put - element i of the dtype array buf = f (rounded to nearest even). */
void ofx_put(void *buf, size_t i, kvf_dtype dt, float f)
{
	unsigned char *b = buf;
	uint16_t h;

	if (dt == KVF_DTYPE_F32) {
		memcpy(b + i * 4, &f, 4);
		return;
	}
	h = dt == KVF_DTYPE_F16 ? kvf_f32_to_f16(f) : kvf_f32_to_bf16(f);
	memcpy(b + i * 2, &h, 2);
}

/* get - element i of the dtype array buf, widened. */
float ofx_get(const void *buf, size_t i, kvf_dtype dt)
{
	const unsigned char *b = buf;
	uint16_t h;
	float f;

	if (dt == KVF_DTYPE_F32) {
		memcpy(&f, b + i * 4, 4);
		return f;
	}
	memcpy(&h, b + i * 2, 2);
	return dt == KVF_DTYPE_F16 ? kvf_f16_to_f32(h) : kvf_bf16_to_f32(h);
}

void *ofx_xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	cr_assert(p != NULL, "out of memory (%zu bytes)", bytes);
	return p;
}

void ofx_rcfg_config(const struct rcfg *r, kvf_dtype out, kvf_opt_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->struct_size = sizeof(*cfg);
	cfg->kind = r->kind;
	cfg->lr = r->lr;
	cfg->beta1 = r->beta1;
	cfg->beta2 = r->beta2;
	cfg->eps = r->eps;
	cfg->weight_decay = r->wd;
	cfg->momentum = r->momentum;
	cfg->dampening = r->dampening;
	cfg->nesterov = r->nesterov;
	cfg->lr_decay = r->lr_decay;
	cfg->initial_accumulator_value = r->iav;
	cfg->out_dtype = out;
	cr_assert(kvc_optim_config_check(cfg, NULL, 0), "%s", r->name);
}

static float uniform(uint64_t *rng, float lo, float hi)
{
	return lo + (hi - lo) * (float)((rng_next(rng) >> 40) * 0x1p-24);
}

void ofx_rstate_make(struct rstate *r, uint64_t *rng, size_t n, kvf_dtype gdt,
		     kvf_dtype odt, unsigned density_pct)
{
	size_t ge = ofx_elt_bytes(gdt);

	memset(r, 0, sizeof(*r));
	r->n = n;
	r->mem[0] = ofx_xmalloc((n + 1) * 4);
	r->mem[1] = ofx_xmalloc((n + 1) * 4);
	r->mem[2] = ofx_xmalloc((n + 1) * 4);
	r->mem[3] = ofx_xmalloc((n + 1) * ge);
	r->mem[4] = ofx_xmalloc((n + 1) * 4);
	r->mem[5] = ofx_xmalloc((n + 1) * ge);
	r->mem[6] = ofx_xmalloc((n + 1) * 4);
	r->p = (float *)r->mem[0] + 1;
	r->m = (float *)r->mem[1] + 1;
	r->v = (float *)r->mem[2] + 1;
	r->g = (char *)r->mem[3] + ge;
	r->idx = (uint32_t *)r->mem[4] + 1;
	r->val = (char *)r->mem[5] + ge;
	r->out = (char *)r->mem[6] + ofx_elt_bytes(odt);
	for (size_t i = 0; i < n; i++) {
		r->p[i] = uniform(rng, -2, 2);
		r->m[i] = uniform(rng, -0.1f, 0.1f);
		r->v[i] = uniform(rng, 0, 0.01f);
		if (rng_below(rng, 100) < density_pct) {
			ofx_put(r->g, i, gdt, uniform(rng, -3, 3));
			r->idx[r->nnz] = (uint32_t)i;
			ofx_put(r->val, r->nnz++, gdt, ofx_get(r->g, i, gdt));
		} else {
			ofx_put(r->g, i, gdt, 0.0f);
		}
	}
}

void ofx_rstate_free(struct rstate *r)
{
	for (int i = 0; i < 7; i++)
		free(r->mem[i]);
}

/* same_bits - the n floats (or bytes) of a and b are identical. */
void ofx_same_bits(const void *a, const void *b, size_t bytes, const char *what,
		   const char *ctx)
{
	cr_assert(memcmp(a, b, bytes) == 0, "%s differ: %s", what, ctx);
}

void ofx_compare_states(const struct rstate *a, const struct rstate *b,
			kvf_dtype odt, const char *ctx)
{
	ofx_same_bits(a->p, b->p, a->n * 4, "params", ctx);
	ofx_same_bits(a->m, b->m, a->n * 4, "m", ctx);
	ofx_same_bits(a->v, b->v, a->n * 4, "v", ctx);
	ofx_same_bits(a->out, b->out, a->n * ofx_elt_bytes(odt), "params_out",
		      ctx);
}
