/*
 * bench_ftl_int.h - what the files of `kvbench ftl` share (see bench_ftl.c
 * for what it measures): the arguments, one run's counters, the figures
 * derived from them, and the calls each file makes into another.
 * bench_ftl.c parses the arguments, bench_ftl_run.c drives the device,
 * bench_ftl_report.c turns a run into figures, tables and the model
 * validation.  Nothing outside bench_ftl*.c includes it.
 */
#ifndef KVF_BENCH_FTL_INT_H
#define KVF_BENCH_FTL_INT_H

#include <stdint.h>

#include "ftl/media_flash.h"

#define BATCH 4096u    /* pages generated per write call */
#define MAX_DW 64u     /* measured drive writes kept one by one */

enum workload { WL_UNIFORM, WL_HOTCOLD, WL_ZIPF, WL_SEQ, WL_SEGMENT };

struct ftl_args {
	enum kvf_flash_gc_policy gc;   /* victim choice */
	uint32_t gc_d;                 /* d-choices sample */
	double spare;                  /* spare factor */
	uint32_t ppb;                  /* pages per block */
	uint32_t blocks;               /* blocks in the device */
	uint32_t page_size;            /* bytes */
	uint32_t channels;             /* channels */
	uint32_t dies;                 /* dies per channel */
	enum kvf_flash_cell cell;      /* timings and P/E rating */
	enum kvf_flash_mapping mapping; /* page or block */
	enum workload wl;              /* access pattern */
	double hot_r;                  /* hotcold: fraction of writes */
	double hot_f;                  /* hotcold: fraction of pages */
	double theta;                  /* zipf exponent */
	double trim;                   /* fraction of operations that trim */
	int streams;                   /* hot/cold as stream hints */
	uint32_t warmup;               /* drive writes before measuring */
	uint32_t measure;              /* drive writes measured */
	uint32_t wl_gap;               /* static WL threshold; 0 = off */
	uint32_t pe_limit;             /* 0 = the cell's rating */
	enum kvf_flash_backing backing; /* none or memory */
	uint64_t idle_every;           /* host pages between idle spells */
	uint64_t idle_us;              /* length of one idle spell (us) */
	int qd1;                       /* sync issue: latency */
	uint64_t seed;                 /* generator seed */
	int validate;                  /* the model table */
	int wearout;                   /* write until the device wears out */
	int json;                      /* JSON output */
	const char *wl_text;           /* the --workload text */
};

struct ftl_run {
	struct kvf_flash_stats fill;   /* after the fill */
	struct kvf_flash_stats before; /* start of the measured phase */
	struct kvf_flash_stats after;  /* end of it */
	double dw_wa[MAX_DW];          /* WA of each measured drive write */
	uint32_t n_dw;                 /* entries in dw_wa */
	uint64_t n_lpn;                /* logical pages */
	uint64_t wall_ns;              /* warm-up + measure wall time */
	uint64_t trims;                /* trim operations issued */
	uint64_t bytes_per_request;    /* host bytes per write request */
};

struct figures {
	double wa;          /* device WA over the measured phase */
	double sfe;         /* effective spare factor over it */
	double host_mbs;    /* modeled host write bandwidth (MB/s) */
	double dev_s;       /* modeled device time of the phase (s) */
	double host_per_s;  /* emulator: host page writes per wall second */
	double prog_per_s;  /* emulator: NAND programs per wall second */
	double dw_spread;   /* (max - min) / mean of per-drive-write WA */
	double die_util;    /* die busy time / (dies x device time) */
	double ch_util;     /* channel busy time / (channels x device time) */
	struct kvf_flash_lifetime life; /* at the measured WA and wear */
};

/* ftl_run_case - open the device, fill it, warm up and measure a->measure
 * drive writes into *r; 0, or 1 with a message printed */
int ftl_run_case(const struct ftl_args *a, struct ftl_run *r);
/* ftl_wearout - `--wearout`: write until the device wears out and report
 * against the lifetime projected after warm-up; 0 or 1 */
int ftl_wearout(const struct ftl_args *a);
/* ftl_figures - the figures of a measured run */
void ftl_figures(const struct ftl_args *a, const struct ftl_run *r,
		 struct figures *f);
/* ftl_print_table, ftl_print_json - one run's report */
void ftl_print_table(const struct ftl_args *a, const struct ftl_run *r,
		     const struct figures *f);
void ftl_print_json(const struct ftl_args *a, const struct ftl_run *r,
		    const struct figures *f);
/* ftl_validate - `--validate`: measured WA against the models; 0 or 1 */
int ftl_validate(const struct ftl_args *base);

#endif /* KVF_BENCH_FTL_INT_H */
