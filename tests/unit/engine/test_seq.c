/*
 * test_seq.c - kvf_seq_create, kvf_seq_fork, kvf_seq_free and kvf_seq_len
 * on the filled store (store_fixture.h): each refusal's status, message
 * and a store left as it was; no output written on failure.  The good
 * path (suite seq_round_trip, on a store of its own): a fork reads its
 * parent's tokens, appends its own, and outlives the freed parent across
 * a sync and a reopen.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdint.h>
#include <string.h>

#include "store_fixture.h"
#include "testutil.h"

TestSuite(seq, .init = fx_setup, .fini = fx_teardown, .timeout = 60);
TestSuite(seq_round_trip, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 60);

#define RT_LAYERS 3 /* the round trip's store */

Test(seq, seq_create)
{
	REFUSED(kvf_seq_create(NULL, 5), KVF_EINVAL,
		"kvf_seq_create: store is NULL");
	REFUSED(kvf_seq_create(fx.st, UINT64_MAX), KVF_EINVAL,
		"sequence id 18446744073709551615 is reserved");
	REFUSED(kvf_seq_create(fx.st, 1), KVF_EEXIST,
		"kvf_seq_create: sequence 1 exists already");
	REFUSED(kvf_seq_create(fx.st, 2), KVF_EEXIST, "sequence 2 exists already");
}

Test(seq, seq_fork)
{
	REFUSED(kvf_seq_fork(NULL, 1, 3, 0), KVF_EINVAL,
		"kvf_seq_fork: store is NULL");
	REFUSED(kvf_seq_fork(fx.st, 1, UINT64_MAX, 0), KVF_EINVAL, "is reserved");
	REFUSED(kvf_seq_fork(fx.st, 1, 1, 0), KVF_EINVAL,
		"child and parent are both 1");
	REFUSED(kvf_seq_fork(fx.st, 1, 2, 0), KVF_EEXIST,
		"kvf_seq_fork: sequence 2 exists already");
	/* an existing child is refused before a missing parent */
	REFUSED(kvf_seq_fork(fx.st, 3, 2, 0), KVF_EEXIST,
		"sequence 2 exists already");
	REFUSED(kvf_seq_fork(fx.st, 3, 4, 0), KVF_ENOENT,
		"kvf_seq_fork: sequence 3 does not exist");
	/* layer 1 has 70 tokens: the shortest layer bounds a fork */
	REFUSED(kvf_seq_fork(fx.st, 1, 3, 71), KVF_ERANGE,
		"n_tokens 71 past the end of sequence 1 (layer 1 has 70 tokens)");
	REFUSED(kvf_seq_fork(fx.st, 1, 3, UINT64_MAX), KVF_ERANGE, "past the end");
	REFUSED(kvf_seq_fork(fx.st, 2, 3, 51), KVF_ERANGE,
		"past the end of sequence 2 (layer 1 has 50 tokens)");
}

Test(seq, seq_free)
{
	REFUSED(kvf_seq_free(NULL, 1), KVF_EINVAL,
		"kvf_seq_free: store is NULL");
	REFUSED(kvf_seq_free(fx.st, 3), KVF_ENOENT,
		"kvf_seq_free: sequence 3 does not exist");
	REFUSED(kvf_seq_free(fx.st, UINT64_MAX), KVF_ENOENT, "does not exist");
}

Test(seq, seq_len)
{
	uint64_t n = 12345;

	REFUSED(kvf_seq_len(NULL, 1, 0, &n), KVF_EINVAL,
		"kvf_seq_len: store is NULL");
	REFUSED(kvf_seq_len(fx.st, 1, 0, NULL), KVF_EINVAL,
		"kvf_seq_len: n_tokens is NULL");
	REFUSED(kvf_seq_len(fx.st, 1, LAYERS, &n), KVF_ERANGE,
		"kvf_seq_len: layer 2 out of range (store has 2 layers)");
	REFUSED(kvf_seq_len(fx.st, 1, UINT32_MAX, &n), KVF_ERANGE, "out of range");
	REFUSED(kvf_seq_len(fx.st, 3, 0, &n), KVF_ENOENT,
		"kvf_seq_len: sequence 3 does not exist");
	cr_assert(eq(u64, n, 12345), "an output written on failure");
}

/* the round trip: fork, the child's own tokens, free the parent, sync,
 * reopen */
Test(seq_round_trip, fork_and_free)
{
	kvf_model m = { RT_LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m, 64 * 1024, 64ull << 20, 2);
	kvf_store *st = NULL;
	kvf_stats s = { .struct_size = sizeof(s) };

	OK(kvf_open(fx.path, &o, &st));
	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (uint32_t l = 0; l < RT_LAYERS; l++)
		OK(fx_append(st, 1, 1, l, 0, 300));
	cr_assert(eq(int, kvf_seq_fork(st, 1, 2, 250), KVF_OK), "%s",
		  kvf_last_error());
	for (uint32_t l = 0; l < RT_LAYERS; l++) {
		fx_check_tokens(st, 2, 1, l, 0, 250);
		OK(fx_append(st, 2, 2, l, 250, 10)); /* child's own tokens */
	}
	cr_assert(eq(int, kvf_seq_free(st, 1), KVF_OK));
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	fx_check_tokens(st, 2, 1, 0, 0, 250);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	cr_assert(eq(int, kvf_open(fx.path, NULL, &st), KVF_OK), "%s",
		  kvf_last_error());
	for (uint32_t l = 0; l < RT_LAYERS; l++)
		fx_check_tokens(st, 2, 1, l, 0, 250);
	cr_assert(eq(int, kvf_read(st, 1, 0, 0, 0, 1, NULL, NULL), KVF_EINVAL));
	{
		uint16_t buf[DIM];

		cr_assert(eq(int, kvf_read(st, 1, 0, 0, 0, 1, buf, NULL), KVF_ENOENT));
	}
	cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	cr_assert(eq(u64, s.n_sequences, 1));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}
