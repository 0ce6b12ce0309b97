/*
 * test_media_file.c - what only the file backend does: files per stripe,
 * O_DIRECT and its fallback, io_uring and pread paths, preallocation,
 * locking, durability across a reopen, and failures injected through the
 * sysio seam (EIO, short and torn writes, failed opens, fallocate, sync).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/alloc.h"
#include "api/status.h"
#include "flash_fixture.h"
#include "ftl/media.h"
#include "ftl/sysio.h"
#include "testutil.h"

#define PAGE 4096u
#define PPS 32u  /* pages per segment: 128 KiB segments */
#define SEGS 4u

static char *dir;
static char *paths[3];

static void setup(void)
{
	static const char *leaf[3] = { "stripe0", "stripe1", "stripe2" };

	dir = tmpdir_make("mfile");
	cr_assert_not_null(dir);
	for (int i = 0; i < 3; i++)
		paths[i] = strdup(tmp_path(dir, leaf[i]));
}

static void teardown(void)
{
	kvf_sysio_set(NULL);
	for (int i = 0; i < 3; i++)
		free(paths[i]);
	tmpdir_remove(dir);
}

static struct kvf_media_config config(uint32_t n_stripes,
				      enum kvf_media_switch uring)
{
	return (struct kvf_media_config){
		.kind = KVF_MEDIA_FILE,
		.geo = { .n_stripes = n_stripes, .page_size = PAGE,
			 .pages_per_segment = PPS, .segs_per_stripe = SEGS },
		.paths = (const char *const *)paths,
		.uring = uring,
	};
}

static struct kvf_media *open_ok(uint32_t n_stripes,
				 enum kvf_media_switch uring)
{
	struct kvf_media_config cfg = config(n_stripes, uring);
	struct kvf_media *m = NULL;

	cr_assert(eq(int, kvf_media_open(&cfg, &m), KVF_OK), "%s",
		  kvf_last_error());
	return m;
}

static unsigned char *filled(uint32_t n_pages, int byte)
{
	unsigned char *p = kvf_aligned_alloc(KVF_MEDIA_ALIGN,
					     (size_t)n_pages * PAGE);

	cr_assert_not_null(p);
	memset(p, byte, (size_t)n_pages * PAGE);
	return p;
}


TestSuite(media_file_only, .init = setup, .fini = teardown);

Test(media_file_only, stripes_are_files_preallocated)
{
	struct kvf_media *m = open_ok(3, KVF_MEDIA_AUTO);
	unsigned char *a = filled(PPS, 0xa1);
	struct kvf_media_stats st;
	struct stat sb;
	unsigned char head[16];
	int fd;

	for (int i = 0; i < 3; i++) {
		cr_assert(eq(int, stat(paths[i], &sb), 0));
		cr_assert(eq(i64, (long long)sb.st_size,
			     (long long)SEGS * PPS * PAGE), "stripe %d size", i);
	}
	/* segment 2 of stripe 1 lands at byte 2 * segment size of its file */
	cr_assert(eq(int, kvf_media_write_segment(m, 1, 2, a, (size_t)PPS * PAGE), KVF_OK));
	cr_assert(eq(int, kvf_media_sync(m), KVF_OK));
	fd = open(paths[1], O_RDONLY);
	cr_assert(eq(i64, (long long)pread(fd, head, sizeof(head),
					   (off_t)2 * PPS * PAGE), 16));
	close(fd);
	cr_assert(eq(u8, head[0], 0xa1));
	kvf_media_stats(m, &st);
	cr_assert(eq(str, (char *)st.backend, "file"));
	cr_assert(eq(u32, st.direct_io, 1), "O_DIRECT expected on %s", dir);
	cr_assert(eq(u32, st.uring, 1), "io_uring expected");
	cr_assert(eq(u64, st.syncs, 1));
	kvf_media_free(m);
	kvf_free(a);
}

