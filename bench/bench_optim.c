/*
 * bench_optim.c - `kvbench optim`: Adam steps on optimizer state kept in
 * the store (kvf_opt_step) against plain loops that move the same bytes,
 * side by side in one run.
 *
 * One tensor of n_params fp32 parameters (default 32M: 128 MiB of params
 * and 256 MiB of Adam moments, well past the caches; at 64M a step of the
 * file store takes some 5 s on a 2-core VM and the default run would pass
 * a minute) lives in two stores in turn, each with its own optimizer
 * created from the same initial parameters (PyTorch's Adam defaults), and
 * stepped once untimed before the timed steps (the first step after
 * create also lays out the third generation of segments):
 *  1. a memory store (KVF_MEDIA_MEMORY): a kvf_opt_step with a dense f32
 *     gradient and f32 params_out against memcpy of the same bytes.  A
 *     step reads p, m, v and g and writes p, m, v and params_out: 8 * 4
 *     bytes per parameter.  The baseline copies four arrays of n_params
 *     floats into four others (16 bytes read and 16 written per
 *     parameter), so both sides count 32 bytes per parameter;
 *  2. a file store with O_DIRECT: the same step against one thread of
 *     1 MiB O_DIRECT pread + pwrite (in place) over a preallocated, fully
 *     written file of p, m and v, then one fdatasync, as the store makes
 *     each step durable once (a media sync and a synced catalog commit).
 *     Both sides count the state bytes through the media, 24 bytes per
 *     parameter (read p, m, v; write p, m, v), so the ratio is that of
 *     the step times;
 *  3. 1% Top-K gradients (ascending indices, f32 values): the bytes the
 *     caller hands to kvf_opt_step (4-byte index + value per entry)
 *     against the dense gradient's, and the step time on each store
 *     against the dense step's.  A Top-K step still streams all of p, m
 *     and v (a zero gradient still moves Adam's state).
 * Each pass runs every side `steps` times, alternating which side goes
 * first; every step is timed alone and the medians over all passes are
 * reported, with the targets beside them (figures, never pass/fail).
 * Beside each store's figures: what one dense step asked of the media
 * (bytes and requests read and written, syncs, trims), from the media's
 * own counters (ftl/media.h, reached through engine/store.h: kvf_stats
 * does not count the optimizer's pages as written).  Both stores live in
 * DIR/store, one after the other (the memory store keeps its catalog
 * there); --media runs one of them alone.
 *
 * Checks, untimed: first a small tensor (5 full chunks and a partial one)
 * on a memory store, two dense steps and a Top-K one, every parameter and
 * every params_out value compared bit for bit with the compute/optim.h
 * kernels run on plain arrays; then, on the big tensors, after every step,
 * three ranges of parameters (start, middle, end) of params_out, and of
 * kvf_opt_read at the end, against the same kernels run on those ranges
 * alone (the update is element-wise, so a range gives the same bits).
 *
 * One thread drives everything; no locking.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "compute/optim.h"
#include "engine/store_state.h" /* st->media, for the media's own counters */
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

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench optim [--dir DIR] [--params N] [--steps N] [--repeat N]\n"
		"                     [--topk PCT] [--stripes N] [--segment BYTES]\n"
		"                     [--size BYTES] [--media memory|file|both]\n"
		"                     [--json] [--keep]\n"
		"  --dir DIR        directory for the stores and the plain file\n"
		"                   (default ./kvbench-optim)\n"
		"  --params N       fp32 parameters of the tensor (at least 8K),\n"
		"                   K/M/G suffixes\n"
		"                   (default 32M: 128 MiB params + 256 MiB Adam moments)\n"
		"  --steps N        timed steps per side per pass (default 2)\n"
		"  --repeat N       passes; medians over every timed step (default 3)\n"
		"  --topk PCT       Top-K gradient entries, percent (default 1)\n"
		"  --stripes N      store stripes (files) (default 1)\n"
		"  --segment BYTES  segment size per stripe (default 1M)\n"
		"  --size BYTES     store capacity (default: three generations of\n"
		"                   the state, + 25%%)\n"
		"  --media KIND     the stores to measure: memory, file or both\n"
		"                   (default both)\n"
		"  --json           JSON instead of a table\n"
		"  --keep           leave the file store and the plain file in DIR\n");
}

/* parse_media - --media memory|file|both */
static int parse_media(const char *flag, const char *text, void *out)
{
	struct optim_args *a = out;

	(void)flag;
	if (strcmp(text, "memory") != 0 && strcmp(text, "file") != 0 &&
	    strcmp(text, "both") != 0)
		return -1;
	a->run_mem = strcmp(text, "file") != 0;
	a->run_file = strcmp(text, "memory") != 0;
	return 0;
}

