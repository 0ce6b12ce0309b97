/*
 * test_media_flash_image.c - the emulated NAND device kept in a persistent
 * image: written, synced, closed and reopened it reads every page back,
 * with its wear (erase counts equal) and a working FTL (kvf_flash_check
 * after every reopen); a writer killed with SIGKILL loses nothing synced;
 * programs torn either way at the system-call seam (bytes without their
 * spare record, a record without its bytes, half the bytes), records
 * corrupted in the file and flipped page bytes are never returned as
 * data; a damaged header is KVF_ECORRUPT; an existing image brings its
 * own geometry, and one of another logical size is refused.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/media_flash.h"
#include "ftl/sysio.h"
#include "testutil.h"

#define PAGE 4096u
#define PPS 16u
#define STRIPES 2u
#define SEGS 24u
#define LPNS (SEGS * PPS) /* per stripe */

static char *dir;

static void setup(void)
{
	dir = tmpdir_make("flashimg");
	cr_assert_not_null(dir);
}

static void teardown(void)
{
	kvf_sysio_set(NULL);
	tmpdir_remove(dir);
}

TestSuite(media_flash_image, .init = setup, .fini = teardown, .timeout = 120);

static struct kvf_flash_config fc;

static struct kvf_media_config config(const char *path)
{
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = STRIPES, .page_size = PAGE,
			 .pages_per_segment = PPS, .segs_per_stripe = SEGS },
		.flash = &fc,
	};

	kvf_flash_config_init(&fc);
	fc.channels = STRIPES;
	fc.spare_factor = 0.2;
	fc.backing = KVF_FLASH_BACKING_IMAGE;
	fc.path = path;
	return mc;
}

static struct kvf_media *open_image(const char *path)
{
	struct kvf_media_config mc = config(path);
	struct kvf_media *m = NULL;

	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_flash_check(m), KVF_OK), "%s", kvf_last_error());
	return m;
}

/* the bytes of version ver of (stripe, lpn): unique to all three */
static void fill(void *buf, uint32_t stripe, uint32_t lpn, uint32_t ver)
{
	uint32_t *w = buf;
	uint32_t seed = (stripe * LPNS + lpn) * 7919u + ver * 104729u + 1;

	for (uint32_t i = 0; i < PAGE / 4; i++)
		w[i] = seed * 2654435761u + i * 40503u;
}

static kvf_status write_page(struct kvf_media *m, uint32_t stripe,
			     uint32_t lpn, uint32_t ver, void *buf)
{
	struct kvf_media_io io = { .stripe = stripe, .seg = lpn / PPS,
				   .page = lpn % PPS, .n_pages = 1,
				   .buf = buf };

	fill(buf, stripe, lpn, ver);
	return kvf_media_write(m, &io, 1);
}

/*
 * check_page - the page reads as version want (0: zeros, never written
 * or trimmed), or, with any set, as zeros or any version up to max_ver
 * of this very page; never another page's bytes.  KVF_ECORRUPT passes
 * only with any set.
 */
static void check_page(struct kvf_media *m, uint32_t stripe, uint32_t lpn,
		       uint32_t want, uint32_t max_ver, int any)
{
	static unsigned char *r, *e;
	kvf_status rc;
	int ok = 0;

	if (r == NULL) {
		r = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
		e = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
	}
	rc = kvf_media_read_pages(m, stripe, lpn / PPS, lpn % PPS, 1, r);
	if (any && rc == KVF_ECORRUPT)
		return;
	cr_assert(eq(int, rc, KVF_OK), "stripe %u lpn %u: %s", stripe, lpn,
		  kvf_last_error());
	for (uint32_t v = any ? 0 : want; v <= (any ? max_ver : want) && !ok;
	     v++) {
		if (v == 0)
			memset(e, 0, PAGE);
		else
			fill(e, stripe, lpn, v);
		ok = memcmp(r, e, PAGE) == 0;
	}
	cr_assert(ok, "stripe %u lpn %u: not version %u (max %u, any %d)",
		  stripe, lpn, want, max_ver, any);
}

static uint64_t rng;

