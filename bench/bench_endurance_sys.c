/*
 * bench_endurance_sys.c - the systems of `kvbench endurance` that keep
 * their own files: kvflash (a file store; its block trace from the media
 * seam, kvf_media_trace_hook, and its catalog's files through the file
 * system model) and RocksDB through its C API (one key per (sequence,
 * layer, KV head, block of 16 tokens), WAL on, default options and a
 * tuned set; its files through the file system model by polling the
 * directory: RocksDB's files only grow and are deleted whole).
 */
#include <errno.h>
#include <rocksdb/c.h>
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

/* kv_data - n bytes of test data for (seq, layer, t0) from the pool */
static const void *kv_data(const struct end_sys *s, uint64_t seq,
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

static int kvf_open_sys(struct end_sys *s)
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
	(void)a->admit_tokens; /* see docs/endurance.md, "Admission" */
	traced = s;
	kvf_media_trace_hook = media_hook;
	if ((rc = kvf_open(s->dir, &o, &k->st)) != KVF_OK)
		return end_sys_fail(s, "kvf_open: %s", kvf_last_error());
	snprintf(k->meta, sizeof(k->meta), "%s/meta", s->dir);
	if ((k->mark = fsm_create(&s->fs, "")) < 0)
		return end_sys_fail(s, "out of memory");
	return 0;
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
		const unsigned char *kv = kv_data(s, seq, l, s->tokens[seq], 2 * half);

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
	(void)s;
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
	if (k->st) {
		if (kvf_stats_get(k->st, &st) == KVF_OK) {
			s->host_bytes = st.host_bytes_written + st.metadata_bytes;
			s->dram_peak = st.dram_peak;
			s->padding_bytes = st.padding_bytes;
			s->cleaner_bytes = st.cleaner_bytes;
		}
		if (kvf_close(k->st) != KVF_OK)
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
	.close = kvf_close_sys,
};

/* ---- RocksDB ---- */

struct rocks_impl {
	rocksdb_t *db;
	rocksdb_options_t *opts;
	rocksdb_writeoptions_t *wo;
	char path[600];
	unsigned char *val;    /* one value: K and V of one head's block */
};

/* key - (seq, layer, head, block), big-endian so a sequence is a range */
static void rocks_key(unsigned char *k, uint64_t seq, uint32_t layer,
		      uint32_t head, uint32_t block)
{
	for (int i = 0; i < 8; i++)
		k[i] = (unsigned char)(seq >> (56 - 8 * i));
	for (int i = 0; i < 4; i++) {
		k[8 + i] = (unsigned char)(layer >> (24 - 8 * i));
		k[12 + i] = (unsigned char)(head >> (24 - 8 * i));
		k[16 + i] = (unsigned char)(block >> (24 - 8 * i));
	}
}

static int rocks_open_with(struct end_sys *s, int tuned)
{
	struct rocks_impl *r = calloc(1, sizeof(*r));
	const kvf_model *m = &s->a->model;
	char *err = NULL;

	if (r == NULL)
		return end_sys_fail(s, "out of memory");
	s->impl = r;
	if (fsm_init(&s->fs, &s->tr, 0, s->tr.n_lpn))
		return end_sys_fail(s, "out of memory");
	r->val = malloc((size_t)END_BLOCK_TOKENS * m->head_dim * 2u * 2u);
	r->opts = rocksdb_options_create();
	r->wo = rocksdb_writeoptions_create(); /* WAL on, no sync a write */
	if (r->val == NULL || r->opts == NULL || r->wo == NULL)
		return end_sys_fail(s, "out of memory");
	rocksdb_options_set_create_if_missing(r->opts, 1);
	if (tuned) {
		/* for large values that die in bulk: values in blob files
		 * (key-value separation: compactions move keys only), blob
		 * GC, no compression (f16 K/V does not compress), large
		 * memtables, dynamic level sizes, two background jobs */
		rocksdb_options_set_enable_blob_files(r->opts, 1);
		rocksdb_options_set_min_blob_size(r->opts, 1024);
		rocksdb_options_set_enable_blob_gc(r->opts, 1);
		rocksdb_options_set_compression(r->opts, rocksdb_no_compression);
		rocksdb_options_set_write_buffer_size(r->opts, 128u << 20);
		rocksdb_options_set_max_write_buffer_number(r->opts, 4);
		rocksdb_options_set_level_compaction_dynamic_level_bytes(r->opts, 1);
		rocksdb_options_increase_parallelism(r->opts, 2);
	}
	snprintf(r->path, sizeof(r->path), "%s/db", s->dir);
	r->db = rocksdb_open(r->opts, r->path, &err);
	if (err) {
		end_sys_fail(s, "rocksdb_open %s: %s", r->path, err);
		free(err);
		return -1;
	}
	return 0;
}

static int rocks_open(struct end_sys *s)
{
	return rocks_open_with(s, 0);
}

static int rocks_open_tuned(struct end_sys *s)
{
	return rocks_open_with(s, 1);
}

static int rocks_append(struct end_sys *s, uint64_t seq, uint32_t n)
{
	struct rocks_impl *r = s->impl;
	const kvf_model *m = &s->a->model;
	uint64_t t0 = s->tokens[seq], t1 = t0 + n;
	size_t half = (size_t)END_BLOCK_TOKENS * m->head_dim * 2u;
	rocksdb_writebatch_t *wb;
	unsigned char key[20];
	char *err = NULL;

	/* a block goes in once its 16 tokens are there (the partial one
	 * waits in DRAM, as kvflash's group buffers do) */
	if (t1 / END_BLOCK_TOKENS == t0 / END_BLOCK_TOKENS)
		return 0;
	if ((wb = rocksdb_writebatch_create()) == NULL)
		return end_sys_fail(s, "out of memory");
	for (uint64_t b = t0 / END_BLOCK_TOKENS; b < t1 / END_BLOCK_TOKENS; b++)
		for (uint32_t l = 0; l < m->n_layers; l++)
			for (uint32_t h = 0; h < m->n_kv_heads; h++) {
				const void *d = kv_data(s, seq, l * 4096u + h,
							b, 2 * half);

				rocks_key(key, seq, l, h, (uint32_t)b);
				rocksdb_writebatch_put(wb, (const char *)key,
						       sizeof(key), d, 2 * half);
			}
	rocksdb_write(r->db, r->wo, wb, &err);
	rocksdb_writebatch_destroy(wb);
	if (err) {
		end_sys_fail(s, "rocksdb_write: %s", err);
		free(err);
		return -1;
	}
	return 0;
}

static int rocks_end(struct end_sys *s, uint64_t seq)
{
	struct rocks_impl *r = s->impl;
	unsigned char k0[20], k1[20];
	rocksdb_writebatch_t *wb;
	char *err = NULL;

	rocks_key(k0, seq, 0, 0, 0);
	rocks_key(k1, seq + 1, 0, 0, 0);
	if ((wb = rocksdb_writebatch_create()) == NULL)
		return end_sys_fail(s, "out of memory");
	rocksdb_writebatch_delete_range(wb, (const char *)k0, sizeof(k0),
					(const char *)k1, sizeof(k1));
	rocksdb_write(r->db, r->wo, wb, &err);
	rocksdb_writebatch_destroy(wb);
	if (err) {
		end_sys_fail(s, "rocksdb delete range: %s", err);
		free(err);
		return -1;
	}
	return 0;
}

/* not_wal - RocksDB syncs every file it writes as it finishes it (table
 * and blob files, the manifest); the WAL only when asked (a sync point) */
static int not_wal(const char *name)
{
	size_t n = strlen(name);

	return n < 4 || strcmp(name + n - 4, ".log") != 0;
}

static int rocks_step(struct end_sys *s)
{
	struct rocks_impl *r = s->impl;

	/* files grow and die between steps; the poll sees each step's */
	if (fsm_poll_dir(&s->fs, r->path, NULL))
		return end_sys_fail(s, "polling %s: %s", r->path, strerror(errno));
	if (fsm_flush_if(&s->fs, not_wal))
		return end_sys_fail(s, "the device is full (RocksDB's files outgrew it: lower --util)");
	return 0;
}

static int rocks_sync(struct end_sys *s)
{
	struct rocks_impl *r = s->impl;
	char *err = NULL;

	rocksdb_flush_wal(r->db, 1, &err);
	if (err) {
		end_sys_fail(s, "rocksdb_flush_wal: %s", err);
		free(err);
		return -1;
	}
	if (rocks_step(s))
		return -1;
	if (fsm_flush(&s->fs))
		return end_sys_fail(s, "the device is full (RocksDB's files outgrew it: lower --util)");
	return 0;
}

static int rocks_close(struct end_sys *s)
{
	struct rocks_impl *r = s->impl;
	int rc = 0;

	if (r == NULL)
		return -1;
	if (r->db) {
		rocksdb_close(r->db);
		r->db = NULL;
		if (s->error[0] == 0)
			rc = rocks_step(s);
		if (rc == 0 && fsm_flush(&s->fs))
			rc = end_sys_fail(s, "the device is full (RocksDB's files outgrew it: lower --util)");
	}
	if (r->wo)
		rocksdb_writeoptions_destroy(r->wo);
	if (r->opts)
		rocksdb_options_destroy(r->opts);
	free(r->val);
	free(r);
	s->impl = NULL;
	/* bytes handed to write calls by the whole process while it ran:
	 * RocksDB's threads write, nothing else does then */
	s->host_bytes = end_wchar() - s->wchar0;
	return rc;
}

const struct end_sys_ops end_ops_rocks = {
	.name = "rocksdb", .open = rocks_open, .append = rocks_append,
	.end_seq = rocks_end, .step = rocks_step, .sync = rocks_sync,
	.close = rocks_close,
};

const struct end_sys_ops end_ops_rocks_tuned = {
	.name = "rocksdb-tuned", .open = rocks_open_tuned,
	.append = rocks_append, .end_seq = rocks_end, .step = rocks_step,
	.sync = rocks_sync, .close = rocks_close,
};

const struct end_sys_ops *end_sys_ops(enum end_sys_kind k)
{
	static const struct end_sys_ops *const t[SYS_COUNT] = {
		&end_ops_kvflash, &end_ops_rocks, &end_ops_rocks_tuned,
		&end_ops_files, &end_ops_token,
	};

	return k < SYS_COUNT ? t[k] : NULL;
}
