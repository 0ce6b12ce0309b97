/*
 * writer.c - the segment writer thread, its job queue and the buffer pool.
 *
 * WRITER_THREADS threads take jobs in submission order, so that many
 * segment writes are in flight at once.  For each job a thread builds the
 * summary after the data pages, writes the segment in one media write,
 * commits the segment's record, seals the segment and drops the
 * references of the pages the job's pages replace (they die only now that
 * their replacements are committed).  Then it marks the job done; the
 * sequence that owns it reaps it under its own lock.
 *
 * Locking: writer.lock guards the queue, `inflight`, `stop`; a job's
 * `done` is atomic.  The writer takes segtab.lock (segment states) and the
 * catalog's own locking; never a sequence lock, so an appender holding its
 * sequence's lock may wait for it.
 */
#include "engine/segments/writer.h"

#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "engine/base/catalog.h"
#include "engine/base/fatal.h"
#include "engine/base/key.h"
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "engine/segments/segtable.h"
#include "engine/base/store_state.h"
#include "engine/base/tier.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void segbuf_free(struct segbuf *sb)
{
	kvf_free(sb->buf);
	kvf_free(sb->held);
	kvf_free(sb->entries);
	kvf_free(sb->runs);
	kvf_free(sb->superseded);
	kvf_free(sb->record);
	catalog_batch_free(sb->batch);
	kvf_free(sb);
}

/* segbuf_new - a new segment buffer and all it carries; NULL: ENOMEM */
static struct segbuf *segbuf_new(kvf_store *st)
{
	uint32_t d = st->data_per_seg;
	struct segbuf *sb = kvf_calloc(1, sizeof(*sb));

	if (sb == NULL)
		goto fail;
	sb->buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, st->hdr.segment_size);
	sb->held = kvf_calloc(d, sizeof(*sb->held));
	sb->entries = kvf_calloc(d, sizeof(*sb->entries));
	sb->runs = kvf_calloc(d, sizeof(*sb->runs));
	sb->superseded = kvf_calloc(d, sizeof(uint32_t));
	sb->record = kvf_malloc(sizeof(struct meta_seg) +
				(size_t)d * sizeof(struct meta_run));
	sb->batch = catalog_batch_new();
	if (sb->buf && sb->held && sb->entries && sb->runs && sb->superseded &&
	    sb->record && sb->batch)
		return sb;
fail:
	if (sb)
		segbuf_free(sb);
	kvf_fail(KVF_ENOMEM, "out of memory for a segment buffer of %llu bytes",
		 (unsigned long long)st->hdr.segment_size);
	return NULL;
}

struct segbuf *segbuf_get(kvf_store *st)
{
	struct segbuf *sb;

	pthread_mutex_lock(&st->bufs.lock);
	sb = st->bufs.free;
	if (sb) {
		st->bufs.free = sb->next;
		st->bufs.n_free--;
	}
	pthread_mutex_unlock(&st->bufs.lock);
	return sb ? sb : segbuf_new(st);
}

void segbuf_gather(kvf_store *st, struct segbuf *sb, uint32_t n_pages)
{
	uint32_t ps = st->hdr.page_size;

	for (uint32_t i = 0, left = sb->n_held; i < n_pages && left; i++)
		if (sb->held[i]) {
			memcpy(sb->buf + (size_t)i * ps, sb->held[i], ps);
			left--;
		}
}

void segbuf_give_held(kvf_store *st, struct segbuf *sb)
{
	/* n_held counts what is left: the cache took the rest
	 * (seg_cache_written) */
	for (uint32_t i = 0; i < st->data_per_seg && sb->n_held; i++)
		if (sb->held[i]) {
			tier_page_return(st, sb->held[i]);
			sb->held[i] = NULL;
			sb->n_held--;
		}
}

void segbuf_put(kvf_store *st, struct segbuf *sb)
{
	if (sb == NULL)
		return;
	segbuf_give_held(st, sb);
	pthread_mutex_lock(&st->bufs.lock);
	sb->next = st->bufs.free;
	st->bufs.free = sb;
	st->bufs.n_free++;
	pthread_mutex_unlock(&st->bufs.lock);
}

