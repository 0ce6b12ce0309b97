/*
 * test_store_regress.c - bugs found by the model and crash tests, each
 * kept as the smallest case that showed it.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "kvflash.h"
#include "testutil.h"

static char *dir;

static void setup(void)
{
	dir = tmpdir_make("regress");
	cr_assert_not_null(dir);
}

static void teardown(void)
{
	kvf_alloc_fail_at(0, 0);
	tmpdir_remove(dir);
}

TestSuite(regress, .init = setup, .fini = teardown, .timeout = 120);

static kvf_options small(uint64_t capacity, uint64_t segment)
{
	kvf_model m = { 1, 1, 1, 64, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.segment_size = segment;
	o.capacity_bytes = capacity;
	o.n_stripes = 1;
	return o;
}

/* A reopen that runs out of memory part way must fail cleanly or give the
 * store back whole: it once counted no references when a list allocation
 * failed, found every segment dead and trimmed the lot. */
Test(regress, reopen_under_allocation_failure_keeps_data)
{
	kvf_options o = small(8 << 20, 64 * 1024);
	uint16_t k[64 * 64], v[64 * 64], back[64 * 64];
	kvf_store *st = NULL;

	for (int i = 0; i < 64 * 64; i++)
		k[i] = (uint16_t)(i * 7), v[i] = (uint16_t)(i * 13);
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), &o, &st), KVF_OK));
	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	cr_assert(eq(int, kvf_append(st, 1, 0, 64, k, v), KVF_OK));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	for (uint64_t n = 1; n < 400; n++) {
		kvf_status rc;

		st = NULL;
		kvf_alloc_fail_at(n, 0);
		rc = kvf_open(tmp_path(dir, "s"), NULL, &st);
		kvf_alloc_fail_at(0, 0);
		if (rc != KVF_OK) {
			cr_assert(eq(int, rc, KVF_ENOMEM), "n %llu: %s",
				  (unsigned long long)n, kvf_last_error());
			cr_assert_null(st);
			continue;
		}
		cr_assert(eq(int, kvf_read(st, 1, 0, 0, 0, 64, back, NULL), KVF_OK),
			  "n %llu: %s", (unsigned long long)n, kvf_last_error());
		cr_assert(eq(int, memcmp(back, k, sizeof(k)), 0), "n %llu", (unsigned long long)n);
		cr_assert(eq(int, kvf_close(st), KVF_OK));
	}
}

/* A sync refused for space must not forget which lengths it did not
 * write: they once stayed marked as synced and were lost at reopen. */
Test(regress, sync_refused_for_space_keeps_lengths)
{
	kvf_options o = small(4 * 16 * 1024, 16 * 1024);
	uint16_t k[64], v[64];
	kvf_store *st = NULL;
	kvf_status rc = KVF_OK;
	uint64_t n, id;

	memset(k, 1, sizeof(k));
	memset(v, 2, sizeof(v));
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	for (id = 0; id < 6; id++) {
		cr_assert(eq(int, kvf_seq_create(st, id), KVF_OK));
		cr_assert(eq(int, kvf_append(st, id, 0, 1, k, v), KVF_OK));
	}
	rc = kvf_sync(st);
	/* free sequences until a sync succeeds */
	for (id = 5; rc != KVF_OK && id > 0; id--) {
		cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
		cr_assert(eq(int, kvf_seq_free(st, id), KVF_OK));
		rc = kvf_sync(st);
	}
	cr_assert(eq(int, rc, KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	st = NULL;
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &st), KVF_OK));
	for (uint64_t s = 0; s <= id; s++) {
		cr_assert(eq(int, kvf_seq_len(st, s, 0, &n), KVF_OK), "seq %llu: %s",
			  (unsigned long long)s, kvf_last_error());
		cr_assert(eq(u64, n, 1), "seq %llu lost its length", (unsigned long long)s);
	}
	kvf_close(st);
}
