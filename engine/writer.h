/*
 * writer.h - segment writes off the append path.
 *
 * A full open segment becomes a flush job: its buffers go to a writer
 * thread, which writes data and summary to media in one write, commits the
 * segment's record, marks it sealed and drops the references of the pages
 * it replaces; the appender takes a fresh buffer from a pool and carries
 * on, so filling the next segment overlaps writing the last one.
 *
 * Until its job is reaped, a segment's pages are read from the job's
 * buffer (the media write may still be in flight): each sequence keeps its
 * jobs on a list under its lock.  Jobs may commit out of order: each
 * carries the seqno it got at submission, and recovery orders by seqno.
 * A job that fails puts the store in the fatal state.
 */
#ifndef KVF_ENGINE_WRITER_H
#define KVF_ENGINE_WRITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "api/status.h"
#include "engine/meta.h"
#include "engine/segfmt.h"
#include "kvflash.h"

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
	uint64_t owner;          /* sequence it was filled for */
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

kvf_status writer_start(kvf_store *st);
/* writer_stop - finish every queued job, then end the thread */
void writer_stop(kvf_store *st);

/* segbuf_get - buffers for a segment, from the pool or new; NULL: ENOMEM
 * (message set) */
struct segbuf *segbuf_get(kvf_store *st);
void segbuf_put(kvf_store *st, struct segbuf *sb);
/* segbuf_reserve - fill the pool up to n free buffers (KVF_ENOMEM, message
 * set, when memory runs out) */
kvf_status segbuf_reserve(kvf_store *st, uint32_t n);
/* writer_init - the writer's locks and the buffer pool, empty (first
 * thing at open); writer_free - the pool and the locks (last at close,
 * after writer_stop) */
void writer_init(kvf_store *st);
void writer_free(kvf_store *st);

/*
 * writer_seqno - give job its seqno, counted as unwritten until the writer
 * is done with it.  Every seqno of a segment written by the writer comes
 * from here.
 */
void writer_seqno(kvf_store *st, struct flush_job *job);

/*
 * writer_written_bound - the highest seqno below which every segment the
 * writer was given is written (or failed): a durable point takes it
 * before its media sync, so that a segment whose seqno it records is on
 * media, even one sealed by another sequence while the point was under
 * way.  Waits for the writes of seqnos given before the call.  Callers
 * hold dur.lock.
 */
uint64_t writer_written_bound(kvf_store *st);

/*
 * writer_submit - queue job for writing and put it on seq's list.  Waits
 * while WRITER_MAX_INFLIGHT jobs are in flight.  Caller holds seq->lock.
 */
void writer_submit(kvf_store *st, struct seq *seq, struct flush_job *job);

/*
 * seq_jobs_reap - drop seq's finished jobs, returning their buffers; with
 * `wait`, first wait for all of them.  Caller holds seq->lock.
 * Return: KVF_OK, or KVF_EFATAL when a job failed.
 */
kvf_status seq_jobs_reap(kvf_store *st, struct seq *seq, int wait);
/* job_free - a finished job's buffers back to the pool, and the job */
void job_free(kvf_store *st, struct flush_job *j);

/* seq_job_page - the bytes of addr if it lies in one of seq's jobs */
const unsigned char *seq_job_page(kvf_store *st, struct seq *seq,
				  uint32_t addr);

/* writer_wait_all - until no job of any sequence is in flight */
void writer_wait_all(kvf_store *st);

#endif /* KVF_ENGINE_WRITER_H */
