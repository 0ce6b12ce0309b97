/*
 * test_typed_calls.c - the calls a serving engine embeds first:
 * kvf_append_tensor / kvf_append_x_tensor (dtype, shape and strides
 * stated, wrong ones refused with nothing changed; conversion between
 * dtypes is test_convert.c's), kvf_attend_multi
 * (causal over positions, window, mask, LSE; checked against kvf_attend
 * with a per-query mask), kvf_attend_start / kvf_job_wait (the same
 * result as kvf_attend_batch; kvf_close waits for a running job), and
 * kvf_struct_size.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(typed_append, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

static kvf_tensor view(const void *data, uint64_t n, uint32_t heads,
		       uint32_t dim, kvf_dtype dt)
{
	kvf_tensor t;

	kvf_tensor_init(&t);
	t.dtype = dt;
	t.data = data;
	t.n_tokens = n;
	t.n_heads = heads;
	t.head_dim = dim;
	return t;
}

Test(typed_append, refusals_change_nothing)
{
	static unsigned char k[4 * KVH * ROW * 2], v[4 * KVH * ROW * 2];
	kvf_tensor tk = view(k, 4, KVH, DIM, KVF_DTYPE_F16);
	kvf_tensor tv = view(v, 4, KVH, DIM, KVF_DTYPE_F16), bad;

	bad = tk;
	bad.dtype = (kvf_dtype)7;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"kvf_append_tensor: k.dtype 7 is not a kvf_dtype");
	bad = tk;
	bad.n_heads = KVH + 1;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"k has 3 heads, the store has 2");
	bad = tk;
	bad.head_dim = DIM / 2;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"k has head_dim 32, the store has 64");
	bad = tv;
	bad.n_tokens = 3;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &tk, &bad), KVF_EINVAL,
		"k has 4 tokens, v has 3");
	bad = tk;
	bad.data_bytes = 4 * KVH * ROW - 1;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"k of 4 tokens reaches 1024 bytes past data, data_bytes is 1023");
	bad = tk;
	bad.head_stride = ROW / 2;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"k.token_stride 256 and head_stride 64 make rows of 128 bytes overlap");
	bad = tk;
	bad.token_stride = ROW;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"k.token_stride 128 and head_stride 128 make rows of 128 bytes overlap");
	/* strides past 2^64 wrap onto rows before or over others: the
	 * data_bytes check must not be fooled by the wrapped sum */
	bad = tk;
	bad.dtype = KVF_DTYPE_F32; /* gathered and converted */
	bad.token_stride = 1ull << 63;
	bad.data_bytes = 4 * KVH * ROW;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"k.token_stride 9223372036854775808 and head_stride 256 over 4 tokens reach past the address space after data");
	bad.token_stride = (uint64_t)-(int64_t)(KVH * ROW * 2); /* "negative" */
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"reach past the address space after data");
	bad.token_stride = 0;
	bad.head_stride = 1ull << 63;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"k of 4 tokens reaches 9223372036854777600 bytes past data, data_bytes is 1024");
	bad.token_stride = 1ull << 63;
	bad.head_stride = 0;
	bad.data_bytes = 0; /* unstated: the wrap is still seen */
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"reach past the address space after data");
	bad = tk;
	bad.data = NULL;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"k.data is NULL");
	bad = tk;
	bad.struct_size = 4;
	REFUSED(kvf_append_tensor(fx.st, 1, 0, &bad, &tv), KVF_EINVAL,
		"k.struct_size 4 is too small");
	REFUSED(kvf_append_tensor(fx.st, 1, 0, NULL, &tv), KVF_EINVAL,
		"k is NULL");
	/* the append's own refusals name the typed call too */
	REFUSED(kvf_append_tensor(fx.st, 3, 0, &tk, &tv), KVF_ENOENT,
		"kvf_append_tensor: sequence 3 does not exist");
	REFUSED(kvf_append_tensor(fx.st, 1, LAYERS, &tk, &tv), KVF_ERANGE,
		"kvf_append_tensor: layer 2 out of range");
	REFUSED(kvf_append_tensor_at(fx.st, 1, 0, 5, &tk, &tv), KVF_ERANGE,
		"kvf_append_tensor_at: ");
	bad = view(k, 4, QH, DIM, (kvf_dtype)3);
	REFUSED(kvf_append_x_tensor(fx.st, 1, 0, &bad), KVF_EINVAL,
		"kvf_append_x_tensor: x.dtype 3 is not a kvf_dtype");
	REFUSED(kvf_append_x_tensor(fx.st, 1, 0, &tk), KVF_EINVAL,
		"x has 2 heads, the store has 4");
	REFUSED(kvf_append_tensor(NULL, 1, 0, &tk, &tv), KVF_EINVAL,
		"kvf_append_tensor: store is NULL");
}