/* durability: what was synced before close is read back after a reopen */
static void reopen_reads_back(enum kvf_media_switch uring)
{
	struct kvf_media *m = open_ok(2, uring);
	unsigned char *a = filled(PPS, 0), *b = filled(PPS, 0);
	uint64_t rng = rng_seed("reopen_reads_back");

	rng_fill(&rng, a, (size_t)PPS * PAGE);
	cr_assert(eq(int, kvf_media_write_segment(m, 1, 3, a, (size_t)PPS * PAGE), KVF_OK));
	cr_assert(eq(int, kvf_media_sync(m), KVF_OK));
	kvf_media_free(m);
	m = open_ok(2, uring);
	cr_assert(eq(int, kvf_media_read_pages(m, 1, 3, 0, PPS, b), KVF_OK));
	cr_assert(eq(int, memcmp(a, b, (size_t)PPS * PAGE), 0));
	kvf_media_free(m);
	kvf_free(a);
	kvf_free(b);
}

Test(media_file_only, reopen_reads_back_uring) { reopen_reads_back(KVF_MEDIA_AUTO); }
Test(media_file_only, reopen_reads_back_pread) { reopen_reads_back(KVF_MEDIA_OFF); }

Test(media_file_only, pread_path_reports_itself)
{
	struct kvf_media *m = open_ok(1, KVF_MEDIA_OFF);
	struct kvf_media_stats st;

	kvf_media_stats(m, &st);
	cr_assert(eq(u32, st.uring, 0));
	cr_assert(eq(u32, st.queue_depth, 1));
	kvf_media_free(m);
}

Test(media_file_only, second_open_is_busy_and_changes_nothing)
{
	struct kvf_media *m = open_ok(2, KVF_MEDIA_AUTO);
	struct kvf_media_config cfg = config(2, KVF_MEDIA_AUTO);
	struct kvf_media *m2 = NULL;
	struct stat sb;

	EXPECT(kvf_media_open(&cfg, &m2), KVF_EBUSY, "is in use by another open media");
	cr_assert_null(m2);
	cr_assert(eq(int, stat(paths[0], &sb), 0), "busy open removed a file");
	kvf_media_free(m);
}

Test(media_file_only, bad_config)
{
	struct kvf_media_config cfg = config(2, KVF_MEDIA_AUTO);
	struct kvf_media *m = NULL;
	const char *same[2] = { paths[0], paths[0] };
	const char *empty[2] = { paths[0], "" };
	char nested[4200];

	cfg.paths = NULL;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "needs paths");
	cfg.paths = same;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "stripes 0 and 1 have the same path");
	cfg.paths = empty;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "path of stripe 1 is empty");
	cfg = config(2, KVF_MEDIA_AUTO);
	cfg.geo.page_size = 2048;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "page_size >= 4096");
	cfg = config(2, KVF_MEDIA_AUTO);
	cfg.queue_depth = 5000;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "queue_depth 5000 out of range");
	cfg = config(2, KVF_MEDIA_AUTO);
	cfg.max_rings = 99;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "max_rings 99 out of range");
	cfg = config(1, KVF_MEDIA_AUTO);
	cfg.paths = (const char *const *)&dir; /* a directory */
	EXPECT(kvf_media_open(&cfg, &m), KVF_EIO, dir);
	snprintf(nested, sizeof(nested), "%s/no/such/dir/file", dir);
	{
		const char *p[1] = { nested };

		cfg.paths = p;
		EXPECT(kvf_media_open(&cfg, &m), KVF_EIO, "No such file or directory");
	}
	cr_assert_null(m);
}

