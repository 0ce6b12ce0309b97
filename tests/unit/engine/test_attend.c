/*
 * test_attend.c - attention near the data against a double-precision
 * reference computed from the same K and V read back with kvf_read: every
 * dtype, GQA groupings, lengths around the token group, LSE, masks,
 * windows, batches, merges, probabilities, top-k and H2O; SparF by
 * tokens (sparse = 1) and by whole token groups (sparse = 2); and each
 * bad argument with its status and message.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "kvflash.h"
#include "testutil.h"

#define LAYERS 2
#define DIM 64

static char *dir;

static void setup(void)
{
	dir = tmpdir_make("attend");
	cr_assert_not_null(dir);
}

static void teardown(void)
{
	tmpdir_remove(dir);
}

TestSuite(attend, .init = setup, .fini = teardown, .timeout = 120);

struct fx {
	kvf_store *st;
	kvf_dtype dt;
	uint32_t qh, kvh;
	uint64_t rng;
};

static size_t esz(kvf_dtype dt)
{
	return dt == KVF_DTYPE_F32 ? 4 : 2;
}

static double to_f(kvf_dtype dt, const void *p, size_t i)
{
	if (dt == KVF_DTYPE_F32)
		return ((const float *)p)[i];
	if (dt == KVF_DTYPE_F16)
		return kvf_f16_to_f32(((const uint16_t *)p)[i]);
	return kvf_bf16_to_f32(((const uint16_t *)p)[i]);
}

static void put_f(kvf_dtype dt, void *p, size_t i, float x)
{
	if (dt == KVF_DTYPE_F32)
		((float *)p)[i] = x;
	else if (dt == KVF_DTYPE_F16)
		((uint16_t *)p)[i] = kvf_f32_to_f16(x);
	else
		((uint16_t *)p)[i] = kvf_f32_to_bf16(x);
}

static float urand(uint64_t *rng)
{
	return (float)((double)(rng_next(rng) >> 11) / 9007199254740992.0 * 2 - 1);
}

static struct fx open_fx(const char *name, kvf_dtype dt, uint32_t qh, uint32_t kvh)
{
	kvf_model m = { LAYERS, qh, kvh, DIM, dt };
	kvf_options o;
	struct fx f = { .dt = dt, .qh = qh, .kvh = kvh };

	kvf_options_init(&o, &m);
	o.segment_size = 128 * 1024;
	o.capacity_bytes = 64ull << 20;
	o.n_stripes = 2;
	o.n_threads = 3;
	f.rng = rng_seed("attend");
	cr_assert(eq(int, kvf_open(tmp_path(dir, name), &o, &f.st), KVF_OK), "%s",
		  kvf_last_error());
	return f;
}

static void append(struct fx *f, uint64_t seq, uint32_t n)
{
	size_t cnt = (size_t)n * f->kvh * DIM;
	void *k = malloc(cnt * esz(f->dt) + 4), *v = malloc(cnt * esz(f->dt) + 4);

	for (uint32_t l = 0; l < LAYERS; l++) {
		for (size_t i = 0; i < cnt; i++) {
			put_f(f->dt, k, i, urand(&f->rng));
			put_f(f->dt, v, i, urand(&f->rng));
		}
		cr_assert(eq(int, kvf_append(f->st, seq, l, n, k, v), KVF_OK), "%s",
			  kvf_last_error());
	}
	free(k);
	free(v);
}

/* reference: softmax(q.K^T * scale) V in double, per query head, over the
 * tokens [t0, len) with mask; also the LSE and the probabilities */
static void reference(struct fx *f, uint64_t seq, uint32_t layer,
		      const float *q, float scale, const uint8_t *mask,
		      uint64_t t0, double *out, double *lse, double *probs)
{
	uint64_t len;
	uint32_t d = f->qh / f->kvh;

	cr_assert(eq(int, kvf_seq_len(f->st, seq, layer, &len), KVF_OK));
	for (uint32_t kh = 0; kh < f->kvh; kh++) {
		size_t bytes = (size_t)(len ? len : 1) * DIM * esz(f->dt);
		void *k = malloc(bytes), *v = malloc(bytes);

		cr_assert(eq(int, kvf_read(f->st, seq, layer, kh, 0, len, k, v), KVF_OK));
		for (uint32_t hh = 0; hh < d; hh++) {
			uint32_t h = kh * d + hh;
			double m = -INFINITY, l = 0;
			double *s = calloc(len + 1, sizeof(double));

			for (uint64_t t = t0; t < len; t++) {
				double dot = 0;

				if (mask && !mask[t]) {
					s[t] = -INFINITY;
					continue;
				}
				for (uint32_t e = 0; e < DIM; e++)
					dot += (double)q[h * DIM + e] * scale *
					       to_f(f->dt, k, t * DIM + e);
				s[t] = dot;
				if (dot > m)
					m = dot;
			}
			for (uint64_t t = t0; t < len; t++)
				if (s[t] > -INFINITY)
					l += exp(s[t] - m);
			for (uint32_t e = 0; e < DIM; e++) {
				double acc = 0;

				for (uint64_t t = t0; t < len; t++)
					if (s[t] > -INFINITY)
						acc += exp(s[t] - m) * to_f(f->dt, v, t * DIM + e);
				out[h * DIM + e] = l > 0 ? acc / l : 0;
			}
			lse[h] = l > 0 ? m + log(l) : -INFINITY;
			if (probs)
				for (uint64_t t = t0; t < len; t++)
					probs[(size_t)h * len + t] =
						s[t] > -INFINITY ? exp(s[t] - m) / l : 0;
			free(s);
		}
		free(k);
		free(v);
	}
}