/* churn - n single-page writes at random lpns; ver[] tracks versions */
static void churn(struct kvf_media *m, uint32_t *ver, uint32_t n, void *buf)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = (uint32_t)rng_below(&rng, STRIPES);
		uint32_t l = (uint32_t)rng_below(&rng, LPNS);

		cr_assert(eq(int, write_page(m, s, l, ++ver[s * LPNS + l], buf),
			     KVF_OK), "%s", kvf_last_error());
	}
}

static uint32_t *erase_counts(struct kvf_media *m, uint32_t *n_blocks)
{
	struct nand *n = kvf_flash_nand(m);
	uint32_t *ec = kvf_malloc(n->geo.n_blocks * sizeof(uint32_t));

	memcpy(ec, n->erase_count, n->geo.n_blocks * sizeof(uint32_t));
	*n_blocks = n->geo.n_blocks;
	return ec;
}

Test(media_flash_image, write_sync_close_reopen_reads_every_page)
{
	const char *path = tmp_path(dir, "dev.img");
	uint32_t *ver = kvf_calloc(STRIPES * LPNS, sizeof(uint32_t));
	void *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
	struct kvf_flash_stats fs;
	struct kvf_media *m;

	rng = rng_seed("write_sync_close_reopen_reads_every_page");
	m = open_image(path);
	cr_assert(eq(int, kvf_flash_stats(m, &fs), KVF_OK));
	cr_assert(eq(u32, fs.image, 1));
	cr_assert(eq(u32, fs.image_created, 1));
	for (uint32_t s = 0; s < STRIPES; s++)
		for (uint32_t l = 0; l < LPNS; l++)
			cr_assert(eq(int, write_page(m, s, l, ++ver[s * LPNS + l], buf),
				     KVF_OK));
	/* a trimmed segment and some trimmed pages read as zeros */
	cr_assert(eq(int, kvf_media_trim_segment(m, 1, 3), KVF_OK));
	cr_assert(eq(int, kvf_flash_trim_pages(m, 0, 100, 5), KVF_OK));
	for (uint32_t l = 3 * PPS; l < 4 * PPS; l++)
		ver[LPNS + l] = 0;
	for (uint32_t l = 100; l < 105; l++)
		ver[l] = 0;
	/* written again after its trim: the newer program wins */
	cr_assert(eq(int, write_page(m, 0, 102, 7, buf), KVF_OK));
	ver[102] = 7;
	cr_assert(eq(int, kvf_media_sync(m), KVF_OK), "%s", kvf_last_error());
	kvf_media_free(m);

	m = open_image(path);
	cr_assert(eq(int, kvf_flash_stats(m, &fs), KVF_OK));
	cr_assert(eq(u32, fs.image_created, 0));
	cr_assert(ge(u64, fs.image_scan_records, STRIPES * LPNS));
	cr_assert(eq(u64, fs.image_scan_verified, 0),
		  "a clean close leaves nothing newer than the durable point");
	for (uint32_t s = 0; s < STRIPES; s++)
		for (uint32_t l = 0; l < LPNS; l++)
			check_page(m, s, l, ver[s * LPNS + l], 0, 0);
	/* and it goes on working: more writes, close without sync, reopen */
	churn(m, ver, 500, buf);
	kvf_media_free(m);
	m = open_image(path);
	for (uint32_t s = 0; s < STRIPES; s++)
		for (uint32_t l = 0; l < LPNS; l++)
			check_page(m, s, l, ver[s * LPNS + l], 0, 0);
	kvf_media_free(m);
	kvf_free(ver);
	kvf_free(buf);
}

