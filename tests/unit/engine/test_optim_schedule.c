/*
 * test_optim_schedule.c - kvf_opt_step_config: each step takes the
 * caller's hyper-parameters (a learning-rate schedule, changing betas,
 * weight decay and momentum) and gives the bits the kernels give on plain
 * arrays with those hyper-parameters, step by step and across a reopen,
 * while the stored configuration stays what kvf_opt_step uses; refusals
 * (another kind or out_dtype, a hyper-parameter torch refuses, NULL)
 * change nothing.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compute/optim.h"
#include "store_fixture.h"
#include "testutil.h"

#define NP 3000

TestSuite(optim_schedule, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 120);

static kvf_store *open_store(int create)
{
	kvf_model m = { 1, 1, 1, 64, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m, 128 * 1024, 64ull << 20, 1);
	kvf_store *st = NULL;

	OK(kvf_open(fx.path, create ? &o : NULL, &st));
	return st;
}

/* the reference: the kernels over whole arrays */
static float rp[NP], rm[NP], rv[NP];

static void ref_step(const kvf_opt_config *c, uint64_t t, const float *g)
{
	struct kvc_optim_step s;
	unsigned st = kvc_optim_states(c);

	kvc_optim_step_prepare(&s, c, t, 1.0f);
	kvc_optim_dense(kvc_optim(), &s, rp, st & KVC_OPTIM_M ? rm : NULL,
			st & KVC_OPTIM_V ? rv : NULL, NP, g, KVF_DTYPE_F32, NULL);
}

static void grad_of(float *g, uint64_t t)
{
	for (uint32_t i = 0; i < NP; i++)
		g[i] = sinf((float)(i * 13 + t * 7)) * 0.5f;
}

/* sched - step t's hyper-parameters: warm-up then decay, and betas,
 * weight decay and momentum that move too */
static void sched(kvf_opt_config *c, kvf_opt_kind kind, uint64_t t)
{
	kvf_opt_config_init(c, kind);
	c->lr = t <= 10 ? 0.01f * (float)t / 10.0f : 0.01f * powf(0.97f, (float)(t - 10));
	c->weight_decay = 0.01f * (float)(t % 3);
	if (kind == KVF_OPT_ADAMW || kind == KVF_OPT_ADAM) {
		c->beta1 = 0.85f + 0.01f * (float)(t % 5);
		c->beta2 = 0.99f + 0.001f * (float)(t % 7);
	} else if (kind == KVF_OPT_SGD) {
		c->momentum = 0.5f + 0.05f * (float)(t % 8);
	}
}

static void run_kind(kvf_opt_kind kind)
{
	static float g[NP], got[NP], init[NP];
	kvf_opt_config c0, c;
	kvf_store *st = open_store(1);
	kvf_opt *opt = NULL;
	kvf_grad grad = { KVF_DTYPE_F32, g, NULL, NP };
	uint64_t t = 0;

	fx.st = st;
	for (uint32_t i = 0; i < NP; i++)
		init[i] = cosf((float)i);
	kvf_opt_config_init(&c0, kind);
	if (kind == KVF_OPT_SGD)
		c0.momentum = 0.5f; /* the moment exists from creation */
	OK(kvf_opt_create(st, "s", NP, &c0, init, &opt));
	memcpy(rp, init, sizeof(rp));
	kvc_optim_state_init(&c0, rm, rv, NP);
	for (int phase = 0; phase < 2; phase++) {
		for (int i = 0; i < 30; i++) {
			t++;
			grad_of(g, t);
			sched(&c, kind, t);
			if (kind == KVF_OPT_SGD && c.momentum == 0)
				c.momentum = 0.1f;
			OK(kvf_opt_step_config(opt, &c, &grad, NULL));
			ref_step(&c, t, g);
		}
		OK(kvf_opt_read(opt, 0, NP, got));
		for (uint32_t i = 0; i < NP; i++)
			cr_assert(eq(int, memcmp(&got[i], &rp[i], 4), 0),
				  "kind %d step %llu parameter %u: %g, expected %g",
				  (int)kind, (unsigned long long)t, i,
				  (double)got[i], (double)rp[i]);
		OK(kvf_opt_close(opt));
		OK(kvf_close(st));
		st = open_store(0);
		fx.st = st;
		OK(kvf_opt_open(st, "s", &opt));
	}
	/* kvf_opt_step goes on with the stored configuration */
	t++;
	grad_of(g, t);
	OK(kvf_opt_step(opt, &grad, NULL));
	ref_step(&c0, t, g);
	OK(kvf_opt_read(opt, 0, NP, got));
	cr_assert(eq(int, memcmp(got, rp, sizeof(got)), 0),
		  "kvf_opt_step after scheduled steps");
	OK(kvf_opt_close(opt));
	OK(kvf_opt_free(st, "s"));
	OK(kvf_close(st));
	fx.st = NULL;
}

Test(optim_schedule, adamw)
{
	run_kind(KVF_OPT_ADAMW);
}

Test(optim_schedule, adam)
{
	run_kind(KVF_OPT_ADAM);
}

Test(optim_schedule, sgd)
{
	run_kind(KVF_OPT_SGD);
}

Test(optim_schedule, adagrad)
{
	run_kind(KVF_OPT_ADAGRAD);
}

/* never_stepped - opt took no step: its count is 0, its parameters are
 * before's */
