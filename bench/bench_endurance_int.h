/*
 * bench_endurance_int.h - what the files of `kvbench endurance` share (see
 * bench_endurance.c for what it measures and docs/endurance.md for the
 * method): the arguments, the workloads, the block traces and the file
 * system model that makes them, the systems under test, the replay on
 * the emulated SSD, and the figures.
 *
 * bench_endurance.c      arguments, the runs, progress
 * bench_endurance_work.c the workloads (seeded operation lists)
 * bench_endurance_trace.c block traces, the file system model, the FTL
 *                        replay, the lifetime arithmetic
 * bench_endurance_sys.c  kvflash, shared helpers, the table of systems
 * bench_endurance_rocks.c RocksDB (default and tuned)
 * bench_endurance_files.c file-per-block and per-token baselines
 * bench_endurance_report.c table, JSON, plots
 * Nothing outside bench_endurance*.c and its unit test includes it.
 */
#ifndef KVF_BENCH_ENDURANCE_INT_H
#define KVF_BENCH_ENDURANCE_INT_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "kvflash.h"

#define END_BLOCK_TOKENS 16u /* tokens of a RocksDB key / a block file */
#define END_PAGE 4096u       /* page of the file system and the SSD */

/* ---- workloads ---------------------------------------------------------- */

enum end_wl { WL_OFFLINE, WL_ONLINE, WL_CHAT, WL_TRAIN, WL_COUNT };

enum end_op_kind {
	OP_PREFILL, /* n tokens appended to seq (a prompt or a chat turn) */
	OP_DECODE,  /* one generated token appended to seq */
	OP_STEP,    /* the end of one decode step of the batch */
	OP_END,     /* seq finished: freed */
	OP_REQUEST, /* a request (sequence or chat turn) completed */
	OP_TRAIN,   /* one optimizer step (Adam) over the whole state */
};

struct end_op {
	uint8_t kind;   /* enum end_op_kind */
	uint32_t n;     /* OP_PREFILL: tokens */
	uint64_t seq;   /* 0..n_seqs-1 */
};

struct end_workload {
	enum end_wl wl;
	struct end_op *ops;
	size_t n_ops, cap;
	uint64_t n_seqs;        /* sequence ids used: 0..n_seqs-1 */
	uint64_t steps;         /* OP_STEP count */
	uint64_t gen_tokens;    /* OP_DECODE count */
	uint64_t prompt_tokens; /* tokens of OP_PREFILL */
	uint64_t requests;      /* OP_REQUEST count */
	uint64_t peak_live_tokens; /* most tokens alive at once */
	double mean_life_steps; /* mean steps from a sequence's first
				 * append to its end */
	uint64_t state_bytes;   /* train: fp32 params, m and v (bytes) */
};

struct end_args;
/* end_workload_make - the seeded operation list of workload wl; 0 or -1
 * (out of memory, message printed) */
int end_workload_make(const struct end_args *a, enum end_wl wl,
		      struct end_workload *w);
void end_workload_free(struct end_workload *w);
const char *end_wl_name(enum end_wl wl);

/* ---- block traces ------------------------------------------------------- */

enum { TR_WRITE = 0, TR_TRIM = 1 };

struct end_tev {
	uint64_t lpn;  /* first logical page (END_PAGE bytes) */
	uint32_t n;    /* pages */
	uint32_t op;   /* TR_WRITE or TR_TRIM */
};

/* A block trace: what a system's storage handed the SSD, in order. */
struct end_trace {
	pthread_mutex_t lock; /* appends come from the store's threads */
	struct end_tev *ev;
	size_t n, cap;
	uint64_t n_lpn;       /* logical pages of the device it runs on */
	uint64_t write_pages; /* pages written */
	uint64_t trim_pages;  /* pages trimmed */
	int failed;           /* out of memory, or an address past n_lpn */
};

void end_trace_init(struct end_trace *t, uint64_t n_lpn);
void end_trace_free(struct end_trace *t);
/* end_trace_add - one event (merged with the last when contiguous and of
 * the same kind); takes the lock */
void end_trace_add(struct end_trace *t, uint32_t op, uint64_t lpn, uint64_t n);
/* end_trace_check - 0 if every event is inside the device and non-empty,
 * else -1 with the first bad event printed */
int end_trace_check(const struct end_trace *t);

