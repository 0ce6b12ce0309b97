/*
 * test_optim.c - the optimizer kernels of compute/optim.h.
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
 *
 * Scalar against AVX2, on random data of lengths 0, 1, 7, 8, 9, 1000 and
 * 1003 (more than one 256-element block), unaligned, for every rule and
 * option set: bit for bit (tolerance 0), because both variants round every
 * fp32 operation in the same order without fused multiply-adds (optim.h).
 * Sums of squares: relative 1e-12 (the order of double additions differs).
 *
 * Sparse against dense: a Top-K gradient gives exactly the bits of the
 * dense gradient with zeros filled in, in any chunking; and the elements
 * it does not name are still updated (m and v decay, weight decay, SGD
 * momentum), as PyTorch's dense semantics say.
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
#include "testutil.h"

#define GOLDEN_ULPS 2 /* fp32 ulps between a kernel and the known answer */
#define GN OPTIM_GOLDEN_N
#define GSTEPS OPTIM_GOLDEN_STEPS
#define GBASE 1000u /* tensor index of a golden case's element 0 */

static const kvf_dtype dtypes[3] = { KVF_DTYPE_F16, KVF_DTYPE_BF16,
				     KVF_DTYPE_F32 };

/* variants - scalar, then AVX2 when this CPU has it; returns the count. */
static int variants(const struct kvc_optim *v[2])
{
	v[0] = kvc_optim_scalar();
	v[1] = kvc_optim_avx2();
	if (!v[1])
		fprintf(stderr, "optim: no AVX2 here; scalar only\n");
	return v[1] ? 2 : 1;
}

static const char *dtype_name(kvf_dtype dt)
{
	return dt == KVF_DTYPE_F16  ? "f16" :
	       dt == KVF_DTYPE_BF16 ? "bf16" :
				      "f32";
}

static size_t elt_bytes(kvf_dtype dt)
{
	return dt == KVF_DTYPE_F32 ? 4 : 2;
}

/* put - element i of the dtype array buf = f (rounded to nearest even). */
static void put(void *buf, size_t i, kvf_dtype dt, float f)
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
static float get(const void *buf, size_t i, kvf_dtype dt)
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

static void *xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	cr_assert(p != NULL, "out of memory (%zu bytes)", bytes);
	return p;
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
	size_t oe = elt_bytes(s->out_dtype), ge = elt_bytes(gdt);
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
			put(g, i, gdt, c->g[st][i]);
			cr_assert(get(g, i, gdt) == c->g[st][i]); /* exact */
			if (c->g[st][i] != 0.0f) {
				idx[nnz] = GBASE + (uint32_t)i;
				put(val, nnz++, gdt, c->g[st][i]);
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
				  c->name, kvc_optim_name(k), dtype_name(gdt),
				  mode_names[md], st + 1, i, (double)p[i],
				  (double)c->p[st][i], (double)m[i],
				  (double)c->m[st][i], (double)v[i],
				  (double)c->v[st][i]);
			put(want_out, 0, odt, p[i]);
			cr_assert(memcmp((char *)out + i * elt_bytes(odt),
					 want_out, elt_bytes(odt)) == 0,
				  "%s (%s) step %d element %zu: params_out "
				  "(%s) is not p rounded",
				  c->name, kvc_optim_name(k), st + 1, i,
				  dtype_name(odt));
		}
	}
	return worst;
}

