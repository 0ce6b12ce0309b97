/*
 * bench_demo_int.h - what the two files of `kvbench demo` share (see
 * bench_demo.c for the workload): the constants, the arguments, a slot,
 * the run's totals and context, and the report's entry points, which
 * live in bench_demo_report.c.  Nothing outside bench_demo*.c includes
 * it.  One thread, no locking.
 */
#ifndef KVF_BENCH_DEMO_INT_H
#define KVF_BENCH_DEMO_INT_H

#include <stdint.h>

#include "kvflash.h"

#define MIB (1ull << 20)
#define MAX_SLOTS 256u
#define CHECKS_PER_SYNC 2u /* heads read back after each periodic sync */

struct demo_args {
	const char *dir;                 /* the store directory */
	kvf_model model;                 /* the store's shape */
	uint32_t n_slots;                /* sequences decoding at once */
	uint32_t steps;                  /* decode steps of the whole batch */
	uint32_t min_prompt, max_prompt; /* prompt tokens, uniform */
	uint32_t min_decode, max_decode; /* decode tokens per sequence */
	uint32_t sync_every;             /* steps between kvf_syncs */
	uint32_t n_stripes;              /* store stripes */
	uint64_t segment_bytes;          /* bytes per segment per stripe */
	uint64_t capacity_bytes;         /* store capacity */
	uint64_t seed;                   /* workload generator seed */
	int json;                        /* JSON instead of text */
};

struct slot {
	uint64_t id;      /* its sequence */
	uint32_t prompt;  /* prompt tokens */
	uint32_t budget;  /* decode tokens to produce */
	uint32_t decoded; /* decode tokens so far */
};

/* What the run did and how long the calls took. */
struct demo_totals {
	uint64_t seqs_created, seqs_freed;
	uint64_t prefill_tokens, prefill_ns; /* prompt tokens, in kvf_append */
	uint64_t decode_tokens, decode_ns; /* sequence-tokens, in kvf_append */
	uint64_t n_syncs, sync_ns;         /* periodic and final syncs */
	uint64_t sync_max_ns;              /* the longest of them */
	uint64_t other_ns;                 /* seq create/free */
	uint64_t check_heads, check_bytes, check_ns; /* reads while running */
	uint64_t cold_heads, cold_bytes, cold_ns;    /* reads after reopen */
	uint64_t wall_ns; /* the workload, wall clock */
	double reopen_ms; /* kvf_open of the closed store */
	int direct_io;    /* O_DIRECT forced on and granted */
};

struct demo {
	const struct demo_args *a;
	kvf_store *st;
	struct slot slots[MAX_SLOTS];
	uint64_t next_id;    /* the next sequence id */
	uint64_t rng;        /* workload generator state */
	uint32_t row_elts;   /* head_dim */
	uint32_t tok_elts;   /* n_kv_heads * head_dim: one token, all heads */
	uint16_t *k, *v;     /* append buffers: max_prompt tokens */
	uint16_t *rk, *rv;   /* read buffers: the longest sequence, one head */
	uint16_t *want;      /* one expected row */
	uint64_t max_tokens; /* the longest a sequence gets */
	struct demo_totals t;
	kvf_stats stats; /* at the end, before close */
};

/* demo_print_json, demo_print_text - the run's figures, after the final
 * sync and before close (d->stats) */
void demo_print_json(const struct demo *d);
void demo_print_text(const struct demo *d);

#endif /* KVF_BENCH_DEMO_INT_H */