/* parse_topk - --topk PCT in (0, 100] */
static int parse_topk(const char *flag, const char *text, void *out)
{
	double *pct = out;

	if (bench_parse_double(flag, text, pct) != 0)
		return 2;
	return *pct > 0 && *pct <= 100 ? 0 : -1;
}

static int parse_args(int argc, char **argv, struct optim_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir),
		BENCH_FUNC("--media", parse_media, a),
		BENCH_FUNC("--topk", parse_topk, &a->topk_pct),
		/* the small check borrows init and grad */
		BENCH_U64("--params", a->n_params, 8192, UINT32_MAX),
		BENCH_U32("--steps", a->steps, 1, 64),
		BENCH_U32("--repeat", a->repeat, 1, 64),
		BENCH_U32("--stripes", a->n_stripes, 1, 64),
		BENCH_U64("--segment", a->segment_bytes, 1, UINT64_MAX),
		BENCH_U64("--size", a->capacity_bytes, 1, UINT64_MAX),
		BENCH_BOOL("--json", a->json),
		BENCH_BOOL("--keep", a->keep),
		{ 0 }
	};
	int rc;

	*a = (struct optim_args){ .dir = "kvbench-optim",
				  .n_params = 32 * MIB,
				  .steps = 2,
				  .repeat = 3,
				  .topk_pct = 1.0,
				  .n_stripes = 1,
				  .segment_bytes = MIB,
				  .run_mem = 1,
				  .run_file = 1 };
	rc = bench_parse_opts("optim", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	if ((uint64_t)a->steps * a->repeat > MAX_SAMPLES)
		return bench_usage_error("optim",
					 "--steps times --repeat is at most %u",
					 MAX_SAMPLES);
	return 0;
}

/* ---- data ---------------------------------------------------------------- */

/* fill_uniform - n floats uniform in [-scale, scale), from seed */
static void fill_uniform(float *x, uint64_t n, uint64_t seed, float scale)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = bench_mix64(seed + i) >> 40; /* 24 bits */

		x[i] = ((float)r * (1.0f / 8388608.0f) - 1.0f) * scale;
	}
}

/* topk_make - nnz ascending indices below n, one at a random place in each
 * of nnz equal strides, with the dense gradient's values there */
static void topk_make(struct optim_ctx *c, uint64_t n)
{
	for (uint64_t j = 0; j < c->nnz; j++) {
		uint64_t lo = j * n / c->nnz, hi = (j + 1) * n / c->nnz;

		c->idx[j] =
			(uint32_t)(lo + bench_mix64(j ^ 0x746f706bull) % (hi - lo));
		c->vals[j] = c->grad[c->idx[j]];
	}
}

/* ---- the reference ------------------------------------------------------- */

/* ref_init - the reference of a fresh optimizer over n parameters:
 * ranges at the start, the middle and the end (len each) */
static void ref_init(struct optim_ctx *c, uint64_t n)
{
	struct ref *r = &c->ref;
	uint32_t len = r->len;

	r->start[0] = 0;
	r->start[1] = (n / 2) & ~1023ull;
	r->start[2] = n - len;
	for (uint32_t i = 0; i < N_RANGES; i++)
		memcpy(r->p + (size_t)i * len, c->init + r->start[i],
		       len * sizeof(float));
	kvc_optim_state_init(&c->cfg, r->m, r->v, (size_t)N_RANGES * len);
	r->t = 0;
}