Test(optim, golden_every_case_variant_dtype_and_mode)
{
	const struct kvc_optim *vs[2];
	int nv = variants(vs);
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

/* ---- random data --------------------------------------------------------- */

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

static void rcfg_config(const struct rcfg *r, kvf_dtype out,
			kvf_opt_config *cfg)
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

static void rstate_make(struct rstate *r, uint64_t *rng, size_t n,
			kvf_dtype gdt, kvf_dtype odt, unsigned density_pct)
{
	size_t ge = elt_bytes(gdt);

	memset(r, 0, sizeof(*r));
	r->n = n;
	r->mem[0] = xmalloc((n + 1) * 4);
	r->mem[1] = xmalloc((n + 1) * 4);
	r->mem[2] = xmalloc((n + 1) * 4);
	r->mem[3] = xmalloc((n + 1) * ge);
	r->mem[4] = xmalloc((n + 1) * 4);
	r->mem[5] = xmalloc((n + 1) * ge);
	r->mem[6] = xmalloc((n + 1) * 4);
	r->p = (float *)r->mem[0] + 1;
	r->m = (float *)r->mem[1] + 1;
	r->v = (float *)r->mem[2] + 1;
	r->g = (char *)r->mem[3] + ge;
	r->idx = (uint32_t *)r->mem[4] + 1;
	r->val = (char *)r->mem[5] + ge;
	r->out = (char *)r->mem[6] + elt_bytes(odt);
	for (size_t i = 0; i < n; i++) {
		r->p[i] = uniform(rng, -2, 2);
		r->m[i] = uniform(rng, -0.1f, 0.1f);
		r->v[i] = uniform(rng, 0, 0.01f);
		if (rng_below(rng, 100) < density_pct) {
			put(r->g, i, gdt, uniform(rng, -3, 3));
			r->idx[r->nnz] = (uint32_t)i;
			put(r->val, r->nnz++, gdt, get(r->g, i, gdt));
		} else {
			put(r->g, i, gdt, 0.0f);
		}
	}
}

static void rstate_free(struct rstate *r)
{
	for (int i = 0; i < 7; i++)
		free(r->mem[i]);
}

/* same_bits - the n floats (or bytes) of a and b are identical. */
static void same_bits(const void *a, const void *b, size_t bytes,
		      const char *what, const char *ctx)
{
	cr_assert(memcmp(a, b, bytes) == 0, "%s differ: %s", what, ctx);
}

static void compare_states(const struct rstate *a, const struct rstate *b,
			   kvf_dtype odt, const char *ctx)
{
	same_bits(a->p, b->p, a->n * 4, "params", ctx);
	same_bits(a->m, b->m, a->n * 4, "m", ctx);
	same_bits(a->v, b->v, a->n * 4, "v", ctx);
	same_bits(a->out, b->out, a->n * elt_bytes(odt), "params_out", ctx);
}

static const size_t lengths[] = { 0, 1, 7, 8, 9, 1000, 1003 };
#define N_LENGTHS (sizeof(lengths) / sizeof(lengths[0]))

/*
 * avx2_case - three steps of rule r over n random elements on both
 * variants, from the same state and gradient (seeded by seed); every
 * array must stay identical.
 */
static void avx2_case(const struct rcfg *r, size_t n, kvf_dtype gdt,
		      kvf_dtype odt, int sparse, uint64_t seed)
{
	const struct kvc_optim *sc = kvc_optim_scalar(), *av = kvc_optim_avx2();
	uint64_t ra = seed, rb = seed; /* b starts as a copy of a */
	struct rstate a, b;
	kvf_opt_config cfg;
	struct kvc_optim_step s;
	char ctx[160];

	rstate_make(&a, &ra, n, gdt, odt, 60);
	rstate_make(&b, &rb, n, gdt, odt, 60);
	rcfg_config(r, odt, &cfg);
	snprintf(ctx, sizeof(ctx), "%s n=%zu grad %s out %s %s", r->name, n,
		 dtype_name(gdt), dtype_name(odt), sparse ? "sparse" : "dense");
	for (uint64_t t = 1; t <= 3; t++) {
		kvc_optim_step_prepare(&s, &cfg, t, t == 2 ? 0.37f : 1.0f);
		if (sparse) {
			kvc_optim_sparse(sc, &s, a.p, a.m, a.v, n, 0, a.idx,
					 a.val, a.nnz, gdt, a.out);
			kvc_optim_sparse(av, &s, b.p, b.m, b.v, n, 0, b.idx,
					 b.val, b.nnz, gdt, b.out);
		} else {
			kvc_optim_dense(sc, &s, a.p, a.m, a.v, n, a.g, gdt,
					a.out);
			kvc_optim_dense(av, &s, b.p, b.m, b.v, n, b.g, gdt,
					b.out);
		}
		compare_states(&a, &b, odt, ctx);
	}
	rstate_free(&a);
	rstate_free(&b);
}

Test(optim, avx2_matches_scalar_bit_for_bit)
{
	uint64_t seed = rng_seed("optim avx2_matches_scalar");

	if (!kvc_optim_avx2())
		cr_skip_test("no AVX2 on this CPU");
	for (size_t c = 0; c < N_RCFGS; c++) {
		for (size_t li = 0; li < N_LENGTHS; li++) {
			/* every grad dtype x out dtype x dense/sparse */
			for (int x = 0; x < 3 * 3 * 2; x++)
				avx2_case(&rcfgs[c], lengths[li], dtypes[x / 6],
					  dtypes[x / 2 % 3], x % 2,
					  seed + c * 1000003 + li * 1009 +
						  (uint64_t)x);
		}
	}
}

/*
 * from_case - three steps of rule r over n elements on variant k: a reads
 * its state in place (kvc_optim_dense / _sparse), b reads a copy of it and
 * writes into its own arrays (the _from kernels), alternating which are
 * in and which out, as the engine's generations do.  b's outputs equal
 * a's bit for bit and b's inputs are left as they were.
 */
static void from_case(const struct kvc_optim *k, const struct rcfg *r,
		      size_t n, kvf_dtype gdt, int sparse, uint64_t seed)
{
	uint64_t ra = seed, rb = seed, rc = ~seed;
	struct rstate a, b, x; /* b and x: the two generations of b; x
				* starts different, so reading an out
				* array instead of its in array shows */
	kvf_opt_config cfg;
	struct kvc_optim_step s;
	char ctx[160];

	rstate_make(&a, &ra, n, gdt, KVF_DTYPE_F32, 60);
	rstate_make(&b, &rb, n, gdt, KVF_DTYPE_F32, 60);
	rstate_make(&x, &rc, n, gdt, KVF_DTYPE_F32, 60);
	rcfg_config(r, KVF_DTYPE_F32, &cfg);
	snprintf(ctx, sizeof(ctx), "%s %s n=%zu grad %s %s", kvc_optim_name(k),
		 r->name, n, dtype_name(gdt), sparse ? "sparse" : "dense");
	for (uint64_t t = 1; t <= 3; t++) {
		struct rstate *in = t % 2 ? &b : &x, *out = t % 2 ? &x : &b;
		struct kvc_optim_chunk c = { { in->p, in->m, in->v },
					     { out->p, out->m, out->v } };
		float *keep = xmalloc(5 * n * sizeof(float) + 1);

		memcpy(keep, in->p, n * 4);
		memcpy(keep + n, in->m, n * 4);
		memcpy(keep + 2 * n, in->v, n * 4);
		memcpy(keep + 3 * n, out->m, n * 4);
		memcpy(keep + 4 * n, out->v, n * 4);
		kvc_optim_step_prepare(&s, &cfg, t, t == 2 ? 0.37f : 1.0f);
		if (sparse) {
			kvc_optim_sparse(k, &s, a.p, a.m, a.v, n, 0, a.idx,
					 a.val, a.nnz, gdt, a.out);
			kvc_optim_sparse_from(k, &s, &c, n, 0, b.idx, b.val,
					      b.nnz, gdt, out->out);
		} else {
			kvc_optim_dense(k, &s, a.p, a.m, a.v, n, a.g, gdt,
					a.out);
			kvc_optim_dense_from(k, &s, &c, n, b.g, gdt, out->out);
		}
		/* the arrays the rule keeps; it writes no other */
		same_bits(a.p, out->p, n * 4, "params", ctx);
		same_bits(a.out, out->out, n * 4, "params_out", ctx);
		if (kvc_optim_states(&cfg) & KVC_OPTIM_M)
			same_bits(a.m, out->m, n * 4, "m", ctx);
		else
			same_bits(keep + 3 * n, out->m, n * 4, "m not kept", ctx);
		if (kvc_optim_states(&cfg) & KVC_OPTIM_V)
			same_bits(a.v, out->v, n * 4, "v", ctx);
		else
			same_bits(keep + 4 * n, out->v, n * 4, "v not kept", ctx);
		same_bits(keep, in->p, n * 4, "params read", ctx);
		same_bits(keep + n, in->m, n * 4, "m read", ctx);
		same_bits(keep + 2 * n, in->v, n * 4, "v read", ctx);
		free(keep);
	}
	rstate_free(&a);
	rstate_free(&b);
	rstate_free(&x);
}

Test(optim, from_kernels_equal_in_place_and_leave_their_input)
{
	uint64_t seed = rng_seed("optim from kernels");
	const struct kvc_optim *v[2];
	int nv = variants(v);

	for (int vi = 0; vi < nv; vi++)
		for (size_t c = 0; c < N_RCFGS; c++)
			for (size_t li = 0; li < N_LENGTHS; li++)
				for (int x = 0; x < 3 * 2; x++)
					from_case(v[vi], &rcfgs[c], lengths[li],
						  dtypes[x / 2], x % 2,
						  seed + c * 1000003 + li * 1009 +
							  (uint64_t)x);
}

/* The narrowing of params_out agrees with half.h on special values too:
 * NaN payloads, infinities, overflow to infinity, subnormals, ties. */
Test(optim, params_out_conversions_match_half_h)
{
	static const uint32_t bits[] = {
		0x7fc00001u, 0xffa00000u, 0x7f800001u, 0x7f800000u, 0xff800000u,
		0x477ff000u, 0x477fefffu, 0x00000001u, 0x33800000u, 0x33800001u,
		0x387fc000u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x80000000u,
		0x00000000u, 0x3f800001u, 0xc0490fdbu,
	};
	enum {
		NB = sizeof(bits) / sizeof(bits[0])
	};
	const struct kvc_optim *vs[2];
	int nv = variants(vs);
	kvf_opt_config cfg;
	struct kvc_optim_step s;

	/* SGD with lr 0 leaves p as it is: params_out = p rounded */
	rcfg_config(&rcfgs[4], KVF_DTYPE_F32, &cfg);
	cfg.lr = 0.0f;
	for (int vi = 0; vi < nv; vi++)
		for (int od = 0; od < 2; od++) {
			float p[NB], g[NB] = { 0 };
			uint16_t out[NB];

			cfg.out_dtype = dtypes[od];
			for (size_t i = 0; i < NB; i++)
				p[i] = kvf_bits_f32(bits[i]);
			kvc_optim_step_prepare(&s, &cfg, 1, 1.0f);
			kvc_optim_dense(vs[vi], &s, p, NULL, NULL, NB, g,
					KVF_DTYPE_F32, out);
			for (size_t i = 0; i < NB; i++) {
				uint16_t want = dtypes[od] == KVF_DTYPE_F16 ?
							kvf_f32_to_f16(p[i]) :
							kvf_f32_to_bf16(p[i]);

				cr_assert(eq(u16, out[i], want),
					  "%s %s: 0x%08x",
					  kvc_optim_name(vs[vi]),
					  dtype_name(dtypes[od]), bits[i]);
			}
		}
}

/* ---- sparse gradients ---------------------------------------------------- */

/*
 * sparse_chunks - run one step of a Top-K gradient over r in random chunks,
 * each given its part of the index list by kvc_optim_grad_span, with the
 * tensor at index base.
 */
static void sparse_chunks(const struct kvc_optim *k,
			  const struct kvc_optim_step *s, struct rstate *r,
			  uint32_t base, kvf_dtype gdt, uint64_t *rng)
{
	size_t ge = elt_bytes(gdt), oe = elt_bytes(s->out_dtype);
	uint32_t *idx = xmalloc((r->nnz + 1) * sizeof(*idx));

	for (size_t j = 0; j < r->nnz; j++)
		idx[j] = r->idx[j] + base;
	for (size_t a = 0, len; a < r->n; a += len) {
		size_t first, count;

		len = 1 + rng_below(rng, 300);
		len = len < r->n - a ? len : r->n - a;
		kvc_optim_grad_span(idx, r->nnz, base + a, len, &first, &count);
		kvc_optim_sparse(k, s, r->p + a, r->m + a, r->v + a, len,
				 base + a, idx + first,
				 (char *)r->val + first * ge, count, gdt,
				 (char *)r->out + a * oe);
	}
	free(idx);
}

/*
 * sparse_case - three steps of rule r over 1003 random elements with a
 * gradient of density_pct nonzeros: once dense in one call, once Top-K in
 * random chunks (seeded by seed); every array must stay identical.
 */
static void sparse_case(const struct kvc_optim *k, const struct rcfg *r,
			kvf_dtype gdt, unsigned density_pct, uint64_t seed)
{
	uint64_t r1 = seed, r2 = seed, chunks = seed ^ 0x5eed;
	struct rstate dense, sparse;
	kvf_opt_config cfg;
	struct kvc_optim_step s;
	size_t n = 1003;
	char ctx[160];

	rstate_make(&dense, &r1, n, gdt, KVF_DTYPE_BF16, density_pct);
	rstate_make(&sparse, &r2, n, gdt, KVF_DTYPE_BF16, density_pct);
	rcfg_config(r, KVF_DTYPE_BF16, &cfg);
	snprintf(ctx, sizeof(ctx), "%s %s grad %s density %u%%",
		 kvc_optim_name(k), r->name, dtype_name(gdt), density_pct);
	for (uint64_t t = 1; t <= 3; t++) {
		kvc_optim_step_prepare(&s, &cfg, t, 0.5f);
		kvc_optim_dense(k, &s, dense.p, dense.m, dense.v, n, dense.g,
				gdt, dense.out);
		sparse_chunks(k, &s, &sparse, 12345u, gdt, &chunks);
		compare_states(&dense, &sparse, KVF_DTYPE_BF16, ctx);
	}
	rstate_free(&dense);
	rstate_free(&sparse);
}

Test(optim, sparse_equals_dense_with_zeros_in_any_chunking)
{
	static const unsigned densities[] = { 0, 1, 10, 50, 100 };
	const struct kvc_optim *vs[2];
	int nv = variants(vs);
	uint64_t seed = rng_seed("optim sparse_equals_dense");

	for (int vi = 0; vi < nv; vi++) {
		for (size_t c = 0; c < N_RCFGS; c++) {
			/* every grad dtype x density */
			for (int x = 0; x < 3 * 5; x++)
				sparse_case(vs[vi], &rcfgs[c], dtypes[x / 5],
					    densities[x % 5],
					    seed + c * 7919 + (uint64_t)x);
		}
	}
}

/* A rule for unlisted_case. */
struct urule {
	const char *name;
	kvf_opt_kind kind;
	float wd, momentum;
};

/*
 * unlisted_case - step 2 of rule u over 10 elements with m = 0.5, v = 0.25,
 * and a Top-K gradient naming elements 0 and 9 only: equal to the dense
 * gradient with zeros, and element 1 (never named) still updated.
 */
static void unlisted_case(const struct kvc_optim *k, const struct urule *u)
{
	float p[10], m[10], v[10], pd[10], md[10], vd[10], g[10] = { 0 };
	uint32_t idx[2] = { 0, 9 };
	float val[2] = { 0.5f, -0.25f };
	kvf_opt_config cfg;
	struct kvc_optim_step s;

	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = u->kind;
	cfg.lr = 0.1f;
	cfg.beta1 = 0.9f;
	cfg.beta2 = 0.999f;
	cfg.eps = 1e-8f;
	cfg.weight_decay = u->wd;
	cfg.momentum = u->momentum;
	cfg.out_dtype = KVF_DTYPE_F32;
	g[0] = val[0];
	g[9] = val[1];
	for (int i = 0; i < 10; i++) {
		p[i] = pd[i] = 1.0f + (float)i;
		m[i] = md[i] = 0.5f;
		v[i] = vd[i] = 0.25f;
	}
	kvc_optim_step_prepare(&s, &cfg, 2, 1.0f); /* not the first step */
	kvc_optim_sparse(k, &s, p, m, v, 10, 0, idx, val, 2, KVF_DTYPE_F32,
			 NULL);
	kvc_optim_dense(k, &s, pd, md, vd, 10, g, KVF_DTYPE_F32, NULL);
	cr_assert(memcmp(p, pd, sizeof(p)) == 0 &&
			  memcmp(m, md, sizeof(m)) == 0 &&
			  memcmp(v, vd, sizeof(v)) == 0,
		  "%s %s: sparse != dense with zeros", kvc_optim_name(k),
		  u->name);
	cr_assert(p[1] != 2.0f, "%s %s: unlisted p untouched",
		  kvc_optim_name(k), u->name);
	if (u->kind == KVF_OPT_ADAM || u->kind == KVF_OPT_ADAMW)
		cr_assert(m[1] < 0.5f && v[1] < 0.25f,
			  "%s %s: unlisted m, v did not decay",
			  kvc_optim_name(k), u->name);
	if (u->kind == KVF_OPT_SGD && u->momentum != 0.0f)
		cr_assert(eq(flt, m[1], 0.5f * 0.9f));
	if (u->kind == KVF_OPT_ADAGRAD) /* g = wd p: the sum grows */
		cr_assert(v[1] > 0.25f);
}

/*
 * A Top-K gradient means "the rest are zero", not "the rest are untouched":
 * an element the list never names still has its m and v decay, its
 * weight decay, and its Adam or momentum step.
 */
Test(optim, sparse_unlisted_elements_are_still_updated)
{
	static const struct urule rules[] = {
		{ "adam", KVF_OPT_ADAM, 0.0f, 0.0f },
		{ "adam_l2", KVF_OPT_ADAM, 0.1f, 0.0f },
		{ "adamw", KVF_OPT_ADAMW, 0.1f, 0.0f },
		{ "sgd_momentum", KVF_OPT_SGD, 0.0f, 0.9f },
		{ "sgd_wd", KVF_OPT_SGD, 0.1f, 0.0f },
		{ "adagrad_wd", KVF_OPT_ADAGRAD, 0.1f, 0.0f },
	};
	const struct kvc_optim *vs[2];
	int nv = variants(vs);

	for (int vi = 0; vi < nv; vi++) {
		for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); r++)
			unlisted_case(vs[vi], &rules[r]);
	}
}