Test(media_flash_image, gc_and_wear_survive_reopen)
{
	const char *path = tmp_path(dir, "dev.img");
	uint32_t *ver = kvf_calloc(STRIPES * LPNS, sizeof(uint32_t));
	void *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
	struct kvf_flash_stats a, b;
	uint32_t *ec0, *ec1, nb0, nb1;
	struct kvf_media *m;

	rng = rng_seed("gc_and_wear_survive_reopen");
	m = open_image(path);
	for (int round = 0; round < 3; round++) {
		churn(m, ver, 6 * STRIPES * LPNS, buf);
		cr_assert(eq(int, kvf_flash_stats(m, &a), KVF_OK));
		cr_assert(a.gc_victims > (0), "the churn must run GC");
		ec0 = erase_counts(m, &nb0);
		cr_assert(eq(int, kvf_media_sync(m), KVF_OK));
		kvf_media_free(m);

		m = open_image(path);
		ec1 = erase_counts(m, &nb1);
		cr_assert(eq(u32, nb0, nb1));
		for (uint32_t i = 0; i < nb0; i++)
			cr_assert(eq(u32, ec0[i], ec1[i]), "block %u", i);
		cr_assert(eq(int, kvf_flash_stats(m, &b), KVF_OK));
		cr_assert(eq(u32, a.erase_max, b.erase_max));
		cr_assert(eq(u32, a.erase_min, b.erase_min));
		cr_assert(eq(dbl, a.erase_mean, b.erase_mean));
		for (uint32_t s = 0; s < STRIPES; s++)
			for (uint32_t l = 0; l < LPNS; l++)
				check_page(m, s, l, ver[s * LPNS + l], 0, 0);
		kvf_free(ec0);
		kvf_free(ec1);
	}
	kvf_media_free(m);
	kvf_free(ver);
	kvf_free(buf);
}

/* A child writes, syncing now and then, and kills itself mid-round. */
Test(media_flash_image, kill_keeps_every_synced_page)
{
	const char *path = tmp_path(dir, "dev.img");
	uint32_t *ver = kvf_calloc(STRIPES * LPNS, sizeof(uint32_t));
	void *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
	uint64_t seed = rng_seed("kill_keeps_every_synced_page");
	int fds[2], status;
	uint32_t rounds = 0, got;
	pid_t pid;

	cr_assert(eq(int, pipe(fds), 0));
	pid = fork();
	cr_assert(ge(int, pid, 0));
	if (pid == 0) {
		struct kvf_media *m = open_image(path);

		close(fds[0]);
		rng = seed;
		/* round r writes every page as version r, in random order */
		for (uint32_t r = 1;; r++) {
			for (uint32_t i = 0; i < STRIPES * LPNS; i++) {
				uint32_t s = (uint32_t)rng_below(&rng, STRIPES);
				uint32_t l = (uint32_t)rng_below(&rng, LPNS);

				(void)write_page(m, s, l, r, buf);
				if (r == 6 && i == STRIPES * LPNS / 2)
					raise(SIGKILL);
			}
			for (uint32_t s = 0; s < STRIPES; s++)
				for (uint32_t l = 0; l < LPNS; l++)
					(void)write_page(m, s, l, r, buf);
			if (kvf_media_sync(m) != KVF_OK)
				_exit(3);
			if (write(fds[1], &r, sizeof(r)) != sizeof(r))
				_exit(4);
		}
	}
	close(fds[1]);
	while (read(fds[0], &got, sizeof(got)) == sizeof(got))
		rounds = got;
	close(fds[0]);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	{
		int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;

		cr_assert(killed, "the writer did not die by SIGKILL (status %d)",
			  status);
	}
	cr_assert(eq(u32, rounds, 5));
	{
		struct kvf_media *m = open_image(path);
		static unsigned char r[PAGE] __attribute__((aligned(4096)));
		static unsigned char e[PAGE];

		for (uint32_t s = 0; s < STRIPES; s++)
			for (uint32_t l = 0; l < LPNS; l++) {
				/* the synced round, or the one in flight */
				cr_assert(eq(int, kvf_media_read_pages(m, s, l / PPS,
								      l % PPS, 1, r),
					     KVF_OK), "%s", kvf_last_error());
				fill(e, s, l, rounds);
				if (memcmp(r, e, PAGE) != 0) {
					fill(e, s, l, rounds + 1);
					cr_assert(eq(int, memcmp(r, e, PAGE), 0),
						  "stripe %u lpn %u lost its synced version",
						  s, l);
				}
			}
		kvf_media_free(m);
	}
	kvf_free(ver);
	kvf_free(buf);
}