static void never_stepped(kvf_opt *opt, const float *before)
{
	static float after[NP];
	uint64_t steps, n;

	OK(kvf_opt_steps(opt, &steps, &n));
	cr_assert(eq(u64, steps, 0));
	OK(kvf_opt_read(opt, 0, NP, after));
	cr_assert(eq(int, memcmp(before, after, sizeof(after)), 0));
}

Test(optim_schedule, refusals)
{
	static float g[NP], before[NP];
	kvf_opt_config c0, c;
	kvf_store *st = open_store(1);
	kvf_opt *opt = NULL;
	kvf_grad grad = { KVF_DTYPE_F32, g, NULL, NP };

	fx.st = st;
	kvf_opt_config_init(&c0, KVF_OPT_ADAM);
	OK(kvf_opt_create(st, "r", NP, &c0, NULL, &opt));
	grad_of(g, 1);
	OK(kvf_opt_read(opt, 0, NP, before));
	kvf_opt_config_init(&c, KVF_OPT_SGD);
	c.lr = 0.1f;
	cr_assert(eq(int, kvf_opt_step_config(opt, &c, &grad, NULL), KVF_EINVAL));
	fx_has("kvf_opt_step_config: cfg.kind 2 is not the kind 0 optimizer 'r' was created with");
	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	c.out_dtype = KVF_DTYPE_F16;
	cr_assert(eq(int, kvf_opt_step_config(opt, &c, &grad, NULL), KVF_EINVAL));
	fx_has("cfg.out_dtype f16 is not the f32 optimizer 'r' writes");
	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	c.beta2 = 1.0f;
	cr_assert(eq(int, kvf_opt_step_config(opt, &c, &grad, NULL), KVF_EINVAL));
	fx_has("beta2");
	c.beta2 = 0.999f;
	c.lr = -1.0f;
	cr_assert(eq(int, kvf_opt_step_config(opt, &c, &grad, NULL), KVF_EINVAL));
	fx_has("lr");
	c = c0;
	c.struct_size = sizeof(size_t); /* no room for its kind */
	cr_assert(eq(int, kvf_opt_step_config(opt, &c, &grad, NULL), KVF_EINVAL));
	fx_has("cfg.struct_size 8 does not reach its kind");
	cr_assert(eq(int, kvf_opt_step_config(opt, NULL, &grad, NULL), KVF_EINVAL));
	cr_assert(eq(int, kvf_opt_step_config(NULL, &c0, &grad, NULL), KVF_EINVAL));
	cr_assert(eq(int, kvf_opt_step_config(opt, &c0, NULL, NULL), KVF_EINVAL));
	never_stepped(opt, before);
	OK(kvf_opt_close(opt));
}

/* SGD's momentum buffer exists only when the optimizer was made with
 * momentum: a schedule that turns momentum on or off is refused and
 * changes nothing (turning it on was a NULL buffer in the kernel) */
Test(optim_schedule, momentum_turned_on_or_off_refused)
{
	static float g[NP], before[NP];
	kvf_opt_config plain, with, c;
	kvf_store *st = open_store(1);
	kvf_opt *a = NULL, *b = NULL;
	kvf_grad grad = { KVF_DTYPE_F32, g, NULL, NP };

	fx.st = st;
	kvf_opt_config_init(&plain, KVF_OPT_SGD);
	plain.lr = 0.1f;
	with = plain;
	with.momentum = 0.9f;
	OK(kvf_opt_create(st, "plain", NP, &plain, NULL, &a));
	OK(kvf_opt_create(st, "with", NP, &with, NULL, &b));
	grad_of(g, 1);
	OK(kvf_opt_read(a, 0, NP, before));
	c = plain;
	c.momentum = 0.9f;
	cr_assert(eq(int, kvf_opt_step_config(a, &c, &grad, NULL), KVF_EINVAL));
	fx_has("kvf_opt_step_config: cfg.momentum 0.9, but optimizer 'plain' was created with momentum 0");
	c = with;
	c.momentum = 0;
	cr_assert(eq(int, kvf_opt_step_config(b, &c, &grad, NULL), KVF_EINVAL));
	fx_has("optimizer 'with' was created with momentum 0.9");
	never_stepped(a, before);
	/* another momentum than the one made with is a schedule */
	c = with;
	c.momentum = 0.5f;
	OK(kvf_opt_step_config(b, &c, &grad, NULL));
	OK(kvf_opt_close(a));
	OK(kvf_opt_close(b));
}

/* a finite gradient that grad_scale takes past the fp32 range is refused
 * as a non-finite one is, and changes nothing */
Test(optim_schedule, a_gradient_grad_scale_overflows_refused)
{
	static float g[NP], before[NP];
	kvf_opt_config c;
	kvf_store *st = open_store(1);
	kvf_opt *opt = NULL;
	kvf_grad grad = { KVF_DTYPE_F32, g, NULL, NP };

	fx.st = st;
	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	OK(kvf_opt_create(st, "s", NP, &c, NULL, &opt));
	OK(kvf_opt_read(opt, 0, NP, before));
	grad_of(g, 1);
	g[17] = 3e38f;
	g[18] = 3e38f; /* a norm past FLT_MAX: no value overflows unscaled */
	c.grad_scale = 10.0f;
	cr_assert(eq(int, kvf_opt_step_config(opt, &c, &grad, NULL), KVF_ERANGE));
	fx_has("a gradient value of 3e+38 times the scale 10 (grad_scale, clipping) overflows fp32");
	never_stepped(opt, before);
	c.grad_scale = 1.0f; /* unscaled it fits */
	OK(kvf_opt_step_config(opt, &c, &grad, NULL));
	OK(kvf_opt_close(opt));
}
