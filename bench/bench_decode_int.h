/*
 * bench_decode_int.h - what the files of `kvbench decode` share (see
 * bench_decode.c for what it measures): the constants, the arguments, one
 * run's figures, the baselines' figures, the run's context and buffers,
 * and the calls each file makes into another.  bench_decode.c parses the
 * arguments and runs the whole; bench_decode_run.c holds the data, the
 * baselines and one run; bench_decode_report.c prints the figures.
 * Nothing outside bench_decode*.c includes it.  One thread drives the
 * store; the baselines' threads share nothing but read-only data.
 */
#ifndef KVF_BENCH_DECODE_INT_H
#define KVF_BENCH_DECODE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

#define MAX_THREADS 64u
#define MAX_STEPS 4096u
#define PLAIN_CHUNK (1u << 20)  /* bytes per plain O_DIRECT pread */
#define PREFILL_CHUNK 1024u     /* tokens per prefill kvf_append */
#define BASE_REPEAT 3u          /* baseline reads per size; median */
#define N_RUNS 4u               /* fits on, fits off, larger on, larger off */

struct decode_args {
	const char *dir;     /* where the stores and the plain file go */
	kvf_model model;     /* the shape; f16 */
	uint32_t batch;      /* sequences decoding together */
	uint32_t steps;      /* timed decode steps */
	uint32_t warmup;     /* untimed steps before them */
	uint32_t n_threads;  /* store threads and memory-loop threads */
	uint64_t budget;     /* dram_budget of the "on" runs, bytes */
	uint64_t fit_bytes;  /* working set that fits; 0 = budget / 2 */
	uint32_t scale;      /* the larger working set, times fit_bytes */
	int json;            /* JSON instead of a table */
	int keep;            /* leave the stores in DIR */
};

/* The figures of one run. */
struct run_figs {
	uint32_t prompt;          /* tokens prefilled per sequence */
	uint64_t ws_bytes;        /* K+V of the batch after the last step */
	double prefill_s;         /* prefill appends and the sync */
	double step_med, step_mean; /* ns a timed step */
	double append_med, attend_med; /* ns of its appends, its attention */
	double bytes_read;        /* per timed step: kvf_stats bytes_read */
	double attend_bytes_read; /* per timed step: attend_bytes_read */
	double attended;          /* per timed step: K+V bytes attended */
	double attend_gbs;        /* attended bytes over attention time */
	uint64_t cache_hits, cache_misses; /* over the timed steps */
	uint64_t dram_peak, dram_budget;   /* kvf_stats, after the run */
	double host_wa;           /* kvf_stats, after the run */
	int direct_io;            /* the store opened with O_DIRECT */
};

/* The baselines for one working-set size. */
struct base_figs {
	uint64_t bytes;    /* bytes read */
	double mem_gbs;    /* plain memory-read loop, n_threads threads */
	double direct_gbs; /* plain sequential O_DIRECT reads, one thread */
	int direct;        /* the plain file was read with O_DIRECT */
};

struct decode_ctx {
	const struct decode_args *a;
	uint32_t n_threads;
	uint64_t token_bytes;     /* K+V of one token, every layer */
	uint16_t noise[65536];    /* f16 noise in [-1, 1) */
	struct run_figs run[N_RUNS];
	struct base_figs base[2];
	float *last_out[N_RUNS];  /* outputs of the last step, last layer */
	double diff[2];           /* max |on - off| of those, per size */
	volatile uint64_t sink;   /* sums of the plain reads, kept */
};

static const char *const size_name[2] = { "fit", "large" };


struct run_bufs {
	uint16_t *k, *v;  /* [max(PREFILL_CHUNK, 1)][kv_heads][dim] */
	float *q, *out;   /* [batch][q_heads][dim] */
	uint64_t *ids;    /* [batch] */
	double *step, *app, *att; /* [steps] ns */
};

/* decode_ws_of - K+V bytes of the batch after the last step, size i */
uint64_t decode_ws_of(const struct decode_ctx *c, uint32_t i);
/* decode_baselines - the plain reads over bytes into *b; 0 or -1 */
int decode_baselines(struct decode_ctx *c, uint64_t bytes,
		     struct base_figs *b);
/* decode_run_one - run r (size r / 2, tier on for even r) into c->run[r];
 * 0, or -1 with a message printed */
int decode_run_one(struct decode_ctx *c, uint32_t r, struct run_bufs *b);
/* decode_max_diff - the largest |x[i] - y[i]| (INFINITY across a NaN) */
double decode_max_diff(const float *x, const float *y, size_t n);
/* decode_print_table, decode_print_json - the four runs' figures */
void decode_print_table(const struct decode_ctx *c);
void decode_print_json(const struct decode_ctx *c);

#endif /* KVF_BENCH_DECODE_INT_H */
