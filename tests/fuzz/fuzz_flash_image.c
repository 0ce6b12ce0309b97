/*
 * fuzz_flash_image.c - the persistent image of the flash emulator
 * (ftl/nand_image.c, docs/ftl.md "The persistent image"), as
 * kvf_media_open with KVF_MEDIA_FLASH and the image backing reads it.
 *
 * The template is a small device made once per process: 2 stripes of 8
 * segments of 16 pages of 4 KiB, 8-page blocks; every page written, some
 * rewritten (GC and erases ran), some trimmed, synced, then a few writes
 * after the sync and a power cut that tears the last of them, so the image
 * holds records newer than its durable point and a torn program.
 *
 * Input: one flags byte, one region byte, a 4-byte offset (little-endian,
 * taken modulo the region's length), then the bytes written over the
 * region from that offset (clipped to the file, unless bit 6).
 *   region % 7: 0 header, 1 sync slots, 2 block slots, 3 spare-area
 *               records, 4 trim entries, 5 page bytes, 6 the whole file
 *   bit 0  the header gets its right checksum
 *   bit 1  each sync and block slot the bytes touched gets its check
 *   bit 2  each record touched gets its check (after bit 4)
 *   bit 3  each trim entry touched gets its check
 *   bit 4  each record touched, or whose page bytes were, gets the
 *          hash of its page's bytes (and bit 2 its check)
 *   bit 5  after the first open: close (a clean close syncs), reopen,
 *          and every page must read as it did
 *   bit 6  the file ends where the bytes end (cut or extended)
 *   bit 7  after the reads, write and sync a little, then check again
 * The checks are salted with the image id found in the (possibly fuzzed)
 * header, as the scan reads them.
 *
 * The contract: kvf_media_open gives KVF_OK, KVF_ECORRUPT, KVF_EVERSION or
 * KVF_EMISMATCH (never KVF_EINVAL: the caller's config is fine, the bytes
 * are damaged), with a message; after KVF_OK every page reads KVF_OK or
 * KVF_ECORRUPT, kvf_flash_check holds (the scan rebuilt a consistent FTL
 * from whatever records it believed), writes give KVF_OK or KVF_ENOSPC
 * (a device worn out by its erase counts), and a reopen after a clean
 * close succeeds and reads the same.  Anything else aborts; ASan and UBSan
 * catch the rest.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "ftl/media_flash.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PAGE 4096u
#define PPS 16u /* pages per segment */
#define PPB 8u  /* pages per block */
#define STRIPES 2u
#define SEGS 8u
#define LPNS (SEGS * PPS) /* logical pages per stripe */

/* the file's layout (nand_image.c) */
#define OFF_SYNC 4096u
#define OFF_BLOCKS 8192u
#define SLOT 32u
#define REC 32u
#define TRIM 16u

enum region {
	R_HEADER,
	R_SYNC,
	R_BLOCKS,
	R_RECS,
	R_TRIMS,
	R_DATA,
	R_ALL,
	N_REGIONS
};

static struct {
	char *top;            /* the temporary directory */
	char *path;           /* the work image */
	unsigned char *bytes; /* the template image */
	size_t size;          /* its bytes */
	uint32_t n_blocks;    /* blocks of the device */
	uint32_t page_shift;  /* ppn = block << page_shift | page */
	uint64_t off_oob, off_trim, off_data; /* bytes */
	uint64_t n_ppn, n_lpn; /* physical page numbers, logical pages */
} T;

static unsigned char *page_buf;
static uint64_t digest[2][STRIPES * LPNS]; /* per page: status, hash */

static void die(const char *what)
{
	fprintf(stderr, "fuzz: %s: %s\n", what, strerror(errno));
	abort();
}

static struct kvf_flash_config fc;

