/*
 * prof.h - the write path's stage profile (kvf_options.profile): time
 * spent in each stage, summed over threads, reported by kvf_stats
 * (prof_*_ns).  Off by default: then each mark is one load and a branch.
 *
 * Stages nest (a sealed page is hashed inside an append, a full segment
 * queued inside a seal); each is counted exclusive of the stages inside
 * it, so the foreground stages of one thread add up to its time in the
 * calls.  A thread keeps the time its timed stages took (prof_inner) so
 * that the stage around them can take it off.
 *
 * Locking: none; the sums are atomic.
 */
#ifndef KVF_ENGINE_PROF_H
#define KVF_ENGINE_PROF_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

enum prof_stage {
	PROF_APPEND,  /* in kvf_append(_x), outside every stage below:
		       * planning, lookups, the rest */
	PROF_LOCK,    /* waiting for the world lock and a sequence's */
	PROF_COPY,    /* rows copied into group buffers and pages */
	PROF_HASH,    /* sealed pages hashed (XXH3) */
	PROF_TIER,    /* the memory tier: holds, pages waiting for
		       * write-back, written segments cached */
	PROF_SEGMENT, /* segments reserved and opened */
	PROF_QUEUE,   /* waiting for the segment writers */
	PROF_SYNC,    /* in kvf_sync, outside the stages above */
	PROF_WRITER,  /* the writer threads: segment writes and commits */
	PROF_STAGES
};

struct prof {
	int on;                            /* kvf_options.profile */
	_Atomic uint64_t ns[PROF_STAGES];  /* exclusive time per stage */
};

/* prof_inner - this thread's time in timed stages so far (prof.c) */
extern _Thread_local uint64_t prof_inner;

struct prof_mark {
	uint64_t t0;     /* 0: not timing */
	uint64_t inner0; /* prof_inner at the start */
};

static inline uint64_t prof_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* prof_begin - start timing a stage (nothing when the profile is off) */
static inline struct prof_mark prof_begin(const struct prof *p)
{
	struct prof_mark m = { 0, 0 };

	if (p->on) {
		m.t0 = prof_now();
		m.inner0 = prof_inner;
	}
	return m;
}

/* prof_end - count the stage begun at m, less the stages inside it */
static inline void prof_end(struct prof *p, enum prof_stage s,
			    struct prof_mark m)
{
	uint64_t el, inside;

	if (m.t0 == 0)
		return;
	el = prof_now() - m.t0;
	inside = prof_inner - m.inner0;
	atomic_fetch_add_explicit(&p->ns[s], el > inside ? el - inside : 0,
				  memory_order_relaxed);
	prof_inner = m.inner0 + el;
}

#endif /* KVF_ENGINE_PROF_H */
