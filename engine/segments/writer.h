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
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "engine/segments/writer_state.h"
#include "kvflash.h"

kvf_status writer_start(kvf_store *st);
/* writer_stop - finish every queued job, then end the thread */
void writer_stop(kvf_store *st);

/* segbuf_get - buffers for a segment, from the pool or new; NULL: ENOMEM
 * (message set) */
struct segbuf *segbuf_get(kvf_store *st);
void segbuf_put(kvf_store *st, struct segbuf *sb);
/* segbuf_gather - copy the held pages (openseg_adopt) among the first
 * n_pages into sb->buf; segbuf_give_held - give the held pages back to the
 * memory tier (segbuf_put does) */
void segbuf_gather(kvf_store *st, struct segbuf *sb, uint32_t n_pages);
void segbuf_give_held(kvf_store *st, struct segbuf *sb);
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
/* writer_enqueue - writer_submit without a sequence's list: the caller
 * keeps track of job (a pack's, openseg.h) */
void writer_enqueue(kvf_store *st, struct flush_job *job);
/* writer_mark - set *at to v under the writer's lock and wake its
 * waiters; writer_wait_mark - wait until *at >= v (a pack's end,
 * openseg.c) */
void writer_mark(kvf_store *st, uint64_t *at, uint64_t v);
void writer_wait_mark(kvf_store *st, const uint64_t *at, uint64_t v);
/* writer_wait_jobs - wait until every job on the seq_next chain list is
 * done */
void writer_wait_jobs(kvf_store *st, struct flush_job *list);

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
