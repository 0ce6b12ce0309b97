/*
 * test_optim_config.c - the optimizer configuration of compute/optim.h:
 * the check that follows PyTorch, state sizes and initialization, the
 * step constants, optional arrays, and the choice of kernel variant.
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
	int nv = ofx_variants(vs);
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
	int nv = ofx_variants(vs);
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
