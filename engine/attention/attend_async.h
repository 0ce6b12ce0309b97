/*
 * attend_async.h - the background attention jobs of kvf_attend_start, as
 * the rest of the engine sees them: kvf_close waits for a store's jobs.
 */
#ifndef KVF_ENGINE_ATTEND_ASYNC_H
#define KVF_ENGINE_ATTEND_ASYNC_H

#include "api/status.h"
#include "kvflash.h"

/* attend_async_drain - wait until no job of st is queued or running (their
 * handles stay for kvf_job_wait).  Any thread; cheap when st has none. */
void attend_async_drain(kvf_store *st);

/*
 * async_submit - run run(arg) in the background as a kvf_job of st (for
 * calls other than kvf_attend_start: kvf_attend_x_start, kvf_kvpr_start);
 * kvf_job_wait returns its status, then calls release(arg) (NULL: none).
 * The caller has checked every argument.  On failure (KVF_ENOMEM, message
 * naming call) nothing runs, release is not called and *job is NULL.
 */
kvf_status async_submit(kvf_store *st, const char *call,
			kvf_status (*run)(void *arg),
			void (*release)(void *arg), void *arg, kvf_job **job);

#endif /* KVF_ENGINE_ATTEND_ASYNC_H */