Test(optim, sparse_helpers)
{
	static const uint32_t idx[] = { 3, 4, 10, 11, 12, 40, 41, 1000 };
	enum {
		NNZ = sizeof(idx) / sizeof(idx[0])
	};
	static const struct {
		uint64_t i0, n;
		size_t first, count;
	} spans[] = {
		{ 0, 3, 0, 0 },
		{ 0, 4, 0, 1 },
		{ 3, 2, 0, 2 },
		{ 4, 7, 1, 2 },
		{ 5, 5, 2, 0 },
		{ 5, 6, 2, 1 },
		{ 12, 1, 4, 1 },
		{ 13, 27, 5, 0 },
		{ 13, 28, 5, 1 },
		{ 0, 2000, 0, NNZ },
		{ 1000, 1, 7, 1 },
		{ 1001, 5, NNZ, 0 },
		{ 5, UINT64_MAX, 2, NNZ - 2 },
	};
	static const uint32_t bad_order[] = { 1, 2, 2, 5 };
	static const uint32_t bad_desc[] = { 7, 3 };
	size_t first, count;

	for (size_t i = 0; i < sizeof(spans) / sizeof(spans[0]); i++) {
		kvc_optim_grad_span(idx, NNZ, spans[i].i0, spans[i].n, &first,
				    &count);
		cr_assert(eq(sz, first, spans[i].first), "span %zu", i);
		cr_assert(eq(sz, count, spans[i].count), "span %zu", i);
	}
	kvc_optim_grad_span(NULL, 0, 0, 10, &first, &count);
	cr_assert(eq(sz, first, 0));
	cr_assert(eq(sz, count, 0));

	cr_assert(eq(sz, kvc_optim_grad_check(idx, NNZ, 1001), NNZ));
	cr_assert(eq(sz, kvc_optim_grad_check(idx, NNZ, 1000), NNZ - 1));
	cr_assert(eq(sz, kvc_optim_grad_check(bad_order, 4, 10), 2));
	cr_assert(eq(sz, kvc_optim_grad_check(bad_desc, 2, 10), 1));
	cr_assert(eq(sz, kvc_optim_grad_check(NULL, 0, 0), 0));
	cr_assert(eq(sz, kvc_optim_grad_check(idx, 1, 3), 0));
}

