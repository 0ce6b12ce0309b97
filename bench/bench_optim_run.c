/*
 * bench_optim_run.c - `kvbench optim`: the untimed and timed sides: the
 * test data, the reference ranges stepped with the compute/optim.h kernels
 * on plain arrays, opening the stores, one kvf_opt_step, the plain loops
 * (memcpy, O_DIRECT pread + pwrite), the small bit-for-bit check, and the
 * passes of one store kind.  See bench_optim.c for what is measured.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "bench/bench_optim_int.h"
#include "compute/optim.h"
#include "engine/base/store_state.h" /* st->media, for the media's own counters */
#include "ftl/media.h"
#include "kvflash.h"

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

	bench_store_options(&o, &m, a->n_stripes, a->segment_bytes,
			    a->capacity_bytes);
	o.media = media;
	if (media != KVF_MEDIA_FILE)
		return kvf_open(c->store_dir, &o, out);
	return bench_open_direct(c->store_dir, &o, out, &c->direct_io);
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
	int fd = bench_plain_create("optim", c->plain_path, bytes,
				    &c->plain_direct);

	if (fd < 0)
		return -1;
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
int optim_small_check(struct optim_ctx *c)
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
int optim_measure_kind(struct optim_ctx *c, kvf_media_kind media,
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


int optim_setup(struct optim_ctx *c)
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
uint64_t optim_default_capacity(const struct optim_ctx *c)
{
	const struct optim_args *a = c->a;
	uint64_t seg = a->segment_bytes * a->n_stripes;
	uint64_t need = c->state_bytes * 3 / 4 * 5 + 16 * seg;

	return (need + seg - 1) / seg * seg;
}