/* A failed open removes the files it created and keeps existing ones. */
Test(media_file_only, failed_open_leaves_nothing_behind)
{
	struct kvf_media_config cfg = config(3, KVF_MEDIA_AUTO);
	struct kvf_media *m = NULL;
	struct stat sb;
	int fd;

	/* stripe 2 is a directory: stripes 0 and 1 get created first */
	cr_assert(eq(int, mkdir(paths[2], 0755), 0));
	EXPECT(kvf_media_open(&cfg, &m), KVF_EIO, paths[2]);
	cr_assert_null(m);
	cr_assert(ne(int, stat(paths[0], &sb), 0), "stripe0 left behind");
	cr_assert(ne(int, stat(paths[1], &sb), 0), "stripe1 left behind");
	cr_assert(eq(int, rmdir(paths[2]), 0));
	/* an existing file survives a failed open */
	fd = open(paths[0], O_CREAT | O_WRONLY, 0644);
	cr_assert(ge(int, fd, 0));
	close(fd);
	cr_assert(eq(int, mkdir(paths[2], 0755), 0));
	EXPECT(kvf_media_open(&cfg, &m), KVF_EIO, paths[2]);
	cr_assert(eq(int, stat(paths[0], &sb), 0), "existing stripe0 removed");
}

/* ---- failures injected through the seam -------------------------------- */

static struct kvf_sysio inject;
static int fail_op = -1;           /* op to fail, -1 none */
static int fail_errno;             /* errno to fail it with */
static int fail_after;             /* transfers of that op to let through */
static ssize_t short_len;          /* >0: cut the next transfer to this */
static int refuse_direct;          /* open with O_DIRECT gives EINVAL */
static int fail_fallocate;         /* fallocate fails with this errno */
static int fail_sync;              /* fdatasync fails with this errno */

static ssize_t fault_hook(enum kvf_sysio_op op, int fd, size_t len, off_t off)
{
	(void)fd;
	(void)off;
	if (short_len > 0 && (int)op == KVF_SYSIO_WRITE) {
		ssize_t n = short_len;

		short_len = 0;
		return n;
	}
	if ((int)op == fail_op) {
		if (fail_after == 0)
			return -fail_errno;
		fail_after--;
	}
	return (ssize_t)len;
}

static int open_hook(const char *path, int flags, mode_t mode)
{
	if (refuse_direct && (flags & O_DIRECT)) {
		errno = EINVAL;
		return -1;
	}
	return kvf_sysio_real.open(path, flags, mode);
}

static int fallocate_hook(int fd, int mode, off_t off, off_t len)
{
	if (fail_fallocate && mode == 0) {
		errno = fail_fallocate;
		return -1;
	}
	return kvf_sysio_real.fallocate(fd, mode, off, len);
}

static int fdatasync_hook(int fd)
{
	if (fail_sync) {
		errno = fail_sync;
		return -1;
	}
	return kvf_sysio_real.fdatasync(fd);
}

static void install_hooks(void)
{
	inject = kvf_sysio_real;
	inject.fault = fault_hook;
	inject.open = open_hook;
	inject.fallocate = fallocate_hook;
	inject.fdatasync = fdatasync_hook;
	fail_op = -1;
	short_len = 0;
	refuse_direct = fail_fallocate = fail_sync = 0;
	kvf_sysio_set(&inject);
}