kvf_status segbuf_reserve(kvf_store *st, uint32_t n)
{
	for (;;) {
		struct segbuf *sb;
		uint32_t have;

		pthread_mutex_lock(&st->bufs.lock);
		have = st->bufs.n_free;
		pthread_mutex_unlock(&st->bufs.lock);
		if (have >= n)
			return KVF_OK;
		if ((sb = segbuf_new(st)) == NULL)
			return KVF_ENOMEM;
		segbuf_put(st, sb);
	}
}

void writer_init(kvf_store *st)
{
	pthread_mutex_init(&st->writer.lock, NULL);
	pthread_cond_init(&st->writer.work, NULL);
	pthread_cond_init(&st->writer.idle, NULL);
	atomic_init(&st->writer.next_seqno, 1);
	pthread_mutex_init(&st->bufs.lock, NULL);
}

void writer_free(kvf_store *st)
{
	struct segbuf *sb = st->bufs.free;

	while (sb) {
		struct segbuf *next = sb->next;

		segbuf_free(sb);
		sb = next;
	}
	st->bufs.free = NULL;
	st->bufs.n_free = 0;
	pthread_mutex_destroy(&st->bufs.lock);
	pthread_cond_destroy(&st->writer.idle);
	pthread_cond_destroy(&st->writer.work);
	pthread_mutex_destroy(&st->writer.lock);
}

/* job_run - write and commit one job; sets the fatal state on failure */
static void job_run(kvf_store *st, struct flush_job *job)
{
	uint32_t ps = st->hdr.page_size, n = job->n_pages;
	uint32_t sum_pages = summary_pages(n, ps);
	unsigned char *sum = job->sb->buf + (size_t)n * ps;
	struct seg_summary_header h;
	struct meta_seg rec;
	struct catalog_batch *b;
	unsigned char key[5];
	size_t rec_len;
	unsigned char *val;
	kvf_status rc;

	if (atomic_load(&st->fatal.on))
		return; /* nothing after a failure may commit */
	/* pages placed by pointer are copied here, off the appender's
	 * path; readers go on using them until the job is reaped */
	segbuf_gather(st, job->sb, n);
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, SEG_MAGIC, 8);
	h.store_id = st->hdr.store_id;
	h.seqno = job->seqno;
	h.segid = job->segid;
	h.n_data_pages = n;
	h.page_size = ps;
	memset(sum, 0, (size_t)sum_pages * ps);
	memcpy(sum + sizeof(h), job->sb->entries,
	       (size_t)n * sizeof(*job->sb->entries));
	memcpy(sum, &h, sizeof(h));
	h.checksum = XXH3_64bits(sum, sizeof(h) + (size_t)n *
						 sizeof(*job->sb->entries));
	memcpy(sum, &h, sizeof(h));
	if (job->data_written) { /* a pack: its pages went as they came */
		struct kvf_media_io io = { .stripe = seg_stripe(st, job->segid),
					   .seg = seg_in_stripe(st, job->segid),
					   .page = n, .n_pages = sum_pages,
					   .buf = sum };

		job->given = NULL;
		rc = kvf_media_write(st->media, &io, 1);
	} else {
		job->given = job->sb->buf;
		rc = kvf_media_give_segment(st->media, seg_stripe(st, job->segid),
					    seg_in_stripe(st, job->segid),
					    &job->given,
					    (size_t)(n + sum_pages) * ps);
		if (job->given == job->sb->buf)
			job->given = NULL;
	}
	if (rc != KVF_OK) {
		store_set_fatal(st, rc, "segment write");
		return;
	}
	rec = (struct meta_seg){ .seqno = h.seqno, .write_ns = now_ns(),
				 .owner = job->owner, .n_data_pages = n,
				 .n_runs = job->n_runs };
	rec_len = sizeof(rec) + (size_t)job->n_runs * sizeof(struct meta_run);
	val = job->sb->record;
	b = job->sb->batch;
	catalog_batch_clear(b);
	memcpy(val, &rec, sizeof(rec));
	memcpy(val + sizeof(rec), job->sb->runs,
	       (size_t)job->n_runs * sizeof(struct meta_run));
	meta_key_u32(key, META_TAG_SEG, job->segid);
	catalog_batch_put(b, key, sizeof(key), val, rec_len);
	rc = catalog_commit(st->cat, b, 0);
	if (rc != KVF_OK) {
		store_set_fatal(st, rc, "segment commit");
		return;
	}
	/* a segment written part full (at a sync) stays so: on a stripe
	 * file, the rest of its space goes back (best effort: a failure
	 * leaves the space allocated, nothing else) */
	if (n + sum_pages < st->pages_per_seg)
		(void)kvf_media_release_tail(st->media, seg_stripe(st, job->segid),
					     seg_in_stripe(st, job->segid),
					     n + sum_pages);
	seg_sealed(st, job->segid, n, rec.seqno, rec.write_ns);
	atomic_fetch_add(&st->c.summary_bytes, (uint64_t)sum_pages * ps);
	atomic_fetch_add(&st->c.segments_written, 1);
	seg_refs_dec(st, job->sb->superseded, job->n_superseded);
}

