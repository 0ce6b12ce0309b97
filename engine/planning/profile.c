/*
 * profile.c - kvf_profile_run and kvf_profile_get: the store's measured
 * rates, kept in DIR/PROFILE for the planners (compute/plan.c).
 *
 * The measurement runs on a scratch sequence in layer 0 holding n random
 * tokens of K, V and X, made durable first so every read goes through the
 * media path: the DRAM tier is emptied, every KV head is read (cold), read
 * again (warm), SparF attention runs cold and warm when the store keeps
 * K^T pages, dense attention runs warm, X is read cold (its bandwidth, and
 * the latency of one token of it), and kvf_attend_x's path runs with
 * weights of the profile's own (the near-data recomputation rate).  Each warm
 * figure is the best of three runs, the latency the median of three.
 *
 * DIR/PROFILE (120 bytes, little-endian, replaced atomically: temp file,
 * fsync, rename):
 *	OFFSET SIZE FIELD
 *	0      8    magic "KVFPROF\0"
 *	8      4    format version (PROFILE_VERSION)
 *	12     4    fields that follow (PROFILE_FIELDS)
 *	16     80   ten doubles: caller_flops, link_bytes_per_s,
 *	            read_cold, read_warm, sparf_cold, sparf_warm,
 *	            attend_tokens_per_s, store_flops, read_x, x_latency_s
 *	96     16   two uint64: profile_tokens, measured_unix_s
 *	112    8    XXH3-64 of bytes [0, 112)
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/half.h"
#include "engine/base/fatal.h"
#include "engine/planning/recompute.h"
#include "engine/base/store_int.h"
#include "engine/base/store_state.h"
#include "engine/base/tier.h"

#define PROFILE_FILE "PROFILE"
#define PROFILE_MAGIC "KVFPROF"
#define PROFILE_VERSION 1u
#define PROFILE_FIELDS 12u
#define PROFILE_BYTES 120u
#define PROFILE_SUM_AT 112u
#define PROFILE_DEFAULT_TOKENS 4096u
#define PROFILE_MAX_TOKENS (1u << 20)
#define CHUNK 256u /* tokens appended or projected at a time */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the file ------------------------------------------------------------ */

static void encode(const kvf_profile *p, unsigned char *b)
{
	double d[10] = { p->caller_flops, p->link_bytes_per_s,
			 p->read_cold_bytes_per_s, p->read_warm_bytes_per_s,
			 p->sparf_cold_bytes_per_s, p->sparf_warm_bytes_per_s,
			 p->attend_tokens_per_s, p->store_flops,
			 p->read_x_bytes_per_s, p->x_latency_s };
	uint64_t u[2] = { p->profile_tokens, p->measured_unix_s };
	uint32_t v = PROFILE_VERSION, n = PROFILE_FIELDS;
	uint64_t sum;

	memset(b, 0, PROFILE_BYTES);
	memcpy(b, PROFILE_MAGIC, sizeof(PROFILE_MAGIC));
	memcpy(b + 8, &v, 4);
	memcpy(b + 12, &n, 4);
	memcpy(b + 16, d, sizeof(d));
	memcpy(b + 96, u, sizeof(u));
	sum = XXH3_64bits(b, PROFILE_SUM_AT);
	memcpy(b + PROFILE_SUM_AT, &sum, 8);
}

