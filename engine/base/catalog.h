/*
 * catalog.h - the store's metadata in an embedded RocksDB: a small
 * key/value interface with atomic write batches and prefix scans.
 *
 * The only module that sees RocksDB.  Keys and values are opaque bytes
 * here; their layout is the business of the callers (see engine/base/meta.h).
 *
 * Concurrency: every call may run from many threads, except that
 * catalog_close must not overlap any other call.  A batch belongs to one
 * thread until it is committed or freed.
 */
#ifndef KVF_ENGINE_CATALOG_H
#define KVF_ENGINE_CATALOG_H

#include <stddef.h>

#include "kvflash.h"

struct catalog;
struct catalog_batch;

/*
 * catalog_open - open the RocksDB in dir; create it when `create`.
 * read_only opens without taking the write lock or changing anything.
 * durability: what the store's media needs of the catalog.  Commits asked
 * to sync fsync only with CATALOG_FSYNC (files and devices); the flash
 * emulator's catalog outlives a handle only within the process
 * (CATALOG_NO_FSYNC), and a memory store's not at all (CATALOG_VOLATILE:
 * no write-ahead log either).
 * Return: KVF_OK; KVF_ENOENT (missing and not create), KVF_EBUSY (locked
 * by another process), KVF_ECORRUPT, KVF_EIO, KVF_ENOMEM; the message
 * carries RocksDB's own.
 */
enum catalog_durability { CATALOG_VOLATILE, CATALOG_NO_FSYNC, CATALOG_FSYNC };
kvf_status catalog_open(const char *dir, int create, int read_only,
			enum catalog_durability durability, struct catalog **out);
void catalog_close(struct catalog *c);

/* catalog_get - the value of key into a kvf_malloc'd buffer (*val, *vlen);
 * KVF_ENOENT when absent. */
kvf_status catalog_get(struct catalog *c, const void *key, size_t klen,
		       void **val, size_t *vlen);

/* catalog_visit_fn - called per entry of a scan; nonzero stops the scan
 * and becomes catalog_scan's result (a kvf_status). */
typedef int (*catalog_visit_fn)(void *arg, const void *key, size_t klen,
				const void *val, size_t vlen);

/* catalog_scan - visit every key that starts with prefix, in key order. */
kvf_status catalog_scan(struct catalog *c, const void *prefix, size_t plen,
			catalog_visit_fn fn, void *arg);

/* Batches: every put and delete of one batch commits atomically. */
struct catalog_batch *catalog_batch_new(void);
void catalog_batch_put(struct catalog_batch *b, const void *key, size_t klen,
		       const void *val, size_t vlen);
void catalog_batch_delete(struct catalog_batch *b, const void *key,
			  size_t klen);
size_t catalog_batch_count(const struct catalog_batch *b);
void catalog_batch_free(struct catalog_batch *b);
/* catalog_batch_clear - empty b for reuse */
void catalog_batch_clear(struct catalog_batch *b);

/*
 * catalog_commit - apply the batch atomically; with `sync` the write-ahead
 * log is on stable storage before it returns.  The batch stays the
 * caller's.  Return: KVF_OK or KVF_EIO (message has RocksDB's).
 */
kvf_status catalog_commit(struct catalog *c, struct catalog_batch *b,
			  int sync);

/* catalog_bytes_written - bytes handed to RocksDB in batches so far. */
unsigned long long catalog_bytes_written(const struct catalog *c);

/* catalog_salvage - RocksDB's RepairDB over the catalog at dir: every
 * record its files still hold whole is kept (damaged ones are dropped,
 * and the files they were in are moved to dir/lost).  The catalog must
 * not be open. */
kvf_status catalog_salvage(const char *dir);

/* catalog_fail_commits - tests: the next n commits fail with KVF_EIO. */
void catalog_fail_commits(struct catalog *c, unsigned n);

/*
 * catalog_durable_hook - tests: when set, called with the catalog's
 * directory after every commit whose write-ahead log reached stable
 * storage (sync with CATALOG_FSYNC), from the committing thread.  The
 * power-cut tests note there how much of the log a cut must keep.
 */
extern void (*catalog_durable_hook)(const char *dir);

#endif /* KVF_ENGINE_CATALOG_H */
