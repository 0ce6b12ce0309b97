/*
 * store_model.h - what the files of the store_model test share
 * (test_store_model.c says what it checks): the geometries, the reference
 * (store_model_ref.c) and one case (store_model_case.c).
 */
#ifndef KVF_TEST_STORE_MODEL_H
#define KVF_TEST_STORE_MODEL_H

#include <stdint.h>
#include <stdio.h>

#include "kvflash.h"

#define CASES_PER_TEST 3  /* cases (seeds) per Test() */
#define OPS_PER_CASE 1000 /* operations per case */
#define ID_POOL 12        /* sequence ids the operations draw from */
#define MAX_GROUPS 40     /* no more appends past this many groups */

struct geometry {
	kvf_model m;
	uint32_t page_size; /* bytes */
	uint32_t n_stripes; /* stripes */
	uint32_t elt_bytes; /* bytes per element */
	uint32_t row_bytes; /* one token of one head */
	uint32_t G;         /* tokens per page of one head */
};

/* model_mix - splitmix64's finalizer */
static inline uint64_t model_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ---- the reference (store_model_ref.c) ------------------------------------ */

struct run {
	uint64_t end; /* tokens below end (and at or past the previous run's
		       * end) carry tag */
	uint64_t tag; /* value tag */
};

struct track {
	uint64_t len;     /* tokens */
	struct run *runs; /* in token order */
	uint32_t n, cap;  /* runs used, allocated */
};

struct mseq {
	uint64_t id;
	int live;
	struct track *kv; /* [n_layers] */
	struct track *x;  /* [n_layers] */
};

struct model {
	uint32_t n_layers;
	struct mseq seqs[ID_POOL];
	uint64_t user_bytes; /* appended since the store was created */
};

/* ref_fill_row - the bytes of token t of head h (kind 0 K, 1 V, 2 X) */
void ref_fill_row(unsigned char *dst, uint32_t row_bytes, uint64_t tag,
		  uint32_t layer, int kind, uint64_t t, uint32_t h);
/* ref_track_push - n more tokens carrying tag */
void ref_track_push(struct track *t, uint64_t n, uint64_t tag);
/* ref_track_prefix - dst = the first n tokens of src */
void ref_track_prefix(struct track *dst, const struct track *src, uint64_t n);
/* ref_track_tag - the tag of token tok */
uint64_t ref_track_tag(const struct track *t, uint64_t tok);
void ref_mseq_clear(struct mseq *s, uint32_t n_layers);
void ref_mseq_init(struct mseq *s, uint32_t n_layers);
void ref_model_copy(struct model *dst, const struct model *src);
void ref_model_reset(struct model *m);
/* ref_model_count - live sequences */
uint32_t ref_model_count(const struct model *m);
/* ref_min_len - the most tokens a fork of s may take */
uint64_t ref_min_len(const struct model *m, const struct mseq *s);

/* ---- one case (store_model_case.c) ---------------------------------------- */

struct tally {
	unsigned appends, reads, forks, frees, syncs, reopens, abandons, enospc,
		refusals;
};

struct ctx {
	const struct geometry *g;
	kvf_media_kind media;
	uint64_t seed; /* of this case, for messages */
	uint64_t rng;  /* state */
	unsigned op;   /* operation number, for messages */
	char *path;    /* the store directory */
	kvf_options opts;
	kvf_store *st;
	struct model cur;    /* what the store must hold now */
	struct model synced; /* ... and after a crash */
	uint64_t next_tag;
	uint32_t ballast;    /* sequences outside the model (see run_case) */
	int tight;           /* capacity small enough for KVF_ENOSPC */
	int meta_since_sync; /* create/fork/free since the last sync */
	unsigned char *buf_a, *buf_b, *want; /* scratch */
	size_t buf_cap;                      /* bytes in each scratch buffer */
	struct tally t;
};

#define CHECK(c, cond, ...)                                               \
	cr_assert(cond, "seed %" PRIu64 " op %u: %s", (c)->seed, (c)->op, \
		  msg_of(__VA_ARGS__))

const char *msg_of(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

extern int model_tracing; /* KVF_MODEL_TRACE set: print every operation */

#define TRACE(c, ...)                                        \
	do {                                                 \
		if (model_tracing) {                         \
			fprintf(stderr, "op %u: ", (c)->op); \
			fprintf(stderr, __VA_ARGS__);        \
		}                                            \
	} while (0)

/* model_run_case - one case: the store at dir/s against the reference,
 * OPS_PER_CASE operations from seed */
void model_run_case(const struct geometry *g, kvf_media_kind media,
		    uint64_t seed, const char *dir);

#endif /* KVF_TEST_STORE_MODEL_H */
