/*
 * bench_attend_int.h - what the files of `kvbench attend` share (see
 * bench_attend.c for what it measures): the constants, the SparF modes,
 * the arguments, one pass's times, the figures, the run's context, the
 * FlexGen workers, and the calls each file makes into another.  A header
 * of its own so that the context struct stays the one place the files
 * meet; nothing outside bench_attend*.c includes it.
 *
 * One thread drives the stores; the baselines' threads share nothing but
 * read-only data.
 */
#ifndef KVF_BENCH_ATTEND_INT_H
#define KVF_BENCH_ATTEND_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

#define N_LAYERS 2u            /* layer 0 scattered, layer 1 clustered */
#define SEQ_ID 1u              /* the one sequence */
#define PREFILL_CHUNK 2048u    /* tokens per kvf_append (chunked prefill) */
#define PLAIN_CHUNK (1u << 20) /* bytes per plain O_DIRECT pread */
#define MAX_REPEAT 32u
#define MAX_THREADS 64u
#define ALIGN_DIMS 8u      /* dims of a head that q points along */
#define SCATTER_EVERY 128u /* layer 0: one heavy hitter in this many */
#define RUN_BLOCK 512u     /* layer 1: one run in every RUN_BLOCK */
#define RUN_TOKENS 80u     /* tokens per run */
#define HH_K 2.0f          /* a heavy hitter's K on the aligned dims */
#define CHECK_TOL 1e-4     /* max |difference| the checks accept */
#define MEM_CALLS 3u       /* in-memory calls (and reads) per pass */
#define N_MODES 2u         /* SparF modes measured: sparse = 1, 2 */
#define N_H2O 2u           /* H2O budgets measured: keep 1/2 and 1/4 */
#define H2O_SEQ 2u         /* the fork H2O drops from */
#define H2O_QUERIES 4u     /* queries whose scores H2O ranks by */

/* The SparF modes of section 3, in the order they are printed. */
static const struct sparf_mode {
	uint32_t sparse;   /* kvf_attn_opts.sparse */
	const char *title; /* the table's heading */
	const char *json;  /* JSON key prefix (then _layer<l>) */
	const char *name;  /* JSON "mode" */
} sparf_mode[N_MODES] = {
	{ 1, "3a. SparF by tokens (sparse = 1)", "sparf", "tokens" },
	{ 2, "3b. SparF by groups (sparse = 2)", "sparf_groups", "groups" },
};

struct attend_args {
	const char *dir;    /* where the stores and the plain file go */
	kvf_model model;    /* the layer shape (n_layers fixed at 2) */
	uint32_t n_tokens;  /* tokens of the sequence */
	uint32_t top_r;     /* SparF dims; 0 = head_dim / 8 */
	uint32_t top_k;     /* SparF tokens; 0 = n_tokens / 8 */
	uint32_t n_threads; /* store threads (and baseline threads); 0 = CPUs */
	uint32_t repeat;    /* passes; medians are reported */
	int json;           /* JSON instead of a table */
	int keep;           /* leave the stores and the plain file */
	const char *model_dir; /* --model: perplexity of this model instead
				* (bench_attend_model.c) */
	uint32_t windows;   /* --model: windows of val.bin */
	uint32_t window;    /* --model: tokens a window */
	uint64_t budget;    /* --codec: the warm stores' dram_budget */
	kvf_codec codec;    /* --codec: against an uncompressed store
			     * (bench_attend_codec.c; with --model, the
			     * model's dense perplexity with it) */
};

/* One pass's times, ns; [l] is layer l, [s][l] SparF mode s on layer l.
 * Only doubles: medians are taken member by member. */
struct attend_pass {
	double mem_attend;           /* dense kvf_attend, memory store */
	double mem_plain;            /* plain read, n_threads threads */
	double mem_plain1;           /* plain read, one thread */
	double cold_dense[N_LAYERS]; /* dense kvf_attend, file store, cold */
	double plain_direct;         /* O_DIRECT preads of the same bytes */
	double flex;                 /* kvf_read + kernel outside, cold */
	double mem_sparf[N_MODES][N_LAYERS];   /* SparF, memory store, warm */
	double sparf_first[N_MODES][N_LAYERS]; /* first call after a reopen */
	double sparf[N_MODES][N_LAYERS];       /* the next (timed) call */
	/* CPU ns of the whole process (all threads) during those calls */
	double cold_dense_cpu[N_LAYERS];
	double sparf_cpu[N_MODES][N_LAYERS];
	double flex_cpu;
	double reopen; /* kvf_close + kvf_open of the store */
};

/* Figures of one SparF mode on one layer (the last pass). */
struct sparf_figs {
	uint64_t first_bytes;     /* bytes_read of the first call after reopen */
	uint64_t bytes;           /* bytes_read of the timed call */
	uint64_t pages_read;      /* sparf_pages_read of the timed call */
	uint64_t pages_skipped;   /* sparf_pages_skipped of it */
	double cos_min, cos_mean; /* vs dense, over the q heads */
};

/* Figures of one layer that do not vary between passes (the last pass). */
struct layer_figs {
	uint64_t dense_bytes;          /* bytes_read of a cold dense call */
	struct sparf_figs sp[N_MODES]; /* per SparF mode */
	double hh_mass; /* dense attention mass on heavy hitters */
	struct sparf_figs h2o[N_H2O]; /* H2O at each budget: cosine only */
	uint64_t h2o_kept[N_H2O];     /* tokens a KV head kept (mean) */
	double h2o_ms[N_H2O];         /* the kvf_h2o_evict call */
};