/* ---- a lying cache at the system-call seam ---- */

enum lose { LOSE_NONE, LOSE_BYTES, LOSE_RECORDS, HALF_BYTES };
static enum lose lose_mode;
static int lose_child; /* 1 in the child that must lose writes */

static ssize_t lossy_pwrite(int fd, const void *b, size_t len, off_t off)
{
	if (lose_child && lose_mode == LOSE_BYTES && len == PAGE)
		return (ssize_t)len; /* never reaches the file */
	if (lose_child && lose_mode == HALF_BYTES && len == PAGE)
		return pwrite(fd, b, len / 2, off) < 0 ? -1 : (ssize_t)len;
	if (lose_child && lose_mode == LOSE_RECORDS && len == 32)
		return (ssize_t)len; /* spare records, slots, sync records */
	return pwrite(fd, b, len, off);
}

/* the cache loses only what no fdatasync covered: the run must not
 * sync while it loses writes */
static int lossy_fdatasync(int fd)
{
	if (lose_child)
		_exit(5);
	return fdatasync(fd);
}

static struct kvf_sysio lossy;
#define LOST_PAGES (2 * PPS) /* written while losing: no GC, no erase */

/*
 * torn_run - every page written as version 1 and synced, then the first
 * LOST_PAGES pages of stripe 0 written as version 2 while mode loses part
 * of each program, then SIGKILL; after reopen every page reads as
 * version 1 (v2_must for those pages).
 */
static void torn_run(enum lose mode, uint32_t v2_must)
{
	const char *path = tmp_path(dir, "dev.img");
	void *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
	int status;
	pid_t pid;

	lossy = kvf_sysio_real;
	lossy.pwrite = lossy_pwrite;
	lossy.fdatasync = lossy_fdatasync;
	lose_mode = mode;
	kvf_sysio_set(&lossy);
	pid = fork();
	cr_assert(ge(int, pid, 0));
	if (pid == 0) {
		struct kvf_media *m = open_image(path);

		for (uint32_t s = 0; s < STRIPES; s++)
			for (uint32_t l = 0; l < LPNS; l++)
				if (write_page(m, s, l, 1, buf) != KVF_OK)
					_exit(2);
		if (kvf_media_sync(m) != KVF_OK)
			_exit(3);
		lose_child = 1;
		for (uint32_t l = 0; l < LOST_PAGES; l++)
			if (write_page(m, 0, l, 2, buf) != KVF_OK)
				_exit(4);
		raise(SIGKILL);
	}
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	{
		int killed = WIFSIGNALED(status);

		cr_assert(killed, "the writer exited with %d", status >> 8);
	}
	kvf_sysio_set(NULL);
	{
		struct kvf_media *m = open_image(path);
		struct kvf_flash_stats fs;

		for (uint32_t s = 0; s < STRIPES; s++)
			for (uint32_t l = 0; l < LPNS; l++)
				check_page(m, s, l,
					   s == 0 && l < LOST_PAGES ? v2_must : 1,
					   0, 0);
		cr_assert(eq(int, kvf_flash_stats(m, &fs), KVF_OK));
		if (mode != LOSE_RECORDS)
			cr_assert(eq(u64, fs.image_scan_verified, LOST_PAGES),
				  "the pages newer than the sync are read at open");
		kvf_media_free(m);
	}
	kvf_free(buf);
}

Test(media_flash_image, record_without_its_bytes_is_unwritten)
{
	torn_run(LOSE_BYTES, 1);
}

Test(media_flash_image, bytes_without_their_record_are_unwritten)
{
	torn_run(LOSE_RECORDS, 1);
}

Test(media_flash_image, half_written_page_is_unwritten)
{
	torn_run(HALF_BYTES, 1);
}

/* ---- damage in the file ---- */

static void flip(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	unsigned char c;

	cr_assert(ge(int, fd, 0));
	cr_assert(eq(long, (long)pread(fd, &c, 1, (off_t)off), 1L));
	c ^= 0x5a;
	cr_assert(eq(long, (long)pwrite(fd, &c, 1, (off_t)off), 1L));
	close(fd);
}