/* ref_grad - the gradient element i of the step (dense or Top-K) */
static float ref_grad(const struct optim_ctx *c, uint64_t i, int sparse)
{
	uint64_t lo = 0, hi = c->nnz;

	if (!sparse)
		return c->grad[i];
	while (lo < hi) { /* the first index >= i */
		uint64_t mid = lo + (hi - lo) / 2;

		if (c->idx[mid] < i)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < c->nnz && c->idx[lo] == i ? c->vals[lo] : 0.0f;
}

/* ref_step - step the reference as the store was just stepped, then
 * compare its params_out with the store's; 0 or -1 (message printed) */
static int ref_step(struct optim_ctx *c, int sparse, const char *where)
{
	struct ref *r = &c->ref;
	size_t n = (size_t)N_RANGES * r->len;
	struct kvc_optim_step s;

	for (uint32_t i = 0; i < N_RANGES; i++)
		for (uint32_t j = 0; j < r->len; j++)
			r->g[(size_t)i * r->len + j] =
				ref_grad(c, r->start[i] + j, sparse);
	kvc_optim_step_prepare(&s, &c->cfg, ++r->t, 1.0f);
	kvc_optim_dense(c->k, &s, r->p, r->m, r->v, n, r->g, KVF_DTYPE_F32,
			r->out);
	for (uint32_t i = 0; i < N_RANGES; i++) {
		const float *want = r->out + (size_t)i * r->len;
		const float *got = c->out + r->start[i];

		if (memcmp(want, got, r->len * sizeof(float)) != 0) {
			fprintf(stderr,
				"kvbench optim: %s: params_out of step %llu differs from the reference in [%llu, %llu)\n",
				where, (unsigned long long)r->t,
				(unsigned long long)r->start[i],
				(unsigned long long)(r->start[i] + r->len));
			return -1;
		}
	}
	c->checked += n;
	return 0;
}

/* ref_read_check - kvf_opt_read of the ranges, and the step count, equal
 * the reference; 0 or -1 */
static int ref_read_check(struct optim_ctx *c, kvf_opt *o, const char *where)
{
	struct ref *r = &c->ref;
	uint64_t steps = 0;
	kvf_status rc;

	if ((rc = kvf_opt_steps(o, &steps, NULL)) != KVF_OK)
		return bench_fail("optim", "kvf_opt_steps", rc);
	if (steps != r->t) {
		fprintf(stderr,
			"kvbench optim: %s: the store counts %llu steps, the run took %llu\n",
			where, (unsigned long long)steps,
			(unsigned long long)r->t);
		return -1;
	}
	for (uint32_t i = 0; i < N_RANGES; i++) {
		float *got = r->got + (size_t)i * r->len;

		if ((rc = kvf_opt_read(o, r->start[i], r->len, got)) != KVF_OK)
			return bench_fail("optim", "kvf_opt_read", rc);
		if (memcmp(got, r->p + (size_t)i * r->len,
			   r->len * sizeof(float)) != 0) {
			fprintf(stderr,
				"kvbench optim: %s: kvf_opt_read after %llu steps differs from the reference in [%llu, %llu)\n",
				where, (unsigned long long)r->t,
				(unsigned long long)r->start[i],
				(unsigned long long)(r->start[i] + r->len));
			return -1;
		}
	}
	c->checked += (uint64_t)N_RANGES * r->len;
	return 0;
}

/* ---- the stores ---------------------------------------------------------- */

static kvf_status store_open(struct optim_ctx *c, kvf_media_kind media,
			     kvf_store **out)
{
	const struct optim_args *a = c->a;
	kvf_model m = { 1, 1, 1, 64, KVF_DTYPE_F16 }; /* no K/V is stored */
	kvf_options o;
	kvf_status rc;

	kvf_options_init(&o, &m);
	o.media = media;
	o.n_stripes = a->n_stripes;
	o.segment_size = a->segment_bytes;
	o.capacity_bytes = a->capacity_bytes;
	if (media != KVF_MEDIA_FILE)
		return kvf_open(c->store_dir, &o, out);
	o.direct_io = 1;
	rc = kvf_open(c->store_dir, &o, out);
	c->direct_io = rc == KVF_OK;
	if (rc == KVF_ENOTSUP) { /* no O_DIRECT here: say so, go on */
		o.direct_io = 0;
		rc = kvf_open(c->store_dir, &o, out);
	}
	return rc;
}

/* optim_step - one timed kvf_opt_step (dense or Top-K) into c->out, then
 * the reference check; ns, or 0 on error */
static uint64_t optim_step(struct optim_ctx *c, kvf_opt *o, int sparse,
			   const char *where)
{
	kvf_grad g = { .dtype = KVF_DTYPE_F32 };
	uint64_t t0, ns;
	kvf_status rc;

	if (sparse) {
		g.values = c->vals;
		g.indices = c->idx;
		g.n = c->nnz;
	} else {
		g.values = c->grad;
		g.n = c->a->n_params;
	}
	t0 = bench_now_ns();
	rc = kvf_opt_step(o, &g, c->out);
	ns = bench_now_ns() - t0;
	if (rc != KVF_OK) {
		bench_fail("optim",
			   sparse ? "kvf_opt_step (Top-K)" : "kvf_opt_step", rc);
		return 0;
	}
	if (ref_step(c, sparse, where) != 0)
		return 0;
	return ns ? ns : 1;
}

/* ---- plain loops ----------------------------------------------------------- */

/* memcpy_pass - the four arrays of src into those of dst; ns */
static uint64_t memcpy_pass(struct optim_ctx *c)
{
	size_t arr = (size_t)c->a->n_params * sizeof(float);
	uint64_t t0 = bench_now_ns(), ns;

	for (int i = 0; i < 4; i++)
		memcpy(c->dst + i * arr, c->src + i * arr, arr);
	ns = bench_now_ns() - t0;
	return ns ? ns : 1;
}

/* plain_create - the plain file of the state bytes, preallocated and fully
 * written once (as the store's state is when the steps begin); its
 * descriptor or -1 */
static int plain_create(struct optim_ctx *c, uint64_t bytes)
{
	int fd;

	unlink(c->plain_path);
	fd = open(c->plain_path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	c->plain_direct = fd >= 0;
	if (fd < 0) /* the store falls back the same way */
		fd = open(c->plain_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || fallocate(fd, 0, 0, (off_t)bytes) != 0)
		goto fail;
	memset(c->chunk, 0x3c, PLAIN_CHUNK);
	for (uint64_t off = 0; off < bytes; off += PLAIN_CHUNK)
		if (pwrite(fd, c->chunk, PLAIN_CHUNK, (off_t)off) !=
		    PLAIN_CHUNK)
			goto fail;
	if (fdatasync(fd) != 0)
		goto fail;
	return fd;
fail:
	fprintf(stderr, "kvbench optim: %s: %s\n", c->plain_path,
		strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* plain_pass - read and write back every 1 MiB of the plain file, then
 * fdatasync; ns, or 0 on error */
static uint64_t plain_pass(struct optim_ctx *c, int fd, uint64_t bytes)
{
	uint64_t t0 = bench_now_ns();

	for (uint64_t off = 0; off < bytes; off += PLAIN_CHUNK) {
		if (pread(fd, c->chunk, PLAIN_CHUNK, (off_t)off) !=
			    PLAIN_CHUNK ||
		    pwrite(fd, c->chunk, PLAIN_CHUNK, (off_t)off) !=
			    PLAIN_CHUNK) {
			fprintf(stderr, "kvbench optim: pread/pwrite %s: %s\n",
				c->plain_path, strerror(errno));
			return 0;
		}
	}
	if (fdatasync(fd) != 0) {
		fprintf(stderr, "kvbench optim: fdatasync %s: %s\n",
			c->plain_path, strerror(errno));
		return 0;
	}
	return bench_now_ns() - t0;
}

/* ---- the small check ----------------------------------------------------- */

/*
 * small_check - a small tensor on a memory store: two dense steps and one
 * Top-K step; every parameter (kvf_opt_read) and every params_out value
 * equal the kernels run on the whole arrays.  0 or -1.
 */
static int small_check(struct optim_ctx *c)
{
	const uint64_t n = SMALL_PARAMS;
	size_t bytes = n * sizeof(float);
	float *p = malloc(bytes), *m = malloc(bytes), *v = malloc(bytes);
	float *g = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
	float *out = malloc(bytes);
	uint32_t idx[64];
	float vals[64];
	kvf_store *st = NULL;
	kvf_opt *o = NULL;
	kvf_status rc;
	int ret = -1;

	if (!p || !m || !v || !g || !want || !got || !out) {
		fprintf(stderr, "kvbench optim: out of memory\n");
		goto out;
	}
	memcpy(p, c->init, bytes);
	kvc_optim_state_init(&c->cfg, m, v, n);
	if ((rc = store_open(c, KVF_MEDIA_MEMORY, &st)) != KVF_OK) {
		bench_fail("optim", "kvf_open (memory, small check)", rc);
		goto out;
	}
	if ((rc = kvf_opt_create(st, "small", n, &c->cfg, p, &o)) != KVF_OK) {
		bench_fail("optim", "kvf_opt_create (small check)", rc);
		goto out;
	}
	for (uint64_t t = 1; t <= 3; t++) {
		int sparse = t == 3;
		kvf_grad gr = { KVF_DTYPE_F32, c->grad, NULL, n };
		struct kvc_optim_step s;

		memcpy(g, c->grad, bytes);
		if (sparse) { /* 64 entries, the rest zero */
			memset(g, 0, bytes);
			for (uint32_t j = 0; j < 64; j++) {
				idx[j] = (uint32_t)(j * n / 64 + j % 7);
				vals[j] = g[idx[j]] = c->grad[idx[j]];
			}
			gr = (kvf_grad){ KVF_DTYPE_F32, vals, idx, 64 };
		}
		kvc_optim_step_prepare(&s, &c->cfg, t, 1.0f);
		kvc_optim_dense(c->k, &s, p, m, v, n, g, KVF_DTYPE_F32, want);
		if ((rc = kvf_opt_step(o, &gr, out)) != KVF_OK) {
			bench_fail("optim", "kvf_opt_step (small check)", rc);
			goto out;
		}
		if ((rc = kvf_opt_read(o, 0, n, got)) != KVF_OK) {
			bench_fail("optim", "kvf_opt_read (small check)", rc);
			goto out;
		}
		if (memcmp(out, want, bytes) != 0 ||
		    memcmp(got, p, bytes) != 0) {
			fprintf(stderr,
				"kvbench optim: small check: step %llu (%s) differs from the kernels on plain arrays\n",
				(unsigned long long)t,
				sparse ? "Top-K" : "dense");
			goto out;
		}
		c->checked += 2 * n;
	}
	ret = 0;
out:
	kvf_opt_close(o);
	if (st && (rc = kvf_close(st)) != KVF_OK && ret == 0)
		ret = bench_fail("optim", "kvf_close (small check)", rc);
	free(p);
	free(m);
	free(v);
	free(g);
	free(want);
	free(got);
	free(out);
	return ret;
}

/* ---- the measurements ---------------------------------------------------- */

static double median_ns(uint64_t *ns, uint32_t n)
{
	double v[MAX_SAMPLES];

	for (uint32_t i = 0; i < n; i++)
		v[i] = (double)ns[i];
	return bench_median(v, n);
}

/* io_delta - the media counters of b minus those of a, into *d */
static void io_delta(const struct kvf_media_stats *a,
		     const struct kvf_media_stats *b, struct kvf_media_stats *d)
{
	*d = *b;
	d->bytes_written = b->bytes_written - a->bytes_written;
	d->bytes_read = b->bytes_read - a->bytes_read;
	d->write_ios = b->write_ios - a->write_ios;
	d->read_ios = b->read_ios - a->read_ios;
	d->trims = b->trims - a->trims;
	d->syncs = b->syncs - a->syncs;
}

/* dense_step - one timed dense step, its media counters into *io; ns or 0 */
static uint64_t dense_step(struct optim_ctx *c, kvf_store *st, kvf_opt *o,
			   const char *where, struct kvf_media_stats *io)
{
	struct kvf_media_stats io0, io1;
	uint64_t ns;

	kvf_media_stats(st->media, &io0);
	ns = optim_step(c, o, 0, where);
	kvf_media_stats(st->media, &io1);
	io_delta(&io0, &io1, io);
	return ns;
}

/* plain_side - the baseline of the store's kind: the O_DIRECT loop over
 * fd, or memcpy when fd < 0; ns or 0 */
static uint64_t plain_side(struct optim_ctx *c, int fd)
{
	return fd >= 0 ? plain_pass(c, fd, c->state_bytes) : memcpy_pass(c);
}

/*
 * measure_kind - one store of the given media: create the optimizer, then
 * `repeat` passes of dense steps against the plain loop (alternating which
 * goes first) and Top-K steps; the medians into *r.  0 or -1.
 */
static int measure_kind(struct optim_ctx *c, kvf_media_kind media,
			struct kind_result *r)
{
	const struct optim_args *a = c->a;
	const char *where = media == KVF_MEDIA_FILE ? "file store" :
						      "memory store";
	uint64_t dense[MAX_SAMPLES], topk[MAX_SAMPLES], plain[MAX_SAMPLES];
	uint64_t t0;
	uint32_t n = 0;
	kvf_store *st = NULL;
	kvf_opt *o = NULL;
	kvf_status rc;
	int fd = -1, ret = -1;

	if (bench_remove_store(c->store_dir) != 0)
		return -1;
	if ((rc = store_open(c, media, &st)) != KVF_OK)
		return bench_fail("optim", "kvf_open", rc);
	if (media == KVF_MEDIA_FILE &&
	    (fd = plain_create(c, c->state_bytes)) < 0)
		goto out;
	t0 = bench_now_ns();
	rc = kvf_opt_create(st, "w", a->n_params, &c->cfg, c->init, &o);
	r->create_ms = (double)(bench_now_ns() - t0) / 1e6;
	if (rc != KVF_OK) {
		bench_fail("optim", "kvf_opt_create", rc);
		goto out;
	}
	ref_init(c, a->n_params);
	/* one untimed step: the first also fills the media's third
	 * generation of segments, which no later step does afresh */
	if (optim_step(c, o, 0, where) == 0)
		goto out;
	for (uint32_t pass = 0; pass < a->repeat; pass++) {
		for (uint32_t s = 0; s < a->steps; s++, n++) {
			/* alternate which side goes first, so drift hits
			 * both */
			for (uint32_t i = 0; i < 2; i++) {
				int kvf = (pass + i) % 2 == 0;
				uint64_t ns = kvf ? dense_step(c, st, o, where,
							       &r->io) :
						    plain_side(c, fd);

				if (ns == 0)
					goto out;
				*(kvf ? &dense[n] : &plain[n]) = ns;
			}
		}
		for (uint32_t s = 0; s < a->steps; s++) {
			topk[pass * a->steps + s] = optim_step(c, o, 1, where);
			if (topk[pass * a->steps + s] == 0)
				goto out;
		}
	}
	if (ref_read_check(c, o, where) != 0)
		goto out;
	r->step_ns = median_ns(dense, n);
	r->topk_ns = median_ns(topk, n);
	r->plain_ns = median_ns(plain, n);
	r->ran = 1;
	ret = 0;
out:
	kvf_opt_close(o);
	if (st && (rc = kvf_close(st)) != KVF_OK && ret == 0)
		ret = bench_fail("optim", "kvf_close", rc);
	if (fd >= 0)
		close(fd);
	return ret;
}

/* ---- output ------------------------------------------------------------------ */

/* per_s - bytes over ns as MB/s (10^6 bytes) */
static double per_s(uint64_t bytes, double ns)
{
	return ns > 0 ? (double)bytes / 1e6 / (ns / 1e9) : 0;
}

static void json_kind(struct bench_json *j, const char *key,
		      const struct kind_result *r, uint64_t bytes,
		      double target, const char *plain)
{
	char k[64];

	bench_json_begin(j, key);
	bench_json_u64(j, "bytes_per_step", bytes);
	bench_json_double(j, "kvflash_mb_s", per_s(bytes, r->step_ns));
	snprintf(k, sizeof(k), "%s_mb_s", plain);
	bench_json_double(j, k, per_s(bytes, r->plain_ns));
	bench_json_double(j, "ratio", r->plain_ns / r->step_ns);
	bench_json_double(j, "target_min_ratio", target);
	bench_json_double(j, "step_ms", r->step_ns / 1e6);
	snprintf(k, sizeof(k), "%s_ms", plain);
	bench_json_double(j, k, r->plain_ns / 1e6);
	bench_json_double(j, "topk_step_ms", r->topk_ns / 1e6);
	bench_json_double(j, "topk_over_dense", r->topk_ns / r->step_ns);
	bench_json_double(j, "create_ms", r->create_ms);
	bench_json_begin(j, "media_per_step");
	bench_json_u64(j, "read_bytes", r->io.bytes_read);
	bench_json_u64(j, "read_ios", r->io.read_ios);
	bench_json_u64(j, "written_bytes", r->io.bytes_written);
	bench_json_u64(j, "write_ios", r->io.write_ios);
	bench_json_u64(j, "syncs", r->io.syncs);
	bench_json_u64(j, "trims", r->io.trims);
	bench_json_end(j);
	bench_json_end(j);
}

static void print_json(const struct optim_ctx *c)
{
	const struct optim_args *a = c->a;
	uint64_t n = a->n_params, dense = n * 4, sent = c->nnz * 8;
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "optim");
	bench_json_str(&j, "dir", a->dir);
	bench_json_str(&j, "optimizer", "adam");
	bench_json_u64(&j, "n_params", n);
	bench_json_u64(&j, "state_bytes", c->state_bytes);
	bench_json_str(&j, "kernels", kvc_optim_name(c->k));
	bench_json_u64(&j, "steps", a->steps);
	bench_json_u64(&j, "repeat", a->repeat);
	bench_json_u64(&j, "stripes", a->n_stripes);
	bench_json_u64(&j, "segment_bytes", a->segment_bytes);
	bench_json_u64(&j, "capacity_bytes", a->capacity_bytes);
	bench_json_u64(&j, "direct_io", (uint64_t)c->direct_io);
	bench_json_u64(&j, "io_uring", (uint64_t)c->file.io.uring);
	bench_json_u64(&j, "plain_direct_io", (uint64_t)c->plain_direct);
	if (c->mem.ran)
		json_kind(&j, "memory", &c->mem, 32 * n, 0.6, "memcpy");
	if (c->file.ran)
		json_kind(&j, "file", &c->file, c->state_bytes * 2, 0.7,
			  "plain");
	bench_json_begin(&j, "topk");
	bench_json_double(&j, "percent_entries", a->topk_pct);
	bench_json_u64(&j, "entries", c->nnz);
	bench_json_u64(&j, "sent_bytes", sent);
	bench_json_u64(&j, "dense_bytes", dense);
	bench_json_double(&j, "percent_of_dense",
			  100.0 * (double)sent / (double)dense);
	bench_json_double(&j, "percent_of_dense_bf16_values",
			  100.0 * (double)(c->nnz * 6) / (double)dense);
	bench_json_double(&j, "target_max_percent", 2.0);
	bench_json_end(&j);
	bench_json_u64(&j, "checked_values", c->checked);
	bench_json_end(&j);
}

/* io_line - what one dense step asked of the media */
static void io_line(const char *kind, const struct kvf_media_stats *io,
		    uint64_t state_bytes)
{
	double mib = (double)MIB;

	printf("  %s step's media I/O: read %.1f MiB in %llu requests "
	       "(%.0f KiB each), wrote %.1f MiB in %llu\n"
	       "  (%.0f KiB each), %llu sync(s), %llu trim(s); the state is "
	       "%.1f MiB\n",
	       kind, (double)io->bytes_read / mib,
	       (unsigned long long)io->read_ios,
	       io->read_ios ?
		       (double)io->bytes_read / 1024.0 / (double)io->read_ios :
		       0,
	       (double)io->bytes_written / mib,
	       (unsigned long long)io->write_ios,
	       io->write_ios ? (double)io->bytes_written / 1024.0 /
				       (double)io->write_ios :
			       0,
	       (unsigned long long)io->syncs, (unsigned long long)io->trims,
	       (double)state_bytes / mib);
}

static void print_table(const struct optim_ctx *c)
{
	const struct optim_args *a = c->a;
	const struct kind_result *mr = &c->mem, *fr = &c->file;
	uint64_t n = a->n_params, sent = c->nnz * 8, dense = n * 4;
	uint64_t mem_bytes = 32 * n, file_bytes = c->state_bytes * 2;
	double mib = (double)MIB;

	printf("kvbench optim: Adam (PyTorch defaults) on %llu fp32 params: "
	       "%.1f MiB params + %.1f MiB moments, %s kernels,\n"
	       "  dense f32 gradient, f32 params_out, Top-K %.3g%% "
	       "(%llu entries); %s, %u stripe(s), %llu KiB segments,\n"
	       "  %u step(s) x %u passes per side, medians",
	       (unsigned long long)n, (double)(n * 4) / mib,
	       (double)(n * 8) / mib, kvc_optim_name(c->k), a->topk_pct,
	       (unsigned long long)c->nnz, a->dir, a->n_stripes,
	       (unsigned long long)(a->segment_bytes >> 10), a->steps,
	       a->repeat);
	if (fr->ran)
		printf("; file store: O_DIRECT %s (plain %s), io_uring %s",
		       c->direct_io ? "on" : "off (fallback)",
		       c->plain_direct ? "on" : "off",
		       fr->io.uring ? "on" : "off");
	printf("\n%-36s %14s %14s %7s   %s\n", "measurement", "kvflash",
	       "plain loop", "ratio", "target");
	if (mr->ran) {
		printf("%-36s %9.1f MB/s %9.1f MB/s %6.2fx   >= 0.60x\n",
		       "Adam step, state in memory",
		       per_s(mem_bytes, mr->step_ns),
		       per_s(mem_bytes, mr->plain_ns),
		       mr->plain_ns / mr->step_ns);
		printf("  %.1f ms per step vs %.1f ms of memcpy; 32 bytes per "
		       "param (read p m v g, write p m v out)\n",
		       mr->step_ns / 1e6, mr->plain_ns / 1e6);
		io_line("memory", &mr->io, c->state_bytes);
	}
	if (fr->ran) {
		printf("%-36s %9.1f MB/s %9.1f MB/s %6.2fx   >= 0.70x\n",
		       "Adam step, file store, O_DIRECT",
		       per_s(file_bytes, fr->step_ns),
		       per_s(file_bytes, fr->plain_ns),
		       fr->plain_ns / fr->step_ns);
		printf("  %.1f ms per step vs %.1f ms of pread+pwrite+fdatasync; "
		       "24 bytes per param (read, write p m v)\n",
		       fr->step_ns / 1e6, fr->plain_ns / 1e6);
		io_line("file", &fr->io, c->state_bytes);
	}
	printf("%-36s %9.2f MiB %10.1f MiB %6.2f%%   <= 2%%\n",
	       "Top-K gradient bytes sent vs dense", (double)sent / mib,
	       (double)dense / mib, 100.0 * (double)sent / (double)dense);
	printf("  4-byte index + f32 value per entry; with bf16 values %.2f%%\n",
	       100.0 * (double)(c->nnz * 6) / (double)dense);
	printf("%-36s %14s %14s %7s\n", "Top-K step vs dense step", "Top-K",
	       "dense", "ratio");
	if (mr->ran)
		printf("%-36s %9.1f ms %12.1f ms %6.2fx\n", "  state in memory",
		       mr->topk_ns / 1e6, mr->step_ns / 1e6,
		       mr->topk_ns / mr->step_ns);
	if (fr->ran)
		printf("%-36s %9.1f ms %12.1f ms %6.2fx\n",
		       "  file store, O_DIRECT", fr->topk_ns / 1e6,
		       fr->step_ns / 1e6, fr->topk_ns / fr->step_ns);
	printf("  kvf_opt_create:");
	if (mr->ran)
		printf(" %.1f ms in memory", mr->create_ms);
	if (fr->ran)
		printf("%s %.1f ms on file", mr->ran ? "," : "", fr->create_ms);
	printf("; %llu values checked bit for bit against the kernels\n",
	       (unsigned long long)c->checked);
}

/* ---- main ---------------------------------------------------------------------- */

static int setup(struct optim_ctx *c)
{
	const struct optim_args *a = c->a;
	uint64_t n = a->n_params, chunks = (n + 1023) / 1024;
	size_t plen = strlen(a->dir) + 16, arr = (size_t)n * sizeof(float);
	size_t ref_n = (size_t)N_RANGES * RANGE_MAX * sizeof(float);
	size_t copy = a->run_mem ? 4 * arr : 1; /* the memcpy baseline's */

	c->k = kvc_optim();
	kvf_opt_config_init(&c->cfg, KVF_OPT_ADAM);
	c->nnz = (uint64_t)((double)n * a->topk_pct / 100.0); /* at most */
	if (c->nnz == 0)
		c->nnz = 1;
	c->state_bytes = chunks * 4096 * 3;
	c->init = malloc(arr);
	c->grad = malloc(arr);
	c->out = malloc(arr);
	c->idx = malloc(c->nnz * sizeof(uint32_t));
	c->vals = malloc(c->nnz * sizeof(float));
	c->src = malloc(copy);
	c->dst = malloc(copy);
	c->chunk = kvf_aligned_alloc(4096, PLAIN_CHUNK);
	c->store_dir = malloc(plen);
	c->plain_path = malloc(plen);
	c->ref.len = RANGE_MAX;
	c->ref.p = malloc(ref_n);
	c->ref.m = malloc(ref_n);
	c->ref.v = malloc(ref_n);
	c->ref.g = malloc(ref_n);
	c->ref.out = malloc(ref_n);
	c->ref.got = malloc(ref_n);
	if (!c->init || !c->grad || !c->out || !c->idx || !c->vals || !c->src ||
	    !c->dst || !c->chunk || !c->store_dir || !c->plain_path ||
	    !c->ref.p || !c->ref.m || !c->ref.v || !c->ref.g || !c->ref.out ||
	    !c->ref.got) {
		fprintf(stderr, "kvbench optim: out of memory\n");
		return -1;
	}
	fill_uniform(c->init, n, 0x696e6974ull, 1.0f);
	fill_uniform(c->grad, n, 0x67726164ull, 1e-2f);
	topk_make(c, n);
	/* touch every page the timed loops write, so no first-touch fault
	 * is timed */
	memset(c->out, 0, arr);
	memset(c->src, 0x3c, copy);
	memset(c->dst, 0, copy);
	snprintf(c->store_dir, plen, "%s/store", a->dir);
	snprintf(c->plain_path, plen, "%s/plain.dat", a->dir);
	if (bench_make_dir("optim", a->dir, &c->made_dir) != 0)
		return -1;
	return 0;
}

/* default_capacity - three generations of the state (the committed one,
 * the one before it, whose pages a step replaces, and the one the step
 * writes, as dying segments are reused only after the step's durable
 * point), + 25%, and a few segments per stripe */
static uint64_t default_capacity(const struct optim_ctx *c)
{
	const struct optim_args *a = c->a;
	uint64_t seg = a->segment_bytes * a->n_stripes;
	uint64_t need = c->state_bytes * 3 / 4 * 5 + 16 * seg;

	return (need + seg - 1) / seg * seg;
}

int bench_optim_main(int argc, char **argv)
{
	struct optim_args a;
	struct optim_ctx c = { 0 };
	int rc;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	c.a = &a;
	rc = 1;
	if (setup(&c) != 0)
		goto out;
	if (a.capacity_bytes == 0)
		a.capacity_bytes = default_capacity(&c);
	if (small_check(&c) != 0 ||
	    (a.run_mem && measure_kind(&c, KVF_MEDIA_MEMORY, &c.mem) != 0) ||
	    (a.run_file && measure_kind(&c, KVF_MEDIA_FILE, &c.file) != 0))
		goto out;
	if (a.json)
		print_json(&c);
	else
		print_table(&c);
	rc = 0;
out:
	if (!a.keep && c.store_dir) {
		bench_remove_store(c.store_dir);
		unlink(c.plain_path);
		if (c.made_dir)
			rmdir(a.dir);
	}
	free(c.init);
	free(c.grad);
	free(c.out);
	free(c.idx);
	free(c.vals);
	free(c.src);
	free(c.dst);
	kvf_free(c.chunk);
	free(c.store_dir);
	free(c.plain_path);
	free(c.ref.p);
	free(c.ref.m);
	free(c.ref.v);
	free(c.ref.g);
	free(c.ref.out);
	free(c.ref.got);
	return rc;
}
