/*
 * test_pool.c - the worker pool runs every task exactly once, with any
 * number of workers (zero included) and concurrent submitters, and reports
 * the lowest failing task's status and message.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "api/status.h"
#include "engine/base/pool.h"

struct count {
	_Atomic uint32_t hits[1000];
	uint32_t fail_from; /* tasks >= this fail */
};

static kvf_status task(void *arg, uint32_t i)
{
	struct count *c = arg;

	atomic_fetch_add(&c->hits[i], 1);
	if (i >= c->fail_from)
		return kvf_fail(KVF_EIO, "task %u failed", i);
	return KVF_OK;
}

Test(pool, every_task_once)
{
	for (uint32_t workers = 0; workers <= 3; workers++) {
		struct pool *p = NULL;
		static struct count c;

		memset(&c, 0, sizeof(c));
		c.fail_from = 1000;
		cr_assert(eq(int, pool_create(workers, &p), KVF_OK));
		cr_assert(eq(int, pool_run(p, 1000, task, &c), KVF_OK));
		for (int i = 0; i < 1000; i++)
			cr_assert(eq(u32, atomic_load(&c.hits[i]), 1),
				  "workers %u task %d", workers, i);
		cr_assert(eq(int, pool_run(p, 0, task, &c), KVF_OK));
		pool_destroy(p);
	}
}

Test(pool, lowest_failure_wins)
{
	struct pool *p = NULL;
	static struct count c;

	memset(&c, 0, sizeof(c));
	c.fail_from = 500;
	cr_assert(eq(int, pool_create(2, &p), KVF_OK));
	cr_assert(eq(int, pool_run(p, 1000, task, &c), KVF_EIO));
	cr_assert(eq(str, (char *)kvf_last_error(), "task 500 failed"));
	for (int i = 0; i < 1000; i++)
		cr_assert(eq(u32, atomic_load(&c.hits[i]), 1));
	pool_destroy(p);
}

struct submitter {
	struct pool *p;
	struct count c;
	kvf_status rc;
};

static void *submit(void *arg)
{
	struct submitter *s = arg;

	for (int round = 0; round < 20 && s->rc == KVF_OK; round++)
		s->rc = pool_run(s->p, 50, task, &s->c);
	return NULL;
}

Test(pool, concurrent_submitters)
{
	static struct submitter s[4];
	pthread_t t[4];
	struct pool *p = NULL;

	cr_assert(eq(int, pool_create(2, &p), KVF_OK));
	for (int i = 0; i < 4; i++) {
		memset(&s[i], 0, sizeof(s[i]));
		s[i].p = p;
		s[i].c.fail_from = 1000;
		pthread_create(&t[i], NULL, submit, &s[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_assert(eq(int, s[i].rc, KVF_OK));
		for (int k = 0; k < 50; k++)
			cr_assert(eq(u32, atomic_load(&s[i].c.hits[k]), 20));
	}
	pool_destroy(p);
}
