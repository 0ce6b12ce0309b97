/*
 * bench_endurance_rocks.c - RocksDB as a baseline of `kvbench endurance`,
 * through its C API: one key per (sequence, layer, KV head, block of 16
 * tokens), the value that block's K and V; WAL on; default options, and a
 * tuned set.  Its files go through the file system model by polling the
 * directory after every step: RocksDB's files only grow and are deleted
 * whole.  (The one file of bench/ that includes <rocksdb/c.h>, as
 * engine/base/catalog.c is in the engine: tests/check-layers.sh.)
 */
#include <errno.h>
#include <rocksdb/c.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_endurance_int.h"

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
				const void *d = end_kv_data(s, seq, l * 4096u + h,
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

/* rocks_train - the state of one step written back: a key per 64 KiB
 * chunk of params, m and v, then the WAL synced (the step is durable,
 * as kvf_opt_step's is) */
static int rocks_train(struct end_sys *s)
{
	struct rocks_impl *r = s->impl;
	uint64_t bytes = 4 * s->a->train_params, chunk = 64u << 10;
	unsigned char key[20];
	char *err = NULL;

	for (uint32_t state = 0; state < 3; state++) {
		rocksdb_writebatch_t *wb = rocksdb_writebatch_create();

		if (wb == NULL)
			return end_sys_fail(s, "out of memory");
		for (uint64_t off = 0; off < bytes; off += chunk) {
			uint64_t n = bytes - off < chunk ? bytes - off : chunk;

			rocks_key(key, UINT64_MAX, state, 0, (uint32_t)(off / chunk));
			rocksdb_writebatch_put(wb, (const char *)key, sizeof(key),
					       end_kv_data(s, off, state, 0, n), n);
		}
		rocksdb_write(r->db, r->wo, wb, &err);
		rocksdb_writebatch_destroy(wb);
		if (err) {
			end_sys_fail(s, "rocksdb_write: %s", err);
			free(err);
			return -1;
		}
	}
	return rocks_sync(s);
}

const struct end_sys_ops end_ops_rocks = {
	.name = "rocksdb", .open = rocks_open, .append = rocks_append,
	.end_seq = rocks_end, .step = rocks_step, .sync = rocks_sync,
	.close = rocks_close, .train_step = rocks_train,
};

const struct end_sys_ops end_ops_rocks_tuned = {
	.name = "rocksdb-tuned", .open = rocks_open_tuned,
	.append = rocks_append, .end_seq = rocks_end, .step = rocks_step,
	.sync = rocks_sync, .close = rocks_close, .train_step = rocks_train,
};

