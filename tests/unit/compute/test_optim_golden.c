/*
 * test_optim_golden.c - the optimizer kernels of compute/optim.h against
 * known answers.
 *
 * Known answers: tests/golden/optim_golden.h, made by gen_optim.py from
 * the PyTorch formulas (and checked there against the formulas in double).
 * Every case runs on every variant, with f16, bf16 and f32 gradients (the
 * golden gradients are exact in all three), dense and Top-K, in one call
 * and in two chunks, writing params_out in every out dtype.  Tolerance:
 * GOLDEN_ULPS units in the last place of fp32; the generator evaluates the
 * same fp32 operations in the same order, so on this machine the answers
 * match exactly (the test prints the largest distance seen), and the slack
 * is for a libm whose pow() rounds the bias corrections differently.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "compute/optim.h"
#include "tests/golden/optim_golden.h"
#include "optim_fixture.h"
#include "testutil.h"

#define GOLDEN_ULPS 2 /* fp32 ulps between a kernel and the known answer */
#define GN OPTIM_GOLDEN_N
#define GSTEPS OPTIM_GOLDEN_STEPS
#define GBASE 1000u /* tensor index of a golden case's element 0 */

/* ulps - distance of two floats in units in the last place (0 = same bits
 * or both zero; huge across a NaN). */
static uint64_t ulps(float a, float b)
{
	int64_t ia = (int32_t)kvf_f32_bits(a), ib = (int32_t)kvf_f32_bits(b);

	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b) ? 0 : UINT64_MAX;
	if (ia < 0)
		ia = INT32_MIN - ia; /* order negative floats below positive */
	if (ib < 0)
		ib = INT32_MIN - ib;
	return (uint64_t)(ia > ib ? ia - ib : ib - ia);
}

/* ---- known answers ------------------------------------------------------- */

static void golden_config(const struct optim_golden *c, kvf_dtype out,
			  kvf_opt_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->struct_size = sizeof(*cfg);
	cfg->kind = c->kind;
	cfg->lr = c->lr;
	cfg->beta1 = c->beta1;
	cfg->beta2 = c->beta2;
	cfg->eps = c->eps;
	cfg->weight_decay = c->weight_decay;
	cfg->momentum = c->momentum;
	cfg->dampening = c->dampening;
	cfg->nesterov = c->nesterov;
	cfg->lr_decay = c->lr_decay;
	cfg->initial_accumulator_value = c->initial_accumulator_value;
	cfg->out_dtype = out;
}

/* How a golden step hands its gradient to the kernels. */
enum mode {
	DENSE,
	DENSE_CHUNKS,
	SPARSE,
	SPARSE_CHUNKS,
	N_MODES
};
static const char *const mode_names[N_MODES] = { "dense", "dense in chunks",
						 "sparse", "sparse in chunks" };

/*
 * run_chunk - one step over elements [a, b) of a golden tensor held at
 * tensor index GBASE: dense from g, or sparse from the (idx, val) list of
 * the whole tensor, of which kvc_optim_grad_span finds the chunk's part.
 */
static void run_chunk(const struct kvc_optim *k, const struct kvc_optim_step *s,
		      float *p, float *m, float *v, size_t a, size_t b,
		      int sparse, const void *g, const uint32_t *idx,
		      const void *val, size_t nnz, kvf_dtype gdt, void *out)
{
	size_t oe = ofx_elt_bytes(s->out_dtype), ge = ofx_elt_bytes(gdt);
	size_t first, count;

	if (!sparse) {
		kvc_optim_dense(k, s, p + a, m + a, v + a, b - a,
				(const char *)g + a * ge, gdt,
				(char *)out + a * oe);
		return;
	}
	kvc_optim_grad_span(idx, nnz, GBASE + a, b - a, &first, &count);
	kvc_optim_sparse(k, s, p + a, m + a, v + a, b - a, GBASE + a,
			 count ? idx + first : NULL,
			 count ? (const char *)val + first * ge : NULL, count,
			 gdt, (char *)out + a * oe);
}

/*
 * golden_run - case c on variant k with gradient dtype gdt, out dtype odt,
 * in mode md; checks every step.  Returns the largest ulp distance seen.
 */