static kvf_status decode(const unsigned char *b, size_t n, const char *path,
			 kvf_profile *p)
{
	const char *call = "kvf_profile_get";
	uint64_t sum, u[2];
	uint32_t v, nf;
	double d[10];

	if (n != PROFILE_BYTES || memcmp(b, PROFILE_MAGIC, sizeof(PROFILE_MAGIC)) != 0)
		return kvf_fail(KVF_ECORRUPT, "%s: %s is not a profile (%zu bytes%s)",
				call, path, n, n == PROFILE_BYTES ? ", bad magic" : "");
	memcpy(&sum, b + PROFILE_SUM_AT, 8);
	if (sum != XXH3_64bits(b, PROFILE_SUM_AT))
		return kvf_fail(KVF_ECORRUPT,
				"%s: %s fails its checksum (stored %016llx, computed %016llx)",
				call, path, (unsigned long long)sum,
				(unsigned long long)XXH3_64bits(b, PROFILE_SUM_AT));
	memcpy(&v, b + 8, 4);
	memcpy(&nf, b + 12, 4);
	if (v > PROFILE_VERSION)
		return kvf_fail(KVF_EVERSION, "%s: %s has format %u (this library reads %u)",
				call, path, v, PROFILE_VERSION);
	if (v != PROFILE_VERSION || nf != PROFILE_FIELDS)
		return kvf_fail(KVF_ECORRUPT, "%s: %s has format %u with %u fields",
				call, path, v, nf);
	memcpy(d, b + 16, sizeof(d));
	memcpy(u, b + 96, sizeof(u));
	p->caller_flops = d[0];
	p->link_bytes_per_s = d[1];
	p->read_cold_bytes_per_s = d[2];
	p->read_warm_bytes_per_s = d[3];
	p->sparf_cold_bytes_per_s = d[4];
	p->sparf_warm_bytes_per_s = d[5];
	p->attend_tokens_per_s = d[6];
	p->store_flops = d[7];
	p->read_x_bytes_per_s = d[8];
	p->x_latency_s = d[9];
	p->profile_tokens = u[0];
	p->measured_unix_s = u[1];
	return KVF_OK;
}

static kvf_status profile_write(kvf_store *st, const kvf_profile *p)
{
	char *path = store_path_join(st->dir, PROFILE_FILE);
	char *tmp = store_path_join(st->dir, PROFILE_FILE ".tmp");
	unsigned char b[PROFILE_BYTES];
	kvf_status rc = KVF_OK;
	int fd;

	if (path == NULL || tmp == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_profile_run: out of memory");
		goto out;
	}
	encode(p, b);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, b, sizeof(b)) != (ssize_t)sizeof(b) ||
	    fsync(fd) != 0 || rename(tmp, path) != 0) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		unlink(tmp);
		rc = kvf_fail_errno(KVF_EIO, err, "kvf_profile_run: writing %s", path);
		goto out;
	}
	close(fd);
	store_sync_dir(st->dir);
out:
	kvf_free(path);
	kvf_free(tmp);
	return rc;
}

kvf_status kvf_profile_get(kvf_store *st, kvf_profile *out)
{
	const char *call = "kvf_profile_get";
	unsigned char b[PROFILE_BYTES + 1];
	kvf_profile p;
	char *path;
	kvf_status rc;
	ssize_t n;
	int fd;

	if (st == NULL || out == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "out" : "store");
	if ((rc = kvf_struct_check(call, "out", out, sizeof(*out))) != KVF_OK)
		return rc;
	if (out->struct_size < sizeof(*out))
		return kvf_fail(KVF_EINVAL, "%s: out.struct_size %zu is smaller than %zu",
				call, out->struct_size, sizeof(*out));
	if ((path = store_path_join(st->dir, PROFILE_FILE)) == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = errno == ENOENT
			? kvf_fail(KVF_ENOENT, "%s: the store has no profile (%s; kvf_profile_run makes one)",
				   call, path)
			: kvf_fail_errno(KVF_EIO, errno, "%s: opening %s", call, path);
		kvf_free(path);
		return rc;
	}
	n = read(fd, b, sizeof(b));
	close(fd);
	if (n < 0)
		rc = kvf_fail_errno(KVF_EIO, errno, "%s: reading %s", call, path);
	else {
		kvf_profile_init(&p);
		rc = decode(b, (size_t)n, path, &p);
	}
	kvf_free(path);
	if (rc == KVF_OK) {
		p.struct_size = out->struct_size;
		*out = p;
	}
	return rc;
}

/* ---- the measurement ------------------------------------------------------ */

struct rng {
	uint64_t s;
};

static float rnd(struct rng *r)
{
	r->s ^= r->s << 13;
	r->s ^= r->s >> 7;
	r->s ^= r->s << 17;
	return (float)((r->s >> 40) * (1.0 / (1 << 24))) * 2.0f - 1.0f;
}