/* ---- gradient norm and NaN/Inf ------------------------------------------- */

/* ref_sumsq - the sum of squares in long double (each square exact). */
static long double ref_sumsq(const void *g, size_t n, kvf_dtype dt)
{
	long double s = 0;

	for (size_t i = 0; i < n; i++) {
		long double x = get(g, i, dt);

		s += x * x;
	}
	return s;
}

/*
 * sumsq_case - the sum of squares of n random values of dt (30% nonzero),
 * dense and as a Top-K value list, on every variant, against ref_sumsq.
 */
static void sumsq_case(const struct kvc_optim *const *vs, int nv, size_t n,
		       kvf_dtype dt, uint64_t *rng)
{
	struct rstate r;
	long double want;

	rstate_make(&r, rng, n, dt, KVF_DTYPE_F32, 30);
	want = ref_sumsq(r.g, n, dt);
	for (int vi = 0; vi < nv; vi++) {
		double dense = kvc_optim_grad_sumsq(vs[vi], r.g, n, dt);
		double sparse = kvc_optim_grad_sumsq(vs[vi], r.val, r.nnz, dt);

		cr_assert(fabsl(dense - want) <= 1e-12L * want,
			  "%s %s n=%zu: %.17g want %.17Lg",
			  kvc_optim_name(vs[vi]), dtype_name(dt), n, dense,
			  want);
		cr_assert(fabsl(sparse - want) <= 1e-12L * want,
			  "%s %s n=%zu sparse: %.17g want %.17Lg",
			  kvc_optim_name(vs[vi]), dtype_name(dt), n, sparse,
			  want);
	}
	rstate_free(&r);
}