static uint64_t golden_run(const struct optim_golden *c,
			   const struct kvc_optim *k, kvf_dtype gdt,
			   kvf_dtype odt, enum mode md)
{
	float p[GN], m[GN], v[GN];
	unsigned char g[GN * 4], val[GN * 4], out[GN * 4];
	uint32_t idx[GN];
	kvf_opt_config cfg;
	struct kvc_optim_step s;
	uint64_t worst = 0;
	int sparse = md == SPARSE || md == SPARSE_CHUNKS;
	size_t split = md == DENSE_CHUNKS || md == SPARSE_CHUNKS ? 5 : GN;

	golden_config(c, odt, &cfg);
	cr_assert(kvc_optim_config_check(&cfg, NULL, 0), "%s", c->name);
	memcpy(p, c->p0, sizeof(p));
	memcpy(m, c->m0, sizeof(m));
	memcpy(v, c->v0, sizeof(v));
	for (int st = 0; st < GSTEPS; st++) {
		size_t nnz = 0;

		for (size_t i = 0; i < GN; i++) {
			ofx_put(g, i, gdt, c->g[st][i]);
			cr_assert(ofx_get(g, i, gdt) ==
				  c->g[st][i]); /* exact */
			if (c->g[st][i] != 0.0f) {
				idx[nnz] = GBASE + (uint32_t)i;
				ofx_put(val, nnz++, gdt, c->g[st][i]);
			}
		}
		kvc_optim_step_prepare(&s, &cfg, c->t0 + (uint64_t)st,
				       c->grad_scale);
		run_chunk(k, &s, p, m, v, 0, split, sparse, g, idx, val, nnz,
			  gdt, out);
		if (split < GN)
			run_chunk(k, &s, p, m, v, split, GN, sparse, g, idx,
				  val, nnz, gdt, out);
		for (size_t i = 0; i < GN; i++) {
			uint64_t dp = ulps(p[i], c->p[st][i]);
			uint64_t dm = ulps(m[i], c->m[st][i]);
			uint64_t dv = ulps(v[i], c->v[st][i]);
			uint64_t d = dp > dm ? dp : dm;
			unsigned char want_out[4];

			d = d > dv ? d : dv;
			worst = d > worst ? d : worst;
			cr_assert(d <= GOLDEN_ULPS,
				  "%s (%s, %s grad, %s) step %d element %zu: "
				  "p %a want %a, m %a want %a, v %a want %a",
				  c->name, kvc_optim_name(k),
				  kr_dtype_name(gdt), mode_names[md], st + 1, i,
				  (double)p[i], (double)c->p[st][i],
				  (double)m[i], (double)c->m[st][i],
				  (double)v[i], (double)c->v[st][i]);
			ofx_put(want_out, 0, odt, p[i]);
			cr_assert(memcmp((char *)out + i * ofx_elt_bytes(odt),
					 want_out, ofx_elt_bytes(odt)) == 0,
				  "%s (%s) step %d element %zu: params_out "
				  "(%s) is not p rounded",
				  c->name, kvc_optim_name(k), st + 1, i,
				  kr_dtype_name(odt));
		}
	}
	return worst;
}

Test(optim, golden_every_case_variant_dtype_and_mode)
{
	const struct kvc_optim *vs[2];
	int nv = ofx_variants(vs);
	size_t n_cases = sizeof(optim_golden) / sizeof(optim_golden[0]);
	uint64_t worst = 0, runs = 0;

	cr_assert(n_cases >= 29);
	for (size_t c = 0; c < n_cases; c++) {
		/* every variant x grad dtype x out dtype x mode */
		for (int x = 0; x < nv * 3 * 3 * N_MODES; x++) {
			uint64_t w = golden_run(&optim_golden[c],
						vs[x / (3 * 3 * N_MODES)],
						dtypes[x / (3 * N_MODES) % 3],
						dtypes[x / N_MODES % 3],
						x % N_MODES);

			worst = w > worst ? w : worst;
			runs++;
		}
	}
	fprintf(stderr,
		"optim golden: %zu cases, %llu runs, largest distance %llu "
		"ulp (allowed %d)\n",
		n_cases, (unsigned long long)runs, (unsigned long long)worst,
		GOLDEN_ULPS);
}

/* The golden set covers each rule and option the brief lists. */
Test(optim, golden_covers_every_option)
{
	size_t n_cases = sizeof(optim_golden) / sizeof(optim_golden[0]);
	unsigned seen = 0;

	for (size_t i = 0; i < n_cases; i++) {
		const struct optim_golden *c = &optim_golden[i];

		if (c->kind == KVF_OPT_ADAM)
			seen |= c->weight_decay != 0.0f ? 1u << 0 : 1u << 1;
		if (c->kind == KVF_OPT_ADAMW && c->weight_decay != 0.0f)
			seen |= 1u << 2;
		if (c->kind == KVF_OPT_SGD) {
			seen |= c->momentum == 0.0f ? 1u << 3 : 1u << 4;
			if (c->momentum != 0.0f && c->dampening != 0.0f)
				seen |= 1u << 5;
			if (c->nesterov)
				seen |= 1u << 6;
			if (c->momentum != 0.0f && c->weight_decay != 0.0f)
				seen |= 1u << 7;
			if (c->momentum != 0.0f && c->t0 > 1)
				seen |= 1u << 8;
		}
		if (c->kind == KVF_OPT_ADAGRAD) {
			if (c->lr_decay != 0.0f)
				seen |= 1u << 9;
			if (c->initial_accumulator_value != 0.0f)
				seen |= 1u << 10;
			if (c->weight_decay != 0.0f)
				seen |= 1u << 11;
		}
		if (c->grad_scale != 1.0f)
			seen |= 1u << 12;
	}
	cr_assert(eq(u32, seen, (1u << 13) - 1));
}
