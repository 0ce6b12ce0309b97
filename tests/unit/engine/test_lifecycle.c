/*
 * test_lifecycle.c - an engine's sequence ids across runs, and the GQA
 * mapping kvflash.h states.
 *
 * kvf_seq_reset: on a free id it creates, on a live one it frees and
 * creates (empty, its fork left whole), after a killed run it takes
 * whatever the run left; refusals change nothing.  GQA: query head h
 * attends with KV head h / (n_q_heads / n_kv_heads), checked against a
 * double-precision attention of each query head over the KV head that
 * mapping names (and found different from the other obvious mapping,
 * h % n_kv_heads, so the check can tell them apart).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "store_fixture.h"
#include "testutil.h"

TestSuite(lifecycle, .init = fx_setup, .fini = fx_teardown, .timeout = 60);
TestSuite(lifecycle_rt, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 60);

Test(lifecycle, reset_refusals)
{
	REFUSED(kvf_seq_reset(NULL, 1), KVF_EINVAL,
		"kvf_seq_reset: store is NULL");
	REFUSED(kvf_seq_reset(fx.st, UINT64_MAX), KVF_EINVAL,
		"kvf_seq_reset: sequence id 18446744073709551615 is reserved");
}

Test(lifecycle, reset_live_and_free_ids)
{
	uint64_t n;

	/* a live sequence with a fork: it starts again empty, the fork
	 * keeps every token it shares */
	OK(kvf_seq_reset(fx.st, 1));
	for (uint32_t l = 0; l < LAYERS; l++) {
		OK(kvf_seq_len(fx.st, 1, l, &n));
		cr_assert(eq(u64, n, 0));
		OK(kvf_seq_x_len(fx.st, 1, l, &n));
		cr_assert(eq(u64, n, 0));
	}
	fx_check_tokens(fx.st, 2, 1, 0, 0, 50);
	OK(fx_append(fx.st, 1, 3, 0, 0, G + 2));
	fx_check_tokens(fx.st, 1, 3, 0, 0, G + 2);
	/* a free id: created */
	OK(kvf_seq_reset(fx.st, 3));
	OK(kvf_seq_len(fx.st, 3, 0, &n));
	cr_assert(eq(u64, n, 0));
}

Test(lifecycle, reset_read_only)
{
	kvf_options o;
	kvf_store *ro = NULL;

	OK(kvf_close(fx.st));
	fx.st = NULL;
	kvf_options_init(&o, NULL);
	o.read_only = 1;
	OK(kvf_open(fx.path, &o, &ro));
	fx.st = ro;
	REFUSED(kvf_seq_reset(ro, 1), KVF_ENOTSUP, "open read-only");
}

/* an engine killed mid-request; the next run resets the id and goes on */
Test(lifecycle_rt, reset_after_a_kill)
{
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;
	int fd, status, killed;
	uint64_t n;
	pid_t pid = fx_spawn(&fd);

	if (pid == 0) {
		CHILD_MUST(kvf_open(fx.path, &o, &st));
		CHILD_MUST(kvf_seq_reset(st, 7));
		CHILD_MUST(fx_append(st, 7, 7, 0, 0, 3 * G + 1));
		CHILD_MUST(kvf_sync(st));
		CHILD_MUST(fx_append(st, 7, 7, 0, 3 * G + 1, 5));
		fx_child_say("D");
		raise(SIGKILL);
	}
	free(fx_collect(fd));
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	killed = WIFSIGNALED(status);
	cr_assert(killed, "the child failed");
	OK(kvf_open(fx.path, &o, &st));
	fx.st = st;
	cr_assert(eq(int, kvf_seq_create(st, 7), KVF_EEXIST));
	OK(kvf_seq_reset(st, 7));
	OK(kvf_seq_len(st, 7, 0, &n));
	cr_assert(eq(u64, n, 0));
	OK(fx_append(st, 7, 8, 0, 0, G));
	OK(kvf_close(st));
	OK(kvf_open(fx.path, &o, &st));
	fx.st = st;
	fx_check_tokens(st, 7, 8, 0, 0, G);
}

/* ---- GQA ---------------------------------------------------------------- */

#define GQ 8   /* query heads */
#define GK 2   /* KV heads */
#define GD 16  /* head_dim */
#define GT 37  /* tokens */

static float gval(uint64_t i)
{
	i = (i + 1) * 0x9e3779b97f4a7c15ull;
	i ^= i >> 31;
	return (float)(i % 2001) / 1000.0f - 1.0f;
}

/* ref - attention of query row q over KV head kh of k, v ([GT][GK][GD]) */
static void ref(const float *q, const float *k, const float *v, uint32_t kh,
		double *out)
{
	double s[GT], m = -INFINITY, z = 0;

	for (uint32_t t = 0; t < GT; t++) {
		s[t] = 0;
		for (uint32_t d = 0; d < GD; d++)
			s[t] += (double)q[d] * k[(t * GK + kh) * GD + d];
		s[t] /= sqrt((double)GD);
		if (s[t] > m)
			m = s[t];
	}
	for (uint32_t d = 0; d < GD; d++)
		out[d] = 0;
	for (uint32_t t = 0; t < GT; t++) {
		double p = exp(s[t] - m);

		z += p;
		for (uint32_t d = 0; d < GD; d++)
			out[d] += p * v[(t * GK + kh) * GD + d];
	}
	for (uint32_t d = 0; d < GD; d++)
		out[d] /= z;
}

Test(lifecycle_rt, gqa_mapping)
{
	kvf_model m = { 1, GQ, GK, GD, KVF_DTYPE_F32 };
	static float k[GT * GK * GD], v[GT * GK * GD];
	float q[GQ * GD], out[GQ * GD];
	kvf_options o;
	kvf_store *st = NULL;
	int other_differs = 0;

	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.capacity_bytes = 16u << 20;
	o.segment_size = 64 * 1024;
	OK(kvf_open(fx.path, &o, &st));
	fx.st = st;
	for (uint32_t i = 0; i < GT * GK * GD; i++) {
		k[i] = gval(i) * 2;
		v[i] = gval(i + 100000);
	}
	for (uint32_t i = 0; i < GQ * GD; i++)
		q[i] = gval(i + 200000) * 2;
	OK(kvf_seq_create(st, 1));
	OK(kvf_append(st, 1, 0, GT, k, v));
	OK(kvf_attend(st, 1, 0, q, out, NULL));
	for (uint32_t h = 0; h < GQ; h++) {
		double want[GD], other[GD];

		ref(q + h * GD, k, v, h / (GQ / GK), want);
		ref(q + h * GD, k, v, h % GK, other);
		for (uint32_t d = 0; d < GD; d++) {
			cr_assert(le(dbl, fabs(out[h * GD + d] - want[d]), 1e-5),
				  "query head %u dim %u: %g, KV head %u gives %g",
				  h, d, (double)out[h * GD + d], h / (GQ / GK),
				  want[d]);
			other_differs |= fabs(other[d] - want[d]) > 1e-3;
		}
	}
	cr_assert(other_differs, "the two mappings gave the same outputs");
}