static struct kvf_media_config config(const char *path)
{
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = STRIPES,
			 .page_size = PAGE,
			 .pages_per_segment = PPS,
			 .segs_per_stripe = SEGS },
		.flash = &fc,
	};

	kvf_flash_config_init(&fc);
	fc.channels = STRIPES;
	fc.pages_per_block = PPB;
	fc.spare_factor = 0.2;
	fc.backing = KVF_FLASH_BACKING_IMAGE;
	fc.path = path;
	return mc;
}

static void must(const char *call, kvf_status rc)
{
	if (rc != KVF_OK) {
		fprintf(stderr, "fuzz: making the template: %s: %s\n", call,
			kvf_last_error());
		abort();
	}
}

static void fill(void *buf, uint32_t stripe, uint32_t lpn, uint32_t ver)
{
	uint32_t *w = buf;

	for (uint32_t i = 0; i < PAGE / 4; i++)
		w[i] = (stripe * LPNS + lpn + 1) * 2654435761u + ver * 40503u +
		       i;
}

static kvf_status write_page(struct kvf_media *m, uint32_t stripe, uint32_t lpn,
			     uint32_t ver)
{
	struct kvf_media_io io = { .stripe = stripe,
				   .seg = lpn / PPS,
				   .page = lpn % PPS,
				   .n_pages = 1,
				   .buf = page_buf };

	fill(page_buf, stripe, lpn, ver);
	return kvf_media_write(m, &io, 1);
}

static void remove_all(void)
{
	if (T.path)
		unlink(T.path);
	if (T.top)
		rmdir(T.top);
}

/* make_template - the device described at the top, its bytes in T */
static void make_template(void)
{
	const char *base = getenv("KVF_TEST_DIR");
	struct kvf_media_config mc;
	struct kvf_media *m = NULL;
	const struct nand *n;
	uint64_t x = 12345;
	struct stat sb;
	size_t len;
	int fd;

	if (base == NULL || *base == '\0')
		base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL;
	if (base == NULL &&
	    ((base = getenv("TMPDIR")) == NULL || *base == '\0'))
		base = "/tmp";
	len = strlen(base) + 32;
	if ((T.top = malloc(len)) == NULL ||
	    (T.path = malloc(len + 16)) == NULL)
		die("malloc");
	snprintf(T.top, len, "%s/kvf-fzimg-XXXXXX", base);
	if (mkdtemp(T.top) == NULL)
		die("mkdtemp");
	snprintf(T.path, len + 16, "%s/nand.img", T.top);
	atexit(remove_all);
	page_buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
	if (page_buf == NULL)
		die("kvf_aligned_alloc");

	mc = config(T.path);
	must("kvf_media_open", kvf_media_open(&mc, &m));
	for (uint32_t s = 0; s < STRIPES; s++)
		for (uint32_t l = 0; l < LPNS; l++)
			must("kvf_media_write", write_page(m, s, l, 1));
	for (uint32_t i = 0; i < 3 * LPNS; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		must("kvf_media_write",
		     write_page(m, (uint32_t)(x >> 60) % STRIPES,
				(uint32_t)(x >> 33) % (LPNS / 2), 2 + i));
	}
	must("kvf_flash_trim_pages", kvf_flash_trim_pages(m, 0, 100, 9));
	must("kvf_media_trim_segment", kvf_media_trim_segment(m, 1, 7));
	must("kvf_media_sync", kvf_media_sync(m));
	for (uint32_t l = 0; l < 5; l++)
		must("kvf_media_write", write_page(m, 1, 60 + l, 9000));
	must("kvf_flash_power_cut", kvf_flash_power_cut(m, 2));
	(void)write_page(m, 0, 3, 9001);
	(void)write_page(m, 0, 4, 9002); /* torn, then the power is off */
	n = kvf_flash_nand(m);
	T.n_blocks = n->geo.n_blocks;
	T.page_shift = n->geo.page_shift;
	kvf_media_free(m);

	/* the layout, as nand_image.c computes it */
	T.n_ppn = (uint64_t)T.n_blocks << T.page_shift;
	T.n_lpn = (uint64_t)LPNS * STRIPES;
	T.off_oob = (OFF_BLOCKS + (uint64_t)T.n_blocks * 2 * SLOT + 4095) /
		    4096 * 4096;
	T.off_trim = (T.off_oob + T.n_ppn * REC + 4095) / 4096 * 4096;
	T.off_data = (T.off_trim + T.n_lpn * TRIM + PAGE - 1) / PAGE * PAGE;

	if ((fd = open(T.path, O_RDONLY | O_CLOEXEC)) < 0 ||
	    fstat(fd, &sb) != 0)
		die(T.path);
	T.size = (size_t)sb.st_size;
	if (T.size != T.off_data + T.n_ppn * PAGE) {
		fprintf(stderr,
			"fuzz: the image has %zu bytes, the layout %llu\n",
			T.size,
			(unsigned long long)(T.off_data + T.n_ppn * PAGE));
		abort();
	}
	if ((T.bytes = malloc(T.size)) == NULL ||
	    pread(fd, T.bytes, T.size, 0) != (ssize_t)T.size)
		die(T.path);
	close(fd);
}