static void fill(void *buf, size_t n, kvf_dtype dt, struct rng *r)
{
	for (size_t i = 0; i < n; i++) {
		float f = rnd(r);

		if (dt == KVF_DTYPE_F32)
			((float *)buf)[i] = f;
		else if (dt == KVF_DTYPE_BF16)
			((uint16_t *)buf)[i] = kvf_f32_to_bf16(f);
		else
			((uint16_t *)buf)[i] = kvf_f32_to_f16(f);
	}
}

struct meas {
	kvf_store *st;
	uint64_t seq, n;
	uint32_t n_kv, nq, hd;
	size_t row;              /* bytes of one token of one head */
	unsigned char *kbuf, *vbuf; /* [n][head_dim] */
	float *q, *out;          /* [n_q][head_dim] */
};

static kvf_status fill_seq(struct meas *m)
{
	kvf_store *st = m->st;
	size_t kv_elts = (size_t)CHUNK * m->n_kv * m->hd;
	size_t x_elts = (size_t)CHUNK * m->nq * m->hd;
	void *k = kvf_malloc(kv_elts * st->elt_bytes);
	void *v = kvf_malloc(kv_elts * st->elt_bytes);
	void *x = kvf_malloc(x_elts * st->elt_bytes);
	struct rng r = { 0x9e3779b97f4a7c15ull };
	kvf_status rc = KVF_OK;

	if (!k || !v || !x) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_profile_run: out of memory");
		goto out;
	}
	for (uint64_t t = 0; t < m->n && rc == KVF_OK; t += CHUNK) {
		uint32_t c = (uint32_t)(m->n - t < CHUNK ? m->n - t : CHUNK);

		fill(k, (size_t)c * m->n_kv * m->hd, st->hdr.dtype, &r);
		fill(v, (size_t)c * m->n_kv * m->hd, st->hdr.dtype, &r);
		fill(x, (size_t)c * m->nq * m->hd, st->hdr.dtype, &r);
		if ((rc = kvf_append(st, m->seq, 0, c, k, v)) == KVF_OK)
			rc = kvf_append_x(st, m->seq, 0, c, x);
	}
	if (rc == KVF_OK)
		rc = kvf_sync(st);
out:
	kvf_free(k);
	kvf_free(v);
	kvf_free(x);
	return rc;
}

/* read_all - every head's K,V once; *bps = bytes per second */
static kvf_status read_all(struct meas *m, double *bps)
{
	double t0 = now_s(), dt;
	kvf_status rc = KVF_OK;

	for (uint32_t h = 0; h < m->n_kv && rc == KVF_OK; h++)
		rc = kvf_read(m->st, m->seq, 0, h, 0, m->n, m->kbuf, m->vbuf);
	dt = now_s() - t0;
	*bps = (double)m->n * m->n_kv * m->row * 2 / (dt > 1e-9 ? dt : 1e-9);
	return rc;
}

/* attend_once - one attention call's seconds and media bytes read */
static kvf_status attend_once(struct meas *m, uint32_t sparse, double *sec,
			      uint64_t *bytes)
{
	kvf_stats a = { .struct_size = sizeof(a) }, b = { .struct_size = sizeof(b) };
	kvf_attn_opts o;
	double t0;
	kvf_status rc;

	kvf_attn_opts_init(&o);
	o.sparse = sparse;
	kvf_stats_get(m->st, &a);
	t0 = now_s();
	rc = kvf_attend(m->st, m->seq, 0, m->q, m->out, &o);
	*sec = now_s() - t0;
	kvf_stats_get(m->st, &b);
	*bytes = b.attend_bytes_read - a.attend_bytes_read;
	return rc;
}

static double best3(double a, double b, double c)
{
	double x = a < b ? a : b;

	return x < c ? x : c;
}

static double median3(double a, double b, double c)
{
	return fmax(fmin(a, b), fmin(fmax(a, b), c));
}

/* measure_reads - cold: the median of three passes, each after the tier
 * was emptied (a single pass moves with whatever else the device does);
 * warm: the best of three passes after them */
static kvf_status measure_reads(struct meas *m, kvf_profile *p)
{
	double c[3], w[3];
	kvf_status rc = KVF_OK;

	for (int i = 0; i < 3 && rc == KVF_OK; i++) {
		tier_drop_all(m->st);
		rc = read_all(m, &c[i]);
	}
	for (int i = 0; i < 3 && rc == KVF_OK; i++)
		rc = read_all(m, &w[i]);
	if (rc != KVF_OK)
		return rc;
	p->read_cold_bytes_per_s = median3(c[0], c[1], c[2]);
	p->read_warm_bytes_per_s = fmax(w[0], fmax(w[1], w[2]));
	return KVF_OK;
}