static void check_close(const float *got, const double *want, size_t n,
			double tol, const char *what)
{
	for (size_t i = 0; i < n; i++)
		cr_assert(le(dbl, fabs(got[i] - want[i]), tol + tol * fabs(want[i])),
			  "%s[%zu]: %g, reference %g", what, i, (double)got[i], want[i]);
}

static void attend_matches(kvf_dtype dt, uint32_t qh, uint32_t kvh)
{
	static const uint32_t lens[] = { 0, 1, 31, 32, 33, 700 };
	struct fx f = open_fx("s", dt, qh, kvh);
	float *q = malloc(qh * DIM * sizeof(float)), *out = malloc(qh * DIM * sizeof(float));
	float *lse = malloc(qh * sizeof(float));
	double *rout = malloc(qh * DIM * sizeof(double)), *rlse = malloc(qh * sizeof(double));
	kvf_attn_opts o;
	uint64_t seq = 1;

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++, seq++) {
		cr_assert(eq(int, kvf_seq_create(f.st, seq), KVF_OK));
		if (lens[i])
			append(&f, seq, lens[i]);
		for (uint32_t j = 0; j < qh * DIM; j++)
			q[j] = urand(&f.rng) * 3;
		kvf_attn_opts_init(&o);
		o.lse = lse;
		cr_assert(eq(int, kvf_attend(f.st, seq, 1, q, out, &o), KVF_OK), "%s",
			  kvf_last_error());
		reference(&f, seq, 1, q, 1.0f / sqrtf(DIM), NULL, 0, rout, rlse, NULL);
		check_close(out, rout, qh * DIM, 2e-5, "out");
		for (uint32_t h = 0; h < qh; h++) {
			if (lens[i] == 0)
				cr_assert(eq(flt, lse[h], -INFINITY));
			else
				cr_assert(le(dbl, fabs(lse[h] - rlse[h]), 1e-4),
					  "lse[%u] %g, reference %g", h, (double)lse[h], rlse[h]);
		}
	}
	kvf_close(f.st);
	free(q);
	free(out);
	free(lse);
	free(rout);
	free(rlse);
}

Test(attend, f16_gqa4) { attend_matches(KVF_DTYPE_F16, 8, 2); }
Test(attend, bf16_gqa2) { attend_matches(KVF_DTYPE_BF16, 4, 2); }
Test(attend, f32_mha) { attend_matches(KVF_DTYPE_F32, 2, 2); }

/* mask and window; a window merged with the rest (masked) is the whole */
Test(attend, mask_window_merge_batch)
{
	struct fx f = open_fx("s", KVF_DTYPE_F16, 4, 2);
	float q[4 * DIM], out[4 * DIM], a[4 * DIM], b[4 * DIM], whole[4 * DIM];
	float la[4], lb[4], lw[4];
	double rout[4 * DIM], rlse[4];
	uint8_t *mask = malloc(500);
	kvf_attn_opts o;

	cr_assert(eq(int, kvf_seq_create(f.st, 9), KVF_OK));
	cr_assert(eq(int, kvf_seq_create(f.st, 10), KVF_OK));
	append(&f, 9, 500);
	append(&f, 10, 77);
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = urand(&f.rng) * 2;
	for (int t = 0; t < 500; t++)
		mask[t] = (t % 3) != 0;
	kvf_attn_opts_init(&o);
	o.mask = mask;
	o.mask_len = 500;
	o.scale = 0.2f;
	cr_assert(eq(int, kvf_attend(f.st, 9, 0, q, out, &o), KVF_OK), "%s", kvf_last_error());
	reference(&f, 9, 0, q, 0.2f, mask, 0, rout, rlse, NULL);
	check_close(out, rout, 4 * DIM, 2e-5, "masked");
	/* window of the last 120 tokens vs the first 380 through a mask */
	kvf_attn_opts_init(&o);
	o.window = 120;
	o.lse = lb;
	cr_assert(eq(int, kvf_attend(f.st, 9, 0, q, b, &o), KVF_OK));
	for (int t = 0; t < 500; t++)
		mask[t] = t < 380;
	kvf_attn_opts_init(&o);
	o.mask = mask;
	o.mask_len = 500;
	o.lse = la;
	cr_assert(eq(int, kvf_attend(f.st, 9, 0, q, a, &o), KVF_OK));
	cr_assert(eq(int, kvf_attn_merge(4, DIM, a, la, b, lb, out, la), KVF_OK));
	kvf_attn_opts_init(&o);
	o.lse = lw;
	cr_assert(eq(int, kvf_attend(f.st, 9, 0, q, whole, &o), KVF_OK));
	for (int j = 0; j < 4 * DIM; j++)
		cr_assert(le(flt, fabsf(out[j] - whole[j]), 1e-5f), "merged[%d]", j);
	for (int h = 0; h < 4; h++)
		cr_assert(le(flt, fabsf(la[h] - lw[h]), 1e-5f));
	/* a batch equals one call per sequence */
	{
		uint64_t ids[2] = { 10, 9 };
		float qq[2 * 4 * DIM], bo[2 * 4 * DIM], one[4 * DIM];

		memcpy(qq, q, sizeof(q));
		for (int j = 0; j < 4 * DIM; j++)
			qq[4 * DIM + j] = -q[j];
		cr_assert(eq(int, kvf_attend_batch(f.st, 2, ids, 1, qq, bo, NULL), KVF_OK),
			  "%s", kvf_last_error());
		cr_assert(eq(int, kvf_attend(f.st, 10, 1, qq, one, NULL), KVF_OK));
		cr_assert(eq(int, memcmp(one, bo, sizeof(one)), 0));
		cr_assert(eq(int, kvf_attend(f.st, 9, 1, qq + 4 * DIM, one, NULL), KVF_OK));
		cr_assert(eq(int, memcmp(one, bo + 4 * DIM, sizeof(one)), 0));
	}
	free(mask);
	kvf_close(f.st);
}

