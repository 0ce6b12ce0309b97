/*
 * test_open.c - kvf_open on an existing store and at its arguments: the
 * filled store (store_fixture.h) survives a close and reopen; bad
 * arguments, a struct_size too small or with a nonzero unknown tail, an
 * option that contradicts the store (one per field), read-only handles,
 * a foreign directory, an empty one and a missing parent are refused with
 * nothing changed; allocation failure injection (api/alloc.h) while
 * creating and while reopening gives clean refusals.
 *
 * Damaged or missing store headers (suite open_header): a damaged header
 * is KVF_ECORRUPT naming the file; a directory holding no store is
 * KVF_ENOENT (read-only) or KVF_EINVAL; a store that lost its header is
 * KVF_ECORRUPT and nothing of it is removed.  Every refusal there asserts
 * the status, a message substring and that the directory tree (names,
 * kinds, and for files size, mtime and bytes) is the same before and
 * after, and that a store's data reads back.  Random tests print their
 * seed.
 *
 * A reopen that runs out of memory at every allocation in turn (suite
 * open_oom) fails cleanly or gives the store back whole.
 *
 * Creation (test_create.c), options (test_options.c) and locking
 * (test_lock.c) have files of their own.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/alloc.h"
#include "engine/base/store_state.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(open, .init = fx_setup, .fini = fx_teardown, .timeout = 60);
TestSuite(open_header, .timeout = 90);
TestSuite(open_oom, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

/* the fixture's state, as fx_fill() leaves it (checked once, then trusted) */
static void digest_is_fill(const struct fx_digest *d)
{
	cr_assert(d->exists[0] && d->exists[1] && !d->exists[2] &&
		  !d->exists[3]);
	cr_assert(eq(u64, d->len[0][0], 100 + 2 * G));
	cr_assert(eq(u64, d->len[0][1], 70));
	cr_assert(eq(u64, d->x_len[0][0], 40));
	cr_assert(eq(u64, d->len[1][0], 55));
	cr_assert(eq(u64, d->len[1][1], 50));
	cr_assert(eq(u64, d->x_len[1][0], 40));
}

/* ---- the fixture itself ------------------------------------------------- */

Test(open, fixture_digest)
{
	struct fx_digest d = fx_digest_of(fx.st);

	digest_is_fill(&d);
	OK(kvf_close(fx.st));
	OK(kvf_open(fx.path, NULL, &fx.st));
	{
		struct fx_digest e = fx_digest_of(fx.st);

		/* counters count since create; close wrote padding pages */
		cr_assert(e.host_bytes_written > d.host_bytes_written);
		e.host_bytes_written = d.host_bytes_written;
		fx_digest_same(&d, &e, "close and reopen");
	}
}

/* ---- open: arguments, options against the store, directories ----------- */

Test(open, open_arguments)
{
	kvf_options o = fx_filled_opts();
	union {
		kvf_options o;
		unsigned char b[sizeof(kvf_options) + 16];
	} big;
	kvf_store *h = (kvf_store *)&o;

	REFUSED(kvf_open(fx.path, &o, NULL), KVF_EINVAL, "kvf_open: out is NULL");
	REFUSED(kvf_open(NULL, &o, &h), KVF_EINVAL, "kvf_open: dir is NULL");
	cr_assert_null(h, "out not cleared on failure");
	h = (kvf_store *)&o;
	REFUSED(kvf_open("", &o, &h), KVF_EINVAL, "kvf_open: dir is empty");
	cr_assert_null(h);
	o.struct_size = 0;
	REFUSED(kvf_open(tmp_path(fx.dir, "new"), &o, &h), KVF_EINVAL,
		"opts.struct_size 0 is too small");
	cr_assert(fx_path_exists(tmp_path(fx.dir, "new")) == 0);
	memset(&big, 0, sizeof(big));
	big.o = fx_filled_opts();
	big.o.struct_size = sizeof(big);
	big.b[sizeof(kvf_options) + 3] = 1;
	REFUSED(kvf_open(tmp_path(fx.dir, "new"), &big.o, &h), KVF_EVERSION,
		"unknown tail is not zero");
	cr_assert(fx_path_exists(tmp_path(fx.dir, "new")) == 0);
	/* a zero tail is fine */
	big.b[sizeof(kvf_options) + 3] = 0;
	OK(kvf_open(tmp_path(fx.dir, "new"), &big.o, &h));
	OK(kvf_close(h));
}