static void eio_on(enum kvf_media_switch uring, enum kvf_sysio_op op)
{
	struct kvf_media *m;
	unsigned char *a = filled(PPS, 0x33), *b = filled(PPS, 0);
	struct kvf_media_stats before, after;

	install_hooks();
	m = open_ok(2, uring);
	cr_assert(eq(int, kvf_media_write_segment(m, 0, 1, a, (size_t)PPS * PAGE), KVF_OK));
	kvf_media_stats(m, &before);
	fail_op = (int)op;
	fail_errno = EIO;
	fail_after = 0;
	if (op == KVF_SYSIO_WRITE)
		EXPECT(kvf_media_write_segment(m, 1, 0, a, (size_t)PPS * PAGE),
		       KVF_EIO, "write of 131072 bytes at offset 0 of");
	else
		EXPECT(kvf_media_read_pages(m, 0, 1, 0, PPS, b), KVF_EIO,
		       "read of 131072 bytes at offset 131072 of");
	cr_assert(ne(ptr, strstr(kvf_last_error(), "stripe"), NULL),
		  "no file named: %s", kvf_last_error());
	cr_assert(ne(ptr, strstr(kvf_last_error(), "errno 5"), NULL),
		  "no errno: %s", kvf_last_error());
	kvf_media_stats(m, &after);
	cr_assert(eq(u64, after.bytes_written, before.bytes_written));
	cr_assert(eq(u64, after.bytes_read, before.bytes_read));
	fail_op = -1;
	/* the media keeps working after the error */
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 1, 0, PPS, b), KVF_OK));
	cr_assert(eq(int, memcmp(a, b, (size_t)PPS * PAGE), 0));
	kvf_media_free(m);
	kvf_free(a);
	kvf_free(b);
}

Test(media_file_only, eio_write_uring) { eio_on(KVF_MEDIA_AUTO, KVF_SYSIO_WRITE); }
Test(media_file_only, eio_read_uring) { eio_on(KVF_MEDIA_AUTO, KVF_SYSIO_READ); }
Test(media_file_only, eio_write_pread) { eio_on(KVF_MEDIA_OFF, KVF_SYSIO_WRITE); }
Test(media_file_only, eio_read_pread) { eio_on(KVF_MEDIA_OFF, KVF_SYSIO_READ); }

/* EIO in the middle of a batch: the error names the failing transfer */
Test(media_file_only, eio_mid_batch)
{
	struct kvf_media *m;
	unsigned char *a = filled(4 * PPS, 0x44);
	struct kvf_media_io io[4];

	install_hooks();
	m = open_ok(2, KVF_MEDIA_OFF);
	for (int i = 0; i < 4; i++)
		io[i] = (struct kvf_media_io){ .stripe = (uint32_t)i % 2,
					       .seg = (uint64_t)i / 2, .page = 0,
					       .n_pages = PPS,
					       .buf = a + (size_t)i * PPS * PAGE };
	fail_op = KVF_SYSIO_WRITE;
	fail_errno = ENOSPC;
	fail_after = 2;
	EXPECT(kvf_media_write(m, io, 4), KVF_EIO, "at offset 131072 of");
	cr_assert(ne(ptr, strstr(kvf_last_error(), "stripe0"), NULL), "%s",
		  kvf_last_error());
	kvf_media_free(m);
	kvf_free(a);
}

/* A short write is completed by retrying the rest: no error, all bytes. */
static void short_write_completes(enum kvf_media_switch uring)
{
	struct kvf_media *m;
	unsigned char *a = filled(PPS, 0), *b = filled(PPS, 0);
	uint64_t rng = 99;

	install_hooks();
	m = open_ok(1, uring);
	rng_fill(&rng, a, (size_t)PPS * PAGE);
	short_len = 3 * PAGE;
	cr_assert(eq(int, kvf_media_write_segment(m, 0, 2, a, (size_t)PPS * PAGE), KVF_OK),
		  "%s", kvf_last_error());
	cr_assert(eq(i64, (long long)short_len, 0), "the hook was not consulted");
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 2, 0, PPS, b), KVF_OK));
	cr_assert(eq(int, memcmp(a, b, (size_t)PPS * PAGE), 0));
	kvf_media_free(m);
	kvf_free(a);
	kvf_free(b);
}

Test(media_file_only, short_write_completes_uring) { short_write_completes(KVF_MEDIA_AUTO); }
Test(media_file_only, short_write_completes_pread) { short_write_completes(KVF_MEDIA_OFF); }

/* A torn write (short, then EIO) fails with KVF_EIO; the first part is on
 * disk and the rest is the old contents: exactly what the seam let through. */
