/*
 * test_handles.c - the contract of handles after close and after failure.
 *
 * kvf_close releases the store whatever state it is in; its optimizer
 * handles outlive it, and every call on them but kvf_opt_close answers
 * KVF_ECLOSED (they used to reach into the freed store and crash).  A
 * store that went fatal answers KVF_EFATAL on every call, its optimizers'
 * too, and its close says KVF_EFATAL: the caller learns its last writes
 * may not be durable.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/store_state.h"
#include "engine/base/catalog.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

#define IS(code, call)                                                        \
	cr_assert(eq(int, (call), code), "%s", kvf_last_error())

static kvf_store *open_store(void)
{
	kvf_model m = { 2, 2, 2, 64, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st;

	o = fx_options_for(&m, 64 * 1024, 64ull * 64 * 1024, 0);
	o.n_threads = 1;
	OK(kvf_open(fx.path, &o, &st));
	return st;
}

TestSuite(handles, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 60);

Test(handles, optimizer_calls_after_store_close_are_eclosed)
{
	kvf_store *st = open_store();
	kvf_opt_config c;
	kvf_opt *a, *b;
	float g[100], p[100];
	kvf_grad grad = { KVF_DTYPE_F32, g, NULL, 100 };
	uint64_t steps;

	for (int i = 0; i < 100; i++)
		g[i] = (float)i / 100;
	kvf_opt_config_init(&c, KVF_OPT_SGD);
	OK(kvf_opt_create(st, "w", 100, &c, NULL, &a));
	OK(kvf_opt_open(st, "w", &b));
	OK(kvf_opt_step(a, &grad, p));
	OK(kvf_close(st));

	IS(KVF_ECLOSED, kvf_opt_step(a, &grad, p));
	cr_assert(strstr(kvf_last_error(), "was closed") != NULL, "%s",
		  kvf_last_error());
	IS(KVF_ECLOSED, kvf_opt_read(b, 0, 10, p));
	IS(KVF_ECLOSED, kvf_opt_steps(a, &steps, NULL));
	OK(kvf_opt_close(a));
	OK(kvf_opt_close(b));

	/* the step before close is in the store */
	st = open_store();
	OK(kvf_opt_open(st, "w", &a));
	OK(kvf_opt_steps(a, &steps, NULL));
	cr_assert(eq(u64, steps, 1));
	OK(kvf_opt_close(a));
	OK(kvf_close(st));
}

Test(handles, fatal_store_answers_efatal_everywhere_and_at_close)
{
	kvf_store *st = open_store();
	kvf_opt_config c;
	kvf_opt *a;
	float g[100] = { 0 }, p[100];
	kvf_grad grad = { KVF_DTYPE_F32, g, NULL, 100 };
	uint64_t steps;

	kvf_opt_config_init(&c, KVF_OPT_SGD);
	OK(kvf_opt_create(st, "w", 100, &c, NULL, &a));
	OK(kvf_seq_create(st, 1));
	catalog_fail_commits(st->cat, 1000);
	IS(KVF_EFATAL, kvf_sync(st));
	IS(KVF_EFATAL, kvf_opt_step(a, &grad, p));
	IS(KVF_EFATAL, kvf_opt_read(a, 0, 10, p));
	IS(KVF_EFATAL, kvf_opt_steps(a, &steps, NULL));
	IS(KVF_EFATAL, kvf_seq_create(st, 2));
	IS(KVF_EFATAL, kvf_close(st));
	cr_assert(strstr(kvf_last_error(), "kvf_close") != NULL, "%s",
		  kvf_last_error());
	IS(KVF_ECLOSED, kvf_opt_step(a, &grad, p));
	OK(kvf_opt_close(a));
}

Test(handles, null_handles)
{
	float p[4];
	uint64_t steps;

	OK(kvf_close(NULL));
	OK(kvf_opt_close(NULL));
	IS(KVF_EINVAL, kvf_opt_step(NULL, NULL, NULL));
	IS(KVF_EINVAL, kvf_opt_read(NULL, 0, 1, p));
	IS(KVF_EINVAL, kvf_opt_steps(NULL, &steps, NULL));
	IS(KVF_EINVAL, kvf_sync(NULL));
}