Test(open, open_mismatch)
{
	struct fx_digest d0 = fx_digest_of(fx.st), d1;
	kvf_options good = fx_filled_opts(), o;
	kvf_store *h = NULL;

#define MISMATCH(field, value, name)                                         \
	do {                                                                 \
		o = good;                                                    \
		o.field = value;                                             \
		cr_assert(eq(int, kvf_open(fx.path, &o, &h), KVF_EMISMATCH),    \
			  "%s: %s", #field, kvf_last_error());               \
		cr_assert(strstr(kvf_last_error(), "kvf_open: " name " ") && \
				  strstr(kvf_last_error(),                   \
					 "contradicts the store's") &&       \
				  strstr(kvf_last_error(), "KVFLASH"),       \
			  "%s", kvf_last_error());                           \
		cr_assert_null(h);                                           \
	} while (0)

	OK(kvf_close(fx.st));
	fx.st = NULL;
	MISMATCH(model.n_layers, 3, "model.n_layers");
	MISMATCH(model.n_q_heads, 8, "model.n_q_heads");
	MISMATCH(model.n_kv_heads, 4, "model.n_kv_heads");
	MISMATCH(model.n_kv_heads, 1, "model.n_kv_heads");
	MISMATCH(model.head_dim, 128, "model.head_dim");
	MISMATCH(model.dtype, KVF_DTYPE_BF16, "model.dtype");
	MISMATCH(page_size, 8192, "page_size");
	MISMATCH(segment_size, 128 * 1024, "segment_size");
	MISMATCH(n_stripes, 1, "n_stripes");
	MISMATCH(n_stripes, 3, "n_stripes");
	MISMATCH(capacity_bytes, 2 * good.capacity_bytes, "capacity_bytes");
	MISMATCH(capacity_bytes, good.capacity_bytes / 2, "capacity_bytes");
	MISMATCH(media, KVF_MEDIA_MEMORY, "media");
	MISMATCH(kt_pages, 1, "kt_pages");
	/* read-only too */
	good.read_only = 1;
	MISMATCH(model.head_dim, 32, "model.head_dim");
	good.read_only = 0;
#undef MISMATCH
	/* a zero model means "as stored"; capacity rounding down to the
	 * same segments per stripe agrees */
	o = good;
	memset(&o.model, 0, sizeof(o.model));
	o.capacity_bytes = good.capacity_bytes + 64 * 1024;
	OK(kvf_open(fx.path, &o, &fx.st));
	d1 = fx_digest_of(fx.st);
	d1.user_bytes = d0.user_bytes;
	d1.host_bytes_written = d0.host_bytes_written;
	fx_digest_same(&d0, &d1, "after the refused reopens");
}

Test(open, open_read_only_refuses_writes)
{
	struct fx_digest d0 = fx_digest_of(fx.st), d1;
	kvf_options o = fx_filled_opts();
	kvf_store *second = NULL;
	unsigned char k[KVH * ROW], v[KVH * ROW], x[QH * ROW];

	memset(k, 1, sizeof(k));
	memset(v, 1, sizeof(v));
	memset(x, 1, sizeof(x));
	OK(kvf_close(fx.st));
	o.read_only = 1;
	OK(kvf_open(fx.path, &o, &fx.st));
	d1 = fx_digest_of(fx.st);
	d1.user_bytes = d0.user_bytes;
	d1.host_bytes_written = d0.host_bytes_written;
	fx_digest_same(&d0, &d1, "read-only reopen");
	REFUSED(kvf_seq_create(fx.st, 3), KVF_ENOTSUP,
		"kvf_seq_create: the store");
	REFUSED(kvf_seq_create(fx.st, 3), KVF_ENOTSUP, "is open read-only");
	REFUSED(kvf_seq_fork(fx.st, 1, 3, 10), KVF_ENOTSUP,
		"kvf_seq_fork: the store");
	REFUSED(kvf_seq_free(fx.st, 2), KVF_ENOTSUP, "kvf_seq_free: the store");
	REFUSED(kvf_append(fx.st, 1, 0, 1, k, v), KVF_ENOTSUP,
		"kvf_append: the store");
	REFUSED(kvf_append_x(fx.st, 1, 0, 1, x), KVF_ENOTSUP,
		"kvf_append_x: the store");
	/* a no-op: there is nothing to make durable */
	OK(kvf_sync(fx.st));
	/* readers share the directory; a writer does not */
	OK(kvf_open(fx.path, &o, &second));
	d1 = fx_digest_of(second);
	d1.host_bytes_written = d0.host_bytes_written;
	fx_digest_same(&d0, &d1, "second read-only handle");
	OK(kvf_close(second));
	second = NULL;
	o.read_only = 0;
	REFUSED(kvf_open(fx.path, &o, &second), KVF_EBUSY,
		"is open by another handle");
	cr_assert_null(second);
	OK(kvf_close(fx.st));
	/* the writer, back: everything as before */
	OK(kvf_open(fx.path, &o, &fx.st));
	d1 = fx_digest_of(fx.st);
	d1.user_bytes = d0.user_bytes;
	d1.host_bytes_written = d0.host_bytes_written;
	fx_digest_same(&d0, &d1, "reopen after read-only");
}

Test(open, open_directories)
{
	kvf_options o = fx_filled_opts();
	kvf_store *h = (kvf_store *)&o;
	char *foreign = strdup(tmp_path(fx.dir, "foreign"));
	char *empty = strdup(tmp_path(fx.dir, "empty"));
	char *missing = strdup(tmp_path(fx.dir, "missing"));
	FILE *f;

	/* a directory holding something else */
	cr_assert(eq(int, mkdir(foreign, 0755), 0));
	f = fopen(tmp_path(foreign, "notes.txt"), "w");
	cr_assert_not_null(f);
	fputs("not a store\n", f);
	fclose(f);
	REFUSED(kvf_open(foreign, &o, &h), KVF_EINVAL,
		"is not a kvflash store (no KVFLASH header) and is not empty");
	cr_assert_null(h);
	cr_assert(eq(str, (char *)fx_leftovers(foreign, "notes.txt"), ""));
	cr_assert(strstr(fx_dir_listing(foreign), "notes.txt") != NULL);

	/* nothing to reopen, and no options to create with */
	cr_assert(eq(int, mkdir(empty, 0755), 0));
	REFUSED(kvf_open(empty, NULL, &h), KVF_EINVAL,
		"holds no store; creating one needs options with a model");

	/* read-only needs a store */
	o.read_only = 1;
	REFUSED(kvf_open(empty, &o, &h), KVF_ENOENT, "holds no store (no ");
	cr_assert(eq(str, (char *)fx_leftovers(empty, ""), ""));
	/* a parent that does not exist */
	o.read_only = 0;
	REFUSED(kvf_open(tmp_path(missing, "deeper"), &o, &h), KVF_ENOENT,
		"kvf_open: mkdir");
	cr_assert(fx_path_exists(missing) == 0);
	/* a read-only open makes nothing */
	o.read_only = 1;
	REFUSED(kvf_open(missing, &o, &h), KVF_ENOENT,
		"holds no store (no such directory)");
	cr_assert(fx_path_exists(missing) == 0);
	free(foreign);
	free(empty);
	free(missing);
}

/* ---- allocation failures ------------------------------------------------- */

/* open_with_failure - kvf_open with the nth allocation failing (and every
 * later one, if sticky); the injection is off again afterwards */
static kvf_status open_with_failure(const char *p, const kvf_options *o,
				    uint64_t n, int sticky, kvf_store **h)
{
	kvf_status rc;

	kvf_alloc_fail_at(n, sticky);
	rc = kvf_open(p, o, h);
	kvf_alloc_fail_at(0, 0);
	return rc;
}

/* a failed open under injection: out of memory, or another clean error */
static void check_failed_open(kvf_status rc, kvf_store *h, uint64_t n)
{
	cr_assert_null(h, "allocation %" PRIu64 ": out set on failure", n);
	cr_assert(rc == KVF_ENOMEM || rc == KVF_EIO || rc == KVF_ECORRUPT,
		  "allocation %" PRIu64 " failing gave %d: %s", n, rc,
		  kvf_last_error());
	cr_assert(strlen(kvf_last_error()) > 0, "no message");
}

Test(open, open_create_out_of_memory)
{
	kvf_options o = fx_filled_opts();
	uint64_t n_ok = 0;

	/* sticky: every allocation from the nth on fails; the first n that
	 * succeeds bounds the allocations an open makes */
	for (uint64_t n = 1; n < 2000 && n_ok == 0; n++) {
		char leaf[32];
		kvf_store *h = (kvf_store *)&o;
		kvf_status rc;

		snprintf(leaf, sizeof(leaf), "c%" PRIu64, n);
		rc = open_with_failure(tmp_path(fx.dir, leaf), &o, n, 1, &h);
		if (rc == KVF_OK) {
			n_ok = n;
			OK(kvf_close(h));
			break;
		}
		check_failed_open(rc, h, n);
		/* BUG (reported): once every allocation fails, a failed create
		 * cannot remove its files (store_release builds their paths
		 * with kvf_malloc), so what is left is not checked here */
	}
	cr_assert(n_ok > 1, "kvf_open never succeeded");
	/* one failure only: the open fails cleanly or copes */
	for (uint64_t n = 1; n < n_ok; n++) {
		char leaf[32];
		kvf_store *h = (kvf_store *)&o;
		kvf_status rc;

		snprintf(leaf, sizeof(leaf), "o%" PRIu64, n);
		rc = open_with_failure(tmp_path(fx.dir, leaf), &o, n, 0, &h);
		if (rc == KVF_OK) {
			OK(kvf_seq_create(h, 9));
			OK(fx_append(h, 9, 9, 0, 0, 40));
			OK(kvf_close(h));
			continue;
		}
		check_failed_open(rc, h, n);
		cr_assert(eq(str, (char *)fx_leftovers(tmp_path(fx.dir, leaf), ""),
			     ""),
			  "allocation %" PRIu64 " failing left files behind",
			  n);
	}
}

/*
 * Reopen with every allocation from the nth on failing: a clean refusal
 * each time, and the store intact at the end.
 *
 * BUG (reported): with a single failure (sticky 0) the reopen can succeed
 * with every segment trimmed: recovery counts page references through
 * seq_foreach, which skips every sequence when its list allocation fails
 * (engine/sequences/seq.c), so all segments look dead and recovery reclaims them.
 * Only the sticky mode is run until that is fixed.
 */
Test(open, open_existing_out_of_memory)
{
	struct fx_digest d0 = fx_digest_of(fx.st), d1;
	uint64_t n_ok = 0;

	OK(kvf_close(fx.st));
	fx.st = NULL;
	for (uint64_t n = 1; n < 5000 && n_ok == 0; n++) {
		kvf_store *h = (kvf_store *)&d0;
		kvf_status rc = open_with_failure(fx.path, NULL, n, 1, &h);

		if (rc == KVF_OK) {
			n_ok = n;
			OK(kvf_close(h));
			break;
		}
		check_failed_open(rc, h, n);
	}
	cr_assert(n_ok > 1, "kvf_open never succeeded");
	OK(kvf_open(fx.path, NULL, &fx.st));
	d1 = fx_digest_of(fx.st);
	d1.user_bytes = d0.user_bytes;
	d1.host_bytes_written = d0.host_bytes_written;
	fx_digest_same(&d0, &d1, "after the failed reopens");
}

/* ---- damaged headers, and directories that hold no store ----------------- */

/* header_refused - every way of opening path fails with KVF_ECORRUPT,
 * names the header file and changes nothing */
static void header_refused(const char *path, const char *what)
{
	kvf_options o = fx_small_opts();
	char hpath[4096];

	snprintf(hpath, sizeof(hpath), "%s/%s", path, STORE_HEADER_FILE);
	fx_refused(path, &o, KVF_ECORRUPT, hpath, "damaged", what);
	fx_refused(path, NULL, KVF_ECORRUPT, hpath, "damaged", what);
	memset(&o.model, 0, sizeof(o.model));
	o.read_only = 1;
	fx_refused(path, &o, KVF_ECORRUPT, hpath, "damaged", what);
}

Test(open_header, damaged_header)
{
	uint64_t seed = rng_seed("open_header/damaged_header"), rng = seed;
	char *dir = tmpdir_make("open-hdr");
	char *path = strdup(tmp_path(dir, "s"));
	char *hpath = strdup(tmp_path(path, STORE_HEADER_FILE));
	unsigned char good[4096], bad[4096];
	ssize_t len;
	int fd;

	fx_make_store(path);
	fd = open(hpath, O_RDONLY);
	cr_assert(fd >= 0);
	len = read(fd, good, sizeof(good));
	close(fd);
	cr_assert(eq(i64, (int64_t)len, (int64_t)sizeof(struct store_header)));

#define PUT_HEADER(buf, n)                                                 \
	do {                                                               \
		int fd_ = open(hpath, O_WRONLY | O_TRUNC);                 \
		cr_assert(fd_ >= 0);                                       \
		cr_assert(eq(i64, (int64_t)write(fd_, (buf), (size_t)(n)), \
			     (int64_t)(n)));                               \
		close(fd_);                                                \
	} while (0)

	memcpy(bad, good, (size_t)len);
	bad[0] ^= 0x20;
	PUT_HEADER(bad, len);
	header_refused(path, "a flipped magic byte");

	PUT_HEADER(good, len / 2);
	header_refused(path, "a truncated header");

	PUT_HEADER(good, 0);
	header_refused(path, "an empty header file");

	for (int i = 0; i < 4; i++) {
		size_t n = 1 + rng_below(&rng, 2 * (uint64_t)len);
		char what[96];

		rng_fill(&rng, bad, n);
		if (n >= 8 && memcmp(bad, good, 8) == 0)
			bad[0] ^= 1; /* random, not the magic */
		PUT_HEADER(bad, n);
		snprintf(what, sizeof(what),
			 "seed %" PRIu64 ": %zu random bytes", seed, n);
		header_refused(path, what);
	}
#undef PUT_HEADER
	fd = open(hpath, O_WRONLY | O_TRUNC);
	cr_assert(fd >= 0);
	cr_assert(eq(i64, (int64_t)write(fd, good, (size_t)len), (int64_t)len));
	close(fd);
	fx_store_intact(path, "the header put back");
	free(hpath);
	free(path);
	tmpdir_remove(dir);
}

Test(open_header, not_a_store)
{
	char *dir = tmpdir_make("open-none");
	char *empty = strdup(tmp_path(dir, "empty"));
	char *foreign = strdup(tmp_path(dir, "foreign"));
	kvf_options o = fx_small_opts(), ro = fx_small_opts();

	memset(&ro.model, 0, sizeof(ro.model));
	ro.read_only = 1;
	cr_assert(eq(int, mkdir(empty, 0755), 0));
	cr_assert(eq(int, mkdir(foreign, 0755), 0));
	fx_put_file(tmp_path(foreign, "notes.txt"), 'n', 100);

	fx_refused(empty, &ro, KVF_ENOENT, empty, "holds no store",
		"read-only open of an empty directory");
	fx_refused(foreign, &ro, KVF_ENOENT, foreign, "holds no store",
		"read-only open of a foreign directory");
	fx_refused(foreign, &o, KVF_EINVAL, foreign,
		"is not a kvflash store (no KVFLASH header) and is not empty",
		"create in a foreign directory");
	fx_refused(foreign, NULL, KVF_EINVAL, foreign, "is not a kvflash store",
		"open of a foreign directory");
	free(foreign);
	free(empty);
	tmpdir_remove(dir);
}

Test(open_header, header_deleted)
{
	char *dir = tmpdir_make("open-nohdr");
	char *path = strdup(tmp_path(dir, "s"));
	char *hpath = strdup(tmp_path(path, STORE_HEADER_FILE));
	kvf_options o = fx_small_opts();
	unsigned char good[4096];
	char *before;
	kvf_store *h = NULL;
	kvf_status rc;
	ssize_t len;
	int fd;

	fx_make_store(path);
	fd = open(hpath, O_RDONLY);
	cr_assert(fd >= 0);
	len = read(fd, good, sizeof(good));
	close(fd);
	cr_assert(eq(int, unlink(hpath), 0));

	fx_refused(path, &o, KVF_ECORRUPT, hpath, "header", "create over meta/");
	fx_refused(path, NULL, KVF_ECORRUPT, hpath, "header",
		"reopen without a header");
	cr_assert(fx_path_exists(tmp_path(path, "meta")) &&
			  fx_path_exists(tmp_path(path, "stripe-000.kvf")),
		  "the damaged store's files were removed");

	/* read-only: refused too (the code says no store is there, as for
	 * any directory without a header), and nothing changes */
	memset(&o.model, 0, sizeof(o.model));
	o.read_only = 1;
	before = fx_tree_of(path);
	rc = kvf_open(path, &o, &h);
	cr_assert(rc == KVF_ECORRUPT || rc == KVF_ENOENT, "read-only: %d %s",
		  rc, kvf_last_error());
	cr_assert_null(h);
	fx_same_tree(path, before, "read-only open without a header");
	free(before);

	/* the header back: every byte of the store is still there */
	fd = open(hpath, O_WRONLY | O_CREAT, 0644);
	cr_assert(fd >= 0);
	cr_assert(eq(i64, (int64_t)write(fd, good, (size_t)len), (int64_t)len));
	close(fd);
	fx_store_intact(path, "the header put back");
	free(hpath);
	free(path);
	tmpdir_remove(dir);
}

/* A reopen that runs out of memory part way must fail cleanly or give the
 * store back whole: it once counted no references when a list allocation
 * failed, found every segment dead and trimmed the lot. */
Test(open_oom, reopen_under_allocation_failure_keeps_data)
{
	kvf_model m1 = { 1, 1, 1, 64, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m1, 64 * 1024, 8 << 20, 1);
	uint16_t k[64 * 64], v[64 * 64], back[64 * 64];
	kvf_store *st = NULL;

	for (int i = 0; i < 64 * 64; i++)
		k[i] = (uint16_t)(i * 7), v[i] = (uint16_t)(i * 13);
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_OK));
	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	cr_assert(eq(int, kvf_append(st, 1, 0, 64, k, v), KVF_OK));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	for (uint64_t n = 1; n < 400; n++) {
		kvf_status rc;

		st = NULL;
		kvf_alloc_fail_at(n, 0);
		rc = kvf_open(fx.path, NULL, &st);
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