struct attend_ctx {
	const struct attend_args *a;
	kvf_options opts;          /* the file store's (kept for reopens) */
	char *mem_dir;             /* DIR/mem */
	char *file_dir;            /* DIR/file */
	char *plain_path;          /* DIR/plain.dat */
	int claimed;               /* the stores checked: the files are ours */
	int made_dir;              /* DIR was made by this run */
	kvf_store *mem;            /* memory store, open for the whole run */
	kvf_store *file;           /* file store, reopened for cold calls */
	uint16_t *noise_k;         /* [65536] f16, uniform in [-0.5, 0.5) */
	uint16_t *noise_v;         /* [65536] f16, uniform in [-1, 1) */
	float *q[N_LAYERS];        /* [n_q_heads][head_dim] per layer */
	float *dense[N_LAYERS];    /* dense output of the last cold call */
	float *out;                /* [n_q_heads][head_dim] scratch */
	uint64_t *membuf;          /* kv_bytes for the plain memory read */
	unsigned char *chunk;      /* PLAIN_CHUNK bytes, aligned */
	uint64_t kv_bytes;         /* K+V bytes of one layer */
	uint64_t plain_file_bytes; /* kv_bytes rounded up to PLAIN_CHUNK */
	uint32_t n_threads;        /* threads the store computes with */
	uint32_t top_r, top_k;     /* SparF parameters in use */
	uint32_t group_tokens;     /* G: tokens of a head in a K/V page */
	int direct_io;             /* the file store opened with O_DIRECT */
	int plain_direct;          /* the plain file is O_DIRECT */
	volatile uint64_t sink;    /* plain read sums, so none is dropped */
	double last_cpu;           /* CPU ns of the last timed call */
	struct layer_figs fig[N_LAYERS];
	uint64_t flex_bytes;    /* bytes_read of the FlexGen pass */
	double diff_mem_file;   /* max |dense memory - dense file|, layer 0 */
	double diff_flex;       /* max |FlexGen - dense kvf_attend| */
	double diff_ref;        /* max |double reference - kvf_attend| */
	uint64_t verified_rows; /* rows read back and compared */
};

struct flex_worker {
	struct attend_ctx *c;
	uint32_t layer;
	uint32_t first, step; /* KV heads first, first + step, ... */
	unsigned char *k, *v; /* one head's K and V rows */
	float *state;         /* KVC_ATTN_STATE_FLOATS(group, head_dim) */
	float *qs;            /* [group][head_dim], scaled */
	kvf_status rc;        /* first failure */
	char msg[256];        /* its message */
};

/* bench_attend_setup.c */
/* attend_setup - allocate, make the data, build both stores and the plain
 * file; 0, or -1 with a message printed */
int attend_setup(struct attend_ctx *c);
/* attend_teardown - close the stores, remove them unless --keep, free */
void attend_teardown(struct attend_ctx *c);
/* attend_max_diff - max |a - b| over n floats (NaN counts as the largest) */
double attend_max_diff(const float *a, const float *b, size_t n);
/* attend_sparf_cosine - min and mean over the q heads of cos(SparF, dense) */
void attend_sparf_cosine(const struct attend_ctx *c, const float *sparse,
			 const float *dense, struct sparf_figs *f);
/* attend_check_layer - untimed: rows read back, and the double reference */
int attend_check_layer(struct attend_ctx *c, struct flex_worker *w,
		       uint32_t layer);

/* bench_attend_run.c */
/* attend_call - one timed kvf_attend of a layer; ns, 0 on error */
double attend_call(struct attend_ctx *c, kvf_store *st, uint32_t layer,
		   uint32_t sparse, float *out, uint64_t *bytes, uint64_t *pr,
		   uint64_t *ps);
/* attend_flex_alloc - the FlexGen workers' buffers; 0, or -1 (printed) */
int attend_flex_alloc(struct attend_ctx *c, struct flex_worker *w);
/* attend_flex_free - free the buffers of the first n workers */
void attend_flex_free(struct flex_worker *w, uint32_t n);
/* attend_pass_memory - one pass's calls on the memory store */
int attend_pass_memory(struct attend_ctx *c, int first,
		       struct attend_pass *p);
/* attend_pass_cold - one pass's cold calls on the file store */
int attend_pass_cold(struct attend_ctx *c, struct flex_worker *w, int first,
		     struct attend_pass *p);

/* attend_h2o - untimed but for the drop itself: per layer and budget, a
 * fork of the memory store's sequence scored by H2O_QUERIES queries near
 * the layer's q, kvf_h2o_evict down to the budget, and the cosine of its
 * dense attention to the full sequence's; 0, or -1 (printed) */
int attend_h2o(struct attend_ctx *c);

/* bench_attend_report.c */
/* attend_print_table - the figures (m: medians of the passes) as a table */
void attend_print_table(const struct attend_ctx *c,
			const struct attend_pass *m);
/* attend_print_json - the same figures as JSON */
void attend_print_json(const struct attend_ctx *c,
		       const struct attend_pass *m);

/* bench_attend_model.c: `kvbench attend --model DIR`, perplexity of a
 * llama2.c checkpoint with each attention mode; 0, or 1 (message
 * printed) */
int attend_model_main(const struct attend_args *a);

/* bench_attend_codec.c */
int attend_codec_main(const struct attend_args *a);

#endif /* KVF_BENCH_ATTEND_INT_H */
