/*
 * catalog.c - RocksDB behind the catalog interface.
 *
 * The only file that includes <rocksdb/c.h>.  RocksDB reports errors as a
 * malloc'd string through errptr; each is turned into a kvf_status with the
 * string in the message, then freed.  The database is tuned small: the
 * catalog holds metadata only (a few bytes per data page).
 */
#include "engine/base/catalog.h"

#include <rocksdb/c.h>
#include <stdatomic.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"

void (*catalog_durable_hook)(const char *dir);

#define CATALOG_WRITE_BUFFER (4u << 20) /* bytes of memtable before a flush */

struct catalog {
	rocksdb_t *db;
	char *dir;                           /* for catalog_durable_hook */
	int fsync;                           /* CATALOG_FSYNC */
	rocksdb_options_t *opts;
	rocksdb_writeoptions_t *wopts_async; /* no fsync of the WAL */
	rocksdb_writeoptions_t *wopts_sync;  /* fsync of the WAL */
	rocksdb_readoptions_t *ropts;
	_Atomic unsigned long long bytes_written; /* bytes in batches */
	_Atomic unsigned fail_commits;            /* tests: fail next n */
};

struct catalog_batch {
	rocksdb_writebatch_t *wb;
	size_t count;  /* puts and deletes */
	size_t bytes;  /* key and value bytes */
};

/* db_status - map a RocksDB error string to a status and free it */
static kvf_status db_status(char *err, const char *what, const char *dir)
{
	kvf_status st = KVF_EIO;

	if (strstr(err, "Corruption"))
		st = KVF_ECORRUPT;
	else if (strstr(err, "lock") || strstr(err, "Resource temporarily"))
		st = KVF_EBUSY;
	else if (strstr(err, "does not exist"))
		st = KVF_ENOENT;
	kvf_fail(st, "%s %s: %s", what, dir, err);
	rocksdb_free(err);
	return st;
}

kvf_status catalog_open(const char *dir, int create, int read_only,
			enum catalog_durability durability, struct catalog **out)
{
	struct catalog *c = kvf_calloc(1, sizeof(*c));
	char *err = NULL;

	if (c == NULL)
		return kvf_fail(KVF_ENOMEM, "catalog_open: out of memory");
	c->opts = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(c->opts, create);
	rocksdb_options_set_paranoid_checks(c->opts, 1);
	rocksdb_options_set_info_log_level(c->opts, 3 /* error */);
	rocksdb_options_set_keep_log_file_num(c->opts, 2);
	rocksdb_options_set_max_log_file_size(c->opts, 1 << 20);
	rocksdb_options_set_max_background_jobs(c->opts, 1);
	/* RocksDB preallocates each write-ahead log at 1.1 times the write
	 * buffer and the manifest at 4 MiB: with its defaults a new store of
	 * a few MiB took 75 MiB of disk (and a memtable that may grow to 64
	 * MiB).  The catalog is a few bytes per page: 4 MiB of buffer is
	 * thousands of segments' records between flushes. */
	rocksdb_options_set_write_buffer_size(c->opts, CATALOG_WRITE_BUFFER);
	rocksdb_options_set_manifest_preallocation_size(c->opts, 64 << 10);
	/* records are small binary structs: compression costs CPU on the
	 * append path and saves little */
	rocksdb_options_set_compression(c->opts, rocksdb_no_compression);
	if (read_only)
		c->db = rocksdb_open_for_read_only(c->opts, dir, 0, &err);
	else
		c->db = rocksdb_open(c->opts, dir, &err);
	if (err) {
		kvf_status st = db_status(err, "catalog: open", dir);

		rocksdb_options_destroy(c->opts);
		kvf_free(c);
		return st;
	}
	c->wopts_async = rocksdb_writeoptions_create();
	c->wopts_sync = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(c->wopts_sync, durability == CATALOG_FSYNC);
	if (durability == CATALOG_VOLATILE) {
		rocksdb_writeoptions_disable_WAL(c->wopts_sync, 1);
		rocksdb_writeoptions_disable_WAL(c->wopts_async, 1);
	}
	c->ropts = rocksdb_readoptions_create();
	c->fsync = durability == CATALOG_FSYNC;
	c->dir = kvf_malloc(strlen(dir) + 1);
	if (c->dir == NULL) {
		catalog_close(c);
		return kvf_fail(KVF_ENOMEM, "catalog_open: out of memory");
	}
	strcpy(c->dir, dir);
	*out = c;
	return KVF_OK;
}

