/*
 * jobs.h - a store's background jobs (kvf_attend_start and the other
 * *_start calls, prefetches), waited for by kvf_job_wait; kvf_close waits
 * for all of a store's jobs.
 */
#ifndef KVF_ENGINE_JOBS_H
#define KVF_ENGINE_JOBS_H

#include "api/status.h"
#include "kvflash.h"

/* jobs_drain - take st's queued hints off (async_detach's drop), then
 * wait until no job of st is queued or running (their handles stay for
 * kvf_job_wait).  Any thread; cheap when st has none. */
void jobs_drain(kvf_store *st);

/*
 * async_submit - run run(arg) in the background as a kvf_job of st;
 * kvf_job_wait returns its status, then calls release(arg) (NULL: none).
 * The caller has checked every argument.  On failure (KVF_ENOMEM, message
 * naming call) nothing runs, release is not called and *job is NULL.
 */
kvf_status async_submit(kvf_store *st, const char *call,
			kvf_status (*run)(void *arg),
			void (*release)(void *arg), void *arg, kvf_job **job);

/*
 * async_detach - run run(arg) in the background with no kvf_job to wait
 * for (a hint: kvf_prefetch), on a queue and thread of their own; run
 * owns arg and frees it; id (from async_id, before the job can run) names
 * it for async_cancel.  kvf_close still waits for it if it runs, and
 * takes it off if it is queued (jobs_drain), as async_cancel does.  On
 * failure (KVF_ENOMEM) nothing runs and arg is the caller's.
 */
uint64_t async_id(void);
kvf_status async_detach(kvf_store *st, const char *call,
			kvf_status (*run)(void *arg), void (*drop)(void *arg),
			void *arg, uint64_t id);

/* async_cancel - take detached job id off its queue if it has not started:
 * drop(arg) is called (on this thread) and 1 returned; else 0 (it runs,
 * or ran).  Call it holding no lock that drop takes. */
int async_cancel(uint64_t id);

#endif /* KVF_ENGINE_JOBS_H */