static kvf_status measure_attention(struct meas *m, kvf_profile *p)
{
	double sec[3], cold;
	uint64_t bytes, ignored;
	kvf_status rc;

	if (m->st->kt_dims) {
		tier_drop_all(m->st);
		if ((rc = attend_once(m, 1, &cold, &bytes)) != KVF_OK)
			return rc;
		for (int i = 0; i < 3; i++)
			if ((rc = attend_once(m, 1, &sec[i], &ignored)) != KVF_OK)
				return rc;
		/* the warm runs read from the tier: the bytes are the cold
		 * run's, the pages SparF needs */
		p->sparf_cold_bytes_per_s = (double)bytes / (cold > 1e-9 ? cold : 1e-9);
		p->sparf_warm_bytes_per_s = (double)bytes /
			fmax(best3(sec[0], sec[1], sec[2]), 1e-9);
	}
	for (int i = 0; i < 3; i++)
		if ((rc = attend_once(m, 0, &sec[i], &ignored)) != KVF_OK)
			return rc;
	p->attend_tokens_per_s = (double)m->n / fmax(best3(sec[0], sec[1], sec[2]), 1e-9);
	return KVF_OK;
}

/* measure_x - X read cold: all of it (bandwidth), and one token
 * (latency), each the median of three after the tier was emptied */