/* probabilities, top-k and H2O, after a reopen (pages from media) */
Test(attend, scores_topk_h2o)
{
	struct fx f = open_fx("s", KVF_DTYPE_F16, 4, 2);
	float q[4 * DIM], *probs = malloc(4 * 300 * sizeof(float));
	double rout[4 * DIM], rlse[4], *rp = calloc(4 * 300, sizeof(double));
	uint64_t tok[2 * 5];
	float mass[2 * 5], h2o[300];
	uint32_t n_out[2];
	kvf_attn_opts o;

	cr_assert(eq(int, kvf_seq_create(f.st, 3), KVF_OK));
	append(&f, 3, 300);
	kvf_close(f.st);
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &f.st), KVF_OK));
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = urand(&f.rng) * 4;
	cr_assert(eq(int, kvf_scores(f.st, 3, 0, q, NULL, probs, 300), KVF_OK), "%s",
		  kvf_last_error());
	reference(&f, 3, 0, q, 1.0f / sqrtf(DIM), NULL, 0, rout, rlse, rp);
	check_close(probs, rp, 4 * 300, 1e-5, "probs");
	cr_assert(eq(int, kvf_topk(f.st, 3, 0, q, NULL, 5, tok, mass, n_out), KVF_OK));
	for (uint32_t kh = 0; kh < 2; kh++) {
		double best[300];

		cr_assert(eq(u32, n_out[kh], 5));
		for (int t = 0; t < 300; t++)
			best[t] = (rp[(kh * 2) * 300 + t] + rp[(kh * 2 + 1) * 300 + t]) / 2;
		for (int j = 0; j < 5; j++) {
			int above = 0;

			for (int t = 0; t < 300; t++)
				above += best[t] > best[tok[kh * 5 + j]] + 1e-6;
			cr_assert(lt(int, above, 5), "head %u token %llu is not in the top 5",
				  kh, (unsigned long long)tok[kh * 5 + j]);
			cr_assert(le(dbl, fabs(mass[kh * 5 + j] - best[tok[kh * 5 + j]]), 1e-5));
		}
	}
	kvf_attn_opts_init(&o);
	o.h2o = 1;
	cr_assert(eq(int, kvf_attend(f.st, 3, 0, q, probs, &o), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 3, 0, q, probs, &o), KVF_OK));
	cr_assert(eq(int, kvf_h2o_read(f.st, 3, 0, 1, 0, 300, h2o), KVF_OK));
	for (int t = 0; t < 300; t++)
		cr_assert(le(dbl, fabs(h2o[t] - 2 * (rp[2 * 300 + t] + rp[3 * 300 + t])), 1e-5),
			  "h2o[%d]", t);
	free(probs);
	free(rp);
	kvf_close(f.st);
}

#define EXPECT(call, status, text)                                            \
	do {                                                                  \
		cr_assert(eq(int, (call), (status)), "%s", kvf_last_error());  \
		cr_assert(ne(ptr, strstr(kvf_last_error(), (text)), NULL),     \
			  "message '%s' lacks '%s'", kvf_last_error(), (text)); \
	} while (0)

