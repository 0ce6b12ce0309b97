/*
 * stress_store_attend.c - the attender threads of stress_store
 * (stress_store.h): kvf_attend on writers' sequences and forks, and
 * kvf_attend_batch on all writers' sequences, while they grow; a mask
 * selects tokens below a length seen before the call (lengths only grow),
 * and the output is checked against a double-precision reference computed
 * from the known token values (tolerance as in test_attend.c).  Shares
 * only the counters (atomics) and the store with the other threads.
 */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "kvflash.h"
#include "testutil.h"
#include "tests/stress/stress_store.h"

atomic_uint stress_attends, stress_attend_batches;

static double f16_at(const unsigned char *row, uint32_t d)
{
	uint16_t x;

	memcpy(&x, row + 2 * d, 2);
	return kvf_f16_to_f32(x);
}

/* attn_ref - dense attention of q ([QH][DIM]) over tokens [lo, hi) of
 * family fam, layer: out [QH][DIM]; s has room for hi - lo scores */
static void attn_ref(uint64_t fam, uint32_t layer, uint64_t lo, uint64_t hi,
		     const float *q, double *out, double *s)
{
	const double scale = 1.0 / sqrt((double)DIM);
	unsigned char row[ROW];

	for (uint32_t qh = 0; qh < QH; qh++) {
		uint32_t h = qh / (QH / KVH); /* the KV head it shares */
		double m = -INFINITY, l = 0;
		double *o = out + (size_t)qh * DIM;

		for (uint64_t t = lo; t < hi; t++) {
			double dot = 0;

			stress_fill_row(row, fam, layer, 0, t, h);
			for (uint32_t d = 0; d < DIM; d++)
				dot += (double)q[qh * DIM + d] * f16_at(row, d);
			s[t - lo] = dot * scale;
			if (s[t - lo] > m)
				m = s[t - lo];
		}
		for (uint32_t d = 0; d < DIM; d++)
			o[d] = 0;
		for (uint64_t t = lo; t < hi; t++) {
			double w = exp(s[t - lo] - m);

			l += w;
			stress_fill_row(row, fam, layer, 1, t, h);
			for (uint32_t d = 0; d < DIM; d++)
				o[d] += w * f16_at(row, d);
		}
		for (uint32_t d = 0; d < DIM; d++)
			o[d] = l > 0 ? o[d] / l : 0;
	}
}

/* attn_close - got matches want within ATTN_TOL; else one failure */
static int attn_close(const float *got, const double *want, uint64_t seq,
		      uint32_t layer, uint64_t lo, uint64_t hi, const char *call)
{
	for (uint32_t i = 0; i < QH * DIM; i++)
		if (!(fabs(got[i] - want[i]) <= ATTN_TOL + ATTN_TOL * fabs(want[i]))) {
			stress_fail("%s seq %" PRIu64 " layer %u tokens [%" PRIu64
			     ", %" PRIu64 "): out[%u] %g, reference %g",
			     call, seq, layer, lo, hi, i, (double)got[i],
			     want[i]);
			return 0;
		}
	return 1;
}

/* attn_mask - ones on [lo, hi), zeros up to len (a fresh calloc) */
static uint8_t *attn_mask(uint64_t lo, uint64_t hi, uint64_t len)
{
	uint8_t *m = calloc(len, 1);

	if (m)
		memset(m + lo, 1, hi - lo);
	return m;
}

/* attend_one - kvf_attend on a writer's sequence (any layer) or a fork
 * (layer 1, which only the fork call fills: a fork id made again is at
 * least as long, so its length never drops below one seen) */