/*
 * The file system model: files over a device of n pages, in pages.
 * Writes dirty pages of a file in a page cache; a flush (fdatasync or
 * writeback) allocates the dirty pages not yet placed, next to where the
 * last allocation ended (delayed allocation, as ext4 does), and writes
 * every dirty page to the trace, rewriting a page that was written
 * before in place; an unlink trims the file's pages (discard) and drops
 * its dirty pages unwritten.  Metadata (inodes, journal) is not modeled.
 */
struct fsm_file {
	char name[256];      /* for the directory poll (a d_name); "" if none */
	uint64_t size;       /* bytes */
	uint64_t *lpn;       /* per file page: device page or UINT64_MAX */
	uint64_t n_pages, cap_pages;
	uint8_t *dirty;      /* per file page: 1 = in the cache, dirty */
	int live;            /* 0 once unlinked */
};

struct fsm {
	struct end_trace *tr;
	uint64_t base, n;    /* the device pages [base, base + n) it owns */
	uint8_t *used;       /* per page: allocated */
	uint64_t n_used, cursor;
	struct fsm_file *files;
	size_t n_files, cap_files;
	uint64_t (*dirty)[2]; /* (file, page) dirtied since the last flush */
	size_t n_dirty, cap_dirty;
	uint64_t bytes_in;   /* bytes handed to fsm_write */
	int full;            /* an allocation failed: the device is full */
};

int fsm_init(struct fsm *f, struct end_trace *tr, uint64_t base, uint64_t n);
void fsm_free(struct fsm *f);
/* fsm_create - a new empty file; its index, or -1 (out of memory) */
long fsm_create(struct fsm *f, const char *name);
/* fsm_lookup - the live file of that name, or -1 */
long fsm_lookup(const struct fsm *f, const char *name);
/* fsm_write - len bytes at off of file fi reach the page cache; 0 or -1 */
int fsm_write(struct fsm *f, long fi, uint64_t off, uint64_t len);
/* fsm_flush - write every dirty page back; 0, or -1 when full */
int fsm_flush(struct fsm *f);
/* fsm_flush_if - write back the dirty pages of the files pick() names
 * (an fsync of those files); the others stay dirty */
int fsm_flush_if(struct fsm *f, int (*pick)(const char *name));
/* fsm_unlink - drop the file: its pages trimmed, dirty pages dropped */
void fsm_unlink(struct fsm *f, long fi);
/*
 * fsm_poll_dir - the directory model of a program whose files only grow
 * and are deleted whole (RocksDB): files in dir whose size grew since the
 * last poll have the new bytes written (fsm_write), files gone are
 * unlinked; names for which skip() answers 1 are left alone.  0 or -1.
 */
int fsm_poll_dir(struct fsm *f, const char *dir, int (*skip)(const char *name));

/* ---- the SSD replay and the figures ------------------------------------- */

struct end_drive {
	double capacity_bytes;  /* the drive's logical capacity (bytes) */
	double pe_cycles;       /* rated P/E cycles of its cells */
	double spare;           /* spare factor of the drive */
	double dwpd;            /* rated drive writes per day */
	double warranty_years;  /* the rating's period (years) */
	double tokens_per_s;    /* generated tokens per second it serves */
};

struct end_replay {
	double spare;            /* spare factor replayed at */
	double util_target;      /* cold data added to reach it; 0 = none */
	uint64_t cold_pages;     /* pages of cold data written first */
	uint64_t host_pages;     /* trace pages written while measured */
	uint64_t nand_programs;  /* NAND programs during the replay */
	uint64_t erases;         /* erases during the replay */
	double device_wa;        /* nand_programs / host_pages */
	double util_mean;        /* live logical pages / logical pages,
				  * averaged over the trace's writes */
	uint32_t erase_min, erase_max; /* over the device at the end */
	double erase_mean;
	double wear_evenness;
	uint32_t hist_lo, hist_width;
	uint64_t erase_hist[16];
};

/* end_replay_run - replay t on a fresh emulated SSD (page mapping, greedy
 * GC, 256-page blocks unless block_pages says) at spare factor spare,
 * first filling cold data up to mean utilization util (0: none), in
 * steady state: passes of t until two drive writes have warmed it up,
 * then passes measured until two more (at least one pass); discard 0
 * leaves the trims out (a file system mounted without discard, no
 * fstrim); 0 or -1 */
int end_replay_run(const struct end_trace *t, double spare, double util,
		   uint32_t block_pages, int discard, struct end_replay *out);

/* Lifetime arithmetic (docs/endurance.md, "Lifetime"). */
/* end_nand_budget - bytes the drive's cells can take: its physical
 * capacity (logical / (1 - spare)) times the P/E rating */