static void torn_write(enum kvf_media_switch uring)
{
	struct kvf_media *m;
	unsigned char *old = filled(PPS, 0x0d), *new = filled(PPS, 0xe0);
	unsigned char *b = filled(PPS, 0);

	install_hooks();
	m = open_ok(1, uring);
	cr_assert(eq(int, kvf_media_write_segment(m, 0, 0, old, (size_t)PPS * PAGE), KVF_OK));
	short_len = 5 * PAGE;
	fail_op = KVF_SYSIO_WRITE;
	fail_errno = EIO;
	fail_after = 0;
	EXPECT(kvf_media_write_segment(m, 0, 0, new, (size_t)PPS * PAGE), KVF_EIO,
	       "at offset 20480");
	fail_op = -1;
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 0, 0, PPS, b), KVF_OK));
	for (size_t i = 0; i < (size_t)PPS * PAGE; i++)
		cr_assert(eq(u8, b[i], i < 5 * PAGE ? 0xe0 : 0x0d), "byte %zu", i);
	kvf_media_free(m);
	kvf_free(old);
	kvf_free(new);
	kvf_free(b);
}

Test(media_file_only, torn_write_uring) { torn_write(KVF_MEDIA_AUTO); }
Test(media_file_only, torn_write_pread) { torn_write(KVF_MEDIA_OFF); }

Test(media_file_only, o_direct_refused_falls_back)
{
	struct kvf_media *m;
	struct kvf_media_stats st;
	struct kvf_media_config cfg = config(2, KVF_MEDIA_AUTO);
	unsigned char *a = filled(PPS, 0x77), *b = filled(PPS, 0);

	install_hooks();
	refuse_direct = 1;
	m = open_ok(2, KVF_MEDIA_AUTO);
	kvf_media_stats(m, &st);
	cr_assert(eq(u32, st.direct_io, 0), "fallback not reported");
	cr_assert(eq(int, kvf_media_write_segment(m, 1, 1, a, (size_t)PPS * PAGE), KVF_OK));
	cr_assert(eq(int, kvf_media_read_pages(m, 1, 1, 0, PPS, b), KVF_OK));
	cr_assert(eq(int, memcmp(a, b, (size_t)PPS * PAGE), 0));
	kvf_media_free(m);
	/* forced on: refused, and the files this open made are gone */
	unlink(paths[0]);
	unlink(paths[1]);
	cfg.direct_io = KVF_MEDIA_ON;
	m = NULL;
	EXPECT(kvf_media_open(&cfg, &m), KVF_ENOTSUP, "refuses O_DIRECT and direct_io is forced on");
	cr_assert_null(m);
	cr_assert(ne(int, access(paths[0], F_OK), 0), "stripe0 left behind");
	kvf_free(a);
	kvf_free(b);
}

Test(media_file_only, fallocate_unsupported_uses_ftruncate)
{
	struct kvf_media *m;
	struct stat sb;

	install_hooks();
	fail_fallocate = EOPNOTSUPP;
	m = open_ok(1, KVF_MEDIA_AUTO);
	cr_assert(eq(int, stat(paths[0], &sb), 0));
	cr_assert(eq(i64, (long long)sb.st_size, (long long)SEGS * PPS * PAGE));
	kvf_media_free(m);
}

/* Nothing is allocated at open: a full file system does not refuse it;
 * the first segment that needs space does, naming the file. */
Test(media_file_only, open_allocates_nothing)
{
	struct kvf_media_config cfg = config(1, KVF_MEDIA_AUTO);
	struct kvf_media *m = NULL;
	struct stat sb;

	install_hooks();
	fail_fallocate = ENOSPC;
	cr_assert(eq(int, kvf_media_open(&cfg, &m), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, stat(paths[0], &sb), 0));
	cr_assert(eq(i64, (long long)sb.st_blocks, 0LL), "%lld blocks at open",
		  (long long)sb.st_blocks);
	cr_assert(eq(i64, (long long)sb.st_size, (long long)SEGS * PPS * PAGE));
	EXPECT(kvf_media_allocate_segment(m, 0, 1), KVF_ENOSPC, "is full: segment 1");
	fail_fallocate = EIO;
	EXPECT(kvf_media_allocate_segment(m, 0, 1), KVF_EIO, "fallocate");
	fail_fallocate = 0;
	cr_assert(eq(int, kvf_media_allocate_segment(m, 0, 1), KVF_OK), "%s",
		  kvf_last_error());
	kvf_media_free(m);
}

