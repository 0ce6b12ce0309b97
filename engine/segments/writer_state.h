/*
 * writer_state.h - the segment writer's state (owned by writer.c): its threads and
 * queue, the jobs it writes and their buffers, the spare buffers.
 */
#ifndef KVF_ENGINE_WRITER_STATE_H
#define KVF_ENGINE_WRITER_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/base/meta.h"
#include "engine/base/segfmt.h"

#define WRITER_THREADS 4 /* segment writes in flight at once (2 kept a
			  * file-store optimizer step waiting on its
			  * writes: 487 against 446 ms a step, means of
			  * six alternating runs) */

#define WRITER_MAX_INFLIGHT 8u /* jobs in flight per store */

struct segbuf;
struct seq;

/* The write of one filled segment; it lives in the segment's buffers. */
struct flush_job {
	struct segbuf *sb;       /* the segment's buffers */
	uint32_t segid;          /* segment written */
	uint32_t n_pages;        /* data pages */
	uint32_t n_superseded;   /* entries in sb->superseded */
	uint32_t n_runs;         /* entries in sb->runs */
	uint64_t seqno;          /* commit sequence number (writer_seqno) */
	uint32_t epoch;          /* write_epoch parity it was given in */
	uint64_t owner;          /* sequence it was filled for (KVF_SEQ_NONE:
				  * a pack of several, openseg.h) */
	int cache;               /* a caller's pages: cached once written */
	int data_written;        /* its data pages are on media already (a
				  * pack's): write the summary only */
	unsigned char *given;    /* the buffer the media gave back for sb's,
				  * which it now keeps; swapped in at reap */
	_Atomic int done;        /* written and committed (or failed) */
	struct flush_job *next;  /* writer queue; writer lock */
	struct flush_job *seq_next; /* the sequence's in-flight list */
};

/* The buffers of one segment being filled or written: everything its
 * write needs, so that sealing a segment allocates nothing. */
struct segbuf {
	unsigned char *buf;                /* segment_size bytes, aligned */
	unsigned char **held;              /* per data page: a page of the
					    * memory tier placed without a
					    * copy (openseg_adopt), which the
					    * writer copies into buf before the
					    * write (job_run) and the cache
					    * then takes as it is (or
					    * segbuf_put gives back); or NULL:
					    * the page is in buf */
	uint32_t n_held;                   /* non-NULL entries of held */
	struct seg_summary_entry *entries; /* per data page */
	struct meta_run *runs;             /* the owners of its pages: at
					    * most one run per data page */
	uint32_t *superseded;              /* addresses these pages replace */
	unsigned char *record;             /* the segment's "G" record */
	struct catalog_batch *batch;       /* and the batch it commits in */
	struct flush_job job;              /* its write, once filled */
	struct segbuf *next;               /* free list link; pool lock */
};

/*
 * struct writer - the segment writer's threads and queue, owned by
 * writer.c, and the commit sequence numbers it hands out.  Invariants:
 * inflight counts the jobs queued or being written; unwritten[p] counts
 * the jobs given a seqno while epoch's parity was p and not yet written.
 * Locking: lock guards everything but next_seqno (atomic).
 */
struct writer {
	pthread_t threads[WRITER_THREADS];
	int running;                  /* threads started */
	pthread_mutex_t lock;
	pthread_cond_t work;          /* a job was queued, or stop */
	pthread_cond_t idle;          /* a job finished */
	struct flush_job *head, *tail; /* queued, oldest first */
	uint32_t inflight;
	uint64_t epoch;               /* bumped by writer_written_bound */
	uint64_t unwritten[2];
	int stop;                     /* close asks the threads to end */
	_Atomic uint64_t next_seqno;  /* commit sequence numbers */
};

/* struct segbuf_pool - segment buffers kept for reuse (writer.c); lock
 * guards the list */
struct segbuf_pool {
	pthread_mutex_t lock;
	struct segbuf *free;
	uint32_t n_free;
};

#endif /* KVF_ENGINE_WRITER_STATE_H */