Test(optim, sumsq_dense_sparse_and_variants)
{
	const struct kvc_optim *vs[2];
	int nv = variants(vs);
	uint64_t rng = rng_seed("optim sumsq");

	for (int gd = 0; gd < 3; gd++) {
		for (size_t li = 0; li < N_LENGTHS; li++)
			sumsq_case(vs, nv, lengths[li], dtypes[gd], &rng);
	}
}

Test(optim, sumsq_cannot_overflow_and_flags_nonfinite)
{
	const struct kvc_optim *vs[2];
	int nv = variants(vs);
	float g[100];

	for (int i = 0; i < 100; i++)
		g[i] = i % 2 ? FLT_MAX : -FLT_MAX;
	for (int vi = 0; vi < nv; vi++) {
		double s = kvc_optim_grad_sumsq(vs[vi], g, 100, KVF_DTYPE_F32);

		cr_assert(isfinite(s) && s > 1e78, "%s: %g",
			  kvc_optim_name(vs[vi]), s);
		g[37] = INFINITY;
		cr_assert(isinf(
			kvc_optim_grad_sumsq(vs[vi], g, 100, KVF_DTYPE_F32)));
		g[37] = NAN;
		cr_assert(isnan(
			kvc_optim_grad_sumsq(vs[vi], g, 100, KVF_DTYPE_F32)));
		g[37] = 1.0f;
		cr_assert(eq(dbl,
			     kvc_optim_grad_sumsq(vs[vi], g, 0, KVF_DTYPE_F32),
			     0.0));
	}
}

