/*
 * pool.h - the store's worker threads, for fork-join compute near the
 * data: one call runs n independent tasks and returns when all are done.
 *
 * The calling thread works too, so a pool of zero workers still runs
 * everything (serially), and a task never waits for a free thread.
 * Concurrency: any number of callers may run at once; their tasks share
 * the workers.
 */
#ifndef KVF_ENGINE_POOL_H
#define KVF_ENGINE_POOL_H

#include <stdint.h>

#include "kvflash.h"

struct pool;

/* pool_task_fn - task i of a run; returns KVF_OK or a status (the run's
 * result is the failing task's status with the lowest index) */
typedef kvf_status (*pool_task_fn)(void *arg, uint32_t i);

/* pool_create - n_threads workers (0 = none: callers do all the work) */
kvf_status pool_create(uint32_t n_threads, struct pool **out);
void pool_destroy(struct pool *p);

/*
 * pool_run - run fn(arg, i) for i in [0, n) on the workers and the caller.
 * The message of the failing task is the thread's message on return.
 */
kvf_status pool_run(struct pool *p, uint32_t n, pool_task_fn fn, void *arg);

#endif /* KVF_ENGINE_POOL_H */
