/*
 * alloc.c - heap allocation seam with failure injection.
 *
 * The injection counter is process-wide and atomic: tests that use it run
 * in their own process (Criterion forks each test).
 */
#include "api/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t fail_countdown; /* 0 = off; 1 = fail next */
static _Atomic int fail_sticky;        /* keep failing once triggered */
static _Atomic uint64_t n_calls;       /* allocation calls so far */

uint64_t kvf_alloc_calls(void)
{
	return atomic_load(&n_calls);
}

void kvf_alloc_fail_at(uint64_t n, int sticky)
{
	atomic_store(&fail_sticky, sticky);
	atomic_store(&fail_countdown, n);
}

/* should_fail - count one allocation; true when this one must fail. */
static int should_fail(void)
{
	uint64_t n = atomic_load(&fail_countdown);

	atomic_fetch_add_explicit(&n_calls, 1, memory_order_relaxed);
	while (n != 0) {
		uint64_t next = n - 1;

		if (n == 1 && atomic_load(&fail_sticky))
			next = 1;
		if (atomic_compare_exchange_weak(&fail_countdown, &n, next))
			return n == 1;
	}
	return 0;
}

void *kvf_malloc(size_t size)
{
	if (should_fail())
		return NULL;
	return malloc(size ? size : 1);
}

void *kvf_calloc(size_t n, size_t size)
{
	if (should_fail())
		return NULL;
	return calloc(n ? n : 1, size ? size : 1);
}

void *kvf_realloc(void *p, size_t size)
{
	if (should_fail())
		return NULL;
	return realloc(p, size ? size : 1);
}

void *kvf_aligned_alloc(size_t align, size_t size)
{
	void *p = NULL;

	if (should_fail())
		return NULL;
	if (posix_memalign(&p, align, size ? size : align) != 0)
		return NULL;
	return p;
}

void kvf_free(void *p)
{
	free(p);
}

char *kvf_strdup(const char *s)
{
	size_t len = strlen(s) + 1;
	char *d = kvf_malloc(len);

	if (d)
		memcpy(d, s, len);
	return d;
}
