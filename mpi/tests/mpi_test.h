/*
 * mpi_test.h - what the kvflash_mpi tests share: the deterministic token
 * values (a function of sequence, layer, token, head, dim), a reference
 * single store, the 1e-5 comparison, and a CHECK that records a failure
 * with its rank and line instead of stopping (a rank that stopped would
 * leave the others waiting in a collective).
 */
#ifndef KVF_MPI_TEST_H
#define KVF_MPI_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvflash_mpi.h"

static int test_failed;
static int test_rank;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed: ", \
				test_rank, __FILE__, __LINE__, #cond);        \
			fprintf(stderr, __VA_ARGS__);                         \
			fprintf(stderr, "\n");                                \
			test_failed = 1;                                      \
		}                                                             \
	} while (0)

/* status and message, on every rank (KVF_TEST_VERBOSE=1: rank 0 prints
 * each message) */
#define CHECK_RC(rc, want, substr)                                        \
	do {                                                              \
		if (test_rank == 0 && getenv("KVF_TEST_VERBOSE"))         \
			printf("%s: %s\n", kvf_strerror(rc),              \
			       kvf_mpi_last_error());                     \
		CHECK((rc) == (want) &&                                   \
			      strstr(kvf_mpi_last_error(), (substr)),     \
		      "status %d (%s), want %d; message '%s', want '%s'", \
		      (int)(rc), kvf_strerror(rc), (int)(want),           \
		      kvf_mpi_last_error(), (substr));                    \
	} while (0)

static inline float tok_val(uint64_t seq, uint32_t layer, uint64_t t,
			    uint32_t h, uint32_t d, int kind)
{
	uint64_t x = seq * 0x9E3779B97F4A7C15ull ^ ((uint64_t)layer << 56) ^
		     (t << 20) ^ ((uint64_t)h << 12) ^ ((uint64_t)d << 1) ^
		     (uint64_t)kind;
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 31;
	return (float)((double)(x >> 40) / (double)(1u << 24) * 2.0 - 1.0);
}

/* k, v: [n][m->n_kv_heads][m->head_dim] f32, tokens [t0, t0 + n) */
static inline void tok_fill(const kvf_model *m, uint64_t seq, uint32_t layer,
			    uint64_t t0, uint32_t n, float *k, float *v)
{
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t h = 0; h < m->n_kv_heads; h++)
			for (uint32_t d = 0; d < m->head_dim; d++) {
				size_t o = ((size_t)i * m->n_kv_heads + h) *
						   m->head_dim +
					   d;
				k[o] = tok_val(seq, layer, t0 + i, h, d, 0);
				v[o] = tok_val(seq, layer, t0 + i, h, d, 1);
			}
}

/* Largest per-head error, relative to the head's largest |expected|. */
static inline double rel_err(const float *got, const float *want,
			     uint32_t heads, uint32_t dim)
{
	double worst = 0;

	for (uint32_t h = 0; h < heads; h++) {
		double e = 0, m = 1e-30;
		for (uint32_t d = 0; d < dim; d++) {
			double a = got[h * dim + d], b = want[h * dim + d];
			e = fabs(a - b) > e ? fabs(a - b) : e;
			m = fabs(b) > m ? fabs(b) : m;
		}
		worst = e / m > worst ? e / m : worst;
	}
	return worst;
}

/* The verdict of every rank, for the exit code. */
static inline int test_exit(void)
{
	int any = 0;

	MPI_Allreduce(&test_failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	MPI_Finalize();
	return any ? 1 : 0;
}

#endif