double end_nand_budget(const struct end_drive *d);
/* end_lifetime_years - years until the budget is spent at
 * nand_bytes_per_token bytes for each of tokens_per_s tokens a second;
 * INFINITY for 0 bytes (never), NAN for a NAN figure (no tokens) */
double end_lifetime_years(const struct end_drive *d, double nand_bytes_per_token);
/* end_rated_years - years until the rated TBW (dwpd x capacity x 365 x
 * warranty years) is spent by host_bytes_per_token at the token rate
 * (INFINITY and NAN as end_lifetime_years) */
double end_rated_years(const struct end_drive *d, double host_bytes_per_token);
/* end_requests_per_pbw - requests served per 10^15 NAND bytes
 * (INFINITY with none written, NAN with no requests either) */
double end_requests_per_pbw(double requests, double nand_bytes);

/* ---- systems ------------------------------------------------------------ */

enum end_sys_kind {
	SYS_KVFLASH, SYS_ROCKS, SYS_ROCKS_TUNED, SYS_FILES, SYS_TOKEN,
	SYS_KVFLASH_ADMIT, /* kvflash with admission (--admit-tokens) */
	SYS_COUNT
};

struct end_sys;
struct end_sys_ops {
	const char *name;
	int (*open)(struct end_sys *s);
	int (*append)(struct end_sys *s, uint64_t seq, uint32_t n_tokens);
	int (*end_seq)(struct end_sys *s, uint64_t seq);
	int (*step)(struct end_sys *s);
	int (*sync)(struct end_sys *s);
	int (*close)(struct end_sys *s);
	/* one optimizer step over the training state; NULL: the system
	 * has no form for it (it does not run the train workload) */
	int (*train_step)(struct end_sys *s);
};

/* One system under test on one workload. */
struct end_sys {
	const struct end_sys_ops *ops;
	enum end_sys_kind kind;
	kvf_codec codec;         /* kvflash rows: kvf_options.codec */
	char name[32];           /* the row's name (end_sys_name) */
	const struct end_args *a;
	char dir[512];           /* its own directory */
	struct end_trace tr;     /* its block trace */
	struct fsm fs;           /* its file system model (not kvflash's
				  * media region) */
	uint64_t *tokens;        /* per sequence: tokens appended */
	uint64_t n_seqs;
	const unsigned char *pool; /* random finite f16/bf16 values for K/V */
	size_t pool_bytes;
	uint64_t user_bytes;     /* K/V bytes the workload handed over */
	uint64_t host_bytes;     /* bytes handed to the file system or media */
	uint64_t wchar0;         /* /proc/self/io wchar at open */
	uint64_t dram_peak;      /* kvflash: the tier's peak (bytes) */
	uint64_t dram_only;      /* kvflash: pages freed unwritten (bytes) */
	uint64_t wait_peak;      /* kvflash: most bytes of pages waiting in
				  * DRAM at a step's end (bytes) */
	uint64_t data_bytes, padding_bytes, cleaner_bytes; /* kvflash: by
						     * cause (kvf_stats) */
	void *impl;              /* the system's own state */
	char error[256];         /* why it failed, "" if it did not */
};

const struct end_sys_ops *end_sys_ops(enum end_sys_kind k);
/* end_sys_kvflash - k is a kvflash row (plain or with admission): one
 * per codec of --codec */
int end_sys_kvflash(enum end_sys_kind k);
/* end_sys_name - the row's name into buf: the system's, and for a kvflash
 * row with a codec "-CODEC" after it (kvflash-int4, kvflash-admit-int4) */
void end_sys_name(enum end_sys_kind k, kvf_codec c, char *buf, size_t cap);
extern const struct end_sys_ops end_ops_kvflash, end_ops_rocks,
	end_ops_rocks_tuned, end_ops_files, end_ops_token, end_ops_kvflash_admit;
