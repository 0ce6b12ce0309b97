/*
 * bench_common.h - what every kvbench subcommand shares: timing, a result
 * table printed as text or JSON, a table-driven option parser, and small
 * helpers for the store directories and the test data.
 *
 * Benchmarks print figures and ratios measured side by side in one run;
 * they never pass or fail on a number.
 */
#ifndef KVF_BENCH_COMMON_H
#define KVF_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "kvflash.h"

/* bench_now_ns - monotonic clock in nanoseconds. */
uint64_t bench_now_ns(void);
/* bench_cpu_s - CPU time (user + system) of the whole process so far,
 * every thread included, in seconds. */
double bench_cpu_s(void);

/* bench_parse_u64 - parse a decimal number with an optional K/M/G suffix
 * (powers of 1024); returns 0 on success, -1 (message printed) on error. */
int bench_parse_u64(const char *flag, const char *text, uint64_t *out);
/* bench_parse_double - parse a number; 0 or -1 as above. */
int bench_parse_double(const char *flag, const char *text, double *out);

/*
 * Options: each subcommand lists its flags in a table of struct bench_opt,
 * ended by an entry whose name is NULL, and bench_parse_opts parses argv
 * against it.  The entries are made with the macros below, which check
 * the field's type.
 */
enum bench_opt_kind {
	BENCH_KIND_BOOL,   /* a flag alone; sets the int to 1 */
	BENCH_KIND_STR,    /* a string; points the const char * at argv */
	BENCH_KIND_U32,    /* a number, K/M/G suffix; uint32_t in [min, max] */
	BENCH_KIND_U64,    /* likewise, uint64_t in [min, max] */
	BENCH_KIND_DOUBLE, /* a finite number, any value */
	BENCH_KIND_FUNC,   /* the text handed to parse() */
};

struct bench_opt {
	const char *name; /* "--size" */
	enum bench_opt_kind kind;
	union {
		int *b;
		const char **s;
		uint32_t *u32;
		uint64_t *u64;
		double *d;
		void *any; /* BENCH_KIND_FUNC: handed to parse() */
	};
	uint64_t min, max; /* BENCH_KIND_U32 and _U64: the range allowed */
	/* BENCH_KIND_FUNC: 0 taken, -1 out of range (the parser says so),
	 * 2 refused with a message printed */
	int (*parse)(const char *flag, const char *text, void *out);
};

#define BENCH_BOOL(flag, field) \
	{ .name = (flag), .kind = BENCH_KIND_BOOL, .b = &(field) }
#define BENCH_STR(flag, field) \
	{ .name = (flag), .kind = BENCH_KIND_STR, .s = &(field) }
#define BENCH_U32(flag, field, lo, hi) \
	{ .name = (flag), .kind = BENCH_KIND_U32, .u32 = &(field), \
	  .min = (lo), .max = (hi) }
#define BENCH_U64(flag, field, lo, hi) \
	{ .name = (flag), .kind = BENCH_KIND_U64, .u64 = &(field), \
	  .min = (lo), .max = (hi) }
#define BENCH_DOUBLE(flag, field) \
	{ .name = (flag), .kind = BENCH_KIND_DOUBLE, .d = &(field) }
#define BENCH_FUNC(flag, fn, out) \
	{ .name = (flag), .kind = BENCH_KIND_FUNC, .any = (out), .parse = (fn) }

/* bench_parse_codec - a BENCH_FUNC parser of --codec: fp8, int8 or int4
 * into the kvf_codec at out; 2 (message printed) for anything else */
int bench_parse_codec(const char *flag, const char *text, void *out);

/*
 * bench_parse_opts - parse argv[1..argc-1] of `kvbench cmd` against opts.
 * --help or -h prints usage to stdout and returns 1; a bad flag or value
 * prints one line to stderr and returns 2; else 0.  A flag with a value
 * that is not in opts still has its value read as a number first, so
 * "--nosuch 5" reads "unknown option or value out of range" and
 * "--nosuch x" that x is not a number.
 */
int bench_parse_opts(const char *cmd, void (*usage)(FILE *f),
		     const struct bench_opt *opts, int argc, char **argv);

/*
 * bench_refuse_unused - after bench_parse_opts: 2, naming the first of
 * flags (a NULL-ended list) given on argv and saying it does nothing
 * `where` ("with --model"), so that an option a mode does not read is
 * refused rather than silently ignored; 0 if none was given.  (A value
 * is never taken for a flag: bench_parse_opts refuses a value that is
 * one.)
 */
int bench_refuse_unused(const char *cmd, int argc, char **argv,
			const char *const *flags, const char *where);

/* bench_median - the median of v[0..n-1] (n >= 1); sorts v. */
double bench_median(double *v, uint32_t n);
/* bench_mbs - bytes over ns as MB/s (10^6 bytes); 0 when ns is 0. */
double bench_mbs(uint64_t bytes, uint64_t ns);

/*
 * bench_remove_store - remove the directory path if it is a kvflash store
 * (holds a KVFLASH header) or empty; nothing to do if it does not exist.
 * Returns 0, or -1 (message printed) when path is something else.
 */
int bench_remove_store(const char *path);
/*
 * bench_store_check - path is absent, a kvflash store or empty: 0; else
 * -1 (message printed).  A command checks its store directories with it
 * before it touches anything in its --dir, so that a refused run removes
 * nothing (its plain file and the directory included).
 */
int bench_store_check(const char *path);

/* bench_ratio - num / den as "%.*fx" into buf, or "n/a" when den is 0
 * or the ratio is not finite (nothing was measured: not NaN or inf) */
const char *bench_ratio(char *buf, size_t cap, double num, double den,
			int decimals);

