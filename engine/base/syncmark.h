/*
 * syncmark.h - the durable-point mark: a small file beside the catalog
 * (DIR/SYNCED) that says how many durable points (kvf_sync, optimizer
 * steps, cleaning passes) the store has completed.
 *
 * Why: the catalog's write-ahead log is replayed by RocksDB up to its
 * first damaged record, and the records after it are dropped without an
 * error.  A catalog that comes back with fewer durable points than the mark
 * lost synced records, and open refuses it (KVF_ECORRUPT) instead of
 * rolling the store back silently.  The mark is written after each point's
 * catalog commit is on stable storage, so the catalog is never behind it
 * unless records were lost.
 *
 * On media: two 64-byte slots, at byte 0 and byte 4096; point n goes to
 * slot n % 2, so a torn write leaves the other slot whole.
 *   OFFSET SIZE FIELD
 *   0      8    magic "KVFSYNC1"
 *   8      8    store_id
 *   16     8    n_points   durable points completed
 *   24     8    seqno      the last point's seqno
 *   32     8    n_syncs    kvf_sync calls among the points
 *   40     16   reserved   zero
 *   56     8    checksum   XXH3-64 of bytes 0..55
 *
 * Kept only for stores whose catalog is synced (file media): a memory
 * store's catalog has no log to lose.
 * Locking: syncmark_write is called under the store's dur.lock.
 */
#ifndef KVF_ENGINE_SYNCMARK_H
#define KVF_ENGINE_SYNCMARK_H

#include <stdint.h>

#include "kvflash.h"

#define SYNCMARK_FILE "SYNCED"

struct syncmark {
	uint64_t n_points; /* durable points completed */
	uint64_t seqno;    /* seqno of the last one */
	uint64_t n_syncs;  /* kvf_sync calls among them */
};

/* syncmark_open - open (create = make, at point 0) DIR/SYNCED into *fd */
kvf_status syncmark_open(const char *dir, int create, int read_only,
			 uint64_t store_id, int *fd);

/* syncmark_read - the newest whole slot of fd; KVF_ECORRUPT naming path
 * when neither slot is whole */
kvf_status syncmark_read(int fd, const char *path, uint64_t store_id,
			 struct syncmark *out);

/* syncmark_write - record point m (after its catalog commit is durable) */
kvf_status syncmark_write(int fd, const char *path, uint64_t store_id,
			  const struct syncmark *m);

#endif /* KVF_ENGINE_SYNCMARK_H */