/*
 * nonfinite_case - the NaN/Inf check of variant k over n elements of dt at
 * g: none in a mix of the largest finite value, a subnormal and zeros;
 * then +Inf, -Inf and NaN at every step-th position, one at a time.
 */
static void nonfinite_case(const struct kvc_optim *k, void *g, size_t n,
			   kvf_dtype dt, size_t step)
{
	static const float bad[3] = { INFINITY, -INFINITY, NAN };
	float big = dt == KVF_DTYPE_F16  ? 65504.0f :
		    dt == KVF_DTYPE_BF16 ? kvf_bf16_to_f32(0x7f7f) :
					   FLT_MAX;
	float tiny = dt == KVF_DTYPE_F16  ? 0x1p-24f :
		     dt == KVF_DTYPE_BF16 ? 0x1p-133f :
					    0x1p-149f;
	const char *name = kvc_optim_name(k);

	for (size_t i = 0; i < n; i++)
		put(g, i, dt, i % 3 == 0 ? -big : i % 3 == 1 ? tiny : 0.0f);
	cr_assert(false == kvc_optim_grad_nonfinite(k, g, n, dt),
		  "%s %s n=%zu: finite values flagged", name, dtype_name(dt),
		  n);
	for (size_t pos = 0; pos < n; pos += step) {
		float keep = get(g, pos, dt);

		for (int b = 0; b < 3; b++) {
			put(g, pos, dt, bad[b]);
			cr_assert(kvc_optim_grad_nonfinite(k, g, n, dt),
				  "%s %s n=%zu: %g at %zu missed", name,
				  dtype_name(dt), n, (double)bad[b], pos);
		}
		put(g, pos, dt, keep);
	}
	put(g, n - 1, dt, NAN); /* the very last element */
	cr_assert(kvc_optim_grad_nonfinite(k, g, n, dt));
}

Test(optim, nonfinite_at_every_position_of_every_dtype)
{
	static const size_t ns[] = { 1, 7, 8, 9, 15, 16, 17, 33, 1000, 2100 };
	const struct kvc_optim *vs[2];
	int nv = variants(vs);
	unsigned char *buf = xmalloc(2101 * 4);

	for (int vi = 0; vi < nv; vi++) {
		for (size_t x = 0; x < 3 * sizeof(ns) / sizeof(ns[0]); x++) {
			kvf_dtype dt = dtypes[x % 3];
			size_t n = ns[x / 3];

			/* unaligned; every position up to 100, then a sample */
			nonfinite_case(vs[vi], buf + elt_bytes(dt), n, dt,
				       n > 100 ? 13 : 1);
		}
		cr_assert(false == kvc_optim_grad_nonfinite(vs[vi], NULL, 0,
							    KVF_DTYPE_F32));
	}
	free(buf);
}

Test(optim, clip_coef_is_torch_clip_grad_norm)
{
	/* clip_coef = max_norm / (total_norm + 1e-6), clamped to <= 1, fp32 */
	cr_assert(eq(flt, kvc_optim_clip_coef(0.5, 1.0), 1.0f));
	cr_assert(eq(flt, kvc_optim_clip_coef(0.0, 1.0), 1.0f));
	cr_assert(
		eq(flt, kvc_optim_clip_coef(4.0, 1.0), 1.0f / (4.0f + 1e-6f)));
	cr_assert(
		eq(flt, kvc_optim_clip_coef(2.5, 0.5), 0.5f / (2.5f + 1e-6f)));
	/* at max_norm it already scales a hair, as PyTorch does */
	cr_assert(kvc_optim_clip_coef(1.0, 1.0) < 1.0f);
	cr_assert(kvc_optim_clip_coef(1.0, 1.0) > 0.999998f);
}

/* ---- configuration, state, constants, dispatch --------------------------- */

static kvf_opt_config base_config(kvf_opt_kind kind)
{
	kvf_opt_config c;

	/* PyTorch's defaults (kvf_opt_config_init lives in the api layer) */
	memset(&c, 0, sizeof(c));
	c.struct_size = sizeof(c);
	c.kind = kind;
	c.lr = kind == KVF_OPT_ADAGRAD ? 1e-2f : 1e-3f;
	c.beta1 = 0.9f;
	c.beta2 = 0.999f;
	c.eps = kind == KVF_OPT_ADAGRAD ? 1e-10f : 1e-8f;
	c.weight_decay = kind == KVF_OPT_ADAMW ? 1e-2f : 0.0f;
	c.out_dtype = KVF_DTYPE_F32;
	return c;
}

static void expect_bad(const kvf_opt_config *c, const char *substr)
{
	char why[128] = "";

	cr_assert(false == kvc_optim_config_check(c, why, sizeof(why)),
		  "accepted; wanted \"%s\"", substr);
	cr_assert(strstr(why, substr) != NULL, "message \"%s\" lacks \"%s\"",
		  why, substr);
}