/* A segment written part full gives the rest of its space back; the next
 * allocation of it takes the whole segment again. */
Test(media_file_only, release_tail_punches_the_rest)
{
	struct kvf_media_config cfg = config(1, KVF_MEDIA_AUTO);
	struct kvf_media *m = NULL;
	unsigned char *a = filled(2, 0x5a), *back = filled(2, 0);
	struct stat sb;
	long long whole, part;

	cr_assert(eq(int, kvf_media_open(&cfg, &m), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_media_allocate_segment(m, 0, 2), KVF_OK));
	cr_assert(eq(int, kvf_media_write_segment(m, 0, 2, a, 2 * PAGE), KVF_OK));
	cr_assert(eq(int, stat(paths[0], &sb), 0));
	whole = (long long)sb.st_blocks * 512;
	cr_assert(ge(i64, whole, (long long)PPS * PAGE), "%lld bytes allocated", whole);
	EXPECT(kvf_media_release_tail(m, 0, 2, PPS + 1), KVF_ERANGE, "out of range");
	EXPECT(kvf_media_release_tail(m, 1, 2, 2), KVF_ERANGE, "out of range");
	cr_assert(eq(int, kvf_media_release_tail(m, 0, 2, 2), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, stat(paths[0], &sb), 0));
	part = (long long)sb.st_blocks * 512;
	cr_assert(le(i64, part, 2LL * PAGE), "%lld bytes after the release", part);
	/* the pages written stay */
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 2, 0, 2, back), KVF_OK));
	cr_assert(eq(int, memcmp(a, back, 2 * PAGE), 0));
	/* released: allocating it again takes the whole segment */
	cr_assert(eq(int, kvf_media_allocate_segment(m, 0, 2), KVF_OK));
	cr_assert(eq(int, stat(paths[0], &sb), 0));
	cr_assert(eq(i64, (long long)sb.st_blocks * 512, whole));
	kvf_media_free(m);
	kvf_free(a);
	kvf_free(back);
}

Test(media_file_only, sync_failure_names_the_file)
{
	struct kvf_media *m;
	struct kvf_media_stats st;

	install_hooks();
	m = open_ok(2, KVF_MEDIA_AUTO);
	fail_sync = EIO;
	EXPECT(kvf_media_sync(m), KVF_EIO, "fdatasync of");
	cr_assert(ne(ptr, strstr(kvf_last_error(), "stripe0"), NULL));
	fail_sync = 0;
	cr_assert(eq(int, kvf_media_sync(m), KVF_OK));
	kvf_media_stats(m, &st);
	cr_assert(eq(u64, st.syncs, 1));
	kvf_media_free(m);
}

