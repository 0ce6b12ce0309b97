/*
 * bench_endurance_sys.c - kvflash as a system of `kvbench endurance` (a
 * file store; its block trace from the media seam, kvf_media_trace_hook,
 * and its catalog's files through the file system model), the helpers
 * the systems share, and the table of systems.  RocksDB is in
 * bench_endurance_rocks.c, the files in bench_endurance_files.c.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/bench_common.h"
#include "bench/bench_endurance_int.h"
#include "ftl/media.h"

/* ---- shared helpers ---- */

int end_sys_fail(struct end_sys *s, const char *fmt, ...)
{
	va_list ap;

	if (s->error[0])
		return -1; /* the first reason stays */
	va_start(ap, fmt);
	vsnprintf(s->error, sizeof(s->error), fmt, ap);
	va_end(ap);
	return -1;
}

uint64_t end_token_layer_bytes(const kvf_model *m)
{
	return 2ull * m->n_kv_heads * m->head_dim * 2u; /* K and V, f16 */
}

uint64_t end_wchar(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	char line[128];
	unsigned long long v = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "wchar: %llu", &v) == 1)
			break;
	fclose(f);
	return v;
}

const void *end_kv_data(const struct end_sys *s, uint64_t seq,
			   uint32_t layer, uint64_t t0, size_t n)
{
	uint64_t room = s->pool_bytes - n;
	uint64_t off = bench_mix64(seq * 1315423911u + layer * 2654435761u + t0) %
		       (room + 1);

	return s->pool + (off & ~(uint64_t)63);
}

/* ---- kvflash ---- */

struct kvf_impl {
	kvf_store *st;
	uint64_t media_pages;  /* the media's region of the device */
	char meta[600];        /* the catalog's directory */
	long mark;             /* the durable-point mark, in the fs model */
	kvf_opt *opt;          /* train: the optimizer, made at its first step */
	float *grad;           /* train: the gradient every step hands over */
};

static struct end_sys *traced; /* the kvflash run the hook feeds */

static void media_hook(const struct kvf_media *m, enum kvf_media_trace_op op,
		       uint32_t stripe, uint64_t seg, uint32_t page,
		       uint32_t n_pages)
{
	uint64_t lpn = (stripe * m->geo.segs_per_stripe + seg) *
		       m->geo.pages_per_segment + page;

	if (traced == NULL || m->geo.page_size != END_PAGE)
		return;
	end_trace_add(&traced->tr, op == KVF_MEDIA_TRACE_WRITE ? TR_WRITE : TR_TRIM,
		      lpn, n_pages);
}

static int kvf_open_with(struct end_sys *s, uint64_t admit_tokens)
{
	const struct end_args *a = s->a;
	struct kvf_impl *k = calloc(1, sizeof(*k));
	uint64_t seg = (uint64_t)a->block_pages * END_PAGE;
	kvf_options o;
	kvf_status rc;

	if (k == NULL)
		return end_sys_fail(s, "out of memory");
	s->impl = k;
	/* a sixteenth of the device for the catalog's files, the rest is
	 * the media (whole segments) */
	k->media_pages = (s->tr.n_lpn - s->tr.n_lpn / 16) / a->block_pages *
			 a->block_pages;
	if (fsm_init(&s->fs, &s->tr, k->media_pages, s->tr.n_lpn - k->media_pages))
		return end_sys_fail(s, "out of memory");
	kvf_options_init(&o, &a->model);
	o.media = KVF_MEDIA_FILE;
	o.segment_size = seg;
	o.capacity_bytes = k->media_pages * END_PAGE;
	o.n_stripes = 1;
	o.n_threads = 1;
	o.trim = 1; /* the SSD is told what died, as fstrim/discard would */
	o.direct_io = 0;
	o.dram_budget = a->dram_budget;
	o.admit_tokens = admit_tokens;
	o.codec = s->codec;
	traced = s;
	kvf_media_trace_hook = media_hook;
	if ((rc = kvf_open(s->dir, &o, &k->st)) != KVF_OK)
		return end_sys_fail(s, "kvf_open: %s", kvf_last_error());
	snprintf(k->meta, sizeof(k->meta), "%s/meta", s->dir);
	if ((k->mark = fsm_create(&s->fs, "")) < 0)
		return end_sys_fail(s, "out of memory");
	return 0;
}

static int kvf_open_sys(struct end_sys *s)
{
	return kvf_open_with(s, 0);
}

static int kvf_open_admit(struct end_sys *s)
{
	return kvf_open_with(s, s->a->admit_tokens);
}

static int kvf_append_sys(struct end_sys *s, uint64_t seq, uint32_t n)
{
	struct kvf_impl *k = s->impl;
	const kvf_model *m = &s->a->model;
	size_t half = (size_t)n * m->n_kv_heads * m->head_dim * 2u;
	kvf_status rc;

	if (s->tokens[seq] == 0 && (rc = kvf_seq_create(k->st, seq)) != KVF_OK)
		return end_sys_fail(s, "kvf_seq_create: %s", kvf_last_error());
	for (uint32_t l = 0; l < m->n_layers; l++) {
		const unsigned char *kv = end_kv_data(s, seq, l, s->tokens[seq], 2 * half);

		rc = kvf_append(k->st, seq, l, n, kv, kv + half);
		if (rc != KVF_OK)
			return end_sys_fail(s, "kvf_append: %s", kvf_last_error());
	}
	return 0;
}

static int kvf_end_sys(struct end_sys *s, uint64_t seq)
{
	struct kvf_impl *k = s->impl;

	if (kvf_seq_free(k->st, seq) != KVF_OK)
		return end_sys_fail(s, "kvf_seq_free: %s", kvf_last_error());
	return 0;
}