/* where the spare records start: the layout of nand_image.c */
static uint64_t oob_offset(uint32_t n_blocks)
{
	return (8192u + (uint64_t)n_blocks * 64 + 4095) / 4096 * 4096;
}

Test(media_flash_image, corrupted_records_and_bytes_are_never_data)
{
	const char *path = tmp_path(dir, "dev.img");
	void *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
	uint32_t ppb_shift, n_blocks, flipped = 0;
	struct kvf_flash_stats fs;
	struct kvf_media *m = open_image(path);

	/* two versions of every page: an older one survives somewhere */
	for (uint32_t v = 1; v <= 2; v++)
		for (uint32_t s = 0; s < STRIPES; s++)
			for (uint32_t l = 0; l < LPNS; l++)
				cr_assert(eq(int, write_page(m, s, l, v, buf), KVF_OK));
	cr_assert(eq(int, kvf_flash_stats(m, &fs), KVF_OK));
	n_blocks = fs.blocks;
	ppb_shift = 0;
	while ((1u << ppb_shift) < fs.pages_per_block)
		ppb_shift++;
	kvf_media_free(m);
	/* one byte of every fifth record of the device */
	for (uint64_t q = 0; q < ((uint64_t)n_blocks << ppb_shift); q += 5) {
		flip(path, oob_offset(n_blocks) + q * 32 + (q % 32));
		flipped++;
	}
	m = open_image(path);
	cr_assert(eq(int, kvf_flash_stats(m, &fs), KVF_OK));
	for (uint32_t s = 0; s < STRIPES; s++)
		for (uint32_t l = 0; l < LPNS; l++)
			check_page(m, s, l, 0, 2, 1);
	cr_assert(eq(int, kvf_flash_check(m), KVF_OK), "%s", kvf_last_error());
	/* a flipped page byte is KVF_ECORRUPT, naming block and page */
	{
		uint32_t blk, pg;
		uint64_t off_data;

		cr_assert(eq(int, write_page(m, 1, 9, 3, buf), KVF_OK));
		cr_assert(eq(int, kvf_flash_locate(m, 1, 9, &blk, &pg), KVF_OK));
		kvf_media_free(m);
		/* data starts page-aligned after the trim table */
		off_data = oob_offset(n_blocks) +
			   ((((uint64_t)n_blocks << ppb_shift) * 32 + 4095) /
			    4096 * 4096);
		off_data = (off_data + (uint64_t)STRIPES * LPNS * 16 + PAGE - 1) /
			   PAGE * PAGE;
		flip(path, off_data + (((uint64_t)blk << ppb_shift) | pg) * PAGE +
				   100);
		m = open_image(path);
		cr_assert(eq(int, kvf_media_read_pages(m, 1, 0, 9, 1, buf),
			     KVF_ECORRUPT));
		cr_assert(strstr(kvf_last_error(), "fails its spare-area checksum") != NULL,
			  "%s", kvf_last_error());
		/* rewritten, it reads again */
		cr_assert(eq(int, write_page(m, 1, 9, 4, buf), KVF_OK));
		check_page(m, 1, 9, 4, 0, 0);
	}
	kvf_media_free(m);
	kvf_free(buf);
}

Test(media_flash_image, damaged_header_is_corrupt)
{
	const char *path = tmp_path(dir, "dev.img");
	struct kvf_media_config mc = config(path);
	struct kvf_media *m = open_image(path);

	kvf_media_free(m);
	flip(path, 20); /* a geometry field */
	m = (struct kvf_media *)1;
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_ECORRUPT));
	cr_assert_null(m);
	cr_assert(strstr(kvf_last_error(), "header checksum") != NULL, "%s",
		  kvf_last_error());
	cr_assert(strstr(kvf_last_error(), path) != NULL, "%s", kvf_last_error());
	flip(path, 20);
	flip(path, 0); /* the magic */
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_ECORRUPT));
	cr_assert(strstr(kvf_last_error(), "KVFNAND magic") != NULL, "%s",
		  kvf_last_error());
	flip(path, 0);
	m = open_image(path);
	kvf_media_free(m);
}

