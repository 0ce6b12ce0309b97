/*
 * bench_decode_ctx_int.h - what the files of `kvbench decode --context`
 * share (see bench_decode_ctx.c for what it measures): the systems, the
 * arguments, one context's figures, the run's state and the calls between
 * the files.  bench_decode_ctx.c parses the arguments and runs the whole;
 * bench_decode_ctx_run.c makes the data and runs the systems at one
 * context length; bench_decode_ctx_report.c prints the table, the JSON
 * and the plot.
 * Nothing outside bench_decode*.c includes it.
 */
#ifndef KVF_BENCH_DECODE_CTX_INT_H
#define KVF_BENCH_DECODE_CTX_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

#define CTX_MAX 16u          /* context lengths in one run */
#define CTX_MAX_THREADS 64u  /* threads of the two baselines */
#define CTX_MAX_STEPS 1024u  /* timed steps */
#define CTX_PREFILL_CHUNK 1024u /* tokens per prefill kvf_append */
#define CTX_MIN_BUDGET (1u << 20) /* the least dram_budget kvf_open takes */
#define CTX_MAX_ERR 1e-4     /* the baselines agree with kvf_attend when */
#define CTX_MIN_COS 0.9999   /* max |diff| <= this and cosine >= this */

/* Where a system keeps the KV cache and how it attends. */
enum ctx_kind {
	CTX_KVFLASH, /* a file store, kvf_append + kvf_attend */
	CTX_MEMORY,  /* every token in DRAM, the same kernel */
	CTX_FLEXGEN  /* a plain file, O_DIRECT pread of K and V, the kernel */
};

/*
 * One system of the run.  The table of them (ctx_systems in
 * bench_decode_ctx_run.c) is the one place a system is added: compressed KV
 * is one more CTX_KVFLASH row with its codec (--codec NAME adds it:
 * decode_ctx_add_codec; ctx_store_options sets the store's codec).
 */
struct ctx_system {
	const char *key;    /* JSON key, plot column */
	const char *label;  /* the table's */
	enum ctx_kind kind;
	uint32_t sparse;    /* CTX_KVFLASH: 0 dense, 1 SparF (--sparse) */
	kvf_codec codec;    /* CTX_KVFLASH: the store's KV codec */
};

#define CTX_SYSTEMS_MAX 5u
extern struct ctx_system ctx_systems[CTX_SYSTEMS_MAX];
extern uint32_t ctx_n_systems; /* rows of ctx_systems in this run */
/* decode_ctx_add_codec - a dense kvflash row over a store of codec c */
void decode_ctx_add_codec(kvf_codec c);
#define CTX_DENSE 0u /* ctx_systems index of the reference: dense kvflash */

struct ctx_args {
	const char *dir;       /* the stores and the plain file */
	kvf_model model;       /* f16 */
	uint64_t context[CTX_MAX]; /* prompt tokens, in the order given */
	uint32_t n_context;
	uint32_t steps;        /* timed decode steps */
	uint32_t warmup;       /* untimed steps before them */
	uint32_t n_threads;    /* 0: online CPUs */
	uint64_t budget;       /* dram_budget; 0: a quarter of the K+V */
	uint32_t sparse;       /* SparF mode: 1 by tokens, 2 by groups */
	uint32_t sparf_share;  /* SparF: top_k = tokens / N, top_r = dim / N */
	kvf_codec codec;       /* --codec: one more kvflash row; NONE: not */
	const char *plot_dir;  /* NULL: no plot */
	int json;              /* JSON instead of a table */
	int keep;              /* leave the stores and the plain file */
};

/* The figures of one system at one context. */
struct ctx_figs {
	double step_med_ns;    /* a timed step: appends and attention of
				* every layer */
	double step_mean_ns;
	double tokens_s;       /* per sequence: 1e9 / step_med_ns */
	double cpu_ns;         /* CPU time of the process a timed step (mean;
				* every thread) */
	double bytes_read;     /* from media per timed step */
	double bytes_written;  /* to media per timed step */
	uint64_t cache_hits, cache_misses; /* kvflash, over the timed steps */
	double max_err;        /* max |out - dense kvf_attend|, every step
				* and layer (not for dense itself) */
	double min_cos, mean_cos; /* cosine to dense, per query head */
};

