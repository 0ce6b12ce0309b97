/*
 * store_fixture_attend.c - the fixture's part for the attention tests
 * (store_fixture.h, "attention"): stores of any dtype and head grouping,
 * random K and V, and a double-precision reference computed from the same
 * K and V read back with kvf_read.  Gathered from test_attend.c.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "store_fixture.h"
#include "testutil.h"

size_t fx_elt_size(kvf_dtype dt)
{
	return dt == KVF_DTYPE_F32 ? 4 : 2;
}

double fx_to_f(kvf_dtype dt, const void *p, size_t i)
{
	if (dt == KVF_DTYPE_F32)
		return ((const float *)p)[i];
	if (dt == KVF_DTYPE_F16)
		return kvf_f16_to_f32(((const uint16_t *)p)[i]);
	return kvf_bf16_to_f32(((const uint16_t *)p)[i]);
}

void fx_put_f(kvf_dtype dt, void *p, size_t i, float x)
{
	if (dt == KVF_DTYPE_F32)
		((float *)p)[i] = x;
	else if (dt == KVF_DTYPE_F16)
		((uint16_t *)p)[i] = kvf_f32_to_f16(x);
	else
		((uint16_t *)p)[i] = kvf_f32_to_bf16(x);
}

float fx_urand(uint64_t *rng)
{
	return (float)((double)(rng_next(rng) >> 11) / 9007199254740992.0 * 2 -
		       1);
}

struct attn_fx fx_attn_open(const char *name, kvf_dtype dt, uint32_t qh,
			    uint32_t kvh)
{
	kvf_model m = { LAYERS, qh, kvh, DIM, dt };
	kvf_options o = fx_options_for(&m, 128 * 1024, 64ull << 20, 2);
	struct attn_fx f = { .dt = dt, .qh = qh, .kvh = kvh, .dim = DIM };

	o.n_threads = 3;
	f.rng = rng_seed("attend");
	cr_assert(eq(int, kvf_open(tmp_path(fx.dir, name), &o, &f.st), KVF_OK),
		  "%s", kvf_last_error());
	return f;
}

struct attn_fx fx_attn_open_shape(const char *name, kvf_dtype dt, uint32_t qh,
				  uint32_t kvh, uint32_t dim,
				  uint32_t page_size, int kt)
{
	kvf_model m = { LAYERS, qh, kvh, dim, dt };
	kvf_options o = fx_options_for(&m, 512 * 1024, 256ull << 20, 2);
	struct attn_fx f = { .dt = dt, .qh = qh, .kvh = kvh, .dim = dim };

	o.page_size = page_size;
	o.kt_pages = kt ? 1 : 0;
	o.n_threads = 3;
	f.rng = rng_seed("shape");
	cr_assert(eq(int, kvf_open(tmp_path(fx.dir, name), &o, &f.st), KVF_OK),
		  "%s", kvf_last_error());
	return f;
}

void fx_attn_append(struct attn_fx *f, uint64_t seq, uint32_t n)
{
	size_t cnt = (size_t)n * f->kvh * f->dim;
	void *k = malloc(cnt * fx_elt_size(f->dt) + 4),
	     *v = malloc(cnt * fx_elt_size(f->dt) + 4);

	for (uint32_t l = 0; l < LAYERS; l++) {
		for (size_t i = 0; i < cnt; i++) {
			fx_put_f(f->dt, k, i, fx_urand(&f->rng));
			fx_put_f(f->dt, v, i, fx_urand(&f->rng));
		}
		cr_assert(eq(int, kvf_append(f->st, seq, l, n, k, v), KVF_OK),
			  "%s", kvf_last_error());
	}
	free(k);
	free(v);
}

void fx_attn_reference(struct attn_fx *f, uint64_t seq, uint32_t layer,
		       const float *q, float scale, const uint8_t *mask,
		       uint64_t t0, double *out, double *lse, double *probs)
{
	uint64_t len;
	uint32_t d = f->qh / f->kvh, D = f->dim;

	cr_assert(eq(int, kvf_seq_len(f->st, seq, layer, &len), KVF_OK));
	for (uint32_t kh = 0; kh < f->kvh; kh++) {
		size_t bytes =
			(size_t)(len ? len : 1) * D * fx_elt_size(f->dt);
		void *k = malloc(bytes), *v = malloc(bytes);

		cr_assert(eq(int, kvf_read(f->st, seq, layer, kh, 0, len, k, v),
			     KVF_OK));
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
				for (uint32_t e = 0; e < D; e++)
					dot += (double)q[h * D + e] * scale *
					       fx_to_f(f->dt, k, t * D + e);
				s[t] = dot;
				if (dot > m)
					m = dot;
			}
			for (uint64_t t = t0; t < len; t++)
				if (s[t] > -INFINITY)
					l += exp(s[t] - m);
			for (uint32_t e = 0; e < D; e++) {
				double acc = 0;

				for (uint64_t t = t0; t < len; t++)
					if (s[t] > -INFINITY)
						acc += exp(s[t] - m) *
						       fx_to_f(f->dt, v,
							       t * D + e);
				out[h * D + e] = l > 0 ? acc / l : 0;
			}
			lse[h] = l > 0 ? m + log(l) : -INFINITY;
			if (probs)
				for (uint64_t t = t0; t < len; t++)
					probs[(size_t)h * len + t] =
						s[t] > -INFINITY ?
							exp(s[t] - m) / l :
							0;
			free(s);
		}
		free(k);
		free(v);
	}
}

void fx_check_close(const float *got, const double *want, size_t n, double tol,
		    const char *what)
{
	for (size_t i = 0; i < n; i++)
		cr_assert(le(dbl, fabs(got[i] - want[i]),
			     tol + tol * fabs(want[i])),
			  "%s[%zu]: %g, reference %g", what, i, (double)got[i],
			  want[i]);
}

struct attn_fx fx_attn_open_kt(const char *name)
{
	kvf_model m = { LAYERS, 4, 2, DIM, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m, 256 * 1024, 128ull << 20, 2);
	struct attn_fx f = { .dt = KVF_DTYPE_F16, .qh = 4, .kvh = 2,
			     .dim = DIM };

	o.kt_pages = 1;
	f.rng = rng_seed("sparf");
	cr_assert(eq(int, kvf_open(tmp_path(fx.dir, name), &o, &f.st), KVF_OK),
		  "%s", kvf_last_error());
	return f;
}

double fx_cosine(const float *a, const float *b, size_t n)
{
	double ab = 0, aa = 0, bb = 0;

	for (size_t i = 0; i < n; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return ab / sqrt(aa * bb + 1e-300);
}
