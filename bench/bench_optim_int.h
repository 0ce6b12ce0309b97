/*
 * bench_optim_int.h - what the files of `kvbench optim` share (see
 * bench_optim.c for what it measures): the constants, the arguments, the
 * reference ranges, one store kind's medians, the run's context, and the
 * calls each file makes into another.  bench_optim.c parses the
 * arguments and runs the whole; bench_optim_run.c holds the data, the
 * reference, the stores, the plain loops, the checks and the timed steps;
 * bench_optim_report.c prints the figures.  Nothing outside
 * bench_optim*.c includes it.  One thread drives everything; no locking.
 */
#ifndef KVF_BENCH_OPTIM_INT_H
#define KVF_BENCH_OPTIM_INT_H

#include <stdint.h>

#include "compute/optim.h"
#include "ftl/media.h"
#include "kvflash.h"

#define MIB (1ull << 20)
#define PLAIN_CHUNK (1u << 20)           /* bytes per plain pread/pwrite */
#define MAX_SAMPLES 256u                 /* timed steps per side, all passes */
#define N_RANGES 3u                      /* checked ranges of the big tensor */
#define RANGE_MAX 1024u                  /* parameters per checked range */
#define SMALL_PARAMS (5u * 1024u + 333u) /* the small check's tensor */

struct optim_args {
	const char *dir;         /* where the file store and plain file go */
	uint64_t n_params;       /* parameters of the tensor */
	uint32_t steps;          /* timed steps per side per pass */
	uint32_t repeat;         /* passes; medians over all steps */
	double topk_pct;         /* Top-K entries, percent of n_params */
	uint32_t n_stripes;      /* store stripes */
	uint64_t segment_bytes;  /* bytes per segment per stripe */
	uint64_t capacity_bytes; /* store capacity; 0 = what the run needs */
	int run_mem;             /* measure the memory store */
	int run_file;            /* measure the file store */
	int json;                /* JSON instead of a table */
	int keep;                /* leave the file store and plain file */
};

/* The reference for N_RANGES ranges of the tensor: the state of those
 * parameters, stepped with the kernels on plain arrays. */
struct ref {
	uint64_t start[N_RANGES]; /* first parameter of each range */
	uint32_t len;             /* parameters per range */
	float *p, *m, *v;         /* [N_RANGES * len] */
	float *g, *out, *got;     /* scratch of the same size */
	uint64_t t;               /* steps taken */
};

/* Medians of one store kind; times in ns per step. */
struct kind_result {
	double step_ns;            /* dense kvf_opt_step */
	double topk_ns;            /* Top-K kvf_opt_step */
	double plain_ns;           /* the plain loop */
	double create_ms;          /* kvf_opt_create of the tensor */
	struct kvf_media_stats io; /* media counters of one dense step */
	int ran;                   /* measured */
};

struct optim_ctx {
	const struct optim_args *a;
	const struct kvc_optim *k; /* the kernel variant the store uses */
	kvf_opt_config cfg;        /* Adam, PyTorch's defaults */
	float *init;               /* [n_params] initial parameters */
	float *grad;               /* [n_params] the dense gradient */
	float *out;                /* [n_params] params_out */
	uint32_t *idx;             /* [nnz] Top-K indices, ascending */
	float *vals;               /* [nnz] Top-K values */
	uint64_t nnz;              /* Top-K entries */
	unsigned char *src, *dst;  /* memcpy baseline, 16 * n_params each */
	unsigned char *chunk;      /* PLAIN_CHUNK bytes, aligned */
	char *store_dir;           /* DIR/store */
	char *plain_path;          /* DIR/plain.dat */
	uint64_t state_bytes;      /* p, m, v as the store pages them */
	int made_dir;              /* DIR was created here */
	int direct_io;             /* the file store opened with O_DIRECT */
	int plain_direct;          /* the plain file is O_DIRECT */
	uint64_t checked;          /* parameter values compared */
	struct ref ref;            /* the reference of the current store */
	struct kind_result mem, file;
};

/* optim_setup - the arrays, the reference's scratch, the paths and DIR;
 * 0, or -1 with a message printed */
int optim_setup(struct optim_ctx *c);
/* optim_default_capacity - the store capacity the run needs */
uint64_t optim_default_capacity(const struct optim_ctx *c);
/* optim_small_check - the small tensor's steps, bit for bit against the
 * kernels; 0, or -1 with a message printed */
int optim_small_check(struct optim_ctx *c);
/* optim_measure_kind - every pass on one store kind into *r; 0 or -1 */
int optim_measure_kind(struct optim_ctx *c, kvf_media_kind media,
		       struct kind_result *r);
/* optim_print_json, optim_print_table - the report */
void optim_print_json(const struct optim_ctx *c);
void optim_print_table(const struct optim_ctx *c);

#endif /* KVF_BENCH_OPTIM_INT_H */