/* One context length: the setup and every system. */
struct ctx_point {
	uint64_t tokens;       /* prompt tokens */
	uint64_t kv_bytes;     /* K+V of every layer after the last step */
	uint64_t budget;       /* dram_budget of the kvflash runs */
	uint32_t top_k, top_r; /* SparF's */
	double build_s;        /* the store's prefill and sync */
	double plain_s;        /* writing the plain file */
	int store_direct;      /* the store opened with O_DIRECT */
	int plain_direct;      /* the plain file opened with O_DIRECT */
	int agree;             /* the baselines agree with kvf_attend */
	struct ctx_figs sys[CTX_SYSTEMS_MAX];
};

/* One baseline thread: KV heads first, first + n_threads, ... */
struct ctx;

struct ctx_worker {
	struct ctx *c;
	uint32_t first;
	unsigned char *k, *v; /* FlexGen: one region each, page-aligned */
	float *state;         /* KVC_ATTN_STATE_FLOATS(group, head_dim) */
	float *qs;            /* [group][head_dim], scaled */
	uint64_t bytes;       /* FlexGen: bytes pread this call */
	int err;              /* errno of a failed pread, else 0 */
};

/* The run, and the context length being measured. */
struct ctx {
	const struct ctx_args *a;
	uint32_t n_threads;
	size_t row;             /* bytes of one head's row of a token */
	size_t qn;              /* floats of q and out */
	uint16_t noise[65536];  /* f16 noise in [-1, 1) */
	/* the context being measured */
	struct ctx_point *pt;
	uint64_t n, cap;        /* prompt tokens; with the decode tokens */
	size_t region;          /* bytes of one (layer, kind, head) array:
				 * cap rows in whole pages */
	size_t n_regions;       /* layers * 2 * kv_heads */
	unsigned char *mem;     /* [n_regions][region]: the in-memory cache,
				 * and the plain file's image */
	float *ref;             /* [warmup + steps][layers][qn] dense
				 * kvf_attend's outputs */
	float *q, *out;         /* [qn] */
	uint16_t *tok_k, *tok_v; /* [kv_heads][head_dim]: a step's token */
	uint16_t *chunk_k, *chunk_v; /* [CTX_PREFILL_CHUNK][kv_heads][dim] */
	double *step_ns;        /* [steps] */
	double cos_sum;         /* cosines to dense summed, and how many */
	uint64_t cos_n;
	char store_path[4096], plain_path[4096];
	char codec_path[4096];   /* the --codec row's store */
	/* the FlexGen reader */
	int fd;                 /* the plain file */
	unsigned char *tail;    /* [n_regions][2 pages]: the page being
				 * filled by decode tokens, and its spill */
	uint64_t written;       /* bytes pwritten during the timed steps */
	struct ctx_worker w[CTX_MAX_THREADS];
};

struct ctx_result {
	const struct ctx_args *a;
	uint32_t n_threads;
	struct ctx_point pt[CTX_MAX];
	uint32_t n_pt;         /* contexts run */
};

/* bench_decode_ctx.c */
/* decode_ctx_wanted - argv holds --context: the context benchmark runs */
int decode_ctx_wanted(int argc, char **argv);
/* decode_ctx_main - `kvbench decode --context ...`: 0, 1 (failed or the
 * systems disagree), 2 (usage) */
int decode_ctx_main(int argc, char **argv);

/* bench_decode_ctx_run.c (ctx_systems too) */
/* decode_ctx_kv_bytes - K+V of every layer for tokens tokens */
uint64_t decode_ctx_kv_bytes(const struct ctx_args *a, uint64_t tokens);
/* decode_ctx_run_context - every system at prompt length n into *pt, with
 * its dram_budget budget; 0, or -1 with a message printed */
int decode_ctx_run_context(struct ctx *c, uint64_t n, uint64_t budget,
			   struct ctx_point *pt);

/* bench_decode_ctx_report.c */
void decode_ctx_print_table(const struct ctx_result *r);
void decode_ctx_print_json(const struct ctx_result *r);
/* decode_ctx_plot - DIR/decode_context.dat and .gp, and the PNG through
 * gnuplot when it is installed; 0, or 1 with a message printed */
int decode_ctx_plot(const struct ctx_result *r, const char *dir);

#endif /* KVF_BENCH_DECODE_CTX_INT_H */