Test(media_flash_image, an_image_brings_its_device)
{
	const char *path = tmp_path(dir, "dev.img");
	struct kvf_media_config mc = config(path);
	struct kvf_flash_stats a, b;
	struct kvf_media *m = open_image(path), *m2 = NULL;

	cr_assert(eq(int, kvf_flash_stats(m, &a), KVF_OK));
	/* attached once at a time */
	cr_assert(eq(int, kvf_media_open(&mc, &m2), KVF_EBUSY));
	cr_assert_null(m2);
	kvf_media_free(m);
	/* other geometry, cell and spare asked: the image's are kept */
	mc = config(path);
	fc.channels = 4;
	fc.spare_factor = 0.4;
	fc.cell = KVF_FLASH_SLC;
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_flash_stats(m, &b), KVF_OK));
	cr_assert(eq(u32, b.channels, a.channels));
	cr_assert(eq(u32, b.blocks, a.blocks));
	cr_assert(eq(u32, b.pe_limit, a.pe_limit));
	cr_assert(eq(str, (char *)b.cell, (char *)a.cell));
	kvf_media_free(m);
	/* another logical size is another device */
	mc = config(path);
	mc.geo.segs_per_stripe = SEGS - 1;
	m = (struct kvf_media *)1;
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_EMISMATCH));
	cr_assert_null(m);
	/* block mapping cannot be an image */
	mc = config(tmp_path(dir, "other.img"));
	fc.mapping = KVF_FLASH_MAP_BLOCK;
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_ENOTSUP));
}

/* The emulator's own power cut, then a reopen from the image. */
Test(media_flash_image, power_cut_then_reopen)
{
	const char *path = tmp_path(dir, "dev.img");
	uint32_t *ver = kvf_calloc(STRIPES * LPNS, sizeof(uint32_t));
	void *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);

	rng = rng_seed("power_cut_then_reopen");
	for (uint32_t cut = 1; cut < 400; cut += 37) {
		struct kvf_media *m = open_image(path);
		uint32_t *synced = kvf_malloc(STRIPES * LPNS * sizeof(uint32_t));
		kvf_status rc = KVF_OK;

		churn(m, ver, 300, buf);
		cr_assert(eq(int, kvf_media_sync(m), KVF_OK));
		memcpy(synced, ver, STRIPES * LPNS * sizeof(uint32_t));
		cr_assert(eq(int, kvf_flash_power_cut(m, cut), KVF_OK));
		for (uint32_t i = 0; i < 1000 && rc == KVF_OK; i++) {
			uint32_t s = (uint32_t)rng_below(&rng, STRIPES);
			uint32_t l = (uint32_t)rng_below(&rng, LPNS);

			rc = write_page(m, s, l, ver[s * LPNS + l] + 1, buf);
			if (rc == KVF_OK)
				ver[s * LPNS + l]++;
		}
		cr_assert(eq(int, rc, KVF_EIO), "cut %u: %s", cut,
			  kvf_last_error());
		cr_assert(eq(int, kvf_media_sync(m), KVF_EIO));
		kvf_media_free(m); /* dark: nothing more reaches the image */
		m = open_image(path);
		/* written since the sync: either version; before: synced */
		for (uint32_t s = 0; s < STRIPES; s++)
			for (uint32_t l = 0; l < LPNS; l++) {
				uint32_t i = s * LPNS + l;

				if (ver[i] == synced[i]) {
					check_page(m, s, l, ver[i], 0, 0);
					continue;
				}
				check_page(m, s, l, 0, ver[i] + 1, 1);
			}
		/* pages of either version get a known one again */
		for (uint32_t s = 0; s < STRIPES; s++)
			for (uint32_t l = 0; l < LPNS; l++) {
				uint32_t i = s * LPNS + l;

				if (ver[i] == synced[i])
					continue;
				ver[i] += 2; /* past the one the cut tore */
				cr_assert(eq(int, write_page(m, s, l, ver[i], buf),
					     KVF_OK), "%s", kvf_last_error());
			}
		kvf_free(synced);
		kvf_media_free(m);
	}
	kvf_free(ver);
	kvf_free(buf);
}