static void *writer_main(void *arg)
{
	kvf_store *st = arg;

	pthread_mutex_lock(&st->writer.lock);
	for (;;) {
		struct flush_job *job = st->writer.head;
		struct prof_mark m;

		if (job == NULL) {
			if (st->writer.stop)
				break;
			pthread_cond_wait(&st->writer.work, &st->writer.lock);
			continue;
		}
		st->writer.head = job->next;
		if (st->writer.head == NULL)
			st->writer.tail = NULL;
		pthread_mutex_unlock(&st->writer.lock);
		m = prof_begin(&st->prof);
		job_run(st, job);
		/* the stripe's next segments, off the appenders' path */
		if (!atomic_load(&st->fatal.on))
			seg_allocate_next(st, seg_stripe(st, job->segid),
					  job->n_pages == st->data_per_seg &&
						  !job->data_written ?
						  WRITER_MAX_INFLIGHT : 0);
		prof_end(&st->prof, PROF_WRITER, m);
		pthread_mutex_lock(&st->writer.lock);
		atomic_store(&job->done, 1);
		st->writer.inflight--;
		st->writer.unwritten[job->epoch]--;
		pthread_cond_broadcast(&st->writer.idle);
	}
	pthread_mutex_unlock(&st->writer.lock);
	return NULL;
}

void writer_seqno(kvf_store *st, struct flush_job *job)
{
	pthread_mutex_lock(&st->writer.lock);
	job->seqno = atomic_fetch_add(&st->writer.next_seqno, 1);
	job->epoch = (uint32_t)(st->writer.epoch & 1);
	st->writer.unwritten[job->epoch]++;
	pthread_mutex_unlock(&st->writer.lock);
}

uint64_t writer_written_bound(kvf_store *st)
{
	uint32_t old;
	uint64_t bound;

	pthread_mutex_lock(&st->writer.lock);
	/* seqnos given from here on count in the other parity; those of
	 * this one were all given before `bound` was read */
	old = (uint32_t)(st->writer.epoch++ & 1);
	bound = atomic_load(&st->writer.next_seqno) - 1;
	while (st->writer.unwritten[old] > 0)
		pthread_cond_wait(&st->writer.idle, &st->writer.lock);
	pthread_mutex_unlock(&st->writer.lock);
	return bound;
}

kvf_status writer_start(kvf_store *st)
{
	st->writer.stop = 0;
	for (int i = 0; i < WRITER_THREADS; i++) {
		if (pthread_create(&st->writer.threads[i], NULL, writer_main,
				   st) != 0) {
			writer_stop(st);
			return kvf_fail(KVF_ENOMEM,
					"kvf_open: cannot start segment writer thread %d",
					i);
		}
		st->writer.running++;
	}
	return KVF_OK;
}

void writer_stop(kvf_store *st)
{
	if (!st->writer.running)
		return;
	pthread_mutex_lock(&st->writer.lock);
	st->writer.stop = 1;
	pthread_cond_broadcast(&st->writer.work);
	pthread_mutex_unlock(&st->writer.lock);
	for (int i = 0; i < st->writer.running; i++)
		pthread_join(st->writer.threads[i], NULL);
	st->writer.running = 0;
}

void writer_submit(kvf_store *st, struct seq *seq, struct flush_job *job)
{
	job->seq_next = seq->jobs;
	seq->jobs = job;
	writer_enqueue(st, job);
}

