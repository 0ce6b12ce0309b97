/*
 * bench_append_int.h - what the files of `kvbench append` share (see
 * bench_append.c for what it measures): the constants, the arguments, one
 * pass's figures, the run's context, and the calls each file makes into
 * another.  bench_append.c parses the arguments and takes the medians;
 * bench_append_run.c holds the data, the plain loops and the store's side
 * of one pass; bench_append_report.c prints the figures.  Nothing outside
 * bench_append*.c includes it.  One thread, no locking.
 */
#ifndef KVF_BENCH_APPEND_INT_H
#define KVF_BENCH_APPEND_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

#define MIB (1ull << 20)
#define PLAIN_CHUNK (1u << 20) /* bytes per plain pwrite/pread */
#define POOL_SLACK 65536u      /* elements of offset room in the pool */
#define MAX_REPEAT 32u

struct append_args {
	const char *dir;         /* where the store and the plain file go */
	kvf_model model;         /* the store's shape */
	uint32_t prompt_tokens;  /* prefill tokens per sequence */
	uint32_t decode_steps;   /* decode tokens per sequence */
	uint32_t n_seqs;         /* sequences per batch (each phase) */
	uint32_t n_stripes;      /* store stripes */
	uint64_t segment_bytes;  /* bytes per segment per stripe */
	uint64_t capacity_bytes; /* store capacity; 0 = what the run needs */
	uint32_t n_reads;        /* heads read back per phase */
	uint32_t repeat;         /* passes; medians are reported */
	int json;                /* JSON instead of a table */
	int keep;                /* leave the files in dir */
	kvf_codec codec;         /* --codec: a fourth side, a store with
				  * this codec (KVF_CODEC_NONE: none) */
};

/* The sides of a pass: kvflash with the default options (the memory tier
 * on), the plain loop, kvflash with dram_budget = 0 (no tier), and with
 * --codec kvflash with the default options and that codec (appends only:
 * its reads return decoded values, not the ones appended). */
enum { SIDE_KVF = 0, SIDE_PLAIN = 1, SIDE_NOTIER = 2, SIDES = 3,
       SIDE_CODEC = 3, SIDES_MAX = 4 };

/* One pass's figures, by side (reads: SIDE_KVF and SIDE_PLAIN only). */
struct append_pass {
	double prefill_mbs[SIDES_MAX]; /* user bytes per second */
	double decode_mbs[SIDES_MAX];
	double read_pre_mbs[2]; /* cold head reads, prefill-written */
	double read_dec_mbs[2]; /* cold head reads, decode-written */
	double prefill_cpu[SIDES_MAX]; /* CPU seconds of the process in the phase */
	double decode_cpu[SIDES_MAX];
	double reopen_ms; /* kvf_open of the closed store */
};

/* The stage profile of one store (kvf_options.profile) through both
 * phases: [0] prefill, [1] decode, each the kvf_stats difference over the
 * phase, with the phase's wall time. */
struct append_prof {
	kvf_stats d[2];
	double wall_ns[2];
	double mbs[2];
};

struct append_ctx {
	const struct append_args *a;
	char *store_dir;           /* DIR/store */
	char *store0_dir;          /* DIR/store0 (dram_budget = 0) */
	char *storec_dir;          /* DIR/storec (--codec) */
	char *plain_path;          /* DIR/plain.dat */
	int claimed;               /* the stores checked: the files are ours */
	int made_dir;              /* DIR was made by this run */
	uint16_t *pool;            /* random f16 values */
	size_t pool_elts;          /* elements in pool */
	unsigned char *chunk;      /* PLAIN_CHUNK bytes, aligned */
	uint32_t row_bytes;        /* one token of one head */
	uint64_t prefill_bytes;    /* user bytes of the prefill phase */
	uint64_t decode_bytes;     /* user bytes of the decode phase */
	uint64_t plain_file_bytes; /* the plain file's preallocated size */
	int direct_io;             /* the store opened with O_DIRECT forced */
	int plain_direct;          /* the plain file is O_DIRECT */
	kvf_stats stats;           /* after the append phases (last pass) */
	kvf_stats stats_codec;     /* the same of the codec store (--codec) */
	struct append_prof prof[3]; /* [0] defaults, [1] dram_budget = 0,
				     * [2] the codec store (--codec) */
	uint64_t verified_bytes;   /* bytes of heads checked (last pass) */
};

/* append_setup - the data pool, the plain loops' chunk, the paths and
 * DIR; 0, or -1 with a message printed */
int append_setup(struct append_ctx *c);
/* append_default_capacity - the store capacity both phases need */
uint64_t append_default_capacity(const struct append_ctx *c);
/* append_one_pass - one pass of every side into *p (first: which side
 * goes first); 0, or -1 with a message printed */
int append_one_pass(struct append_ctx *c, int first, struct append_pass *p);
/* append_profile - the stage profile of a fresh store through both
 * phases, with the default options (which 0), dram_budget = 0 (1) or
 * the default options and --codec (2), into c->prof[which]; 0, or -1
 * with a message printed */
int append_profile(struct append_ctx *c, int which);
/* append_print_json, append_print_table - the medians m, reported */
void append_print_json(const struct append_ctx *c,
		       const struct append_pass *m);
void append_print_table(const struct append_ctx *c,
			const struct append_pass *m);

#endif /* KVF_BENCH_APPEND_INT_H */