Test(optim, config_check_follows_torch)
{
	kvf_opt_config c;

	for (int k = KVF_OPT_ADAM; k <= KVF_OPT_ADAGRAD; k++) {
		c = base_config((kvf_opt_kind)k);
		cr_assert(kvc_optim_config_check(&c, NULL, 0), "kind %d", k);
		c.lr = -1.0f;
		expect_bad(&c, "lr -1 must be finite and >= 0");
		c.lr = NAN;
		expect_bad(&c, "lr");
		c = base_config((kvf_opt_kind)k);
		c.weight_decay = -0.5f;
		expect_bad(&c, "weight_decay -0.5");
		c = base_config((kvf_opt_kind)k);
		c.out_dtype = (kvf_dtype)9;
		expect_bad(&c, "out_dtype 9");
	}
	c = base_config(KVF_OPT_ADAM);
	c.beta1 = 1.0f;
	expect_bad(&c, "beta1 1 out of range [0, 1)");
	c = base_config(KVF_OPT_ADAMW);
	c.beta2 = -0.1f;
	expect_bad(&c, "beta2 -0.1");
	c.beta2 = 0.0f; /* allowed, as in PyTorch */
	cr_assert(kvc_optim_config_check(&c, NULL, 0));
	c.eps = INFINITY;
	expect_bad(&c, "eps inf");

	c = base_config(KVF_OPT_SGD);
	c.beta1 = 5.0f; /* not SGD's: ignored */
	c.momentum = 0.9f;
	c.dampening = 0.1f;
	cr_assert(kvc_optim_config_check(&c, NULL, 0));
	c.nesterov = 1;
	expect_bad(&c, "dampening 0.1 must be 0 for Nesterov");
	c.dampening = 0.0f;
	cr_assert(kvc_optim_config_check(&c, NULL, 0));
	c.momentum = 0.0f;
	expect_bad(&c, "momentum 0 must be > 0 for Nesterov");
	c.nesterov = 2;
	expect_bad(&c, "nesterov 2");
	c = base_config(KVF_OPT_SGD);
	c.momentum = -0.9f;
	expect_bad(&c, "momentum -0.9");

	c = base_config(KVF_OPT_ADAGRAD);
	c.initial_accumulator_value = -0.1f;
	expect_bad(&c, "initial_accumulator_value -0.1");
	c = base_config(KVF_OPT_ADAGRAD);
	c.lr_decay = -1e-3f;
	expect_bad(&c, "lr_decay -0.001");

	c = base_config(KVF_OPT_ADAM);
	c.kind = (kvf_opt_kind)7;
	expect_bad(&c, "kind 7");
}

Test(optim, states_and_state_init)
{
	kvf_opt_config c = base_config(KVF_OPT_ADAM);
	float m[5], v[5];

	cr_assert(eq(u32, kvc_optim_states(&c), KVC_OPTIM_M | KVC_OPTIM_V));
	c.kind = KVF_OPT_ADAMW;
	cr_assert(eq(u32, kvc_optim_states(&c), KVC_OPTIM_M | KVC_OPTIM_V));
	c = base_config(KVF_OPT_SGD);
	cr_assert(eq(u32, kvc_optim_states(&c), 0));
	c.momentum = 0.5f;
	cr_assert(eq(u32, kvc_optim_states(&c), KVC_OPTIM_M));
	c = base_config(KVF_OPT_ADAGRAD);
	cr_assert(eq(u32, kvc_optim_states(&c), KVC_OPTIM_V));

	c.initial_accumulator_value = 0.1f;
	for (int i = 0; i < 5; i++)
		m[i] = v[i] = 7.0f;
	kvc_optim_state_init(&c, m, v, 5);
	for (int i = 0; i < 5; i++) {
		cr_assert(eq(flt, v[i], 0.1f));
		cr_assert(eq(flt, m[i], 7.0f)); /* AdaGrad keeps no m */
	}
	kvc_optim_state_init(&c, NULL, v, 5);
	c = base_config(KVF_OPT_ADAM);
	kvc_optim_state_init(&c, m, v, 5);
	for (int i = 0; i < 5; i++) {
		cr_assert(eq(flt, m[i], 0.0f));
		cr_assert(eq(flt, v[i], 0.0f));
	}
	c = base_config(KVF_OPT_SGD);
	kvc_optim_state_init(&c, NULL, NULL, 5); /* keeps nothing */
}

