/*
 * test_read.c - kvf_read and kvf_read_x on the filled store
 * (store_fixture.h): refusals with nothing changed and no output written,
 * and empty ranges up to the end that succeed.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdint.h>
#include <string.h>

#include "store_fixture.h"
#include "testutil.h"

TestSuite(read, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

Test(read, read)
{
	unsigned char k[4 * ROW], v[4 * ROW];
	const uint64_t len = 100 + 2 * G;

	memset(k, 0xee, sizeof(k));
	memset(v, 0xee, sizeof(v));
	REFUSED(kvf_read(NULL, 1, 0, 0, 0, 1, k, v), KVF_EINVAL,
		"kvf_read: store is NULL");
	REFUSED(kvf_read(fx.st, 1, LAYERS, 0, 0, 1, k, v), KVF_ERANGE,
		"kvf_read: layer 2 out of range (store has 2 layers)");
	REFUSED(kvf_read(fx.st, 1, 0, KVH, 0, 1, k, v), KVF_ERANGE,
		"kvf_read: kv_head 2 out of range (store has 2 kv heads)");
	REFUSED(kvf_read(fx.st, 1, 0, UINT32_MAX, 0, 1, k, v), KVF_ERANGE,
		"kv_head 4294967295 out of range");
	REFUSED(kvf_read(fx.st, 1, 0, 0, 3, 2, k, v), KVF_EINVAL,
		"kvf_read: token range [3, 2) is reversed");
	REFUSED(kvf_read(fx.st, 1, 0, 0, 0, 1, NULL, NULL), KVF_EINVAL,
		"kvf_read: k_out and v_out are both NULL");
	REFUSED(kvf_read(fx.st, 3, 0, 0, 0, 1, k, v), KVF_ENOENT,
		"kvf_read: sequence 3 does not exist");
	REFUSED(kvf_read(fx.st, 1, 0, 0, len - 1, len + 1, k, v), KVF_ERANGE,
		"kvf_read: token range [163, 165) past the end of sequence 1 layer 0 (164 tokens)");
	REFUSED(kvf_read(fx.st, 1, 0, 0, len + 1, len + 1, k, v), KVF_ERANGE,
		"past the end");
	REFUSED(kvf_read(fx.st, 1, 1, 1, 0, UINT64_MAX, k, v), KVF_ERANGE,
		"past the end of sequence 1 layer 1 (70 tokens)");
	REFUSED(kvf_read(fx.st, 2, 1, 0, 50, 51, k, NULL), KVF_ERANGE,
		"past the end of sequence 2 layer 1 (50 tokens)");
	for (size_t i = 0; i < sizeof(k); i++)
		cr_assert(k[i] == 0xee && v[i] == 0xee,
			  "a refused read wrote its output (byte %zu)", i);
	/* empty ranges, up to the end, read nothing and succeed */
	OK(kvf_read(fx.st, 1, 0, 0, len, len, k, v));
	OK(kvf_read(fx.st, 1, 0, 0, 7, 7, NULL, NULL));
}

Test(read, read_x)
{
	unsigned char x[2 * QH * ROW];

	REFUSED(kvf_read_x(NULL, 1, 0, 0, 1, x), KVF_EINVAL,
		"kvf_read_x: store is NULL");
	REFUSED(kvf_read_x(fx.st, 1, 0, 0, 1, NULL), KVF_EINVAL,
		"kvf_read_x: x_out is NULL");
	REFUSED(kvf_read_x(fx.st, 1, LAYERS, 0, 1, x), KVF_ERANGE,
		"kvf_read_x: layer 2 out of range (store has 2 layers)");
	REFUSED(kvf_read_x(fx.st, 1, 0, 5, 4, x), KVF_EINVAL,
		"kvf_read_x: token range [5, 4) is reversed");
	REFUSED(kvf_read_x(fx.st, 3, 0, 0, 1, x), KVF_ENOENT,
		"kvf_read_x: sequence 3 does not exist");
	REFUSED(kvf_read_x(fx.st, 1, 0, 39, 41, x), KVF_ERANGE,
		"past the end of the X of sequence 1 layer 0 (40 tokens)");
	REFUSED(kvf_read_x(fx.st, 1, 1, 0, 1, x), KVF_ERANGE,
		"past the end of the X of sequence 1 layer 1 (0 tokens)");
	OK(kvf_read_x(fx.st, 1, 1, 0, 0, NULL));
}
