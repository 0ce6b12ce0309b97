/*
 * bench_plan_int.h - what the files of `kvbench plan` share (see
 * bench_plan.c for what it measures): the arguments, one sweep's points,
 * one case's figures, and the calls each file makes into another.
 * bench_plan.c parses the arguments and runs the whole; bench_plan_run.c
 * makes the stores and times the decode steps; bench_plan_report.c prints
 * the table, the JSON and the plots.
 */
#ifndef KVF_BENCH_PLAN_INT_H
#define KVF_BENCH_PLAN_INT_H

#include <stdint.h>

#include "kvflash.h"

#define PLAN_GRID 8u              /* grid points 0, 1/8, ..., 8/8 */
#define PLAN_POINTS (PLAN_GRID + 2) /* the grid and the planner's pick */
#define PLAN_CASES 4u             /* MHA and GQA, host link and slow link */
#define PLAN_MAX_TOKENS 65536u

struct plan_args {
	const char *dir;       /* where the stores go */
	const char *plot_dir;  /* NULL: no plots; else PNGs and data here */
	uint32_t tokens;       /* s: context tokens of the layer timed */
	uint32_t repeat;       /* timed steps per point; the median */
	uint32_t q_heads;      /* both shapes */
	uint32_t gqa_kv_heads; /* the GQA shape's kv heads */
	uint32_t head_dim;
	double slow_ratio;     /* the slow link: caller FLOP/s over this */
	int json;
	int keep;              /* leave the stores in DIR */
};

struct plan_point {
	double x;   /* l / s (KVPR) or alpha (X-cache) */
	uint64_t n; /* l, or the tokens kept as X */
	double t_s; /* median step time */
};

/* One sweep: the grid and the planner's pick, measured. */
struct plan_sweep {
	struct plan_point pt[PLAN_POINTS];
	uint32_t n_pt;
	uint32_t pick;     /* index of the pick in pt */
	uint32_t best;     /* index of the fastest point */
	double pred_s;     /* the planner's predicted step time at its pick */
	double ratio;      /* pt[pick].t_s / pt[best].t_s */
	double kv_err;     /* KVPR: max rel. error of recomputed vs stored K;
			    * X-cache: unused */
	double out_err;    /* max rel. error of the step's output against
			    * kvf_attend over the whole context */
};

struct plan_case {
	const char *shape;   /* "mha" or "gqa" */
	const char *link;    /* "host" or "slow" */
	kvf_model m;
	kvf_profile prof;    /* the stored profile, for KVPR and beta */
	kvf_profile prof_x;  /* profiled again before the X-cache sweep */
	int direct_io;       /* the store read with O_DIRECT */
	uint32_t x_smaller;  /* kvf_xcache_plan's */
	double beta, near_share;
	struct plan_sweep kvpr, xcache;
};

struct plan_ctx {
	const struct plan_args *a;
	double caller_flops;  /* the bench's recomputation, measured */
	double host_bps;      /* memcpy bandwidth, measured */
	struct plan_case c[PLAN_CASES];
};

/* bench_plan_run.c */
/* plan_measure_host - caller_flops and host_bps of c */
void plan_measure_host(struct plan_ctx *c);
/* plan_run_shape - the store of one shape, its profile, and both link
 * cases' sweeps (c->c[i] and c->c[i + 1]); 0 or 1 (message printed) */
int plan_run_shape(struct plan_ctx *c, uint32_t i, const char *shape,
		   const kvf_model *m);

/* bench_plan_report.c */
void plan_print_table(const struct plan_ctx *c);
void plan_print_json(const struct plan_ctx *c);
/* plan_plot - data files and PNGs in dir through gnuplot; a message and
 * 0 when gnuplot is missing; 1 when it failed */
int plan_plot(const struct plan_ctx *c, const char *dir);

#endif /* KVF_BENCH_PLAN_INT_H */