Test(attend, refusals)
{
	struct fx f = open_fx("s", KVF_DTYPE_F16, 4, 2);
	float q[4 * DIM], out[4 * DIM], probs[4 * 10];
	uint64_t tok[4], ids[2] = { 1, 1 };
	uint32_t n_out[2];
	uint8_t mask[5] = { 1, 1, 1, 1, 1 };
	kvf_attn_opts o;

	memset(q, 0, sizeof(q));
	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append(&f, 1, 20);
	EXPECT(kvf_attend(f.st, 2, 0, q, out, NULL), KVF_ENOENT, "sequence 2 does not exist");
	EXPECT(kvf_attend(f.st, 1, 2, q, out, NULL), KVF_ERANGE, "layer 2 out of range");
	EXPECT(kvf_attend(f.st, 1, 0, NULL, out, NULL), KVF_EINVAL, "q is NULL");
	EXPECT(kvf_attend(f.st, 1, 0, q, NULL, NULL), KVF_EINVAL, "out is NULL");
	EXPECT(kvf_attend(NULL, 1, 0, q, out, NULL), KVF_EINVAL, "store is NULL");
	kvf_attn_opts_init(&o);
	o.sparse = 1;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_ENOTSUP, "needs K^T pages");
	kvf_attn_opts_init(&o);
	o.scale = -1;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_EINVAL, "opts.scale");
	kvf_attn_opts_init(&o);
	o.mask = mask;
	o.mask_len = 5;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_ERANGE, "mask_len 5 is shorter");
	kvf_attn_opts_init(&o);
	o.struct_size = 0;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_EINVAL, "struct_size 0");
	EXPECT(kvf_attend_batch(f.st, 2, ids, 0, q, out, NULL), KVF_EINVAL, "given twice");
	EXPECT(kvf_scores(f.st, 1, 0, q, NULL, probs, 10), KVF_ERANGE, "probs_cap 10");
	EXPECT(kvf_topk(f.st, 1, 0, q, NULL, 0, tok, NULL, n_out), KVF_EINVAL, "k is 0");
	EXPECT(kvf_h2o_read(f.st, 1, 0, 2, 0, 1, probs), KVF_ERANGE, "kv_head 2 out of range");
	EXPECT(kvf_h2o_read(f.st, 1, 0, 0, 0, 21, probs), KVF_ERANGE, "past the end");
	EXPECT(kvf_attn_merge(0, DIM, q, q, q, q, out, probs), KVF_EINVAL, "must be > 0");
	kvf_close(f.st);
}

static struct fx open_kt(const char *name)
{
	kvf_model m = { LAYERS, 4, 2, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	struct fx f = { .dt = KVF_DTYPE_F16, .qh = 4, .kvh = 2 };

	kvf_options_init(&o, &m);
	o.segment_size = 256 * 1024;
	o.capacity_bytes = 128ull << 20;
	o.n_stripes = 2;
	o.kt_pages = 1;
	f.rng = rng_seed("sparf");
	cr_assert(eq(int, kvf_open(tmp_path(dir, name), &o, &f.st), KVF_OK), "%s",
		  kvf_last_error());
	return f;
}

static double cosine(const float *a, const float *b, size_t n)
{
	double ab = 0, aa = 0, bb = 0;

	for (size_t i = 0; i < n; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return ab / sqrt(aa * bb + 1e-300);
}

/* SparF with every dim and every token is dense attention */
Test(attend, sparf_full_equals_dense)
{
	struct fx f = open_kt("s");
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	kvf_attn_opts o;

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append(&f, 1, 700); /* two whole K^T blocks and an open one */
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = urand(&f.rng) * 2;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, NULL), KVF_OK));
	kvf_attn_opts_init(&o);
	o.sparse = 1;
	o.top_r = DIM;
	o.top_k = 700;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error());
	for (int j = 0; j < 4 * DIM; j++)
		cr_assert(le(flt, fabsf(sparse[j] - dense[j]), 2e-5f), "[%d] %g vs %g",
			  j, (double)sparse[j], (double)dense[j]);
	kvf_close(f.st);
}

/* On peaky attention (a few tokens carry the mass), SparF at top_r =
 * head_dim / 8 and top_k = tokens / 8 stays close to dense; with top_k
 * near the heavy hitters it also reads far fewer pages */
Test(attend, sparf_eighth_on_peaky_attention)
{
	struct fx f = open_kt("s");
	uint32_t n = 2048;
	size_t cnt = (size_t)n * 2 * DIM;
	uint16_t *k = malloc(cnt * 2), *v = malloc(cnt * 2);
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	kvf_stats st0 = { .struct_size = sizeof(st0) }, st1 = { .struct_size = sizeof(st1) };
	kvf_attn_opts o;

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	/* q points along a few dims; K is noise except a few heavy hitters
	 * that align with q on those dims */
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = (j % DIM) < 8 ? 4.0f : urand(&f.rng) * 0.1f;
	for (uint32_t l = 0; l < LAYERS; l++) {
		for (size_t i = 0; i < cnt; i++) {
			k[i] = kvf_f32_to_f16(urand(&f.rng) * 0.5f);
			v[i] = kvf_f32_to_f16(urand(&f.rng));
		}
		for (uint32_t t = 0; t < n; t += 97)
			for (uint32_t h = 0; h < 2; h++)
				for (uint32_t e = 0; e < 8; e++)
					k[((size_t)t * 2 + h) * DIM + e] = kvf_f32_to_f16(3.0f);
		cr_assert(eq(int, kvf_append(f.st, 1, l, n, k, v), KVF_OK));
	}
	cr_assert(eq(int, kvf_close(f.st), KVF_OK));
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &f.st), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, NULL), KVF_OK));
	kvf_attn_opts_init(&o);
	o.sparse = 1;
	o.top_r = DIM / 8;
	o.top_k = n / 8;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error()); /* warms the mean of V */
	for (int h = 0; h < 4; h++) {
		double c = cosine(sparse + h * DIM, dense + h * DIM, DIM);

		cr_assert(ge(dbl, c, 0.95), "head %d: cosine %g", h, c);
	}
	/* an eighth of the tokens, chosen one by one, touches nearly every
	 * token group; the pages saved come when the chosen tokens cluster:
	 * here the 22 heavy hitters, each in its own group (by score alone:
	 * the exact set would take room they need) */
	o.top_k = 22;
	o.sink_tokens = KVF_TOKENS_NONE;
	o.recent_tokens = KVF_TOKENS_NONE;
	cr_assert(eq(int, kvf_stats_get(f.st, &st0), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK));
	cr_assert(eq(int, kvf_stats_get(f.st, &st1), KVF_OK));
	for (int h = 0; h < 4; h++)
		cr_assert(ge(dbl, cosine(sparse + h * DIM, dense + h * DIM, DIM), 0.95));
	cr_assert(gt(u64, st1.sparf_pages_skipped, st0.sparf_pages_skipped));
	cr_assert(lt(u64, st1.pages_read - st0.pages_read, 2 * 2 * n / 32 / 2),
		  "SparF read %llu pages, dense reads %u",
		  (unsigned long long)(st1.pages_read - st0.pages_read), 2 * 2 * n / 32);
	free(k);
	free(v);
	kvf_close(f.st);
}