/* end_sys_fail - record why s failed (printf format); returns -1 */
int end_sys_fail(struct end_sys *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* end_kv_data - n bytes of test data for (seq, layer, t0) from s's pool */
const void *end_kv_data(const struct end_sys *s, uint64_t seq, uint32_t layer,
			uint64_t t0, size_t n);
/* end_kv_bytes_per_token_layer - K and V bytes of one token in one layer */
uint64_t end_token_layer_bytes(const kvf_model *m);
/* end_train_grad - the train workload's gradient: n small finite fp32
 * values (malloc'd), the same for every system */
float *end_train_grad(uint64_t n);
/* end_wchar - /proc/self/io's wchar (bytes handed to write calls); 0 when
 * unreadable */
uint64_t end_wchar(void);

/* ---- arguments and results ---------------------------------------------- */

struct end_args {
	kvf_model model;
	const char *dir;         /* work directory */
	const char *plot_dir;    /* --plot DIR or NULL */
	const char *systems;     /* comma list or "all" */
	const char *workloads;   /* comma list or "all" */
	uint64_t seed;
	uint32_t sync_every;     /* steps between syncs */
	double spare;            /* spare factor of the SSD */
	double util;             /* peak live data / device capacity */
	uint32_t block_pages;    /* pages per erase block */
	/* offline */
	uint32_t off_batch, off_rounds, off_prompt, off_gen;
	/* online */
	uint32_t on_steps, on_max_batch, on_prompt, on_gen;
	double on_rate;          /* arrivals per step */
	/* chat */
	uint32_t chat_convs, chat_turns, chat_prompt, chat_gen, chat_think;
	uint32_t chat_max_batch;
	/* train */
	uint64_t train_params;   /* fp32 parameters of the one tensor */
	uint32_t train_steps;    /* optimizer steps */
	double train_steps_per_s; /* for the lifetime */
	struct end_drive drive;
	uint64_t admit_tokens;   /* kvflash-admit: kvf_options.admit_tokens */
	const char *codecs;      /* --codec: comma list or "all" */
	kvf_codec codec[4];      /* the codecs the kvflash rows run with */
	uint32_t n_codecs;
	uint64_t dram_budget;    /* kvflash: kvf_options.dram_budget */
	int json;
	int quiet;               /* no progress line */
};

struct end_result {
	enum end_wl wl;
	enum end_sys_kind sys;
	kvf_codec codec;         /* KVF_CODEC_NONE but for kvflash rows */
	char name[32];           /* the row's name (end_sys_name) */
	int ok;
	char error[256];
	uint64_t user_bytes, host_bytes, block_bytes, nand_bytes;
	uint64_t gen_tokens, requests;
	double host_wa, fs_wa, device_wa, total_wa;
	double nand_bytes_per_token, requests_per_pbw;
	double nand_bytes_per_step; /* train: NAND bytes of one step */
	double lifetime_years, rated_years;
	double util_mean;
	uint64_t dram_peak, dram_only, wait_peak;
	uint64_t data_bytes, padding_bytes; /* kvflash: of host_bytes, sealed
					     * groups and the exact tails
					     * syncs write */
	double wall_s;
	struct end_replay rep;
};

/* end_args_default - the defaults of every argument */
void end_args_default(struct end_args *a);
/*
 * end_run_system - system k runs workload w in a->dir/WORKLOAD-SYSTEM (made
 * afresh, removed after) on a device of n_lpn pages, its trace replayed
 * at a->spare; the figures into *r (r->ok, or r->error).  Its trace is
 * handed to *keep (malloc'd; end_trace_free and free it) when keep is
 * not NULL and the run succeeded.  Always returns 0.
 */
int end_run_system(const struct end_args *a, const struct end_workload *w,
		   enum end_sys_kind k, const unsigned char *pool,
		   size_t pool_bytes, uint64_t n_lpn, struct end_result *r,
		   struct end_trace **keep);
/* end_run_codec - the same, a kvflash row with codec c (none: as
 * end_run_system) */
int end_run_codec(const struct end_args *a, const struct end_workload *w,
		  enum end_sys_kind k, kvf_codec c, const unsigned char *pool,
		  size_t pool_bytes, uint64_t n_lpn, struct end_result *r,
		  struct end_trace **keep);
/* end_figures - the figures of a run from its counters and replay */
void end_figures(const struct end_args *a, const struct end_sys *s,
		 const struct end_workload *w, const struct end_replay *rep,
		 struct end_result *r);
void end_print_table(const struct end_args *a, const struct end_result *r,
		     size_t n);
void end_print_json(const struct end_args *a, const struct end_result *r,
		    size_t n);
/* end_plot - the sweeps (WA against spare factor and utilization per
 * system, from traces[sys] of the online workload, NULL where absent),
 * the erase histograms and the bytes per token; 0, 1 (gnuplot absent:
 * skipped, said so) or -1 */
int end_plot(const struct end_args *a, const struct end_result *r, size_t n,
	     struct end_trace *const *traces);

#endif /* KVF_BENCH_ENDURANCE_INT_H */
