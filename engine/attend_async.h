/*
 * attend_async.h - the background attention jobs of kvf_attend_start, as
 * the rest of the engine sees them: kvf_close waits for a store's jobs.
 */
#ifndef KVF_ENGINE_ATTEND_ASYNC_H
#define KVF_ENGINE_ATTEND_ASYNC_H

#include "kvflash.h"

/* attend_async_drain - wait until no job of st is queued or running (their
 * handles stay for kvf_job_wait).  Any thread; cheap when st has none. */
void attend_async_drain(kvf_store *st);

#endif /* KVF_ENGINE_ATTEND_ASYNC_H */