/* ---- SparF by whole token groups (sparse = 2) ----------------------------- */

#define GROUP 32u /* G, tokens per group: 4096-byte pages of 64 f16 dims */
#define KT_T 256u /* tokens per K^T block: 8 dims of f16 a page */

/* A token given weight: K on dims 0..7 set to k (q points there), and,
 * when v is not 0, every dim of V set to v. */
struct heavy {
	uint32_t t;
	float k, v;
};

/* append_peaky - n tokens to both layers of seq: noise (K in +-0.5, V in
 * +-1) but for heavy[0..n_heavy) in both KV heads */
static void append_peaky(struct fx *f, uint64_t seq, uint32_t n,
			 const struct heavy *heavy, size_t n_heavy)
{
	size_t cnt = (size_t)n * 2 * DIM;
	uint16_t *k = malloc(cnt * 2 + 2), *v = malloc(cnt * 2 + 2);

	for (uint32_t l = 0; l < LAYERS; l++) {
		for (size_t i = 0; i < cnt; i++) {
			k[i] = kvf_f32_to_f16(urand(&f->rng) * 0.5f);
			v[i] = kvf_f32_to_f16(urand(&f->rng));
		}
		for (size_t j = 0; j < n_heavy; j++)
			for (uint32_t h = 0; h < 2; h++)
				for (uint32_t e = 0; e < DIM; e++) {
					size_t at = ((size_t)heavy[j].t * 2 + h) * DIM + e;

					if (e < 8)
						k[at] = kvf_f32_to_f16(heavy[j].k);
					if (heavy[j].v != 0)
						v[at] = kvf_f32_to_f16(heavy[j].v);
				}
		cr_assert(eq(int, kvf_append(f->st, seq, l, n, k, v), KVF_OK), "%s",
			  kvf_last_error());
	}
	free(k);
	free(v);
}

/* peaky_q - every query head points along dims 0..7, noise elsewhere */
static void peaky_q(struct fx *f, float *q)
{
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = (j % DIM) < 8 ? 4.0f : urand(&f->rng) * 0.1f;
}

/* sparf_opts - options for SparF mode `sparse` at top_r, top_k, choosing
 * by score alone: these tests give top_k just the room their heavy
 * hitters need, so the exact set (sinks and recent window, in
 * test_sparf_quality.c) is off */
static kvf_attn_opts sparf_opts(uint32_t sparse, uint32_t top_r, uint32_t top_k)
{
	kvf_attn_opts o;

	kvf_attn_opts_init(&o);
	o.sparse = sparse;
	o.top_r = top_r;
	o.top_k = top_k;
	o.sink_tokens = KVF_TOKENS_NONE;
	o.recent_tokens = KVF_TOKENS_NONE;
	return o;
}

/* pages_of - sparf_pages_read and pages_read of one kvf_attend call */
static void pages_of(struct fx *f, uint64_t seq, const float *q, float *out,
		     const kvf_attn_opts *o, uint64_t *sparf_pages,
		     uint64_t *media_pages)
{
	kvf_stats s0 = { .struct_size = sizeof(s0) }, s1 = { .struct_size = sizeof(s1) };

	cr_assert(eq(int, kvf_stats_get(f->st, &s0), KVF_OK));
	cr_assert(eq(int, kvf_attend(f->st, seq, 0, q, out, o), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_stats_get(f->st, &s1), KVF_OK));
	*sparf_pages = s1.sparf_pages_read - s0.sparf_pages_read;
	*media_pages = s1.pages_read - s0.pages_read;
}

static void check_cosine(const float *got, const float *want, double min,
			 const char *what)
{
	for (int h = 0; h < 4; h++) {
		double c = cosine(got + h * DIM, want + h * DIM, DIM);

		cr_assert(ge(dbl, c, min), "%s: head %d: cosine %g", what, h, c);
	}
}