/*
 * bench_make_dir - create dir unless it is there already; *made (when not
 * NULL) says whether this call created it.  Returns 0, or -1 with
 * "kvbench CMD: mkdir DIR: why" printed.
 */
int bench_make_dir(const char *cmd, const char *dir, int *made);

/* bench_fail - print "kvbench CMD: WHAT: last error (status)"; returns -1. */
int bench_fail(const char *cmd, const char *what, kvf_status rc);

/* bench_check_heads - --q-heads must be a multiple of --kv-heads; 0, or
 * 2 with the usage error printed. */
int bench_check_heads(const char *cmd, const kvf_model *m);

/*
 * BENCH_MODEL_OPTS - the four option entries of a model's shape (--layers,
 * --q-heads, --kv-heads, --head-dim) for a kvf_model m, and
 * BENCH_MODEL_DEFAULT the model they start from: 32 layers, 32 query and
 * 8 KV heads of 128 f16 dims (a Llama-like 8B model).
 */
#define BENCH_MODEL_OPTS(m)                                        \
	BENCH_U32("--layers", (m).n_layers, 1, 4096),              \
	BENCH_U32("--q-heads", (m).n_q_heads, 1, 4095),            \
	BENCH_U32("--kv-heads", (m).n_kv_heads, 1, 4095),          \
	BENCH_U32("--head-dim", (m).head_dim, 1, 32768)
#define BENCH_MODEL_DEFAULT                                        \
	{ .n_layers = 32, .n_q_heads = 32, .n_kv_heads = 8,        \
	  .head_dim = 128, .dtype = KVF_DTYPE_F16 }

/*
 * bench_store_options - kvf_options for model m with n_stripes stripes (0:
 * kvf_options_init's) of segment_bytes segments and capacity_bytes in all
 * (the rest defaults).
 */
void bench_store_options(kvf_options *o, const kvf_model *m,
			 uint32_t n_stripes, uint64_t segment_bytes,
			 uint64_t capacity_bytes);

/*
 * bench_open_direct - kvf_open(dir, o, out) with O_DIRECT, and without it
 * where the file system refuses O_DIRECT (KVF_ENOTSUP): the run goes on
 * and says so.  o->direct_io is left as the store was opened; *direct_io
 * is 1 when O_DIRECT was taken.  Returns kvf_open's status.
 */
kvf_status bench_open_direct(const char *dir, kvf_options *o,
			     kvf_store **out, int *direct_io);

/*
 * bench_plain_create - a fresh plain file at path of bytes preallocated,
 * opened read-write with O_DIRECT, or without it where the file system
 * refuses O_DIRECT (as the store falls back); *direct says which.
 * Returns the descriptor, or -1 with "kvbench CMD: PATH: why" printed.
 */
int bench_plain_create(const char *cmd, const char *path, uint64_t bytes,
		       int *direct);

/*
 * bench_read_words - read every 8-byte word of buf (bytes) on n_threads
 * threads (the caller's takes the first part), the loop a plain memory
 * baseline runs; their sum is added to *sink so that the reads are kept.
 * Returns the ns it took; 0 with "kvbench CMD: ..." printed when a thread
 * could not start.
 */
double bench_read_words(const char *cmd, const uint64_t *buf, uint64_t bytes,
			uint32_t n_threads, volatile uint64_t *sink);

/*
 * bench_read_file - read the first bytes of path (a multiple of
 * chunk_bytes) in sequential preads of chunk_bytes into chunk, with
 * O_DIRECT if direct: the plain file baseline.  Returns the ns it took; 0
 * with "kvbench CMD: reading PATH: why" printed on error.
 */
double bench_read_file(const char *cmd, const char *path, unsigned char *chunk,
		       uint32_t chunk_bytes, uint64_t bytes, int direct,
		       volatile uint64_t *sink);

/* bench_mix64 - a 64-bit mixer (splitmix64's finalizer) for test data. */
static inline uint64_t bench_mix64(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	x ^= x >> 27;
	x *= 0x81dadef4bc2dd44dull;
	x ^= x >> 33;
	return x;
}

/* bench_usage_error - print "kvbench CMD: MSG" to stderr; returns 2. */
int bench_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * A JSON writer for flat and nested objects: bench_json_begin/end open and
 * close an object ("key": { ... } inside another, or the top level when
 * key is NULL); the field functions add one member each.
 */
struct bench_json {
	FILE *f;
	int depth;     /* open objects */
	int need_comma; /* a member was written at this depth */
};
void bench_json_begin(struct bench_json *j, const char *key);
void bench_json_end(struct bench_json *j);
void bench_json_u64(struct bench_json *j, const char *key, uint64_t v);
void bench_json_double(struct bench_json *j, const char *key, double v);
void bench_json_str(struct bench_json *j, const char *key, const char *v);
/* bench_json_model - "model": { n_layers, n_q_heads, n_kv_heads, head_dim,
 * dtype "f16" } (the stores these benchmarks build are all f16). */
void bench_json_model(struct bench_json *j, const kvf_model *m);

/* Subcommands: main-like entry points. */
int bench_media_main(int argc, char **argv);
int bench_ftl_main(int argc, char **argv);
int bench_append_main(int argc, char **argv);
int bench_demo_main(int argc, char **argv);
int bench_kernels_main(int argc, char **argv);
int bench_attend_main(int argc, char **argv);
int bench_optim_main(int argc, char **argv);
int bench_decode_main(int argc, char **argv);
int bench_endurance_main(int argc, char **argv);
int bench_plan_main(int argc, char **argv);
int bench_evict_main(int argc, char **argv);
int bench_prefix_main(int argc, char **argv);
int bench_export_main(int argc, char **argv);
int bench_codec_main(int argc, char **argv);
int bench_scale_main(int argc, char **argv);

#endif /* KVF_BENCH_COMMON_H */