void writer_enqueue(kvf_store *st, struct flush_job *job)
{
	struct prof_mark m;

	job->next = NULL;
	if (!st->writer.running) { /* read-only or closing: write here */
		job_run(st, job);
		atomic_store(&job->done, 1);
		return;
	}
	m = prof_begin(&st->prof);
	pthread_mutex_lock(&st->writer.lock);
	while (st->writer.inflight >= WRITER_MAX_INFLIGHT)
		pthread_cond_wait(&st->writer.idle, &st->writer.lock);
	prof_end(&st->prof, PROF_QUEUE, m);
	st->writer.inflight++;
	if (st->writer.tail)
		st->writer.tail->next = job;
	else
		st->writer.head = job;
	st->writer.tail = job;
	pthread_cond_signal(&st->writer.work);
	pthread_mutex_unlock(&st->writer.lock);
}

void job_free(kvf_store *st, struct flush_job *j)
{
	/* readers of the job's pages may have used sb->buf until now; the
	 * media keeps that buffer, the one it gave back is sb's from here */
	if (j->given)
		j->sb->buf = j->given;
	else if (j->cache && atomic_load(&j->done) && !atomic_load(&st->fatal.on)) {
		struct prof_mark m = prof_begin(&st->prof);

		/* the cache takes the written buffer whole, or the pages
		 * held by pointer (no copy) */
		(void)seg_cache_written(st, j->segid, j->seqno, &j->sb->buf,
					j->sb->held, &j->sb->n_held,
					j->n_pages, j->sb->entries);
		prof_end(&st->prof, PROF_TIER, m);
	}
	segbuf_put(st, j->sb); /* j lives in it */
}

void writer_wait_jobs(kvf_store *st, struct flush_job *list)
{
	if (list == NULL)
		return;
	pthread_mutex_lock(&st->writer.lock);
	for (struct flush_job *j = list; j; j = j->seq_next)
		while (!atomic_load(&j->done))
			pthread_cond_wait(&st->writer.idle, &st->writer.lock);
	pthread_mutex_unlock(&st->writer.lock);
}

void writer_mark(kvf_store *st, uint64_t *at, uint64_t v)
{
	pthread_mutex_lock(&st->writer.lock);
	*at = v;
	pthread_cond_broadcast(&st->writer.idle);
	pthread_mutex_unlock(&st->writer.lock);
}

void writer_wait_mark(kvf_store *st, const uint64_t *at, uint64_t v)
{
	pthread_mutex_lock(&st->writer.lock);
	while (*at < v)
		pthread_cond_wait(&st->writer.idle, &st->writer.lock);
	pthread_mutex_unlock(&st->writer.lock);
}

kvf_status seq_jobs_reap(kvf_store *st, struct seq *seq, int wait)
{
	struct flush_job **pp = &seq->jobs;

	if (wait && seq->jobs) {
		struct prof_mark m = prof_begin(&st->prof);

		writer_wait_jobs(st, seq->jobs);
		prof_end(&st->prof, PROF_QUEUE, m);
	}
	while (*pp) {
		struct flush_job *j = *pp;

		if (!atomic_load(&j->done)) {
			pp = &j->seq_next;
			continue;
		}
		*pp = j->seq_next;
		job_free(st, j);
	}
	if (atomic_load(&st->fatal.on))
		return store_check(st, "segment writer");
	return KVF_OK;
}

const unsigned char *seq_job_page(kvf_store *st, struct seq *seq,
				  uint32_t addr)
{
	uint32_t segid = addr_seg(addr, st->page_bits);
	uint32_t page = addr_page(addr, st->page_bits);

	/* a finished job's pages are on media, and its segment may even be
	 * reused since: only jobs still in flight are read from memory */
	for (struct flush_job *j = seq->jobs; j; j = j->seq_next)
		if (j->segid == segid && page < j->n_pages &&
		    !atomic_load(&j->done))
			return j->sb->held[page] ? j->sb->held[page] :
				j->sb->buf + (size_t)page * st->hdr.page_size;
	return NULL;
}

void writer_wait_all(kvf_store *st)
{
	pthread_mutex_lock(&st->writer.lock);
	while (st->writer.inflight > 0)
		pthread_cond_wait(&st->writer.idle, &st->writer.lock);
	pthread_mutex_unlock(&st->writer.lock);
}
