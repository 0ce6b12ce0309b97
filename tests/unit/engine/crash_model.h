/*
 * crash_model.h - what the crash and power-cut tests share
 * (test_store_crash.c, test_store_power.c): the model of what a store must
 * hold (sequences as runs of tagged tokens, an optimizer with an exact
 * reference), the check of a reopened store against it, the children that
 * write and check and how they report, and the rounds of kills and power
 * cuts (crash_rounds.c).  See test_store_crash.c for how a round works.
 */
#ifndef KVF_TEST_CRASH_MODEL_H
#define KVF_TEST_CRASH_MODEL_H

#include <stdint.h>
#include <sys/types.h>

#include "kvflash.h"
#include "store_fixture.h" /* the model: LAYERS, QH, KVH, DIM, ROW, G */

#define ID_POOL 6
#define BALLAST (1ull << 50) /* a sequence outside the pool; see below */
#define MAX_TOKENS (24 * G)  /* no appends to a layer past this */
/*
 * Six sequences of MAX_TOKENS in both layers, K/V and X, would hold more
 * than the store's 8 MiB (crash_opts), so the script also keeps what its
 * live sequences hold, counted as if they shared nothing, under
 * LIVE_BYTES_MAX: the rest is room for the optimizer, unsynced tails
 * written at syncs and the cleaner.  Without it, a rare script filled the
 * store and the writer failed with KVF_ENOSPC.
 */
#define KV_GROUP_BYTES ((uint64_t)G * KVH * 2 * ROW) /* K and V, all heads */
#define X_GROUP_BYTES ((uint64_t)G * QH * ROW)
#define LIVE_BYTES_MAX (5ull << 20)

#define SEEDS 20          /* stores per run of killed_writer */
#define ROUNDS 6          /* kills per seed, on the same store */
#define OPS_PER_ROUND 300 /* script length of one writer */

/*
 * The optimizer: SGD with lr 1 and momentum 1 over small integer
 * gradients (optim_grad), so that every value is an integer a float holds
 * exactly and the reference (optim_param) needs no tolerance.
 */
#define OPTIM_NAME "crash-optim"
#define OPTIM_PARAMS 3000 /* three pages of fp32 per state tensor */

struct run {
	uint64_t end; /* tokens below end carry tag */
	uint64_t tag;
};

struct track {
	uint64_t len;  /* tokens */
	uint32_t n;    /* runs */
	struct run *runs;
	uint32_t cuts; /* prefixes shorter than what it was made from (a
			* truncation, a fork): with a codec, each may encode
			* the kept tokens of the group it cut once more */
};

struct mseq {
	int live;
	struct track kv[LAYERS];
	struct track x[LAYERS];
};

struct model {
	struct mseq seqs[ID_POOL];
	uint64_t next_tag;
	uint64_t optim_steps; /* optimizer steps taken */
};

extern int in_child;  /* set in forked children: report through the pipe */
extern int report_fd; /* the pipe to the parent, in a child */
extern kvf_media_kind crash_media; /* the media crash_opts asks for */
/* The codec crash_opts asks for (set per test; $KVF_CRASH_CODEC = fp8,
 * int8 or int4 runs every crash and power-cut test with one) and the
 * token group of its stores: G, or the codec's.  With a codec, values
 * are finite (uniform in (-2, 2), as f16) and rows are compared within
 * the codec's error (check_rows). */
extern kvf_codec crash_codec;
extern uint32_t crash_g;
/* crash_codec_set - the codec of the stores made from now on (with
 * KVF_CODEC_NONE: $KVF_CRASH_CODEC's, if set) */
void crash_codec_set(kvf_codec c);
extern unsigned char *buf_a, *buf_b, *buf_c; /* bufs_alloc */

/* fail - stop the test: in a child, send the message up the pipe and exit 3 */
void fail(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
uint64_t mix(uint64_t z);
void fill_row(unsigned char *dst, uint64_t tag, uint32_t layer, int kind,
		     uint64_t t, uint32_t h);
uint64_t seq_id(uint32_t i);
void track_push(struct track *t, uint64_t n, uint64_t tag);
void track_prefix(struct track *dst, const struct track *src, uint64_t n);
uint64_t track_tag(const struct track *t, uint64_t tok);
void mseq_clear(struct mseq *s);
void model_copy(struct model *dst, const struct model *src);
void model_free(struct model *m);
float optim_grad(uint64_t step, uint32_t i);
float optim_param(uint64_t steps, uint32_t i);
kvf_options crash_opts(void);
void bufs_alloc(void);
int check_rows(const struct track *t, uint32_t layer, int kind,
		      uint32_t h, uint64_t t0, uint64_t n,
		      const unsigned char *got, size_t stride, char *why,
		      size_t why_cap);
int state_differs(kvf_store *st, const struct model *m, char *why,
			 size_t why_cap);
void announce(char what, unsigned op_no);
extern kvf_store *must_store; /* the writer's store: a full one's figures
				* go into must's message */
void must(kvf_status rc, const char *what, unsigned op_no);
pid_t spawn(int *fd);
void run_child(void (*fn)(const char *path, uint64_t arg),
		     const char *path, uint64_t arg);
unsigned trials(const char *name, unsigned def);

/*
 * crash_rounds - `n` rounds over stores of ROUNDS rounds each, every one
 * ending with a kill (and, with `power`, a power cut), each followed by a
 * check of the reopened store against the model; media is the store's
 */
void crash_rounds(const char *test, unsigned n, int power,
			 kvf_media_kind media);

#endif /* KVF_TEST_CRASH_MODEL_H */