static void attend_one(struct thread *t, float *q, float *out, double *ref,
		       double *s)
{
	kvf_store *st = t->c->st;
	uint32_t w = (uint32_t)rng_below(&t->rng, WRITERS);
	uint32_t slot = (uint32_t)rng_below(&t->rng, 2 * FORK_SLOTS);
	uint64_t seq = stress_writer_seq(w), fam = seq, n0, lo;
	uint32_t layer = (uint32_t)rng_below(&t->rng, LAYERS);
	int is_fork = 0;
	kvf_attn_opts o;
	uint8_t *mask;
	kvf_status rc;

	if (slot < FORK_SLOTS) {
		uint64_t f = atomic_load(&t->c->forks[slot]);

		if (f) {
			seq = f;
			fam = f / 1000 * 1000;
			layer = 1;
			is_fork = 1;
		}
	}
	rc = kvf_seq_len(st, seq, layer, &n0);
	if (rc == KVF_ENOENT || (rc == KVF_OK && n0 == 0))
		return;
	if (rc != KVF_OK) {
		stress_fail("len %" PRIu64 ": %s", seq, kvf_last_error());
		return;
	}
	lo = n0 - (1 + rng_below(&t->rng, n0 < ATTN_SPAN ? n0 : ATTN_SPAN));
	if ((mask = attn_mask(lo, n0, n0 + ATTN_SLACK)) == NULL)
		return;
	kvf_attn_opts_init(&o);
	o.mask = mask;
	o.mask_len = n0 + ATTN_SLACK;
	for (uint32_t i = 0; i < QH * DIM; i++)
		q[i] = (float)((double)rng_below(&t->rng, 1u << 20) / (1u << 20) - 0.5);
	rc = kvf_attend(st, seq, layer, q, out, &o);
	free(mask);
	if ((rc == KVF_ENOENT && is_fork) || rc == KVF_ERANGE)
		return; /* a fork freed meanwhile; grown past the mask */
	if (rc != KVF_OK) {
		stress_fail("attend seq %" PRIu64 " layer %u: %s", seq, layer,
		     kvf_last_error());
		return;
	}
	attn_ref(fam, layer, lo, n0, q, ref, s);
	if (attn_close(out, ref, seq, layer, lo, n0, "attend")) {
		atomic_fetch_add(&stress_attends, 1);
		atomic_fetch_add(&stress_passed, 1);
	}
}

/* attend_all - kvf_attend_batch over every writer's sequence: one mask
 * for all, ones below the shortest length seen */
static void attend_all(struct thread *t, float *q, float *out, double *ref,
		       double *s)
{
	kvf_store *st = t->c->st;
	uint32_t layer = (uint32_t)rng_below(&t->rng, LAYERS);
	uint64_t seqs[WRITERS], lo, m = UINT64_MAX, longest = 0;
	kvf_attn_opts o;
	uint8_t *mask;
	kvf_status rc;

	for (uint32_t w = 0; w < WRITERS; w++) {
		uint64_t n;

		seqs[w] = stress_writer_seq(w);
		if (kvf_seq_len(st, seqs[w], layer, &n) != KVF_OK)
			return; /* not created yet */
		m = n < m ? n : m;
		longest = n > longest ? n : longest;
	}
	if (m == 0)
		return;
	lo = m - (1 + rng_below(&t->rng, m < ATTN_SPAN ? m : ATTN_SPAN));
	if ((mask = attn_mask(lo, m, longest + ATTN_SLACK)) == NULL)
		return;
	kvf_attn_opts_init(&o);
	o.mask = mask;
	o.mask_len = longest + ATTN_SLACK;
	for (uint32_t i = 0; i < WRITERS * QH * DIM; i++)
		q[i] = (float)((double)rng_below(&t->rng, 1u << 20) / (1u << 20) - 0.5);
	rc = kvf_attend_batch(st, WRITERS, seqs, layer, q, out, &o);
	free(mask);
	if (rc == KVF_ERANGE)
		return;
	if (rc != KVF_OK) {
		stress_fail("attend_batch layer %u: %s", layer, kvf_last_error());
		return;
	}
	for (uint32_t w = 0; w < WRITERS; w++) {
		attn_ref(seqs[w], layer, lo, m, q + (size_t)w * QH * DIM, ref, s);
		if (!attn_close(out + (size_t)w * QH * DIM, ref, seqs[w], layer,
				lo, m, "attend_batch"))
			return;
	}
	atomic_fetch_add(&stress_attend_batches, 1);
	atomic_fetch_add(&stress_passed, 1);
}

void *stress_attender(void *arg)
{
	struct thread *t = arg;
	float *q = malloc((size_t)WRITERS * QH * DIM * sizeof(float));
	float *out = malloc((size_t)WRITERS * QH * DIM * sizeof(float));
	double *ref = malloc((size_t)QH * DIM * sizeof(double));
	double *s = malloc(ATTN_SPAN * sizeof(double));

	/* while the writers run, and at least ATTN_MIN calls in all */
	for (uint32_t i = 0; (atomic_load(&stress_writers_left) > 0 || i < ATTN_MIN) &&
			     q && out && ref && s;
	     i++) {
		if (i % 4 == 3)
			attend_all(t, q, out, ref, s);
		else
			attend_one(t, q, out, ref, s);
	}
	free(q);
	free(out);
	free(ref);
	free(s);
	return NULL;
}

