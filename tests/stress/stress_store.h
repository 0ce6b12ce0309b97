/*
 * stress_store.h - what the two files of stress_store share
 * (stress_store.c says what it runs): the constants, the threads'
 * context, the counters every thread adds to, token values, and the
 * attender threads of stress_store_attend.c.
 */
#ifndef KVF_STRESS_STORE_H
#define KVF_STRESS_STORE_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvflash.h"

#define LAYERS 2
#define QH 4
#define KVH 2
#define DIM 64 /* f16: 128 bytes a token of a head, G = 32 */
#define ROW (DIM * 2)
#define G 32
#define WRITERS 4
#define READERS 2
#define APPENDS 1200  /* appends per writer (each to every layer) */
#define MAX_N (3 * G) /* tokens per append, at most */
#define FORK_SLOTS 4  /* live forks the forker keeps */
#define ATTENDERS 2
#define ATTN_SPAN 256   /* tokens an attention check covers, at most */
#define ATTN_SLACK 8192 /* mask entries past the length seen */
#define ATTN_TOL 2e-5   /* |got - want| <= tol + tol * |want| */
#define ATTN_MIN 50     /* calls per attender, at least */

struct ctx {
	kvf_store *st;
	uint64_t seed;
	/* forks: 0 = none; written by the forker, read by readers */
	_Atomic uint64_t forks[FORK_SLOTS];
};

struct thread {
	struct ctx *c;
	uint32_t id;
	uint64_t rng;
};

/* counters of checks; the writers still running */
extern atomic_uint stress_passed, stress_failed;
extern atomic_int stress_writers_left;
/* the attenders' calls checked */
extern atomic_uint stress_attends, stress_attend_batches;

static inline uint64_t stress_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t stress_writer_seq(uint32_t w)
{
	return 1000 * (uint64_t)(w + 1);
}

/* stress_fail - count a failure, and report the first few */
void stress_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* stress_fill_row - the bytes of token t of head h of family, layer, kind
 * (0 K, 1 V): four finite f16 values below 2 in magnitude a word */
void stress_fill_row(unsigned char *dst, uint64_t family, uint32_t layer,
		     int kind, uint64_t t, uint32_t h);
/* stress_min_len - the tokens every layer of seq has; 0 if it is gone */
int stress_min_len(kvf_store *st, uint64_t seq, uint64_t *out);
/* stress_attender - a thread (struct thread *): kvf_attend and
 * kvf_attend_batch against a double-precision reference */
void *stress_attender(void *arg);

#endif /* KVF_STRESS_STORE_H */