void catalog_close(struct catalog *c)
{
	if (c == NULL)
		return;
	rocksdb_close(c->db);
	rocksdb_readoptions_destroy(c->ropts);
	rocksdb_writeoptions_destroy(c->wopts_sync);
	rocksdb_writeoptions_destroy(c->wopts_async);
	rocksdb_options_destroy(c->opts);
	kvf_free(c->dir);
	kvf_free(c);
}

kvf_status catalog_get(struct catalog *c, const void *key, size_t klen,
		       void **val, size_t *vlen)
{
	char *err = NULL;
	size_t len = 0;
	char *v = rocksdb_get(c->db, c->ropts, key, klen, &len, &err);
	void *copy;

	if (err)
		return db_status(err, "catalog: get", "");
	if (v == NULL)
		return KVF_ENOENT;
	copy = kvf_malloc(len);
	if (copy == NULL) {
		rocksdb_free(v);
		return kvf_fail(KVF_ENOMEM, "catalog_get: out of memory");
	}
	memcpy(copy, v, len);
	rocksdb_free(v);
	*val = copy;
	*vlen = len;
	return KVF_OK;
}

kvf_status catalog_scan(struct catalog *c, const void *prefix, size_t plen,
			catalog_visit_fn fn, void *arg)
{
	rocksdb_iterator_t *it = rocksdb_create_iterator(c->db, c->ropts);
	char *err = NULL;
	int rc = 0;

	for (rocksdb_iter_seek(it, prefix, plen); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		size_t klen, vlen;
		const char *k = rocksdb_iter_key(it, &klen);
		const char *v = rocksdb_iter_value(it, &vlen);

		if (klen < plen || memcmp(k, prefix, plen) != 0)
			break;
		if ((rc = fn(arg, k, klen, v, vlen)) != 0)
			break;
	}
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err)
		return db_status(err, "catalog: scan", "");
	return (kvf_status)rc;
}

struct catalog_batch *catalog_batch_new(void)
{
	struct catalog_batch *b = kvf_calloc(1, sizeof(*b));

	if (b)
		b->wb = rocksdb_writebatch_create();
	return b;
}

void catalog_batch_put(struct catalog_batch *b, const void *key, size_t klen,
		       const void *val, size_t vlen)
{
	rocksdb_writebatch_put(b->wb, key, klen, val, vlen);
	b->count++;
	b->bytes += klen + vlen;
}

void catalog_batch_delete(struct catalog_batch *b, const void *key,
			  size_t klen)
{
	rocksdb_writebatch_delete(b->wb, key, klen);
	b->count++;
	b->bytes += klen;
}

size_t catalog_batch_count(const struct catalog_batch *b)
{
	return b->count;
}

void catalog_batch_clear(struct catalog_batch *b)
{
	rocksdb_writebatch_clear(b->wb);
	b->count = 0;
	b->bytes = 0;
}

void catalog_batch_free(struct catalog_batch *b)
{
	if (b == NULL)
		return;
	rocksdb_writebatch_destroy(b->wb);
	kvf_free(b);
}

kvf_status catalog_commit(struct catalog *c, struct catalog_batch *b, int sync)
{
	unsigned n = atomic_load(&c->fail_commits);
	char *err = NULL;

	while (n > 0 && !atomic_compare_exchange_weak(&c->fail_commits, &n, n - 1))
		;
	if (n > 0)
		return kvf_fail(KVF_EIO, "catalog: commit of %zu entries: injected failure",
				b->count);
	rocksdb_write(c->db, sync ? c->wopts_sync : c->wopts_async, b->wb, &err);
	if (err)
		return db_status(err, "catalog: commit", "");
	atomic_fetch_add(&c->bytes_written, b->bytes);
	if (sync && c->fsync && catalog_durable_hook)
		catalog_durable_hook(c->dir);
	return KVF_OK;
}

unsigned long long catalog_bytes_written(const struct catalog *c)
{
	return atomic_load(&((struct catalog *)c)->bytes_written);
}

kvf_status catalog_salvage(const char *dir)
{
	rocksdb_options_t *o = rocksdb_options_create();
	char *err = NULL;

	rocksdb_options_set_info_log_level(o, 3 /* error */);
	rocksdb_options_set_compression(o, rocksdb_no_compression);
	rocksdb_repair_db(o, dir, &err);
	rocksdb_options_destroy(o);
	if (err)
		return db_status(err, "catalog: repair", dir);
	return KVF_OK;
}

void catalog_fail_commits(struct catalog *c, unsigned n)
{
	atomic_store(&c->fail_commits, n);
}
