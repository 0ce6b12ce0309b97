/*
 * bench_append.c - `kvbench append`: the store's write and read paths
 * against plain O_DIRECT loops on the same file system, in one run.
 *
 * Each pass creates a fresh store in DIR/store for a Llama-8B-like shape
 * (32 layers, 32 q heads, 8 kv heads, head_dim 128, f16 by default) and
 * measures, each side by side with its baseline:
 *  - prefill: for each layer, every sequence of the batch appends its whole
 *    prompt in one kvf_append; then kvf_sync.  Baseline: the same number
 *    of bytes written by one thread with 1 MiB O_DIRECT pwrites into a
 *    preallocated file, then fdatasync;
 *  - decode: a second batch of (empty) sequences appends one token per
 *    layer per step; then kvf_sync.  Same baseline;
 *  - host write amplification (no frees, kt_pages off) and where the bytes
 *    went, and the index memory against the bytes stored;
 *  - cold reads: after kvf_close and kvf_open, whole-range kvf_reads of
 *    single heads (K and V), some written by prefill and some by decode,
 *    against O_DIRECT preads of the same number of bytes, 1 MiB at a time.
 *    The store reads with O_DIRECT, so no page cache hides the media.
 * Only the calls are timed: data generation and checks are not.  Every
 * head read back is compared with what was appended.  Passes alternate
 * which side goes first; medians are reported, with the targets beside
 * them (figures, never pass/fail).
 *
 * Data: K/V rows come from one pool of random f16 values; the rows of
 * (seq, layer, kind) start at an offset hashed from the three, so token t,
 * head h, dim d is pool[off + (t * kv_heads + h) * head_dim + d] whichever
 * phase wrote it.  One thread, no locking.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
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
};

/* One pass's figures; [0] kvflash, [1] plain. */
struct append_pass {
	double prefill_mbs[2]; /* user bytes per second */
	double decode_mbs[2];
	double read_pre_mbs[2]; /* cold head reads, prefill-written */
	double read_dec_mbs[2]; /* cold head reads, decode-written */
	double prefill_cpu[2];  /* CPU seconds of the process in the phase */
	double decode_cpu[2];
	double reopen_ms; /* kvf_open of the closed store */
};

struct append_ctx {
	const struct append_args *a;
	char *store_dir;           /* DIR/store */
	char *plain_path;          /* DIR/plain.dat */
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
	uint64_t verified_bytes;   /* bytes of heads checked (last pass) */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench append [--dir DIR] [--layers N] [--q-heads N] [--kv-heads N]\n"
		"                      [--head-dim N] [--tokens N] [--steps N] [--seqs N]\n"
		"                      [--stripes N] [--segment BYTES] [--size BYTES]\n"
		"                      [--reads N] [--repeat N] [--json] [--keep]\n"
		"  --dir DIR        directory for the store and the plain file\n"
		"                   (default ./kvbench-append)\n"
		"  --layers N       layers (default 32)\n"
		"  --q-heads N      query heads (default 32; a multiple of --kv-heads)\n"
		"  --kv-heads N     kv heads (default 8)\n"
		"  --head-dim N     elements per head, f16 (default 128)\n"
		"  --tokens N       prefill prompt tokens per sequence (default 2000)\n"
		"  --steps N        decode steps (tokens) per sequence (default 250)\n"
		"  --seqs N         sequences per batch, one batch per phase (default 8)\n"
		"  --stripes N      store stripes (files) (default 1)\n"
		"  --segment BYTES  segment size per stripe, K/M suffixes (default 1M)\n"
		"  --size BYTES     store capacity (default: what the run needs, + 25%%)\n"
		"  --reads N        heads read back cold per phase (default 32)\n"
		"  --repeat N       passes; medians are reported (default 3)\n"
		"  --json           JSON instead of a table\n"
		"  --keep           leave the last pass's store and the plain file\n");
}