static int kvf_step_sys(struct end_sys *s)
{
	struct kvf_impl *k = s->impl;
	kvf_stats st = { .struct_size = sizeof(st) };

	/* the DRAM that waiting pages (write-back, admission) cost */
	if (kvf_stats_get(k->st, &st) != KVF_OK)
		return end_sys_fail(s, "kvf_stats_get: %s", kvf_last_error());
	if (st.writeback_bytes > s->wait_peak)
		s->wait_peak = st.writeback_bytes;
	return 0;
}

/* end_train_grad - a fixed gradient of n small finite values (malloc'd) */
float *end_train_grad(uint64_t n)
{
	float *g = malloc(n * sizeof(*g));
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (uint64_t i = 0; g && i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		g[i] = ((float)(x >> 40) / 16777216.0f - 0.5f) * 1e-3f;
	}
	return g;
}

static int kvf_train_sys(struct end_sys *s)
{
	struct kvf_impl *k = s->impl;
	uint64_t n = s->a->train_params;
	kvf_grad g = { .dtype = KVF_DTYPE_F32, .n = n };

	if (k->opt == NULL) {
		kvf_opt_config c;

		kvf_opt_config_init(&c, KVF_OPT_ADAM);
		if ((k->grad = end_train_grad(n)) == NULL)
			return end_sys_fail(s, "out of memory");
		if (kvf_opt_create(k->st, "endurance", n, &c, NULL, &k->opt) != KVF_OK)
			return end_sys_fail(s, "kvf_opt_create: %s", kvf_last_error());
	}
	g.values = k->grad;
	if (kvf_opt_step(k->opt, &g, NULL) != KVF_OK)
		return end_sys_fail(s, "kvf_opt_step: %s", kvf_last_error());
	return 0;
}

static int meta_skip(const char *name)
{
	(void)name;
	return 0;
}

static int kvf_sync_sys(struct end_sys *s)
{
	struct kvf_impl *k = s->impl;
	char p[700];
	struct stat sb;

	if (kvf_sync(k->st) != KVF_OK)
		return end_sys_fail(s, "kvf_sync: %s", kvf_last_error());
	/* the catalog's files as they grew, and the mark rewritten in place */
	snprintf(p, sizeof(p), "%s/SYNCMARK", s->dir);
	if (stat(p, &sb) == 0 && fsm_write(&s->fs, k->mark, 0, (uint64_t)sb.st_size))
		return end_sys_fail(s, "out of memory");
	if (fsm_poll_dir(&s->fs, k->meta, meta_skip) || fsm_flush(&s->fs))
		return end_sys_fail(s, "the catalog's region of the device is full");
	return 0;
}

static int kvf_close_sys(struct end_sys *s)
{
	struct kvf_impl *k = s->impl;
	kvf_stats st = { .struct_size = sizeof(st) };
	int rc = 0;

	if (k == NULL)
		return -1;
	if (k->opt && kvf_opt_close(k->opt) != KVF_OK)
		rc = end_sys_fail(s, "kvf_opt_close: %s", kvf_last_error());
	free(k->grad);
	if (k->st) {
		if (kvf_stats_get(k->st, &st) == KVF_OK) {
			s->host_bytes = st.host_bytes_written + st.metadata_bytes;
			s->dram_peak = st.dram_peak;
			s->dram_only = st.dram_only_bytes;
			s->data_bytes = st.data_bytes;
			s->padding_bytes = st.padding_bytes;
			s->cleaner_bytes = st.cleaner_bytes;
		}
		if (kvf_close(k->st) != KVF_OK && rc == 0)
			rc = end_sys_fail(s, "kvf_close: %s", kvf_last_error());
		k->st = NULL;
		if (rc == 0 && (fsm_poll_dir(&s->fs, k->meta, meta_skip) ||
				fsm_flush(&s->fs)))
			rc = end_sys_fail(s, "the catalog's region of the device is full");
	}
	kvf_media_trace_hook = NULL;
	traced = NULL;
	free(k);
	s->impl = NULL;
	return rc;
}

const struct end_sys_ops end_ops_kvflash = {
	.name = "kvflash", .open = kvf_open_sys, .append = kvf_append_sys,
	.end_seq = kvf_end_sys, .step = kvf_step_sys, .sync = kvf_sync_sys,
	.close = kvf_close_sys, .train_step = kvf_train_sys,
};

const struct end_sys_ops end_ops_kvflash_admit = {
	.name = "kvflash-admit", .open = kvf_open_admit,
	.append = kvf_append_sys, .end_seq = kvf_end_sys, .step = kvf_step_sys,
	.sync = kvf_sync_sys, .close = kvf_close_sys,
};

int end_sys_kvflash(enum end_sys_kind k)
{
	return k == SYS_KVFLASH || k == SYS_KVFLASH_ADMIT;
}

void end_sys_name(enum end_sys_kind k, kvf_codec c, char *buf, size_t cap)
{
	const struct end_sys_ops *ops = end_sys_ops(k);

	if (end_sys_kvflash(k) && c != KVF_CODEC_NONE)
		snprintf(buf, cap, "%s-%s", ops->name, kvf_codec_name(c));
	else
		snprintf(buf, cap, "%s", ops ? ops->name : "?");
}

const struct end_sys_ops *end_sys_ops(enum end_sys_kind k)
{
	static const struct end_sys_ops *const t[SYS_COUNT] = {
		&end_ops_kvflash, &end_ops_rocks, &end_ops_rocks_tuned,
		&end_ops_files, &end_ops_token, &end_ops_kvflash_admit,
	};

	return k < SYS_COUNT ? t[k] : NULL;
}
