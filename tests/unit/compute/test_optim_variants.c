/*
 * test_optim_variants.c - the optimizer kernels of compute/optim.h:
 * scalar against AVX2, the _from kernels against the in-place ones, and
 * params_out conversions against half.h.
 *
 * Scalar against AVX2, on random data of lengths 0, 1, 7, 8, 9, 1000 and
 * 1003 (more than one 256-element block), unaligned, for every rule and
 * option set: bit for bit (tolerance 0), because both variants round every
 * fp32 operation in the same order without fused multiply-adds (optim.h).
 * Sums of squares: relative 1e-12 (the order of double additions differs).
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

	ofx_rstate_make(&a, &ra, n, gdt, odt, 60);
	ofx_rstate_make(&b, &rb, n, gdt, odt, 60);
	ofx_rcfg_config(r, odt, &cfg);
	snprintf(ctx, sizeof(ctx), "%s n=%zu grad %s out %s %s", r->name, n,
		 kr_dtype_name(gdt), kr_dtype_name(odt),
		 sparse ? "sparse" : "dense");
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
		ofx_compare_states(&a, &b, odt, ctx);
	}
	ofx_rstate_free(&a);
	ofx_rstate_free(&b);
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
static void from_case(const struct kvc_optim *k, const struct rcfg *r, size_t n,
		      kvf_dtype gdt, int sparse, uint64_t seed)
{
	uint64_t ra = seed, rb = seed, rc = ~seed;
	struct rstate a, b, x; /* b and x: the two generations of b; x
				* starts different, so reading an out
				* array instead of its in array shows */
	kvf_opt_config cfg;
	struct kvc_optim_step s;
	char ctx[160];

	ofx_rstate_make(&a, &ra, n, gdt, KVF_DTYPE_F32, 60);
	ofx_rstate_make(&b, &rb, n, gdt, KVF_DTYPE_F32, 60);
	ofx_rstate_make(&x, &rc, n, gdt, KVF_DTYPE_F32, 60);
	ofx_rcfg_config(r, KVF_DTYPE_F32, &cfg);
	snprintf(ctx, sizeof(ctx), "%s %s n=%zu grad %s %s", kvc_optim_name(k),
		 r->name, n, kr_dtype_name(gdt), sparse ? "sparse" : "dense");
	for (uint64_t t = 1; t <= 3; t++) {
		struct rstate *in = t % 2 ? &b : &x, *out = t % 2 ? &x : &b;
		struct kvc_optim_chunk c = { { in->p, in->m, in->v },
					     { out->p, out->m, out->v } };
		float *keep = ofx_xmalloc(5 * n * sizeof(float) + 1);

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
		ofx_same_bits(a.p, out->p, n * 4, "params", ctx);
		ofx_same_bits(a.out, out->out, n * 4, "params_out", ctx);
		if (kvc_optim_states(&cfg) & KVC_OPTIM_M)
			ofx_same_bits(a.m, out->m, n * 4, "m", ctx);
		else
			ofx_same_bits(keep + 3 * n, out->m, n * 4, "m not kept",
				      ctx);
		if (kvc_optim_states(&cfg) & KVC_OPTIM_V)
			ofx_same_bits(a.v, out->v, n * 4, "v", ctx);
		else
			ofx_same_bits(keep + 4 * n, out->v, n * 4, "v not kept",
				      ctx);
		ofx_same_bits(keep, in->p, n * 4, "params read", ctx);
		ofx_same_bits(keep + n, in->m, n * 4, "m read", ctx);
		ofx_same_bits(keep + 2 * n, in->v, n * 4, "v read", ctx);
		free(keep);
	}
	ofx_rstate_free(&a);
	ofx_rstate_free(&b);
	ofx_rstate_free(&x);
}

Test(optim, from_kernels_equal_in_place_and_leave_their_input)
{
	uint64_t seed = rng_seed("optim from kernels");
	const struct kvc_optim *v[2];
	int nv = ofx_variants(v);

	for (int vi = 0; vi < nv; vi++)
		for (size_t c = 0; c < N_RCFGS; c++)
			for (size_t li = 0; li < N_LENGTHS; li++)
				for (int x = 0; x < 3 * 2; x++)
					from_case(v[vi], &rcfgs[c], lengths[li],
						  dtypes[x / 2], x % 2,
						  seed + c * 1000003 +
							  li * 1009 +
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
	int nv = ofx_variants(vs);
	kvf_opt_config cfg;
	struct kvc_optim_step s;

	/* SGD with lr 0 leaves p as it is: params_out = p rounded */
	ofx_rcfg_config(&rcfgs[4], KVF_DTYPE_F32, &cfg);
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
					  kr_dtype_name(dtypes[od]), bits[i]);
			}
		}
}
