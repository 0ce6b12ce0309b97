/*
 * test_stats.c - what the store reports: kvf_stats_get and its
 * struct_size rules (older and newer callers), and the names of
 * kvf_strerror.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "store_fixture.h"
#include "testutil.h"

TestSuite(stats, .init = fx_setup, .fini = fx_teardown, .timeout = 60);

Test(stats, stats_struct_size)
{
	union {
		kvf_stats s;
		unsigned char b[sizeof(kvf_stats) + 64];
	} u;
	kvf_stats full = { .struct_size = sizeof(full) };
	size_t small = offsetof(kvf_stats, host_wa);

	REFUSED(kvf_stats_get(NULL, &full), KVF_EINVAL,
		"kvf_stats_get: store is NULL");
	REFUSED(kvf_stats_get(fx.st, NULL), KVF_EINVAL,
		"kvf_stats_get: out is NULL");
	memset(&u, 0xab, sizeof(u));
	u.s.struct_size = 0;
	REFUSED(kvf_stats_get(fx.st, &u.s), KVF_EINVAL,
		"out.struct_size 0 is too small");
	u.s.struct_size = sizeof(size_t) - 1;
	REFUSED(kvf_stats_get(fx.st, &u.s), KVF_EINVAL, "is too small");
	for (size_t i = sizeof(size_t); i < sizeof(u); i++)
		cr_assert(eq(u8, u.b[i], 0xab), "a refused call wrote byte %zu",
			  i);

	/* a newer caller's bigger struct with a nonzero unknown tail */
	u.s.struct_size = sizeof(kvf_stats) + 64;
	REFUSED(kvf_stats_get(fx.st, &u.s), KVF_EVERSION,
		"unknown tail is not zero");
	for (size_t i = sizeof(size_t); i < sizeof(u); i++)
		cr_assert(eq(u8, u.b[i], 0xab), "a refused call wrote byte %zu",
			  i);

	/* ... with a zero tail: filled, the tail left alone */
	memset(u.b + sizeof(kvf_stats), 0, 64);
	OK(kvf_stats_get(fx.st, &u.s));
	OK(kvf_stats_get(fx.st, &full));
	cr_assert(eq(sz, u.s.struct_size, sizeof(kvf_stats) + 64));
	cr_assert(eq(u64, u.s.n_sequences, 2));
	cr_assert(eq(u64, u.s.user_bytes, full.user_bytes));
	for (size_t i = sizeof(kvf_stats); i < sizeof(u); i++)
		cr_assert(eq(u8, u.b[i], 0), "byte %zu of the tail written", i);

	/* an older caller's smaller struct: only its fields are written */
	memset(&u, 0xab, sizeof(u));
	u.s.struct_size = small;
	OK(kvf_stats_get(fx.st, &u.s));
	cr_assert(eq(sz, u.s.struct_size, small));
	cr_assert(eq(u64, u.s.user_bytes, full.user_bytes));
	cr_assert(eq(u64, u.s.host_bytes_written, full.host_bytes_written));
	for (size_t i = small; i < sizeof(u); i++)
		cr_assert(eq(u8, u.b[i], 0xab),
			  "byte %zu past struct_size written", i);
}

Test(stats, strerror_names)
{
	static const struct {
		kvf_status code;
		const char *name;
	} names[] = {
		{ KVF_OK, "success" },
		{ KVF_EINVAL, "invalid argument" },
		{ KVF_ERANGE, "value out of range" },
		{ KVF_ENOENT, "no such object" },
		{ KVF_EEXIST, "object exists" },
		{ KVF_EMISMATCH,
		  "options contradict the stored configuration" },
		{ KVF_EVERSION, "unsupported version" },
		{ KVF_ECLOSED, "handle is closed" },
		{ KVF_ENOTSUP, "not supported" },
		{ KVF_ENOMEM, "out of memory" },
		{ KVF_ENOSPC, "no space left on media" },
		{ KVF_EBUSY, "resource busy" },
		{ KVF_EIO, "I/O error" },
		{ KVF_ECORRUPT, "stored data is corrupt" },
		{ KVF_EFATAL, "fatal error: close and reopen the store" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		cr_assert(eq(str, (char *)kvf_strerror(names[i].code),
			     (char *)names[i].name));
	cr_assert(eq(str, (char *)kvf_strerror((kvf_status)99),
		     "unknown status 99"));
	cr_assert(eq(str, (char *)kvf_strerror((kvf_status)-1),
		     "unknown status -1"));
}