static int parse_args(int argc, char **argv, struct append_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir),
		BENCH_MODEL_OPTS(a->model),
		BENCH_U32("--tokens", a->prompt_tokens, 1, 1u << 24),
		BENCH_U32("--steps", a->decode_steps, 1, 1u << 24),
		BENCH_U32("--seqs", a->n_seqs, 1, 4096),
		BENCH_U32("--stripes", a->n_stripes, 1, 64),
		BENCH_U32("--reads", a->n_reads, 1, 1u << 20),
		BENCH_U32("--repeat", a->repeat, 1, MAX_REPEAT),
		BENCH_U64("--segment", a->segment_bytes, 1, UINT64_MAX),
		BENCH_U64("--size", a->capacity_bytes, 1, UINT64_MAX),
		BENCH_BOOL("--json", a->json),
		BENCH_BOOL("--keep", a->keep),
		{ 0 }
	};
	int rc;

	*a = (struct append_args){ .dir = "kvbench-append",
				   .model = BENCH_MODEL_DEFAULT,
				   .prompt_tokens = 2000,
				   .decode_steps = 250,
				   .n_seqs = 8,
				   .n_stripes = 1,
				   .segment_bytes = MIB,
				   .n_reads = 32,
				   .repeat = 3 };
	rc = bench_parse_opts("append", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	if (bench_check_heads("append", &a->model) != 0)
		return 2;
	return 0;
}

/* ---- data ---------------------------------------------------------------- */

/* pool_fill - random f16 values with the top exponent bit clear (finite,
 * magnitude below 2) */
static void pool_fill(uint16_t *pool, size_t n)
{
	for (size_t i = 0; i < n; i += 4) {
		uint64_t r = bench_mix64(i + 0x6b7666ull);

		for (size_t j = 0; j < 4 && i + j < n; j++)
			pool[i + j] = (uint16_t)(r >> (16 * j)) & 0xbfffu;
	}
}

/* rows_of - where the rows of (seq, layer, kind) start in the pool */
static const uint16_t *rows_of(const struct append_ctx *c, uint64_t seq,
			       uint32_t layer, int kind)
{
	uint64_t h =
		bench_mix64((seq << 20) ^ ((uint64_t)layer << 2) ^ (uint64_t)kind);

	return c->pool + h % POOL_SLACK;
}

/* ---- plain loops ----------------------------------------------------------- */

