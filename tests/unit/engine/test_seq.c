/*
 * test_seq.c - kvf_seq_create, kvf_seq_fork, kvf_seq_free and kvf_seq_len
 * on the filled store (store_fixture.h): each refusal's status, message
 * and a store left as it was; no output written on failure.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdint.h>
#include <string.h>

#include "store_fixture.h"
#include "testutil.h"

TestSuite(seq, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

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
