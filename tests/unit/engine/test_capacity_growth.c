/*
 * test_capacity_growth.c - a new file store does not preallocate its
 * capacity: the stripe file is sparse past its first 64 MiB and grows
 * segment by segment; a full file system (fallocate failing with ENOSPC,
 * injected at the syscall seam) refuses the append that needs new space
 * with KVF_ENOSPC, a message naming the file, and nothing changed; the
 * capacity limit gives KVF_ENOSPC, "full of live data".
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ftl/sysio.h"
#include "store_fixture.h"
#include "testutil.h"

static atomic_int full_past_prealloc; /* 1: fallocate past 64 MiB fails */

static int falloc_hook(int fd, int mode, off_t off, off_t len)
{
	if (atomic_load(&full_past_prealloc) && mode == 0 && off >= (64 << 20)) {
		errno = ENOSPC;
		return -1;
	}
	return kvf_sysio_real.fallocate(fd, mode, off, len);
}

static struct kvf_sysio hooks;

static uint64_t allocated_bytes(const char *dir)
{
	char p[4200];
	struct stat sb;

	snprintf(p, sizeof(p), "%s/stripe-000.kvf", dir);
	if (stat(p, &sb) != 0) {
		snprintf(p, sizeof(p), "%s/stripe0", dir);
		cr_assert(eq(int, stat(p, &sb), 0), "no stripe file in %s", dir);
	}
	return (uint64_t)sb.st_blocks * 512;
}

static kvf_status append_n(kvf_store *st, uint64_t seq, uint32_t n)
{
	size_t bytes = (size_t)n * KVH * ROW;
	unsigned char *k = calloc(1, bytes), *v = calloc(1, bytes);
	kvf_status rc;

	cr_assert(k && v);
	rc = kvf_append(st, seq, 0, n, k, v);
	free(k);
	free(v);
	return rc;
}

TestSuite(capacity_growth, .timeout = 120);

Test(capacity_growth, grows_then_enospc_with_nothing_changed)
{
	char *dir = tmpdir_make("capacity_growth");
	kvf_model m = { 1, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st;
	uint64_t len = 0, len2 = 0, at_open, grown;
	kvf_status rc = KVF_OK;

	hooks = kvf_sysio_real;
	hooks.fallocate = falloc_hook;
	kvf_sysio_set(&hooks);
	kvf_options_init(&o, &m);
	o.n_threads = 1;
	o.direct_io = 2;
	/* the default capacity, 4 GiB: nothing near it is allocated */
	OK(kvf_open(dir, &o, &st));
	at_open = allocated_bytes(dir);
	cr_assert(le(u64, at_open, 65ull << 20), "%llu bytes allocated at create",
		  (unsigned long long)at_open);
	OK(kvf_seq_create(st, 1));
	/* 96 MiB of K/V in 4096-token appends: the file grows past 64 MiB */
	for (int i = 0; i < 48; i++)
		OK(append_n(st, 1, 4096));
	OK(kvf_sync(st));
	grown = allocated_bytes(dir);
	cr_assert(grown > (64ull << 20), "allocated %llu", (unsigned long long)grown);
	cr_assert(lt(u64, grown, 200ull << 20), "allocated %llu", (unsigned long long)grown);

	/* the file system fills up: the append that needs space is refused */
	atomic_store(&full_past_prealloc, 1);
	OK(kvf_seq_len(st, 1, 0, &len));
	for (int i = 0; i < 64 && rc == KVF_OK; i++) {
		OK(kvf_seq_len(st, 1, 0, &len));
		rc = append_n(st, 1, 4096);
	}
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), "kvf_append: the file system holding") &&
		  strstr(kvf_last_error(), "is full"), "%s", kvf_last_error());
	OK(kvf_seq_len(st, 1, 0, &len2));
	cr_assert(eq(u64, len2, len), "a refused append changed the length");
	/* room again: the same append goes through */
	atomic_store(&full_past_prealloc, 0);
	OK(append_n(st, 1, 4096));
	OK(kvf_close(st));
	kvf_sysio_set(NULL);
	tmpdir_remove(dir);
}

Test(capacity_growth, the_capacity_limit_names_itself)
{
	char *dir = tmpdir_make("capacity_limit");
	kvf_options o = fx_options(1ull << 20, 0);
	kvf_store *st;
	kvf_status rc = KVF_OK;

	OK(kvf_open(dir, &o, &st));
	OK(kvf_seq_create(st, 1));
	for (int i = 0; i < 200 && rc == KVF_OK; i++)
		rc = append_n(st, 1, 256);
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), "the store is full of live data (16 segments;") != NULL,
		  "%s", kvf_last_error());
	OK(kvf_close(st));
	tmpdir_remove(dir);
}