/* Many requests at a queue depth smaller than the batch: all complete. */
Test(media_file_only, batch_deeper_than_queue)
{
	struct kvf_media_config cfg = config(2, KVF_MEDIA_ON);
	struct kvf_media *m = NULL;
	enum { N = 2 * SEGS * PPS };
	struct kvf_media_io *io = calloc(N, sizeof(*io));
	unsigned char *a = filled(N, 0), *b = filled(N, 0);
	uint64_t rng = 7;

	cfg.queue_depth = 4;
	cr_assert(eq(int, kvf_media_open(&cfg, &m), KVF_OK), "%s", kvf_last_error());
	rng_fill(&rng, a, (size_t)N * PAGE);
	for (uint32_t i = 0; i < N; i++)
		io[i] = (struct kvf_media_io){ .stripe = i % 2,
					       .seg = (i / 2) / PPS,
					       .page = (i / 2) % PPS,
					       .n_pages = 1,
					       .buf = a + (size_t)i * PAGE };
	cr_assert(eq(int, kvf_media_write(m, io, N), KVF_OK), "%s", kvf_last_error());
	for (uint32_t i = 0; i < N; i++)
		io[i].buf = b + (size_t)i * PAGE;
	cr_assert(eq(int, kvf_media_read(m, io, N), KVF_OK));
	cr_assert(eq(int, memcmp(a, b, (size_t)N * PAGE), 0));
	kvf_media_free(m);
	free(io);
	kvf_free(a);
	kvf_free(b);
}

/* Read-only opens share the files, never create or grow them, and refuse
 * writes and trims; a writer's exclusive lock keeps them out. */
Test(media_file_only, read_only_opens)
{
	struct kvf_media *m = open_ok(2, KVF_MEDIA_AUTO), *r1 = NULL, *r2 = NULL;
	struct kvf_media_config cfg = config(2, KVF_MEDIA_AUTO);
	unsigned char *a = filled(PPS, 0x3c), *b = filled(PPS, 0);
	struct stat sb;

	cr_assert(eq(int, kvf_media_write_segment(m, 1, 2, a, (size_t)PPS * PAGE), KVF_OK));
	cfg.read_only = 1;
	EXPECT(kvf_media_open(&cfg, &r1), KVF_EBUSY, "in use by another open media");
	kvf_media_free(m);
	cr_assert(eq(int, kvf_media_open(&cfg, &r1), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_media_open(&cfg, &r2), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_media_read_pages(r2, 1, 2, 0, PPS, b), KVF_OK));
	cr_assert(eq(int, memcmp(a, b, (size_t)PPS * PAGE), 0));
	EXPECT(kvf_media_write_segment(r1, 0, 0, a, PAGE), KVF_ENOTSUP, "open read-only");
	EXPECT(kvf_media_trim_segment(r1, 1, 2), KVF_ENOTSUP, "open read-only");
	cr_assert(eq(int, kvf_media_sync(r1), KVF_OK));
	kvf_media_free(r1);
	kvf_media_free(r2);
	/* a missing stripe is not created: read-only, or an existing
	 * store's writable open */
	cfg = config(3, KVF_MEDIA_AUTO);
	cfg.read_only = 1;
	EXPECT(kvf_media_open(&cfg, &r1), KVF_ECORRUPT, "stripe2");
	cr_assert(ne(int, stat(paths[2], &sb), 0), "read-only open created stripe2");
	cfg.read_only = 0;
	cfg.existing = 1;
	EXPECT(kvf_media_open(&cfg, &r1), KVF_ECORRUPT, "is missing");
	cr_assert(ne(int, stat(paths[2], &sb), 0), "an open of existing files created stripe2");
	kvf_free(a);
	kvf_free(b);
}

/* Started reads (kvf_media_read_start / _finish): the same bytes as
 * kvf_media_read, deeper than the queue and with the caller writing
 * elsewhere in between; they take at most half the rings, so a
 * synchronous read made while those are held still runs; too many
 * requests refused; an injected EIO reported by finish, the media fine
 * afterwards; the pread path reads at start. */