/* a strided view (every other token of a [2n][H + 1][DIM] buffer, heads
 * in reverse order via the head stride) stores exactly its rows */
Test(typed_append, strided_views_store_their_rows)
{
	enum { N = 40, HP = KVH + 1 };
	static uint16_t big_k[2 * N][HP][DIM], big_v[2 * N][HP][DIM];
	uint16_t got_k[N][DIM], got_v[N][DIM];
	kvf_tensor tk, tv;
	uint64_t len0 = 0, len = 0;

	for (int t = 0; t < 2 * N; t++)
		for (int h = 0; h < HP; h++)
			for (int d = 0; d < DIM; d++) {
				big_k[t][h][d] = kvf_f32_to_f16((float)(t * 7 + h * 3 + d) / 64.0f);
				big_v[t][h][d] = kvf_f32_to_f16((float)(t * 5 - h * 11 + d) / 32.0f);
			}
	OK(kvf_seq_len(fx.st, 1, 1, &len0));
	tk = view(big_k, N, KVH, DIM, KVF_DTYPE_F16);
	tk.token_stride = 2 * sizeof(big_k[0]);
	tk.head_stride = sizeof(big_k[0][0]);
	tk.data_bytes = sizeof(big_k);
	tv = tk;
	tv.data = big_v;
	OK(kvf_append_tensor(fx.st, 1, 1, &tk, &tv));
	/* and a dense one after it, straight from the caller's memory */
	tk = view(big_k, 1, KVH, DIM, KVF_DTYPE_F16);
	tv = view(big_k, 1, KVH, DIM, KVF_DTYPE_F16);
	OK(kvf_append_tensor(fx.st, 1, 1, &tk, &tv));
	OK(kvf_seq_len(fx.st, 1, 1, &len));
	cr_assert(eq(u64, len, len0 + N + 1));
	for (uint32_t h = 0; h < KVH; h++) {
		OK(kvf_read(fx.st, 1, 1, h, len0, len0 + N, got_k, got_v));
		for (int t = 0; t < N; t++)
			cr_assert(memcmp(got_k[t], big_k[2 * t][h], sizeof(got_k[t])) == 0 &&
				  memcmp(got_v[t], big_v[2 * t][h], sizeof(got_v[t])) == 0,
				  "head %u token %d differs", h, t);
	}
}

/* ---- kvf_attend_multi and kvf_attend_start on a store of known values ---- */

struct small {
	char *dir;
	kvf_store *st;
};

static float frand(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((*s >> 40) & 0xffff) / 32768.0f - 1.0f;
}

/* small_open - a memory store holding sequence 1 with n tokens on layer 0
 * (finite f16 values) */