/* sparse = 2 with every dim and every token is dense attention, lse too */
Test(attend, sparf_groups_full_equals_dense)
{
	struct fx f = open_kt("s");
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM], ld[4], ls[4];
	kvf_attn_opts d, o = sparf_opts(2, DIM, 700);

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append(&f, 1, 700); /* two whole K^T blocks and an open one */
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = urand(&f.rng) * 2;
	kvf_attn_opts_init(&d);
	d.lse = ld;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, &d), KVF_OK));
	o.lse = ls;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error());
	for (int j = 0; j < 4 * DIM; j++)
		cr_assert(le(flt, fabsf(sparse[j] - dense[j]), 2e-5f), "[%d] %g vs %g",
			  j, (double)sparse[j], (double)dense[j]);
	for (int h = 0; h < 4; h++)
		cr_assert(le(flt, fabsf(ls[h] - ld[h]), 1e-4f), "lse[%d] %g vs %g",
			  h, (double)ls[h], (double)ld[h]);
	kvf_close(f.st);
}

/* A window that starts inside a group spans one group more than its
 * tokens fill: top_k = every token in it still takes every group */
Test(attend, sparf_groups_window_mid_group_full_equals_dense)
{
	struct fx f = open_kt("s");
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	kvf_attn_opts d, o = sparf_opts(2, DIM, 45);

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append(&f, 1, 300);
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = urand(&f.rng) * 2;
	kvf_attn_opts_init(&d);
	d.window = 45; /* tokens 255..299: groups 7..9, ceil(45 / 32) = 2 */
	o.window = 45;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, &d), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error());
	for (int j = 0; j < 4 * DIM; j++)
		cr_assert(le(flt, fabsf(sparse[j] - dense[j]), 2e-5f), "[%d] %g vs %g",
			  j, (double)sparse[j], (double)dense[j]);
	kvf_close(f.st);
}

/*
 * At top_r = head_dim / 8 and top_k = tokens / 8, with the heavy hitters
 * scattered one per 8 groups (at a different place in each), sparse = 2
 * stays close to dense and reads no more than the K^T pages of top_r
 * dims plus ceil(top_k / G) groups of K and V; sparse = 1 on the same
 * data, its eighth of the tokens chosen one by one, touches nearly every
 * group.
 */
Test(attend, sparf_groups_eighth_on_scattered_heavy_hitters)
{
	struct fx f = open_kt("s");
	uint32_t n = 2048, top_r = DIM / 8, top_k = n / 8;
	struct heavy hv[8];
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	uint64_t pr2, media2, pr1, media1;
	/* per KV head: n / KT_T blocks of ceil(top_r / 8) K^T pages, and
	 * ceil(top_k / G) groups of a K and a V page */
	uint64_t bound = 2 * ((n / KT_T) * ((top_r + 7) / 8) +
			      2 * ((top_k + GROUP - 1) / GROUP));
	uint64_t dense_pages = 2 * 2 * (n / GROUP);
	kvf_attn_opts o = sparf_opts(2, top_r, top_k);

	for (uint32_t i = 0; i < 8; i++) /* group 8i + (5i % 8), token 7i % 32 */
		hv[i] = (struct heavy){ .t = (8 * i + (5 * i) % 8) * GROUP + (7 * i) % GROUP,
					.k = 3.0f };
	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append_peaky(&f, 1, n, hv, 8);
	peaky_q(&f, q);
	cr_assert(eq(int, kvf_close(f.st), KVF_OK));
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &f.st), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, NULL), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error()); /* warms the mean of V */
	check_cosine(sparse, dense, 0.95, "sparse = 2, first call");
	pages_of(&f, 1, q, sparse, &o, &pr2, &media2);
	check_cosine(sparse, dense, 0.95, "sparse = 2");
	cr_assert(le(u64, pr2, bound), "sparse = 2 read %llu SparF pages, bound %llu",
		  (unsigned long long)pr2, (unsigned long long)bound);
	cr_assert(le(u64, media2, bound), "sparse = 2 read %llu pages, bound %llu",
		  (unsigned long long)media2, (unsigned long long)bound);
	cr_assert(lt(u64, 4 * pr2, dense_pages), "sparse = 2 read %llu pages, dense %llu",
		  (unsigned long long)pr2, (unsigned long long)dense_pages);
	o.sparse = 1;
	pages_of(&f, 1, q, sparse, &o, &pr1, &media1);
	check_cosine(sparse, dense, 0.95, "sparse = 1");
	cr_assert(gt(u64, pr1, 2 * pr2), "sparse = 1 read %llu SparF pages, sparse = 2 %llu",
		  (unsigned long long)pr1, (unsigned long long)pr2);
	cr_assert(gt(u64, media1, 2 * media2), "sparse = 1 read %llu pages, sparse = 2 %llu",
		  (unsigned long long)media1, (unsigned long long)media2);
	kvf_close(f.st);
}