/* ---- the fixups ---------------------------------------------------------- */

static uint64_t get64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static void put64(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* fix - what the flags ask for over bytes [lo, hi) of img (size bytes) */
static void fix(unsigned char *img, size_t size, uint64_t lo, uint64_t hi,
		unsigned flags)
{
	uint64_t id = size >= 80 ? get64(img + 72) : 0;

	/* slots: the 2 sync slots and 2 per block, one array of 32 bytes */
	for (uint64_t o = OFF_SYNC;
	     (flags & 2) && o + SLOT <= size &&
	     o < OFF_BLOCKS + (uint64_t)T.n_blocks * 2 * SLOT;
	     o += SLOT) {
		if (o == OFF_SYNC + 2 * SLOT)
			o = OFF_BLOCKS;
		if (o + SLOT > lo && o < hi)
			put64(img + o + 24,
			      XXH3_64bits_withSeed(img + o, 24, id));
	}
	for (uint64_t q = 0; (flags & 0x14) && q < T.n_ppn; q++) {
		uint64_t o = T.off_oob + q * REC, d = T.off_data + q * PAGE;
		unsigned char buf[36];
		uint32_t check;

		if (o + REC > size)
			continue;
		/* a record touched, or (bit 4) one whose page was */
		if ((o + REC <= lo || o >= hi) &&
		    (!(flags & 16) || d + PAGE <= lo || d >= hi))
			continue;
		if ((flags & 16) && d + PAGE <= size)
			put64(img + o + 16, XXH3_64bits(img + d, PAGE));
		if (flags & 4) {
			memcpy(buf, img + o, 28);
			memcpy(buf + 28, &q, 8);
			check = (uint32_t)XXH3_64bits_withSeed(buf, 36, id);
			memcpy(img + o + 28, &check, 4);
		}
	}
	for (uint64_t l = 0; (flags & 8) && l < T.n_lpn; l++) {
		uint64_t o = T.off_trim + l * TRIM, v[2];

		if (o + TRIM > size || o + TRIM <= lo || o >= hi)
			continue;
		v[0] = get64(img + o);
		v[1] = l;
		put64(img + o + 8, XXH3_64bits_withSeed(v, sizeof(v), id));
	}
	if ((flags & 1) && size >= 96)
		put64(img + 88, XXH3_64bits(img, 88));
}

/* ---- the exercise -------------------------------------------------------- */

#define ST(s) FZ_ST(s)

static void read_all(struct kvf_media *m, uint64_t *dig)
{
	for (uint32_t s = 0; s < STRIPES; s++)
		for (uint32_t l = 0; l < LPNS; l++) {
			kvf_status rc = kvf_media_read_pages(m, s, l / PPS,
							     l % PPS, 1,
							     page_buf);

			fz_check("kvf_media_read_pages", rc, ST(KVF_ECORRUPT));
			dig[s * LPNS + l] =
				rc == KVF_OK ? XXH3_64bits(page_buf, PAGE) : 1;
		}
	fz_check("kvf_flash_check", kvf_flash_check(m), 0);
}

static void write_some(struct kvf_media *m)
{
	kvf_status rc = KVF_OK;

	for (uint32_t i = 0; i < 3 * LPNS && rc == KVF_OK; i++) {
		rc = write_page(m, i % STRIPES, (i * 7) % LPNS, 77);
		fz_check("kvf_media_write", rc, ST(KVF_ENOSPC));
	}
	fz_check("kvf_flash_trim_pages", kvf_flash_trim_pages(m, 1, 3, 20),
		 ST(KVF_ENOSPC));
	fz_check("kvf_media_sync", kvf_media_sync(m), 0);
	fz_check("kvf_flash_check", kvf_flash_check(m), 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char *img;
	static size_t img_cap;
	struct kvf_media_config mc;
	struct kvf_media *m = NULL;
	uint64_t base, len, off, end, n;
	unsigned flags;
	kvf_status rc;
	int fd;

	if (size < 6)
		return 0;
	if (T.bytes == NULL)
		make_template();
	flags = data[0];
	switch (data[1] % N_REGIONS) {
	case R_HEADER:
		base = 0;
		len = 96;
		break;
	case R_SYNC:
		base = OFF_SYNC;
		len = 2 * SLOT;
		break;
	case R_BLOCKS:
		base = OFF_BLOCKS;
		len = (uint64_t)T.n_blocks * 2 * SLOT;
		break;
	case R_RECS:
		base = T.off_oob;
		len = T.n_ppn * REC;
		break;
	case R_TRIMS:
		base = T.off_trim;
		len = T.n_lpn * TRIM;
		break;
	case R_DATA:
		base = T.off_data;
		len = T.n_ppn * PAGE;
		break;
	default:
		base = 0;
		len = T.size;
		break;
	}
	off = base + (data[2] | data[3] << 8 | (uint64_t)data[4] << 16 |
		      (uint64_t)data[5] << 24) %
			     len;
	n = size - 6;
	end = flags & 64 ? off + n : T.size;
	if (!(flags & 64) && n > T.size - off)
		n = T.size - off;
	if (end > img_cap) {
		free(img);
		img_cap = end > T.size ? end : T.size;
		if ((img = malloc(img_cap)) == NULL)
			die("malloc");
	}
	memcpy(img, T.bytes, end < T.size ? end : T.size);
	if (end > T.size)
		memset(img + T.size, 0, end - T.size);
	memcpy(img + off, data + 6, n);
	fix(img, end, off, off + n, flags);

	if ((fd = open(T.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		       0644)) < 0 ||
	    (end && pwrite(fd, img, end, 0) != (ssize_t)end))
		die(T.path);
	close(fd);

	mc = config(T.path);
	rc = kvf_media_open(&mc, &m);
	fz_check("kvf_media_open", rc,
		 ST(KVF_ECORRUPT) | ST(KVF_EVERSION) | ST(KVF_EMISMATCH));
	if (rc != KVF_OK)
		return 0;
	read_all(m, digest[0]);
	if (flags & 32) {
		kvf_media_free(m);
		m = NULL;
		mc = config(T.path);
		fz_check("kvf_media_open (again)", kvf_media_open(&mc, &m), 0);
		read_all(m, digest[1]);
		for (uint32_t i = 0; i < STRIPES * LPNS; i++)
			if (digest[0][i] != digest[1][i]) {
				fprintf(stderr,
					"fuzz: stripe %u lpn %u reads otherwise after a clean close and reopen\n",
					i / LPNS, i % LPNS);
				abort();
			}
	}
	if (flags & 128)
		write_some(m);
	kvf_media_free(m);
	return 0;
}