static void small_open(struct small *s, const char *name, uint64_t n)
{
	kvf_model m = { 1, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	uint16_t *k = malloc(n * KVH * DIM * 2), *v = malloc(n * KVH * DIM * 2);
	uint64_t seed = 12345;

	cr_assert(k && v);
	s->dir = tmpdir_make(name);
	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 16ull << 20;
	o.n_threads = 2;
	OK(kvf_open(s->dir, &o, &s->st));
	OK(kvf_seq_create(s->st, 1));
	for (uint64_t i = 0; i < n * KVH * DIM; i++) {
		k[i] = kvf_f32_to_f16(frand(&seed));
		v[i] = kvf_f32_to_f16(frand(&seed));
	}
	OK(kvf_append(s->st, 1, 0, (uint32_t)n, k, v));
	free(k);
	free(v);
}

static void small_close(struct small *s)
{
	OK(kvf_close(s->st));
	tmpdir_remove(s->dir);
}

static int near(float a, float b)
{
	return fabsf(a - b) <= 2e-5f + 2e-5f * fabsf(b);
}

Test(attend_multi, matches_attend_with_a_mask_per_query, .timeout = 60)
{
	enum { N = 150, NQ = 7 };
	uint64_t pos[NQ] = { 0, 31, 32, 149, 100, 5, 100 }, seed = 99;
	static float q[NQ][QH][DIM], out[NQ][QH][DIM], lse[NQ][QH];
	float ref[QH][DIM], ref_lse[QH];
	uint8_t mask[N];
	struct small s;

	small_open(&s, "attend_multi", N);
	for (int i = 0; i < NQ * QH * DIM; i++)
		(&q[0][0][0])[i] = frand(&seed);
	for (uint64_t window = 0; window <= 40; window += 40) {
		kvf_attn_opts o;

		kvf_attn_opts_init(&o);
		o.lse = &lse[0][0];
		o.window = window;
		OK(kvf_attend_multi(s.st, 1, 0, NQ, pos, &q[0][0][0], &out[0][0][0], &o));
		for (int i = 0; i < NQ; i++) {
			kvf_attn_opts r;

			for (uint64_t t = 0; t < N; t++)
				mask[t] = t <= pos[i] &&
					  (window == 0 || t + window > pos[i]);
			kvf_attn_opts_init(&r);
			r.mask = mask;
			r.mask_len = N;
			r.lse = ref_lse;
			OK(kvf_attend(s.st, 1, 0, &q[i][0][0], &ref[0][0], &r));
			for (int h = 0; h < QH; h++) {
				cr_assert(near(lse[i][h], ref_lse[h]),
					  "window %llu query %d head %d: lse %g, attend %g",
					  (unsigned long long)window, i, h,
					  (double)lse[i][h], (double)ref_lse[h]);
				for (int d = 0; d < DIM; d++)
					cr_assert(near(out[i][h][d], ref[h][d]),
						  "window %llu query %d head %d dim %d: %g, attend %g",
						  (unsigned long long)window, i, h, d,
						  (double)out[i][h][d], (double)ref[h][d]);
			}
		}
	}
	/* no positions: every query attends every token, as kvf_attend */
	OK(kvf_attend_multi(s.st, 1, 0, NQ, NULL, &q[0][0][0], &out[0][0][0], NULL));
	OK(kvf_attend(s.st, 1, 0, &q[3][0][0], &ref[0][0], NULL));
	for (int h = 0; h < QH; h++)
		for (int d = 0; d < DIM; d++)
			cr_assert(near(out[3][h][d], ref[h][d]));
	small_close(&s);
}

Test(attend_multi, refusals, .timeout = 60)
{
	uint64_t pos[2] = { 3, 10 };
	static float q[2][QH][DIM], out[2][QH][DIM];
	kvf_attn_opts o;
	struct small s;

	small_open(&s, "attend_multi_refusals", 10);
	cr_assert(eq(int, kvf_attend_multi(s.st, 1, 0, 2, pos, &q[0][0][0], &out[0][0][0], NULL),
		     KVF_ERANGE));
	cr_assert(strstr(kvf_last_error(),
			 "kvf_attend_multi: query 1 is at position 10, past the 10 tokens of sequence 1 layer 0") != NULL,
		  "%s", kvf_last_error());
	cr_assert(eq(int, kvf_attend_multi(s.st, 1, 0, 0, pos, &q[0][0][0], &out[0][0][0], NULL),
		     KVF_EINVAL));
	cr_assert(eq(int, kvf_attend_multi(s.st, 1, 1, 1, pos, &q[0][0][0], &out[0][0][0], NULL),
		     KVF_ERANGE));
	cr_assert(eq(int, kvf_attend_multi(s.st, 2, 0, 1, pos, &q[0][0][0], &out[0][0][0], NULL),
		     KVF_ENOENT));
	cr_assert(eq(int, kvf_attend_multi(s.st, 1, 0, 1, pos, NULL, &out[0][0][0], NULL),
		     KVF_EINVAL));
	kvf_attn_opts_init(&o);
	o.sparse = 1;
	cr_assert(eq(int, kvf_attend_multi(s.st, 1, 0, 1, pos, &q[0][0][0], &out[0][0][0], &o),
		     KVF_ENOTSUP));
	/* an empty sequence with no positions: zeros and -inf */
	OK(kvf_seq_create(s.st, 5));
	kvf_attn_opts_init(&o);
	{
		float lse[QH];

		o.lse = lse;
		out[0][0][0] = 7;
		OK(kvf_attend_multi(s.st, 5, 0, 1, NULL, &q[0][0][0], &out[0][0][0], &o));
		cr_assert(out[0][0][0] == 0 && isinf(lse[0]) && lse[0] < 0);
	}
	small_close(&s);
}

Test(attend_async, same_as_batch_and_close_waits, .timeout = 60)
{
	static float q[2][QH][DIM], a[2][QH][DIM], b[2][QH][DIM];
	uint64_t ids[2] = { 1, 2 }, seed = 5;
	float lse_a[2][QH], lse_b[2][QH];
	kvf_attn_opts o;
	kvf_job *job = (kvf_job *)&seed;
	struct small s;

	small_open(&s, "attend_async", 300);
	OK(kvf_seq_fork(s.st, 1, 2, 200));
	for (int i = 0; i < 2 * QH * DIM; i++)
		(&q[0][0][0])[i] = frand(&seed);
	kvf_attn_opts_init(&o);
	o.lse = &lse_a[0][0];
	OK(kvf_attend_batch(s.st, 2, ids, 0, &q[0][0][0], &a[0][0][0], &o));
	o.lse = &lse_b[0][0];
	OK(kvf_attend_start(s.st, 2, ids, 0, &q[0][0][0], &b[0][0][0], &o, &job));
	memset(q, 0, sizeof(q)); /* q was copied */
	OK(kvf_job_wait(job));
	cr_assert(memcmp(a, b, sizeof(a)) == 0 && memcmp(lse_a, lse_b, sizeof(lse_a)) == 0);

	/* argument errors come back at once, with no job */
	ids[1] = 1;
	cr_assert(eq(int, kvf_attend_start(s.st, 2, ids, 0, &q[0][0][0], &b[0][0][0], NULL, &job),
		     KVF_EINVAL));
	cr_assert_null(job);
	cr_assert(strstr(kvf_last_error(), "sequence 1 is given twice") != NULL);
	cr_assert(eq(int, kvf_attend_start(s.st, 1, ids, 1, &q[0][0][0], &b[0][0][0], NULL, &job),
		     KVF_ERANGE));
	cr_assert(eq(int, kvf_job_wait(NULL), KVF_EINVAL));
	/* a failure in the job comes back from the wait, with its message */
	ids[0] = 9;
	OK(kvf_attend_start(s.st, 1, ids, 0, &q[0][0][0], &b[0][0][0], NULL, &job));
	cr_assert(eq(int, kvf_job_wait(job), KVF_ENOENT));
	cr_assert(strstr(kvf_last_error(), "sequence 9 does not exist") != NULL, "%s",
		  kvf_last_error());
	/* close waits for the jobs it has; the handle is still waited for */
	ids[0] = 1;
	OK(kvf_attend_start(s.st, 1, ids, 0, &q[0][0][0], &b[0][0][0], NULL, &job));
	small_close(&s);
	OK(kvf_job_wait(job));
}

Test(struct_size, mirrors)
{
	cr_assert(eq(sz, kvf_struct_size(KVF_STRUCT_OPTIONS), sizeof(kvf_options)));
	cr_assert(eq(sz, kvf_struct_size(KVF_STRUCT_TENSOR), sizeof(kvf_tensor)));
	cr_assert(eq(sz, kvf_struct_size(KVF_STRUCT_STATS), sizeof(kvf_stats)));
	cr_assert(eq(sz, kvf_struct_size(KVF_STRUCT_MODEL), sizeof(kvf_model)));
	cr_assert(eq(sz, kvf_struct_size((kvf_struct)99), 0));
}