/* sparse = 3 is refused before anything is read or written */
Test(attend, sparf_groups_refuses_sparse_3)
{
	struct fx f = open_kt("s"), plain = open_fx("p", KVF_DTYPE_F16, 4, 2);
	float q[4 * DIM], out[4 * DIM], lse[4], want[4 * DIM];
	uint64_t ids[1] = { 1 };
	kvf_stats s0 = { .struct_size = sizeof(s0) }, s1 = { .struct_size = sizeof(s1) };
	kvf_attn_opts o = sparf_opts(3, DIM / 8, 0);

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append(&f, 1, 300);
	peaky_q(&f, q);
	for (int j = 0; j < 4 * DIM; j++)
		out[j] = want[j] = 7.0f;
	for (int h = 0; h < 4; h++)
		lse[h] = 7.0f;
	o.lse = lse;
	cr_assert(eq(int, kvf_stats_get(f.st, &s0), KVF_OK));
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_EINVAL, "opts.sparse 3");
	EXPECT(kvf_attend_batch(f.st, 1, ids, 0, q, out, &o), KVF_EINVAL, "opts.sparse 3");
	cr_assert(eq(int, kvf_stats_get(f.st, &s1), KVF_OK));
	cr_assert(eq(int, memcmp(out, want, sizeof(out)), 0), "out was written");
	for (int h = 0; h < 4; h++)
		cr_assert(eq(flt, lse[h], 7.0f), "lse[%d] was written", h);
	cr_assert(eq(u64, s1.bytes_read, s0.bytes_read));
	cr_assert(eq(u64, s1.pages_read, s0.pages_read));
	cr_assert(eq(u64, s1.sparf_pages_read, s0.sparf_pages_read));
	cr_assert(eq(u64, s1.sparf_pages_skipped, s0.sparf_pages_skipped));
	/* sparse = 2 is checked as sparse = 1 is: K^T pages, outputs only */
	o.sparse = 2;
	cr_assert(eq(int, kvf_seq_create(plain.st, 1), KVF_OK));
	EXPECT(kvf_attend(plain.st, 1, 0, q, out, &o), KVF_ENOTSUP, "needs K^T pages");
	o.h2o = 1;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_ENOTSUP, "outputs only");
	cr_assert(eq(int, memcmp(out, want, sizeof(out)), 0), "out was written");
	o.h2o = 0;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, out, &o), KVF_OK), "%s",
		  kvf_last_error());
	kvf_close(plain.st);
	kvf_close(f.st);
}

/*
 * A mask and a window with sparse = 2: the tokens left out have K twice
 * as aligned with q as the heavy hitters' and V = 8 in every dim, so one
 * of them attended would pull the output to 8.  Checked at 1/8 (close to
 * the double reference, every element far from 8) and with every dim and
 * token (equal to it): with a mask; with a mask that also leaves out
 * groups 8..15 whole (none of their pages is read); and with a mask and a
 * window that starts inside a group, after three left-out tokens of it.
 */
Test(attend, sparf_groups_mask_and_window)
{
	static const uint32_t attended[] = { 3, 530, 730, 900 }; /* groups 0, 16, 22, 28 */
	struct fx f = open_kt("s");
	uint32_t n = 1024, window = 300, t_start = n - window; /* 724, group 22 */
	struct heavy hv[32];
	size_t n_hv = 0;
	uint8_t *mask = malloc(3 * n);
	float q[4 * DIM], want[4 * DIM], got[4 * DIM];
	double rout[4 * DIM], rlse[4];
	uint64_t pr, media;
	struct {
		const char *what;
		const uint8_t *mask;
		uint32_t window;
		uint64_t whole_pages; /* SparF pages of the whole call; 0: not checked */
	} cases[] = {
		{ "mask", mask, 0, 0 },
		{ "mask and groups 8..15", mask + n, 0,
		  2 * (n / KT_T * 8 + 2 * (n / GROUP - 8)) },
		{ "mask and window", mask + 2 * n, window, 0 },
	};

	for (uint32_t i = 0; i < 4; i++)
		hv[n_hv++] = (struct heavy){ .t = attended[i], .k = 3.0f };
	for (uint32_t t = 40; t < n; t += 64) /* masked, in every odd group */
		hv[n_hv++] = (struct heavy){ .t = t, .k = 6.0f, .v = 8.0f };
	for (uint32_t t = t_start - 3; t < t_start; t++) /* before the window */
		hv[n_hv++] = (struct heavy){ .t = t, .k = 6.0f, .v = 8.0f };
	cr_assert(le(u64, n_hv, 32));
	for (uint32_t t = 0; t < n; t++) {
		mask[2 * n + t] = t % 64 != 40;
		mask[t] = mask[2 * n + t] && (t < t_start - 3 || t >= t_start);
		mask[n + t] = mask[t] && (t < 8 * GROUP || t >= 16 * GROUP);
	}
	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append_peaky(&f, 1, n, hv, n_hv);
	peaky_q(&f, q);
	cr_assert(eq(int, kvf_close(f.st), KVF_OK));
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &f.st), KVF_OK));
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint32_t span = cases[c].window ? cases[c].window : n;

		reference(&f, 1, 0, q, 1.0f / sqrtf(DIM), cases[c].mask, n - span,
			  rout, rlse, NULL);
		for (int j = 0; j < 4 * DIM; j++)
			want[j] = (float)rout[j];
		for (int whole = 0; whole < 2; whole++) {
			kvf_attn_opts o = whole ? sparf_opts(2, DIM, span) :
						  sparf_opts(2, DIM / 8, span / 8);

			o.mask = cases[c].mask;
			o.mask_len = n;
			o.window = cases[c].window;
			pages_of(&f, 1, q, got, &o, &pr, &media);
			check_cosine(got, want, 0.99, cases[c].what);
			for (int j = 0; j < 4 * DIM; j++)
				cr_assert(lt(flt, fabsf(got[j]), 2.0f), "%s: [%d] is %g",
					  cases[c].what, j, (double)got[j]);
			if (!whole)
				continue;
			check_close(got, rout, 4 * DIM, 2e-5, cases[c].what);
			if (cases[c].whole_pages)
				cr_assert(eq(u64, pr, cases[c].whole_pages),
					  "%s: %llu SparF pages", cases[c].what,
					  (unsigned long long)pr);
		}
	}
	free(mask);
	kvf_close(f.st);
}