static void started_reads(enum kvf_media_switch uring)
{
	struct kvf_media_config cfg = config(2, uring);
	struct kvf_media *m = NULL;
	enum { N = 2 * SEGS * PPS };
	struct kvf_media_io *io = calloc(N, sizeof(*io));
	unsigned char *a = filled(N, 0), *b = filled(N, 0), *c = filled(PPS, 0);
	struct kvf_media_read_op *op = calloc(3, sizeof(*op));
	struct kvf_media_stats s0, s1;
	uint64_t rng = 11;
	uint32_t per = N / 3;

	cr_assert(io && op);
	cfg.queue_depth = 4;
	cfg.max_rings = 4; /* two for started reads, two kept back */
	cr_assert(eq(int, kvf_media_open(&cfg, &m), KVF_OK), "%s", kvf_last_error());
	rng_fill(&rng, a, (size_t)N * PAGE);
	for (uint32_t i = 0; i < N; i++)
		io[i] = (struct kvf_media_io){ .stripe = i % 2,
					       .seg = (i / 2) / PPS,
					       .page = (i / 2) % PPS,
					       .n_pages = 1,
					       .buf = a + (size_t)i * PAGE };
	cr_assert(eq(int, kvf_media_write(m, io, N), KVF_OK), "%s", kvf_last_error());
	for (uint32_t i = 0; i < N; i++)
		io[i].buf = b + (size_t)i * PAGE;
	/* three started at once: the third reads at start */
	for (uint32_t k = 0; k < 3; k++)
		cr_assert(eq(int, kvf_media_read_start(m, io + k * per, per, &op[k]),
			     KVF_OK), "%s", kvf_last_error());
	if (uring != KVF_MEDIA_OFF) {
		cr_assert(ge(int, op[0].ring, 0));
		cr_assert(ge(int, op[1].ring, 0));
	}
	cr_assert(lt(int, op[2].ring, 0), "half the rings are kept back");
	/* a synchronous read while both rings for started reads are held */
	cr_assert(eq(int, kvf_media_read_pages(m, 1, 0, 0, PPS, c), KVF_OK),
		  "%s", kvf_last_error());
	for (uint32_t k = 0; k < 3; k++)
		cr_assert(eq(int, kvf_media_read_finish(m, &op[k]), KVF_OK),
			  "%s", kvf_last_error());
	cr_assert(eq(int, memcmp(a, b, (size_t)3 * per * PAGE), 0));
	EXPECT(kvf_media_read_start(m, io, KVF_MEDIA_ASYNC_IO + 1, &op[0]),
	       KVF_EINVAL, "more than");
	/* an error of a started read comes from finish (or start), and
	 * counts no bytes read */
	install_hooks();
	fail_op = KVF_SYSIO_READ;
	fail_errno = EIO;
	fail_after = 2;
	kvf_media_stats(m, &s0);
	{
		kvf_status rc = kvf_media_read_start(m, io, per, &op[0]);

		if (rc == KVF_OK)
			rc = kvf_media_read_finish(m, &op[0]);
		cr_assert(eq(int, rc, KVF_EIO));
		cr_assert(ne(ptr, strstr(kvf_last_error(), "errno 5"), NULL),
			  "%s", kvf_last_error());
	}
	kvf_media_stats(m, &s1);
	cr_assert(eq(u64, s1.bytes_read, s0.bytes_read));
	cr_assert(eq(u64, s1.read_ios, s0.read_ios));
	/* and the rings are fine afterwards: read, counted once */
	fail_op = -1;
	memset(b, 0, (size_t)N * PAGE);
	cr_assert(eq(int, kvf_media_read_start(m, io, per, &op[0]), KVF_OK));
	cr_assert(eq(int, kvf_media_read_finish(m, &op[0]), KVF_OK));
	cr_assert(eq(int, memcmp(a, b, (size_t)per * PAGE), 0));
	kvf_media_stats(m, &s0);
	cr_assert(eq(u64, s0.bytes_read, s1.bytes_read + (uint64_t)per * PAGE));
	cr_assert(eq(u64, s0.read_ios, s1.read_ios + per));
	kvf_media_free(m);
	free(io);
	free(op);
	kvf_free(a);
	kvf_free(b);
	kvf_free(c);
}

Test(media_file_only, started_reads_uring) { started_reads(KVF_MEDIA_ON); }
Test(media_file_only, started_reads_pread) { started_reads(KVF_MEDIA_OFF); }