static kvf_status measure_x(struct meas *m, kvf_profile *p)
{
	size_t row = (size_t)m->nq * m->hd * m->st->elt_bytes;
	unsigned char *x = kvf_malloc(m->n * row);
	double t0, bw[3], lat[3];
	kvf_status rc = KVF_OK;

	if (x == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_profile_run: out of memory");
	for (int i = 0; i < 3 && rc == KVF_OK; i++) {
		uint64_t t = m->n / 4 * (uint64_t)(i + 1);

		tier_drop_all(m->st);
		t0 = now_s();
		rc = kvf_read_x(m->st, m->seq, 0, 0, m->n, x);
		bw[i] = (double)m->n * row / fmax(now_s() - t0, 1e-9);
		tier_drop_all(m->st);
		t0 = now_s();
		if (rc == KVF_OK)
			rc = kvf_read_x(m->st, m->seq, 0, t, t + 1, x);
		lat[i] = now_s() - t0;
	}
	if (rc == KVF_OK) {
		p->read_x_bytes_per_s = median3(bw[0], bw[1], bw[2]);
		p->x_latency_s = median3(lat[0], lat[1], lat[2]);
	}
	kvf_free(x);
	return rc;
}

/* measure_recompute - the near-data path of kvf_attend_x as it runs (X
 * read, K,V projected with RoPE, attention folded), with random weights of
 * its own, over and over for at least 0.25 s: a rate sustained that long
 * includes the machine's other load, as the planned steps will */
static kvf_status measure_recompute(struct meas *m, kvf_profile *p)
{
	uint32_t d = m->nq * m->hd, cols = m->n_kv * m->hd;
	double per_tok = 4.0 * d * cols, t0, dt;
	uint64_t n = (uint64_t)(2e8 / per_tok) + 1, done = 0;
	float *w = kvf_malloc((size_t)d * cols * sizeof(float));
	struct layer_weights lw = { .rope_theta = m->hd % 2 ? 0.0f : 10000.0f };
	struct rng r = { 12345 };
	kvf_status rc = KVF_OK;

	if (n > m->n)
		n = m->n;
	if (w == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_profile_run: out of memory");
	fill(w, (size_t)d * cols, KVF_DTYPE_F32, &r);
	lw.w_k = lw.w_v = w;
	t0 = now_s();
	do {
		rc = recompute_attend_with(m->st, m->seq, 0, 0, n, m->q, m->out, &lw);
		done += n;
		dt = now_s() - t0;
	} while (rc == KVF_OK && dt < 0.25);
	if (rc == KVF_OK)
		p->store_flops = per_tok * (double)done / fmax(dt, 1e-9);
	kvf_free(w);
	return rc;
}

static kvf_status run_check(kvf_store *st, uint64_t n_tokens,
			    const kvf_profile *p)
{
	const char *call = "kvf_profile_run";
	const double rates[2] = { p->caller_flops, p->link_bytes_per_s };
	const char *names[2] = { "caller_flops", "link_bytes_per_s" };
	kvf_status rc;

	if ((rc = kvf_struct_check(call, "p", p, sizeof(*p))) != KVF_OK)
		return rc;
	if (p->struct_size < sizeof(*p))
		return kvf_fail(KVF_EINVAL, "%s: p.struct_size %zu is smaller than %zu",
				call, p->struct_size, sizeof(*p));
	for (int i = 0; i < 2; i++)
		if (!isfinite(rates[i]) || !(rates[i] > 0))
			return kvf_fail(KVF_EINVAL,
					"%s: p.%s %g must be a finite rate > 0 (the caller states it)",
					call, names[i], rates[i]);
	if (n_tokens > PROFILE_MAX_TOKENS)
		return kvf_fail(KVF_ERANGE, "%s: n_tokens %llu is past the limit %u",
				call, (unsigned long long)n_tokens, PROFILE_MAX_TOKENS);
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (st->read_only)
		return kvf_fail(KVF_ENOTSUP, "%s: the store is read-only", call);
	return KVF_OK;
}

kvf_status kvf_profile_run(kvf_store *st, uint64_t scratch_seq,
			   uint64_t n_tokens, kvf_profile *p)
{
	const char *call = "kvf_profile_run";
	struct meas m = { 0 };
	kvf_profile r;
	kvf_status rc;

	if (st == NULL || p == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "p" : "store");
	if ((rc = run_check(st, n_tokens, p)) != KVF_OK)
		return rc;
	if ((rc = kvf_seq_create(st, scratch_seq)) != KVF_OK)
		return kvf_fail_wrap(rc, "kvf_profile_run: scratch sequence");
	kvf_profile_init(&r);
	r.caller_flops = p->caller_flops;
	r.link_bytes_per_s = p->link_bytes_per_s;
	m = (struct meas){ .st = st, .seq = scratch_seq,
			   .n = n_tokens ? n_tokens : PROFILE_DEFAULT_TOKENS,
			   .n_kv = st->hdr.n_kv_heads, .nq = st->hdr.n_q_heads,
			   .hd = st->hdr.head_dim, .row = st->row_bytes };
	r.profile_tokens = m.n;
	m.kbuf = kvf_malloc(m.n * m.row);
	m.vbuf = kvf_malloc(m.n * m.row);
	m.q = kvf_malloc((size_t)m.nq * m.hd * sizeof(float));
	m.out = kvf_malloc((size_t)m.nq * m.hd * sizeof(float));
	if (!m.kbuf || !m.vbuf || !m.q || !m.out) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	{
		struct rng g = { 777 };

		fill(m.q, (size_t)m.nq * m.hd, KVF_DTYPE_F32, &g);
	}
	if ((rc = fill_seq(&m)) != KVF_OK ||
	    (rc = measure_reads(&m, &r)) != KVF_OK ||
	    (rc = measure_attention(&m, &r)) != KVF_OK ||
	    (rc = measure_x(&m, &r)) != KVF_OK ||
	    (rc = measure_recompute(&m, &r)) != KVF_OK)
		goto out;
	r.measured_unix_s = (uint64_t)time(NULL);
	rc = profile_write(st, &r);
out:
	if (rc != KVF_OK && strncmp(kvf_last_error(), call, strlen(call)) != 0)
		kvf_fail_wrap(rc, call);
	{
		char keep[KVF_ERRMSG_CAP];

		snprintf(keep, sizeof(keep), "%s", kvf_last_error());
		kvf_seq_free(st, scratch_seq);
		if (rc != KVF_OK)
			kvf_fail(rc, "%s", keep);
	}
	kvf_free(m.kbuf);
	kvf_free(m.vbuf);
	kvf_free(m.q);
	kvf_free(m.out);
	if (rc == KVF_OK) {
		r.struct_size = p->struct_size;
		*p = r;
	}
	return rc;
}