/*
 * Lengths that are not a multiple of the group: G - 1 (one open group),
 * G + 1 (a whole group and a token), 2G - 1, KT_T + 1 (a whole K^T block
 * and an open one), in group buffers and after a reopen.  Every token:
 * equal to dense; top_k = 1: one group of a K and a V page per KV head.
 */
Test(attend, sparf_groups_lengths_around_the_group)
{
	static const uint32_t lens[] = { GROUP - 1, GROUP + 1, 2 * GROUP - 1, KT_T + 1 };
	struct fx f = open_kt("s");
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	kvf_attn_opts o;
	uint64_t pr, media;

	for (uint32_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		cr_assert(eq(int, kvf_seq_create(f.st, i + 1), KVF_OK));
		append(&f, i + 1, lens[i]);
	}
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = urand(&f.rng) * 2;
	for (int reopened = 0; reopened < 2; reopened++) {
		if (reopened) {
			cr_assert(eq(int, kvf_close(f.st), KVF_OK));
			cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &f.st),
				     KVF_OK));
		}
		for (uint32_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			uint64_t n = lens[i], nb = n / KT_T;

			cr_assert(eq(int, kvf_attend(f.st, i + 1, 0, q, dense, NULL),
				     KVF_OK));
			o = sparf_opts(2, DIM, lens[i]);
			pages_of(&f, i + 1, q, sparse, &o, &pr, &media);
			for (int j = 0; j < 4 * DIM; j++)
				cr_assert(le(flt, fabsf(sparse[j] - dense[j]), 2e-5f),
					  "%u tokens%s: [%d] %g vs %g", lens[i],
					  reopened ? ", reopened" : "", j,
					  (double)sparse[j], (double)dense[j]);
			cr_assert(eq(u64, pr, 2 * (nb * 8 + 2 * ((n + GROUP - 1) / GROUP))),
				  "%u tokens: %llu SparF pages", lens[i],
				  (unsigned long long)pr);
			o = sparf_opts(2, DIM / 8, 1);
			pages_of(&f, i + 1, q, sparse, &o, &pr, &media);
			for (int j = 0; j < 4 * DIM; j++)
				cr_assert(eq(int, isfinite(sparse[j]), 1), "%u tokens: [%d]",
					  lens[i], j);
			cr_assert(eq(u64, pr, 2 * (nb + 2)),
				  "%u tokens, top_k 1: %llu SparF pages", lens[i],
				  (unsigned long long)pr);
		}
	}
	kvf_close(f.st);
}

struct iter_seen {
	double *ref;     /* [qh][len] reference probabilities */
	uint64_t len;
	double m[8], l[8]; /* softmax of what was seen, per head */
	float *s;        /* [qh][len] scores seen */
	int calls, stop_after;
};

static int seen(void *arg, uint32_t h, uint64_t first, uint32_t n, const float *sc)
{
	struct iter_seen *x = arg;

	memcpy(x->s + h * x->len + first, sc, n * sizeof(float));
	return ++x->calls == x->stop_after;
}

/* raw scores block by block: softmax of them is kvf_scores */
Test(attend, scores_iter)
{
	struct fx f = open_fx("s", KVF_DTYPE_BF16, 4, 2);
	float q[4 * DIM], probs[4 * 100];
	struct iter_seen x = { .len = 100 };

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append(&f, 1, 100);
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = urand(&f.rng) * 2;
	x.s = calloc(4 * 100, sizeof(float));
	cr_assert(eq(int, kvf_scores_iter(f.st, 1, 1, q, NULL, seen, &x), KVF_OK));
	cr_assert(eq(int, kvf_scores(f.st, 1, 1, q, NULL, probs, 100), KVF_OK));
	for (int h = 0; h < 4; h++) {
		double m = -INFINITY, l = 0;

		for (int t = 0; t < 100; t++)
			m = fmax(m, x.s[h * 100 + t]);
		for (int t = 0; t < 100; t++)
			l += exp(x.s[h * 100 + t] - m);
		for (int t = 0; t < 100; t++)
			cr_assert(le(dbl, fabs(exp(x.s[h * 100 + t] - m) / l - probs[h * 100 + t]), 1e-6));
	}
	/* stopping early is the caller's choice, not an error */
	x.calls = 0;
	x.stop_after = 3;
	cr_assert(eq(int, kvf_scores_iter(f.st, 1, 1, q, NULL, seen, &x), KVF_OK));
	cr_assert(eq(int, x.calls, 3));
	free(x.s);
	kvf_close(f.st);
}