Test(optim, step_constants_use_the_decimal_hyper_parameters)
{
	kvf_opt_config c = base_config(KVF_OPT_ADAM);
	struct kvc_optim_step s;

	/* beta2 0.999f is read as the double 0.999, as PyTorch holds it */
	kvc_optim_step_prepare(&s, &c, 1, 1.0f);
	cr_assert(eq(flt, s.bc2_sqrt, (float)sqrt(1.0 - 0.999)));
	cr_assert(s.bc2_sqrt != (float)sqrt(1.0 - (double)0.999f));
	cr_assert(eq(flt, s.step_size, (float)(1e-3 / (1.0 - 0.9))));
	cr_assert(eq(flt, s.one_minus_beta2, (float)(1.0 - 0.999)));
	cr_assert(eq(flt, s.lerp_w, 0.1f));
	cr_assert(eq(u32, s.lerp_small, 1));
	cr_assert(eq(flt, s.decay, 1.0f));
	cr_assert(eq(flt, s.l2, 0.0f));
	kvc_optim_step_prepare(&s, &c, 1000000, 1.0f);
	cr_assert(eq(flt, s.step_size, 1e-3f));
	cr_assert(eq(flt, s.bc2_sqrt, 1.0f));

	c = base_config(KVF_OPT_ADAMW); /* wd 0.01: decoupled, no L2 */
	kvc_optim_step_prepare(&s, &c, 3, 1.0f);
	cr_assert(eq(flt, s.decay, (float)(1.0 - 1e-3 * 1e-2)));
	cr_assert(eq(flt, s.l2, 0.0f));

	c = base_config(KVF_OPT_SGD);
	c.momentum = 0.9f;
	c.dampening = 0.1f;
	kvc_optim_step_prepare(&s, &c, 1, 1.0f);
	cr_assert(eq(u32, s.first, 1));
	cr_assert(eq(flt, s.one_minus_damp, (float)(1.0 - 0.1)));
	kvc_optim_step_prepare(&s, &c, 2, 1.0f);
	cr_assert(eq(u32, s.first, 0));

	c = base_config(KVF_OPT_ADAGRAD);
	c.lr_decay = 0.01f;
	kvc_optim_step_prepare(&s, &c, 11, 0.25f);
	cr_assert(eq(flt, s.clr, (float)(1e-2 / (1.0 + 10 * 0.01))));
	cr_assert(eq(flt, s.grad_scale, 0.25f));
}

/* SGD's first step puts the gradient itself in the buffer (no dampening);
 * later steps dampen. */
Test(optim, sgd_first_step_rule)
{
	const struct kvc_optim *vs[2];
	int nv = variants(vs);
	kvf_opt_config c = base_config(KVF_OPT_SGD);
	struct kvc_optim_step s;

	c.lr = 0.5f;
	c.momentum = 0.9f;
	c.dampening = 0.5f;
	for (int vi = 0; vi < nv; vi++) {
		float p[9], m[9], g[9];

		for (int i = 0; i < 9; i++) {
			p[i] = 1.0f;
			m[i] = 123.0f; /* whatever was there is ignored */
			g[i] = 2.0f;
		}
		kvc_optim_step_prepare(&s, &c, 1, 1.0f);
		kvc_optim_dense(vs[vi], &s, p, m, NULL, 9, g, KVF_DTYPE_F32,
				NULL);
		for (int i = 0; i < 9; i++) {
			cr_assert(eq(flt, m[i], 2.0f));
			cr_assert(eq(flt, p[i], 0.0f));
		}
		kvc_optim_step_prepare(&s, &c, 2, 1.0f);
		kvc_optim_dense(vs[vi], &s, p, m, NULL, 9, g, KVF_DTYPE_F32,
				NULL);
		for (int i = 0; i < 9; i++) /* 0.9 * 2 + 0.5 * 2 */
			cr_assert(eq(flt, m[i], 0.9f * 2.0f + 0.5f * 2.0f));
	}
}

/* Arrays a rule does not keep may be NULL, params_out may be NULL, and a
 * chunk of 0 elements touches nothing. */
Test(optim, optional_arrays_may_be_null)
{
	const struct kvc_optim *vs[2];
	int nv = variants(vs);
	struct kvc_optim_step s;

	for (int vi = 0; vi < nv; vi++) {
		static const kvf_opt_kind kinds[] = { KVF_OPT_SGD,
						      KVF_OPT_ADAGRAD };

		for (int ki = 0; ki < 2; ki++) {
			kvf_opt_config c = base_config(kinds[ki]);
			float p[20], q[20], m[20], v[20], v2[20], g[20];
			float out[20];

			for (int i = 0; i < 20; i++) {
				p[i] = q[i] = (float)i / 7.0f;
				v[i] = v2[i] = 0.5f;
				m[i] = 0.0f;
				g[i] = (float)(i % 5) - 2.0f;
			}
			kvc_optim_step_prepare(&s, &c, 1, 1.0f);
			kvc_optim_dense(vs[vi], &s, p, NULL,
					kinds[ki] == KVF_OPT_SGD ? NULL : v, 20,
					g, KVF_DTYPE_F32, NULL);
			kvc_optim_dense(vs[vi], &s, q, m, v2, 20, g,
					KVF_DTYPE_F32, out);
			cr_assert(memcmp(p, q, sizeof(p)) == 0);
			cr_assert(memcmp(p, out, sizeof(p)) == 0);
			kvc_optim_sparse(vs[vi], &s, p, NULL, v, 20, 0, NULL,
					 NULL, 0, KVF_DTYPE_F16, NULL);
		}
		kvc_optim_dense(vs[vi], &s, NULL, NULL, NULL, 0, NULL,
				KVF_DTYPE_F32, NULL);
	}
}

Test(optim, dispatch_forced_scalar_by_environment)
{
	cr_assert(setenv("KVF_SIMD", "scalar", 1) == 0);
	cr_assert(kvc_optim() == kvc_optim_scalar());
	cr_assert(eq(str, (char *)kvc_optim_name(kvc_optim()), "scalar"));
	cr_assert(kvc_optim() == kvc_optim_scalar()); /* chosen once */
}

Test(optim, dispatch_picks_avx2_when_there)
{
	const struct kvc_optim *av = kvc_optim_avx2();

	cr_assert(unsetenv("KVF_SIMD") == 0);
	cr_assert(kvc_optim() == (av ? av : kvc_optim_scalar()));
	if (av)
		cr_assert(eq(str, (char *)kvc_optim_name(av), "avx2"));
}