/* plain_create - a fresh preallocated plain file; its descriptor or -1 */
static int plain_create(struct append_ctx *c)
{
	int fd;

	unlink(c->plain_path);
	fd = open(c->plain_path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	c->plain_direct = fd >= 0;
	if (fd < 0) /* the store falls back the same way */
		fd = open(c->plain_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || fallocate(fd, 0, 0, (off_t)c->plain_file_bytes) != 0) {
		fprintf(stderr, "kvbench append: %s: %s\n", c->plain_path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* plain_write - bytes (rounded up to a page) in 1 MiB pwrites from
 * offset 0, then fdatasync, into a fresh file; MB/s of bytes, < 0 on
 * error; *cpu gets the CPU seconds spent meanwhile */
static double plain_write(struct append_ctx *c, uint64_t bytes, double *cpu)
{
	uint64_t t0, ns, done = 0, total = (bytes + 4095) & ~4095ull;
	double c0;
	int fd = plain_create(c);

	if (fd < 0)
		return -1;
	c0 = bench_cpu_s();
	t0 = bench_now_ns();
	while (done < total) {
		size_t n = total - done < PLAIN_CHUNK ? (size_t)(total - done) :
							PLAIN_CHUNK;

		if (pwrite(fd, c->chunk, n, (off_t)done) != (ssize_t)n) {
			fprintf(stderr, "kvbench append: pwrite %s: %s\n",
				c->plain_path, strerror(errno));
			close(fd);
			return -1;
		}
		done += n;
	}
	if (fdatasync(fd) != 0) {
		fprintf(stderr, "kvbench append: fdatasync %s: %s\n",
			c->plain_path, strerror(errno));
		close(fd);
		return -1;
	}
	ns = bench_now_ns() - t0;
	*cpu = bench_cpu_s() - c0;
	close(fd);
	return bench_mbs(bytes, ns);
}

/* plain_read - read n_heads runs of head_bytes each (rounded up to a
 * page), one after the other from the start of the plain file, in preads
 * of at most 1 MiB; MB/s of head bytes, < 0 on error */
static double plain_read(struct append_ctx *c, uint32_t n_heads,
			 uint64_t head_bytes)
{
	uint64_t run = (head_bytes + 4095) & ~4095ull, off = 0, ns = 0;
	int fd = open(c->plain_path,
		      O_RDONLY | (c->plain_direct ? O_DIRECT : 0));

	if (fd < 0) {
		fprintf(stderr, "kvbench append: %s: %s\n", c->plain_path,
			strerror(errno));
		return -1;
	}
	for (uint32_t i = 0; i < n_heads; i++) {
		uint64_t t0, done = 0;

		if (off + run > c->plain_file_bytes)
			off = 0;
		t0 = bench_now_ns();
		while (done < run) {
			size_t n = run - done < PLAIN_CHUNK ?
					   (size_t)(run - done) :
					   PLAIN_CHUNK;

			if (pread(fd, c->chunk, n, (off_t)(off + done)) !=
			    (ssize_t)n) {
				fprintf(stderr,
					"kvbench append: pread %s: %s\n",
					c->plain_path, strerror(errno));
				close(fd);
				return -1;
			}
			done += n;
		}
		ns += bench_now_ns() - t0;
		off += run;
	}
	close(fd);
	return bench_mbs((uint64_t)n_heads * head_bytes, ns);
}

/* ---- the store ------------------------------------------------------------- */

static kvf_status store_open(struct append_ctx *c, int create, kvf_store **out)
{
	const struct append_args *a = c->a;
	kvf_options o;

	if (!create)
		return kvf_open(c->store_dir, NULL, out);
	bench_store_options(&o, &a->model, a->n_stripes, a->segment_bytes,
			    a->capacity_bytes);
	return bench_open_direct(c->store_dir, &o, out, &c->direct_io);
}

/* prefill - every sequence of batch 0 appends its prompt, layer by layer
 * (a batched forward pass), then sync; MB/s of user bytes */
static double prefill(struct append_ctx *c, kvf_store *st, double *cpu)
{
	const struct append_args *a = c->a;
	uint64_t t0, ns;
	double c0;
	kvf_status rc;

	for (uint32_t s = 0; s < a->n_seqs; s++)
		if ((rc = kvf_seq_create(st, s)) != KVF_OK)
			return bench_fail("append", "kvf_seq_create", rc);
	c0 = bench_cpu_s();
	t0 = bench_now_ns();
	for (uint32_t l = 0; l < a->model.n_layers; l++)
		for (uint32_t s = 0; s < a->n_seqs; s++) {
			rc = kvf_append(st, s, l, a->prompt_tokens,
					rows_of(c, s, l, 0),
					rows_of(c, s, l, 1));
			if (rc != KVF_OK)
				return bench_fail("append",
						  "kvf_append (prefill)", rc);
		}
	if ((rc = kvf_sync(st)) != KVF_OK)
		return bench_fail("append", "kvf_sync", rc);
	ns = bench_now_ns() - t0;
	*cpu = bench_cpu_s() - c0;
	return bench_mbs(c->prefill_bytes, ns);
}

/* decode - batch 1 (empty sequences) appends one token per layer per
 * step, then sync; MB/s of user bytes */
static double decode(struct append_ctx *c, kvf_store *st, double *cpu)
{
	const struct append_args *a = c->a;
	size_t tok_elts = (size_t)a->model.n_kv_heads * a->model.head_dim;
	uint64_t t0, ns;
	double c0;
	kvf_status rc;

	for (uint32_t s = 0; s < a->n_seqs; s++)
		if ((rc = kvf_seq_create(st, a->n_seqs + s)) != KVF_OK)
			return bench_fail("append", "kvf_seq_create", rc);
	c0 = bench_cpu_s();
	t0 = bench_now_ns();
	for (uint32_t t = 0; t < a->decode_steps; t++)
		for (uint32_t l = 0; l < a->model.n_layers; l++)
			for (uint32_t s = 0; s < a->n_seqs; s++) {
				uint64_t id = a->n_seqs + s;

				rc = kvf_append(st, id, l, 1,
						rows_of(c, id, l, 0) +
							t * tok_elts,
						rows_of(c, id, l, 1) +
							t * tok_elts);
				if (rc != KVF_OK)
					return bench_fail("append",
							  "kvf_append (decode)", rc);
			}
	if ((rc = kvf_sync(st)) != KVF_OK)
		return bench_fail("append", "kvf_sync", rc);
	ns = bench_now_ns() - t0;
	*cpu = bench_cpu_s() - c0;
	return bench_mbs(c->decode_bytes, ns);
}

/* check_head - the tokens read back are the ones appended; 0 or -1 */
static int check_head(struct append_ctx *c, uint64_t seq, uint32_t layer,
		      uint32_t head, uint64_t n, const uint16_t *k,
		      const uint16_t *v)
{
	uint32_t H = c->a->model.n_kv_heads, D = c->a->model.head_dim;

	for (int kind = 0; kind < 2; kind++) {
		const uint16_t *got = kind ? v : k;
		const uint16_t *src = rows_of(c, seq, layer, kind);

		for (uint64_t t = 0; t < n; t++)
			if (memcmp(got + t * D, src + (t * H + head) * D,
				   (size_t)D * 2) != 0) {
				fprintf(stderr,
					"kvbench append: sequence %llu layer %u head %u %s token %llu read back wrong data\n",
					(unsigned long long)seq, layer, head,
					kind ? "V" : "K",
					(unsigned long long)t);
				return -1;
			}
	}
	return 0;
}

/* read_heads - whole-range kvf_reads of n_reads heads of batch `batch`
 * (n tokens each), each checked; MB/s of the time in kvf_read */
static double read_heads(struct append_ctx *c, kvf_store *st, int batch,
			 uint64_t n, uint16_t *k, uint16_t *v)
{
	const struct append_args *a = c->a;
	uint64_t ns = 0;

	for (uint32_t i = 0; i < a->n_reads; i++) {
		uint64_t seq = (uint64_t)batch * a->n_seqs + i % a->n_seqs;
		uint32_t layer = (i * 7 + i / a->n_seqs) % a->model.n_layers;
		uint32_t head = (i * 3 + i / a->n_seqs) % a->model.n_kv_heads;
		uint64_t t0 = bench_now_ns();
		kvf_status rc = kvf_read(st, seq, layer, head, 0, n, k, v);

		ns += bench_now_ns() - t0;
		if (rc != KVF_OK)
			return bench_fail("append", "kvf_read", rc);
		if (check_head(c, seq, layer, head, n, k, v) != 0)
			return -1;
		c->verified_bytes += 2 * n * c->row_bytes;
	}
	return bench_mbs((uint64_t)a->n_reads * 2 * n * c->row_bytes, ns);
}

/* one_pass - a fresh store through every phase; `first` picks the side
 * that goes first (0 kvflash, 1 plain) */
static int one_pass(struct append_ctx *c, int first, struct append_pass *p)
{
	const struct append_args *a = c->a;
	uint64_t pre_n = a->prompt_tokens, dec_n = a->decode_steps, t0;
	uint16_t *k = malloc((pre_n > dec_n ? pre_n : dec_n) * c->row_bytes);
	uint16_t *v = malloc((pre_n > dec_n ? pre_n : dec_n) * c->row_bytes);
	kvf_store *st = NULL;
	kvf_status rc;
	double cpu;
	int ret = -1;

	if (bench_remove_store(c->store_dir) != 0)
		goto out;
	if (k == NULL || v == NULL) {
		fprintf(stderr, "kvbench append: out of memory\n");
		goto out;
	}
	if ((rc = store_open(c, 1, &st)) != KVF_OK) {
		bench_fail("append", "kvf_open", rc);
		goto out;
	}
	for (int i = 0; i < 2; i++) {
		int side = first ^ i;

		p->prefill_mbs[side] =
			side ? plain_write(c, c->prefill_bytes,
					   &p->prefill_cpu[1]) :
			       prefill(c, st, &p->prefill_cpu[0]);
		if (p->prefill_mbs[side] < 0)
			goto out;
	}
	for (int i = 0; i < 2; i++) {
		int side = first ^ i;

		p->decode_mbs[side] = side ? plain_write(c, c->decode_bytes,
							 &p->decode_cpu[1]) :
					     decode(c, st, &p->decode_cpu[0]);
		if (p->decode_mbs[side] < 0)
			goto out;
	}
	c->stats.struct_size = sizeof(c->stats);
	if ((rc = kvf_stats_get(st, &c->stats)) != KVF_OK) {
		bench_fail("append", "kvf_stats_get", rc);
		goto out;
	}
	/* the plain file holds the prefill bytes again for the reads */
	if (plain_write(c, c->prefill_bytes, &cpu) < 0)
		goto out;
	rc = kvf_close(st);
	st = NULL;
	if (rc != KVF_OK) {
		bench_fail("append", "kvf_close", rc);
		goto out;
	}
	t0 = bench_now_ns();
	if ((rc = store_open(c, 0, &st)) != KVF_OK) {
		bench_fail("append", "kvf_open (reopen)", rc);
		goto out;
	}
	p->reopen_ms = (double)(bench_now_ns() - t0) / 1e6;
	c->verified_bytes = 0;
	for (int i = 0; i < 2; i++) {
		int side = first ^ i;

		p->read_pre_mbs[side] =
			side ? plain_read(c, a->n_reads,
					  2 * pre_n * c->row_bytes) :
			       read_heads(c, st, 0, pre_n, k, v);
		if (p->read_pre_mbs[side] < 0)
			goto out;
	}
	for (int i = 0; i < 2; i++) {
		int side = first ^ i;

		p->read_dec_mbs[side] =
			side ? plain_read(c, a->n_reads,
					  2 * dec_n * c->row_bytes) :
			       read_heads(c, st, 1, dec_n, k, v);
		if (p->read_dec_mbs[side] < 0)
			goto out;
	}
	ret = 0;
out:
	if (st && (rc = kvf_close(st)) != KVF_OK && ret == 0)
		ret = bench_fail("append", "kvf_close", rc);
	free(k);
	free(v);
	return ret;
}

/* ---- output ------------------------------------------------------------------ */

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

static void json_pair(struct bench_json *j, const char *key, const double *v,
		      const char *unit, double target, const char *target_kind,
		      const double *cpu, uint64_t bytes)
{
	char k0[64], k1[64];

	snprintf(k0, sizeof(k0), "kvflash_%s", unit);
	snprintf(k1, sizeof(k1), "plain_%s", unit);
	bench_json_begin(j, key);
	bench_json_double(j, k0, v[0]);
	bench_json_double(j, k1, v[1]);
	bench_json_double(j, "ratio", v[0] / v[1]);
	bench_json_double(j, target_kind, target);
	if (cpu) { /* CPU seconds per GB (10^9 bytes) of user bytes */
		bench_json_double(j, "kvflash_cpu_s_per_gb",
				  cpu[0] / ((double)bytes / 1e9));
		bench_json_double(j, "plain_cpu_s_per_gb",
				  cpu[1] / ((double)bytes / 1e9));
	}
	bench_json_end(j);
}

static void print_json(const struct append_ctx *c, const struct append_pass *m)
{
	const struct append_args *a = c->a;
	const kvf_stats *s = &c->stats;
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "append");
	bench_json_str(&j, "dir", a->dir);
	bench_json_model(&j, &a->model);
	bench_json_u64(&j, "seqs", a->n_seqs);
	bench_json_u64(&j, "prompt_tokens", a->prompt_tokens);
	bench_json_u64(&j, "decode_steps", a->decode_steps);
	bench_json_u64(&j, "stripes", a->n_stripes);
	bench_json_u64(&j, "segment_bytes", a->segment_bytes);
	bench_json_u64(&j, "capacity_bytes", a->capacity_bytes);
	bench_json_u64(&j, "repeat", a->repeat);
	bench_json_u64(&j, "direct_io", (uint64_t)c->direct_io);
	bench_json_u64(&j, "plain_direct_io", (uint64_t)c->plain_direct);
	bench_json_u64(&j, "prefill_user_bytes", c->prefill_bytes);
	bench_json_u64(&j, "decode_user_bytes", c->decode_bytes);
	json_pair(&j, "prefill_append", m->prefill_mbs, "mb_s", 0.8,
		  "target_min_ratio", m->prefill_cpu, c->prefill_bytes);
	json_pair(&j, "decode_append", m->decode_mbs, "mb_s", 0.6,
		  "target_min_ratio", m->decode_cpu, c->decode_bytes);
	json_pair(&j, "cold_read_prefill_head", m->read_pre_mbs, "mb_s", 0.8,
		  "target_min_ratio", NULL, 0);
	json_pair(&j, "cold_read_decode_head", m->read_dec_mbs, "mb_s", 0.8,
		  "target_min_ratio", NULL, 0);
	bench_json_begin(&j, "host_wa");
	bench_json_double(&j, "host_wa", s->host_wa);
	bench_json_double(&j, "target_max", 1.02);
	bench_json_u64(&j, "user_bytes", s->user_bytes);
	bench_json_u64(&j, "host_bytes_written", s->host_bytes_written);
	bench_json_u64(&j, "data_bytes", s->data_bytes);
	bench_json_u64(&j, "padding_bytes", s->padding_bytes);
	bench_json_u64(&j, "summary_bytes", s->summary_bytes);
	bench_json_u64(&j, "cleaner_bytes", s->cleaner_bytes);
	bench_json_u64(&j, "kt_bytes", s->kt_bytes);
	bench_json_u64(&j, "metadata_bytes", s->metadata_bytes);
	bench_json_u64(&j, "segments_written", s->segments_written);
	bench_json_end(&j);
	bench_json_begin(&j, "index_memory");
	bench_json_u64(&j, "index_bytes", s->index_bytes);
	bench_json_u64(&j, "stored_bytes", s->host_bytes_written);
	bench_json_double(&j, "percent",
			  pct(s->index_bytes, s->host_bytes_written));
	bench_json_double(&j, "target_max_percent", 0.2);
	bench_json_end(&j);
	bench_json_double(&j, "reopen_ms", m->reopen_ms);
	bench_json_u64(&j, "verified_bytes", c->verified_bytes);
	bench_json_end(&j);
}

static void row(const char *what, const double *v, const char *target)
{
	printf("%-34s %9.1f MB/s %9.1f MB/s %6.2fx   %s\n", what, v[0], v[1],
	       v[0] / v[1], target);
}

static void print_table(const struct append_ctx *c, const struct append_pass *m)
{
	const struct append_args *a = c->a;
	const kvf_stats *s = &c->stats;
	double mib = (double)MIB;

	printf("kvbench append: %s, %u layers x %u kv heads (%u q) x %u dims f16, "
	       "%u sequences per batch, prompt %u tokens, %u decode steps,\n"
	       "  %u stripe(s), %llu KiB segments, capacity %llu MiB, O_DIRECT %s "
	       "(plain %s), median of %u\n",
	       a->dir, a->model.n_layers, a->model.n_kv_heads,
	       a->model.n_q_heads, a->model.head_dim, a->n_seqs,
	       a->prompt_tokens, a->decode_steps, a->n_stripes,
	       (unsigned long long)(a->segment_bytes >> 10),
	       (unsigned long long)(a->capacity_bytes >> 20),
	       c->direct_io ? "on" : "off (fallback)",
	       c->plain_direct ? "on" : "off", a->repeat);
	printf("%-34s %14s %14s %7s   %s\n", "measurement", "kvflash",
	       "plain loop", "ratio", "target");
	row("prefill append + sync", m->prefill_mbs, ">= 0.80x");
	row("decode append + sync", m->decode_mbs, ">= 0.60x");
	printf("  CPU s per GB appended: prefill %.2f (plain %.2f), decode %.2f (plain %.2f)\n",
	       m->prefill_cpu[0] / ((double)c->prefill_bytes / 1e9),
	       m->prefill_cpu[1] / ((double)c->prefill_bytes / 1e9),
	       m->decode_cpu[0] / ((double)c->decode_bytes / 1e9),
	       m->decode_cpu[1] / ((double)c->decode_bytes / 1e9));
	row("cold read, prefill-written head", m->read_pre_mbs, ">= 0.80x");
	row("cold read, decode-written head", m->read_dec_mbs, ">= 0.80x");
	printf("%-34s %9.4f %39s\n", "host WA (no frees, kt_pages off)",
	       s->host_wa, "<= 1.02");
	printf("  user bytes %.1f MiB; written %.1f MiB = data %.1f MiB (%.2f%%) "
	       "+ padding %.1f MiB (%.2f%%)\n"
	       "  + summaries %.1f MiB (%.2f%%) + cleaner %.1f MiB; catalog %.1f MiB "
	       "(not in WA); %llu segments\n",
	       (double)s->user_bytes / mib, (double)s->host_bytes_written / mib,
	       (double)s->data_bytes / mib, pct(s->data_bytes, s->user_bytes),
	       (double)s->padding_bytes / mib,
	       pct(s->padding_bytes, s->user_bytes),
	       (double)s->summary_bytes / mib,
	       pct(s->summary_bytes, s->user_bytes),
	       (double)s->cleaner_bytes / mib, (double)s->metadata_bytes / mib,
	       (unsigned long long)s->segments_written);
	printf("%-34s %8.3f%% %39s\n", "index memory / stored bytes",
	       pct(s->index_bytes, s->host_bytes_written), "<= 0.20%");
	printf("  %.1f KiB of index for %.1f MiB stored (%.2f bytes per %u-byte page)\n",
	       (double)s->index_bytes / 1024.0,
	       (double)s->host_bytes_written / mib,
	       s->host_bytes_written ?
		       (double)s->index_bytes /
			       ((double)s->host_bytes_written / 4096.0) :
		       0,
	       4096u);
	printf("  reopen (kvf_open of the closed store) %.1f ms; %.1f MiB of heads "
	       "read back and checked\n",
	       m->reopen_ms, (double)c->verified_bytes / mib);
}

/* median_of - the median over n passes of the double at byte offset off */
static double median_of(const struct append_pass *p, uint32_t n, size_t off)
{
	double v[MAX_REPEAT];

	for (uint32_t i = 0; i < n; i++)
		memcpy(&v[i], (const char *)&p[i] + off, sizeof(double));
	return bench_median(v, n);
}

/* ---- main ---------------------------------------------------------------------- */

static int setup(struct append_ctx *c)
{
	const struct append_args *a = c->a;
	uint64_t max_tok = a->prompt_tokens > a->decode_steps ?
				   a->prompt_tokens :
				   a->decode_steps;
	size_t plen = strlen(a->dir) + 16;

	c->row_bytes = a->model.head_dim * 2;
	c->prefill_bytes = (uint64_t)a->n_seqs * a->model.n_layers *
			   a->prompt_tokens * 2 * a->model.n_kv_heads *
			   c->row_bytes;
	c->decode_bytes = (uint64_t)a->n_seqs * a->model.n_layers *
			  a->decode_steps * 2 * a->model.n_kv_heads *
			  c->row_bytes;
	c->plain_file_bytes =
		((c->prefill_bytes > c->decode_bytes ? c->prefill_bytes :
						       c->decode_bytes) +
		 PLAIN_CHUNK - 1) &
		~(uint64_t)(PLAIN_CHUNK - 1);
	c->pool_elts =
		max_tok * a->model.n_kv_heads * a->model.head_dim + POOL_SLACK;
	c->pool = malloc(c->pool_elts * sizeof(uint16_t));
	c->chunk = kvf_aligned_alloc(4096, PLAIN_CHUNK);
	c->store_dir = malloc(plen);
	c->plain_path = malloc(plen);
	if (!c->pool || !c->chunk || !c->store_dir || !c->plain_path) {
		fprintf(stderr, "kvbench append: out of memory\n");
		return -1;
	}
	pool_fill(c->pool, c->pool_elts);
	memcpy(c->chunk, c->pool,
	       PLAIN_CHUNK < c->pool_elts * 2 ? PLAIN_CHUNK : c->pool_elts * 2);
	snprintf(c->store_dir, plen, "%s/store", a->dir);
	snprintf(c->plain_path, plen, "%s/plain.dat", a->dir);
	if (bench_make_dir("append", a->dir, NULL) != 0)
		return -1;
	return 0;
}

/* default_capacity - room for both phases: the user bytes, summaries,
 * padding and the cleaner's low watermark (10% of the segments: kept
 * free so the background cleaner stays asleep), +25% in all, and the
 * partial segments each sync leaves per sequence */
static uint64_t default_capacity(const struct append_ctx *c)
{
	const struct append_args *a = c->a;
	uint64_t seg = a->segment_bytes * a->n_stripes;
	uint64_t need = (c->prefill_bytes + c->decode_bytes) / 4 * 5 +
			(uint64_t)(8 * a->n_seqs + 16) * seg;

	return (need + seg - 1) / seg * seg;
}

int bench_append_main(int argc, char **argv)
{
	struct append_args a;
	struct append_ctx c = { 0 };
	struct append_pass passes[MAX_REPEAT], med;
	int rc;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	c.a = &a;
	rc = 1;
	if (setup(&c) != 0)
		goto out;
	if (a.capacity_bytes == 0)
		a.capacity_bytes = default_capacity(&c);
	for (uint32_t i = 0; i < a.repeat; i++)
		if (one_pass(&c, (int)(i % 2), &passes[i]) != 0)
			goto out;
	for (int s = 0; s < 2; s++) {
		med.prefill_mbs[s] =
			median_of(passes, a.repeat,
				  offsetof(struct append_pass, prefill_mbs[s]));
		med.decode_mbs[s] =
			median_of(passes, a.repeat,
				  offsetof(struct append_pass, decode_mbs[s]));
		med.read_pre_mbs[s] = median_of(passes, a.repeat,
						offsetof(struct append_pass,
							 read_pre_mbs[s]));
		med.read_dec_mbs[s] = median_of(passes, a.repeat,
						offsetof(struct append_pass,
							 read_dec_mbs[s]));
		med.prefill_cpu[s] =
			median_of(passes, a.repeat,
				  offsetof(struct append_pass, prefill_cpu[s]));
		med.decode_cpu[s] =
			median_of(passes, a.repeat,
				  offsetof(struct append_pass, decode_cpu[s]));
	}
	med.reopen_ms = median_of(passes, a.repeat,
				  offsetof(struct append_pass, reopen_ms));
	if (a.json)
		print_json(&c, &med);
	else
		print_table(&c, &med);
	rc = 0;
out:
	if (!a.keep && c.store_dir) {
		bench_remove_store(c.store_dir);
		unlink(c.plain_path);
		rmdir(a.dir);
	}
	free(c.pool);
	kvf_free(c.chunk);
	free(c.store_dir);
	free(c.plain_path);
	return rc;
}
