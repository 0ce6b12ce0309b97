/*
 * test_alloc.c - the allocation seam and its failure injection
 * (api/alloc.h).
 *
 * kvf_alloc_fail_at(n, sticky): the nth allocation from now fails (1 = the
 * next one); with sticky every later one fails too; n = 0 turns injection
 * off.  Every allocating call counts: kvf_malloc, kvf_calloc, kvf_realloc,
 * kvf_aligned_alloc and kvf_strdup.  The counter is process-wide; Criterion
 * runs each test in its own process, so tests do not disturb each other.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "api/alloc.h"

/* alloc_one - one allocation of kind k (0..4); frees it; 1 if it worked */
static int alloc_one(int k)
{
	void *p = NULL;
	void *q;

	switch (k) {
	case 0:
		p = kvf_malloc(16);
		break;
	case 1:
		p = kvf_calloc(4, 4);
		break;
	case 2:
		p = kvf_realloc(NULL, 16);
		break;
	case 3:
		p = kvf_aligned_alloc(64, 64);
		break;
	case 4:
		p = kvf_strdup("abc");
		break;
	}
	q = p;
	kvf_free(q);
	return p != NULL;
}

Test(alloc, injection_is_off_by_default)
{
	for (int i = 0; i < 100; i++)
		cr_assert(eq(int, alloc_one(i % 5), 1), "allocation %d", i);
}

Test(alloc, nth_allocation_fails_once)
{
	kvf_alloc_fail_at(3, 0);
	cr_assert(eq(int, alloc_one(0), 1));
	cr_assert(eq(int, alloc_one(0), 1));
	cr_assert(eq(int, alloc_one(0), 0), "the 3rd allocation must fail");
	for (int i = 0; i < 20; i++)
		cr_assert(eq(int, alloc_one(0), 1), "not sticky: %d", i);
}

Test(alloc, every_allocating_call_counts_and_fails)
{
	for (int k = 0; k < 5; k++) {
		kvf_alloc_fail_at(2, 0);
		cr_assert(eq(int, alloc_one((k + 1) % 5), 1), "kind %d", k);
		cr_assert(eq(int, alloc_one(k), 0), "kind %d must fail", k);
		cr_assert(eq(int, alloc_one(k), 1), "kind %d", k);
	}
}

Test(alloc, sticky_fails_until_turned_off)
{
	kvf_alloc_fail_at(2, 1);
	cr_assert(eq(int, alloc_one(0), 1));
	for (int i = 0; i < 50; i++)
		cr_assert(eq(int, alloc_one(i % 5), 0), "sticky: %d", i);
	kvf_alloc_fail_at(0, 0);
	for (int i = 0; i < 50; i++)
		cr_assert(eq(int, alloc_one(i % 5), 1), "off again: %d", i);
}

Test(alloc, zero_turns_a_pending_failure_off)
{
	kvf_alloc_fail_at(1, 1);
	kvf_alloc_fail_at(0, 0);
	for (int i = 0; i < 20; i++)
		cr_assert(eq(int, alloc_one(i % 5), 1), "%d", i);
}

Test(alloc, failed_realloc_keeps_the_block)
{
	char *p = kvf_malloc(8);

	cr_assert(not(zero(ptr, p)));
	memcpy(p, "kvflash", 8);
	kvf_alloc_fail_at(1, 0);
	cr_assert(zero(ptr, kvf_realloc(p, 1 << 20)));
	cr_assert(eq(str, p, "kvflash"));
	kvf_free(p);
}

Test(alloc, zero_sizes_and_alignment)
{
	void *p = kvf_malloc(0);
	void *q = kvf_calloc(0, 0);
	void *a = kvf_aligned_alloc(4096, 100);
	void *b = kvf_aligned_alloc(64, 0);
	char *s = kvf_strdup("");

	cr_assert(not(zero(ptr, p)));
	cr_assert(not(zero(ptr, q)));
	cr_assert(not(zero(ptr, a)));
	cr_assert(not(zero(ptr, b)));
	cr_assert(eq(u64, (uintptr_t)a % 4096, 0));
	cr_assert(eq(u64, (uintptr_t)b % 64, 0));
	cr_assert(eq(str, s, ""));
	kvf_free(p);
	kvf_free(q);
	kvf_free(a);
	kvf_free(b);
	kvf_free(s);
	kvf_free(NULL);
}

#define N_THREADS 4
#define PER_THREAD 1000

static void *alloc_many(void *arg)
{
	int *failed = arg;

	for (int i = 0; i < PER_THREAD; i++)
		if (!alloc_one(i % 5))
			(*failed)++;
	return NULL;
}

Test(alloc, exactly_one_failure_across_threads)
{
	pthread_t th[N_THREADS];
	int failed[N_THREADS] = { 0 };
	int total = 0;

	kvf_alloc_fail_at(N_THREADS * PER_THREAD / 2, 0);
	for (int i = 0; i < N_THREADS; i++)
		cr_assert(
			eq(int,
			   pthread_create(&th[i], NULL, alloc_many, &failed[i]),
			   0));
	for (int i = 0; i < N_THREADS; i++) {
		cr_assert(eq(int, pthread_join(th[i], NULL), 0));
		total += failed[i];
	}
	cr_assert(eq(int, total, 1));
}
