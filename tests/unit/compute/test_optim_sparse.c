/*
 * test_optim_sparse.c - Top-K gradients in the optimizer kernels of
 * compute/optim.h.
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
#include "optim_fixture.h"
#include "testutil.h"

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
	size_t ge = ofx_elt_bytes(gdt), oe = ofx_elt_bytes(s->out_dtype);
	uint32_t *idx = ofx_xmalloc((r->nnz + 1) * sizeof(*idx));

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

	ofx_rstate_make(&dense, &r1, n, gdt, KVF_DTYPE_BF16, density_pct);
	ofx_rstate_make(&sparse, &r2, n, gdt, KVF_DTYPE_BF16, density_pct);
	ofx_rcfg_config(r, KVF_DTYPE_BF16, &cfg);
	snprintf(ctx, sizeof(ctx), "%s %s grad %s density %u%%",
		 kvc_optim_name(k), r->name, kr_dtype_name(gdt), density_pct);
	for (uint64_t t = 1; t <= 3; t++) {
		kvc_optim_step_prepare(&s, &cfg, t, 0.5f);
		kvc_optim_dense(k, &s, dense.p, dense.m, dense.v, n, dense.g,
				gdt, dense.out);
		sparse_chunks(k, &s, &sparse, 12345u, gdt, &chunks);
		ofx_compare_states(&dense, &sparse, KVF_DTYPE_BF16, ctx);
	}
	ofx_rstate_free(&dense);
	ofx_rstate_free(&sparse);
}

Test(optim, sparse_equals_dense_with_zeros_in_any_chunking)
{
	static const unsigned densities[] = { 0, 1, 10, 50, 100 };
	const struct kvc_optim *vs[2];
	int nv = ofx_variants(vs);
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
	int nv = ofx_variants(vs);

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
