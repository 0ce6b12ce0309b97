/*
 * nand_image.c - the persistent image of the emulated NAND device (see
 * nand_image.h for what is kept and the crash rules).
 *
 * Layout of the file (all integers little-endian, as the host writes
 * them; ppn = block << page_shift | page over the whole device, glpn =
 * part * lpn_per_part + lpn):
 *
 *   OFFSET       SIZE                  FIELD
 *   0            4096                  header (struct img_header)
 *   4096         2 x 32                sync-record slots A, B
 *   8192         n_blocks x 2 x 32     block slots, two per block
 *   off_oob      n_ppn x 32            spare-area records (4 KiB-aligned)
 *   off_trim     n_lpn x 16            trim entries (4 KiB-aligned)
 *   off_data     n_ppn x page_size     page bytes (page-aligned)
 *
 * Invariants: seq >= every sequence number written to the file;
 * durable_seq <= seq, and every program and trim with a sequence number
 * up to durable_seq is durable; `dirty` is set by every program and trim
 * since the last fdatasync; hash[ppn] is the hash of the bytes the page
 * was programmed with (0 for a page without a believed record).
 *
 * Not thread-safe (see nand_image.h).
 */
#include "ftl/nand_image.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stddef.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/sysio.h"

#define IMG_MAGIC "KVFNAND\0"
#define OFF_SYNC 4096u
#define OFF_BLOCKS 8192u
#define SLOT_BYTES 32u
#define REC_BYTES 32u
#define TRIM_BYTES 16u
#define IO_CHUNK (1u << 20) /* bytes per read while loading */
#define SEQ_BITS 56u        /* sequence numbers: 2^56 of them */
#define SEQ_MASK ((1ull << SEQ_BITS) - 1)

/*
 * The header.
 * OFFSET SIZE FIELD
 * 0      8    magic "KVFNAND\0"
 * 8      4    version (NAND_IMAGE_VERSION)
 * 12     4    header_size (sizeof(struct img_header))
 * 16     44   channels, dies_per_channel, planes_per_die, blocks_per_plane,
 *             pages_per_block, page_size, oob_bytes, n_parts, cell,
 *             pe_limit, reserved (u32 each)
 * 60     4    reserved (0)
 * 64     8    lpn_per_part
 * 72     8    image id: salts every checksum of the file
 * 80     8    reserved (0)
 * 88     8    checksum: XXH3-64 of bytes 0..87
 */
struct img_header {
	char magic[8];
	uint32_t version;
	uint32_t header_size;
	uint32_t channels;
	uint32_t dies_per_channel;
	uint32_t planes_per_die;
	uint32_t blocks_per_plane;
	uint32_t pages_per_block;
	uint32_t page_size;
	uint32_t oob_bytes;
	uint32_t n_parts;
	uint32_t cell;
	uint32_t pe_limit;
	uint32_t reserved0;
	uint32_t reserved1;
	uint64_t lpn_per_part;
	uint64_t id;
	uint64_t reserved2;
	uint64_t checksum;
};
static_assert(sizeof(struct img_header) == 96, "image header layout");
static_assert(offsetof(struct img_header, lpn_per_part) == 64,
	      "image header layout");
static_assert(offsetof(struct img_header, checksum) == 88,
	      "image header layout");

/*
 * A sync-record slot (slot n_syncs & 1) and a block slot (slot
 * erase_count & 1 of its block).
 * OFFSET SIZE FIELD
 * 0      8    sync: durable_seq      block: epoch (erase sequence)
 * 8      8    sync: n_syncs          block: erase_count (low 32) | block << 32
 * 16     8    reserved (0)
 * 24     8    check: XXH3-64 of bytes 0..23 with the image id as seed
 */
struct img_slot {
	uint64_t a;
	uint64_t b;
	uint64_t reserved;
	uint64_t check;
};
static_assert(sizeof(struct img_slot) == SLOT_BYTES, "slot layout");

/*
 * A spare-area record.
 * OFFSET SIZE FIELD
 * 0      8    seq (bits 0..55) | stream << 56
 * 8      8    epoch of the block when programmed
 * 16     8    XXH3-64 of the page bytes
 * 24     4    lpn (partition-local), 0xffffffff = none (padding)
 * 28     4    check: low 32 bits of XXH3-64 of bytes 0..27 and the ppn,
 *             seeded with the image id
 */
struct img_rec {
	uint64_t seq_stream;
	uint64_t epoch;
	uint64_t hash;
	uint32_t lpn;
	uint32_t check;
};
static_assert(sizeof(struct img_rec) == REC_BYTES, "record layout");

/*
 * A trim entry; all zero = never trimmed.
 * OFFSET SIZE FIELD
 * 0      8    seq of the last TRIM
 * 8      8    check: XXH3-64 of seq and glpn, seeded with the image id
 */
struct img_trim {
	uint64_t seq;
	uint64_t check;
};
static_assert(sizeof(struct img_trim) == TRIM_BYTES, "trim layout");

struct nand_image {
	int fd;                 /* the image, flocked */
	char *path;             /* for messages */
	uint64_t id;            /* image id (checksum seed) */
	uint64_t lpn_per_part;  /* logical pages of a partition */
	uint64_t n_ppn;         /* physical page numbers (with holes) */
	uint64_t n_lpn;         /* logical pages of the device */
	uint64_t off_oob;       /* bytes: records */
	uint64_t off_trim;      /* bytes: trim entries */
	uint64_t off_data;      /* bytes: page bytes */
	uint64_t size;          /* bytes of the file */
	uint64_t seq;           /* last sequence number given */
	uint64_t durable_seq;   /* programs and trims up to it are durable */
	uint64_t n_syncs;       /* sync records written, ever */
	int dirty;              /* programs or trims since the last fdatasync */
	int loaded;             /* attach found an existing device */
	uint64_t *epoch;        /* [block] epoch of its current life */
	uint64_t *hash;         /* [ppn] hash of the programmed bytes */
	uint64_t zero_hash;     /* hash of a page of zeros */
	struct nand_image_rec *rec; /* [ppn] scan results, until scan_done */
	uint64_t *trim;         /* [glpn] trim seq, until scan_done */
	struct nand_image_stats st; /* counters */
};

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static uint64_t slot_check(const struct img_slot *s, uint64_t id)
{
	return XXH3_64bits_withSeed(s, 24, id);
}

static uint32_t rec_check(const struct img_rec *r, uint64_t ppn, uint64_t id)
{
	unsigned char buf[28 + 8];

	memcpy(buf, r, 28);
	memcpy(buf + 28, &ppn, 8);
	return (uint32_t)XXH3_64bits_withSeed(buf, sizeof(buf), id);
}

static uint64_t trim_check(uint64_t seq, uint64_t glpn, uint64_t id)
{
	uint64_t v[2] = { seq, glpn };

	return XXH3_64bits_withSeed(v, sizeof(v), id);
}

static uint64_t header_checksum(const struct img_header *h)
{
	return XXH3_64bits(h, offsetof(struct img_header, checksum));
}

/* ---- I/O through the seam ---- */

static kvf_status img_pwrite(struct nand_image *im, const void *buf,
			     size_t len, uint64_t off, const char *what)
{
	ssize_t got = kvf_sysio->fault(KVF_SYSIO_WRITE, im->fd, len, (off_t)off);

	if (got < 0)
		return kvf_fail_errno(KVF_EIO, (int)-got,
				      "flash image %s: writing %s at offset %llu",
				      im->path, what, (unsigned long long)off);
	got = kvf_sysio->pwrite(im->fd, buf, (size_t)got, (off_t)off);
	if (got < 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "flash image %s: writing %s at offset %llu",
				      im->path, what, (unsigned long long)off);
	if ((size_t)got != len)
		return kvf_fail(KVF_EIO,
				"flash image %s: writing %s at offset %llu: short write of %zd of %zu bytes",
				im->path, what, (unsigned long long)off, got, len);
	return KVF_OK;
}

static kvf_status img_pread(struct nand_image *im, void *buf, size_t len,
			    uint64_t off, const char *what)
{
	ssize_t got = kvf_sysio->fault(KVF_SYSIO_READ, im->fd, len, (off_t)off);

	if (got < 0)
		return kvf_fail_errno(KVF_EIO, (int)-got,
				      "flash image %s: reading %s at offset %llu",
				      im->path, what, (unsigned long long)off);
	got = kvf_sysio->pread(im->fd, buf, (size_t)got, (off_t)off);
	if (got < 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "flash image %s: reading %s at offset %llu",
				      im->path, what, (unsigned long long)off);
	if ((size_t)got != len)
		return kvf_fail(KVF_EIO,
				"flash image %s: reading %s at offset %llu: short read of %zd of %zu bytes",
				im->path, what, (unsigned long long)off, got, len);
	return KVF_OK;
}

static kvf_status img_fdatasync(struct nand_image *im)
{
	if (kvf_sysio->fdatasync(im->fd) != 0)
		return kvf_fail_errno(KVF_EIO, errno, "flash image %s: fdatasync",
				      im->path);
	im->st.fdatasyncs++;
	im->dirty = 0;
	return KVF_OK;
}

/* ---- header ---- */

/* sat_mul, sat_add - a * b and a + b, UINT64_MAX when they overflow */
static uint64_t sat_mul(uint64_t a, uint64_t b)
{
	return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

static uint64_t sat_align(uint64_t x, uint64_t a)
{
	return x > UINT64_MAX / 2 ? UINT64_MAX : align_up(x, a);
}

/* header_bytes - the bytes of the file the header's device needs (the
 * layout at the top; layout() for a device), UINT64_MAX when that does
 * not fit in 64 bits; for a header decode_header accepted */
static uint64_t header_bytes(const struct img_header *h)
{
	uint64_t blocks = sat_mul(sat_mul(h->channels, h->dies_per_channel),
				  sat_mul(h->planes_per_die, h->blocks_per_plane));
	uint64_t ppn = blocks, off;

	for (uint64_t span = 1; span < h->pages_per_block; span <<= 1)
		ppn = sat_mul(ppn, 2);
	off = sat_align(sat_add(OFF_BLOCKS, sat_mul(blocks, 2 * SLOT_BYTES)),
			4096);
	off = sat_align(sat_add(off, sat_mul(ppn, REC_BYTES)), 4096);
	off = sat_add(off, sat_mul(sat_mul(h->lpn_per_part, h->n_parts),
				   TRIM_BYTES));
	off = sat_align(off, h->page_size);
	return sat_add(off, sat_mul(ppn, h->page_size));
}

static kvf_status decode_header(const struct img_header *h, size_t n,
				const char *path, struct nand_image_desc *d)
{
	if (n < 12 || memcmp(h->magic, IMG_MAGIC, 8) != 0)
		return kvf_fail(KVF_ECORRUPT,
				"flash image %s is damaged or not an image: no KVFNAND magic in its first %zu bytes",
				path, n);
	if (h->version > NAND_IMAGE_VERSION)
		return kvf_fail(KVF_EVERSION,
				"flash image %s has version %u; this library reads up to %u",
				path, h->version, NAND_IMAGE_VERSION);
	if (n < sizeof(*h) || h->header_size != sizeof(*h))
		return kvf_fail(KVF_ECORRUPT,
				"flash image %s is damaged: header of %zu bytes, header_size %u (expected %zu)",
				path, n, h->header_size, sizeof(*h));
	if (header_checksum(h) != h->checksum)
		return kvf_fail(KVF_ECORRUPT,
				"flash image %s is damaged: header checksum %016llx, computed %016llx",
				path, (unsigned long long)h->checksum,
				(unsigned long long)header_checksum(h));
	if (h->version < 1 || !h->channels || !h->dies_per_channel ||
	    !h->planes_per_die || !h->blocks_per_plane ||
	    h->pages_per_block < 2 || !h->page_size || !h->n_parts ||
	    !h->pe_limit || !h->lpn_per_part)
		return kvf_fail(KVF_ECORRUPT,
				"flash image %s is damaged: its header holds a zero geometry field",
				path);
	/* values no image was created with */
	if (h->cell > KVF_FLASH_QLC || h->page_size > (1u << 16) ||
	    (h->page_size & (h->page_size - 1)) != 0)
		return kvf_fail(KVF_ECORRUPT,
				"flash image %s is damaged: its header holds cell %u, page size %u",
				path, h->cell, h->page_size);
	d->channels = h->channels;
	d->dies_per_channel = h->dies_per_channel;
	d->planes_per_die = h->planes_per_die;
	d->blocks_per_plane = h->blocks_per_plane;
	d->pages_per_block = h->pages_per_block;
	d->page_size = h->page_size;
	d->oob_bytes = h->oob_bytes;
	d->n_parts = h->n_parts;
	d->cell = h->cell;
	d->pe_limit = h->pe_limit;
	d->lpn_per_part = h->lpn_per_part;
	return KVF_OK;
}

kvf_status nand_image_peek(const char *path, struct nand_image_desc *d,
			   int *exists)
{
	struct img_header h;
	struct stat sb;
	ssize_t n;
	int fd;
	kvf_status rc;

	*exists = 0;
	fd = kvf_sysio->open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0) {
		if (errno == ENOENT)
			return KVF_OK;
		return kvf_fail_errno(KVF_EIO, errno,
				      "kvf_media_open: flash: cannot open image %s",
				      path);
	}
	if (kvf_sysio->fstat(fd, &sb) != 0) {
		rc = kvf_fail_errno(KVF_EIO, errno,
				    "kvf_media_open: flash: stat of image %s", path);
		goto out;
	}
	rc = KVF_OK;
	if (sb.st_size == 0)
		goto out;
	memset(&h, 0, sizeof(h));
	n = kvf_sysio->pread(fd, &h, sizeof(h), 0);
	if (n < 0) {
		rc = kvf_fail_errno(KVF_EIO, errno,
				    "kvf_media_open: flash: reading image %s", path);
		goto out;
	}
	if ((rc = decode_header(&h, (size_t)n, path, d)) != KVF_OK)
		goto out;
	/* nothing is sized from the header before this */
	if (header_bytes(&h) > (uint64_t)sb.st_size) {
		rc = kvf_fail(KVF_ECORRUPT,
			      "flash image %s is damaged: %llu bytes, the device its header describes needs %llu",
			      path, (unsigned long long)sb.st_size,
			      (unsigned long long)header_bytes(&h));
		goto out;
	}
	*exists = 1;
out:
	kvf_sysio->close(fd);
	return rc;
}

/* ---- attach: layout, creation, load ---- */

static void layout(struct nand_image *im, const struct nand *n)
{
	const struct nand_geometry *g = &n->geo;

	im->n_ppn = (uint64_t)g->n_blocks << g->page_shift;
	im->n_lpn = im->lpn_per_part * g->n_parts;
	im->off_oob = align_up(OFF_BLOCKS + (uint64_t)g->n_blocks * 2 *
				       SLOT_BYTES, 4096);
	im->off_trim = align_up(im->off_oob + im->n_ppn * REC_BYTES, 4096);
	im->off_data = align_up(im->off_trim + im->n_lpn * TRIM_BYTES,
				g->page_size);
	im->size = im->off_data + im->n_ppn * g->page_size;
}

static uint64_t random_id(const char *path)
{
	struct timespec ts;
	uint64_t x[3];

	clock_gettime(CLOCK_REALTIME, &ts);
	x[0] = (uint64_t)ts.tv_sec;
	x[1] = (uint64_t)ts.tv_nsec;
	x[2] = XXH3_64bits(path, strlen(path));
	return XXH3_64bits(x, sizeof(x)) | 1;
}

static kvf_status create(struct nand_image *im, const struct nand *n,
			 const struct nand_image_desc *d)
{
	struct img_header h;

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, IMG_MAGIC, 8);
	h.version = NAND_IMAGE_VERSION;
	h.header_size = sizeof(h);
	h.channels = d->channels;
	h.dies_per_channel = d->dies_per_channel;
	h.planes_per_die = d->planes_per_die;
	h.blocks_per_plane = d->blocks_per_plane;
	h.pages_per_block = d->pages_per_block;
	h.page_size = d->page_size;
	h.oob_bytes = d->oob_bytes;
	h.n_parts = d->n_parts;
	h.cell = d->cell;
	h.pe_limit = n->pe_limit;
	h.lpn_per_part = d->lpn_per_part;
	h.id = random_id(im->path);
	h.checksum = header_checksum(&h);
	im->id = h.id;
	/* zeros everywhere are empty slots, records and trims */
	if (kvf_sysio->ftruncate(im->fd, (off_t)im->size) != 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "kvf_media_open: flash: cannot size image %s to %llu bytes",
				      im->path, (unsigned long long)im->size);
	return img_pwrite(im, &h, sizeof(h), 0, "the header");
}

static kvf_status check_desc(const struct nand_image *im, const struct nand *n,
			     const struct img_header *h)
{
	const struct nand_geometry *g = &n->geo;

	if (h->channels != g->channels ||
	    h->dies_per_channel != g->dies_per_channel ||
	    h->planes_per_die != g->planes_per_die ||
	    h->blocks_per_plane != g->blocks_per_plane ||
	    h->pages_per_block != g->pages_per_block ||
	    h->page_size != g->page_size || h->n_parts != g->n_parts ||
	    h->lpn_per_part != im->lpn_per_part)
		return kvf_fail(KVF_EMISMATCH,
				"kvf_media_open: flash: image %s holds another device (%u x %u x %u x %u blocks of %u pages of %u bytes, %u stripes of %llu logical pages)",
				im->path, h->channels, h->dies_per_channel,
				h->planes_per_die, h->blocks_per_plane,
				h->pages_per_block, h->page_size, h->n_parts,
				(unsigned long long)h->lpn_per_part);
	return KVF_OK;
}

static void seen(struct nand_image *im, uint64_t seq)
{
	if (seq > im->seq)
		im->seq = seq;
}

static void load_sync(struct nand_image *im, const struct img_slot *s)
{
	for (int i = 0; i < 2; i++) {
		if (s[i].check != slot_check(&s[i], im->id))
			continue;
		seen(im, s[i].a);
		if (s[i].b >= im->n_syncs) {
			im->n_syncs = s[i].b;
			im->durable_seq = s[i].a;
		}
	}
}

/* load_blocks - erase counts and epochs: per block the valid slot of the
 * later life (a torn slot leaves the other: that erase is lost) */
static kvf_status load_blocks(struct nand_image *im, struct nand *n)
{
	size_t bytes = (size_t)n->geo.n_blocks * 2 * SLOT_BYTES;
	struct img_slot *s = kvf_malloc(bytes);
	kvf_status rc;

	if (s == NULL)
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: out of memory for the block table");
	if ((rc = img_pread(im, s, bytes, OFF_BLOCKS, "the block table")) != KVF_OK)
		goto out;
	for (uint32_t b = 0; b < n->geo.n_blocks; b++) {
		uint32_t ec = 0;
		uint64_t epoch = 0;

		for (int i = 0; i < 2; i++) {
			const struct img_slot *x = &s[2 * b + i];

			if (x->check != slot_check(x, im->id) ||
			    (x->b >> 32) != b)
				continue;
			seen(im, x->a);
			if (x->a >= epoch) { /* epochs grow erase by erase */
				ec = (uint32_t)x->b;
				epoch = x->a;
			}
		}
		n->erase_count[b] = ec;
		im->epoch[b] = epoch;
		if (ec >= n->pe_limit) {
			n->flags[b] |= NAND_RETIRED;
			n->retired++;
		}
	}
out:
	kvf_free(s);
	return rc;
}

/* load_records - the spare areas: which pages hold what, write pointers */
static kvf_status load_records(struct nand_image *im, struct nand *n)
{
	uint32_t per = IO_CHUNK / REC_BYTES;
	struct img_rec *buf = kvf_malloc(IO_CHUNK);
	uint32_t mask = (1u << n->geo.page_shift) - 1;
	kvf_status rc = KVF_OK;

	if (buf == NULL)
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: out of memory for the scan");
	for (uint64_t q0 = 0; q0 < im->n_ppn && rc == KVF_OK; q0 += per) {
		uint64_t k = im->n_ppn - q0 < per ? im->n_ppn - q0 : per;

		rc = img_pread(im, buf, k * REC_BYTES,
			       im->off_oob + q0 * REC_BYTES, "the spare areas");
		for (uint64_t i = 0; i < k && rc == KVF_OK; i++) {
			const struct img_rec *r = &buf[i];
			uint64_t q = q0 + i;
			uint32_t b = (uint32_t)(q >> n->geo.page_shift);
			uint32_t p = (uint32_t)(q & mask);
			struct nand_image_rec *out = &im->rec[q];

			out->lpn = NAND_IMAGE_NO_LPN;
			if (p >= n->geo.pages_per_block || r->check == 0 ||
			    r->check != rec_check(r, q, im->id))
				continue;
			im->st.scan_pages++;
			seen(im, r->seq_stream & SEQ_MASK);
			seen(im, r->epoch);
			if (r->epoch != im->epoch[b]) {
				im->st.scan_dropped++;
				continue; /* of an earlier (or lost) life */
			}
			if (p + 1 > n->wp[b])
				n->wp[b] = p + 1;
			out->seq = r->seq_stream & SEQ_MASK;
			out->stream = (uint32_t)(r->seq_stream >> SEQ_BITS);
			im->hash[q] = r->hash;
			if (r->lpn < im->lpn_per_part)
				out->lpn = r->lpn;
		}
	}
	kvf_free(buf);
	return rc;
}

/* verify_recent - a record newer than the durable point is believed only
 * if the page bytes landed with it; the verdict on a torn program is
 * written down (a record of no logical page), as the next sync will
 * count the program among the durable ones */
static kvf_status verify_recent(struct nand_image *im, struct nand *n)
{
	unsigned char *page = kvf_aligned_alloc(KVF_MEDIA_ALIGN, n->geo.page_size);
	kvf_status rc = KVF_OK;

	if (page == NULL)
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: out of memory for the scan");
	for (uint64_t q = 0; q < im->n_ppn && rc == KVF_OK; q++) {
		struct nand_image_rec *r = &im->rec[q];

		if (r->lpn == NAND_IMAGE_NO_LPN || r->seq <= im->durable_seq)
			continue;
		rc = img_pread(im, page, n->geo.page_size,
			       im->off_data + q * n->geo.page_size, "a page");
		im->st.scan_verified++;
		if (rc == KVF_OK &&
		    XXH3_64bits(page, n->geo.page_size) != im->hash[q]) {
			struct img_rec dead;

			r->lpn = NAND_IMAGE_NO_LPN; /* a torn program */
			im->hash[q] = 0;
			im->st.scan_dropped++;
			dead.seq_stream = r->seq | (uint64_t)r->stream << SEQ_BITS;
			dead.epoch = im->epoch[q >> n->geo.page_shift];
			dead.hash = 0;
			dead.lpn = NAND_IMAGE_NO_LPN;
			dead.check = rec_check(&dead, q, im->id);
			rc = img_pwrite(im, &dead, sizeof(dead),
					im->off_oob + q * REC_BYTES,
					"a spare-area record");
			im->dirty = 1;
		}
	}
	kvf_free(page);
	return rc;
}

/* load_trims - trim entries; a torn one is taken as a TRIM after
 * everything found, and written so before the device is used */
static kvf_status load_trims(struct nand_image *im)
{
	uint32_t per = IO_CHUNK / TRIM_BYTES;
	struct img_trim *buf = kvf_malloc(IO_CHUNK);
	uint64_t n_torn = 0;
	kvf_status rc = KVF_OK;

	if (buf == NULL)
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: out of memory for the scan");
	for (uint64_t l0 = 0; l0 < im->n_lpn && rc == KVF_OK; l0 += per) {
		uint64_t k = im->n_lpn - l0 < per ? im->n_lpn - l0 : per;

		rc = img_pread(im, buf, k * TRIM_BYTES,
			       im->off_trim + l0 * TRIM_BYTES, "the trim table");
		for (uint64_t i = 0; i < k && rc == KVF_OK; i++) {
			const struct img_trim *t = &buf[i];

			if (t->seq == 0 && t->check == 0)
				continue;
			if (t->check == trim_check(t->seq, l0 + i, im->id)) {
				im->trim[l0 + i] = t->seq;
				seen(im, t->seq);
				continue;
			}
			im->trim[l0 + i] = UINT64_MAX; /* torn: see below */
			n_torn++;
		}
	}
	kvf_free(buf);
	if (rc != KVF_OK || n_torn == 0)
		return rc;
	im->seq++;
	for (uint64_t l = 0; l < im->n_lpn && rc == KVF_OK; l++) {
		struct img_trim t;

		if (im->trim[l] != UINT64_MAX)
			continue;
		im->trim[l] = im->seq;
		t.seq = im->seq;
		t.check = trim_check(t.seq, l, im->id);
		rc = img_pwrite(im, &t, sizeof(t), im->off_trim + l * TRIM_BYTES,
				"a trim entry");
		im->dirty = 1;
	}
	return rc;
}

static kvf_status load(struct nand_image *im, struct nand *n)
{
	struct img_slot sync[2];
	kvf_status rc;

	if ((rc = img_pread(im, sync, sizeof(sync), OFF_SYNC,
			    "the sync records")) != KVF_OK)
		return rc;
	load_sync(im, sync);
	if ((rc = load_blocks(im, n)) != KVF_OK ||
	    (rc = load_records(im, n)) != KVF_OK ||
	    (rc = verify_recent(im, n)) != KVF_OK ||
	    (rc = load_trims(im)) != KVF_OK)
		return rc;
	/* what the open rewrote is durable before anything builds on it */
	if (im->dirty)
		rc = img_fdatasync(im);
	return rc;
}

static kvf_status open_image(struct nand_image *im, struct nand *n,
			     const struct nand_image_desc *d)
{
	struct img_header h;
	struct nand_image_desc got;
	struct stat sb;
	kvf_status rc;

	im->fd = kvf_sysio->open(im->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (im->fd < 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "kvf_media_open: flash: cannot open image %s",
				      im->path);
	if (kvf_sysio->flock(im->fd, LOCK_EX | LOCK_NB) != 0)
		return kvf_fail_errno(KVF_EBUSY, errno,
				      "kvf_media_open: flash: image %s is in use",
				      im->path);
	if (kvf_sysio->fstat(im->fd, &sb) != 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "kvf_media_open: flash: stat of image %s",
				      im->path);
	if (sb.st_size == 0) {
		im->st.created = 1;
		if ((rc = create(im, n, d)) != KVF_OK)
			return rc;
		return img_fdatasync(im);
	}
	memset(&h, 0, sizeof(h));
	if ((rc = img_pread(im, &h, sizeof(h), 0, "the header")) != KVF_OK)
		return rc;
	if ((rc = decode_header(&h, sizeof(h), im->path, &got)) != KVF_OK ||
	    (rc = check_desc(im, n, &h)) != KVF_OK)
		return rc;
	if ((uint64_t)sb.st_size < im->size)
		return kvf_fail(KVF_ECORRUPT,
				"flash image %s is damaged: %llu bytes, the device needs %llu",
				im->path, (unsigned long long)sb.st_size,
				(unsigned long long)im->size);
	im->id = h.id;
	im->loaded = 1;
	return load(im, n);
}

static void image_free(struct nand_image *im)
{
	if (im->fd >= 0)
		kvf_sysio->close(im->fd);
	kvf_free(im->path);
	kvf_free(im->epoch);
	kvf_free(im->hash);
	kvf_free(im->rec);
	kvf_free(im->trim);
	kvf_free(im);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

kvf_status nand_image_attach(struct nand *n, const char *path,
			     const struct nand_image_desc *d)
{
	struct nand_image *im = kvf_calloc(1, sizeof(*im));
	uint64_t t0 = now_ns();
	unsigned char *zero;
	kvf_status rc;

	n->img = NULL;
	if (im == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_media_open: flash: out of memory");
	im->fd = -1;
	im->lpn_per_part = d->lpn_per_part;
	layout(im, n);
	im->path = kvf_strdup(path);
	im->epoch = kvf_calloc(n->geo.n_blocks, sizeof(uint64_t));
	im->hash = kvf_calloc(im->n_ppn, sizeof(uint64_t));
	im->rec = kvf_calloc(im->n_ppn, sizeof(*im->rec));
	im->trim = kvf_calloc(im->n_lpn, sizeof(uint64_t));
	zero = kvf_calloc(1, n->geo.page_size);
	if (!im->path || !im->epoch || !im->hash || !im->rec || !im->trim ||
	    !zero) {
		kvf_free(zero);
		image_free(im);
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: out of memory for the image of %llu pages",
				(unsigned long long)(n->geo.n_blocks *
						     (uint64_t)n->geo.pages_per_block));
	}
	im->zero_hash = XXH3_64bits(zero, n->geo.page_size);
	kvf_free(zero);
	for (uint64_t q = 0; q < im->n_ppn; q++)
		im->rec[q].lpn = NAND_IMAGE_NO_LPN;
	if ((rc = open_image(im, n, d)) != KVF_OK) {
		image_free(im);
		/* what the load set up goes back to a fresh device */
		memset(n->erase_count, 0, n->geo.n_blocks * sizeof(uint32_t));
		memset(n->wp, 0, n->geo.n_blocks * sizeof(uint32_t));
		memset(n->flags, 0, n->geo.n_blocks);
		n->retired = 0;
		return rc;
	}
	im->st.scan_ns = now_ns() - t0;
	n->img = im;
	return KVF_OK;
}

void nand_image_detach(struct nand *n)
{
	if (n->img == NULL)
		return;
	if (!n->powered_off)
		(void)nand_image_sync(n); /* a clean shutdown flushes */
	image_free(n->img);
	n->img = NULL;
}

int nand_image_loaded(const struct nand *n)
{
	return n->img != NULL && n->img->loaded;
}

const struct nand_image_rec *nand_image_rec(const struct nand *n,
					    uint64_t ppn)
{
	return &n->img->rec[ppn];
}

uint64_t nand_image_trim_seq(const struct nand *n, uint32_t part,
			     uint64_t lpn)
{
	return n->img->trim[(uint64_t)part * n->img->lpn_per_part + lpn];
}

void nand_image_scan_done(struct nand *n)
{
	if (n->img == NULL)
		return;
	kvf_free(n->img->rec);
	kvf_free(n->img->trim);
	n->img->rec = NULL;
	n->img->trim = NULL;
}

/* ---- operations ---- */

static uint64_t ppn_of(const struct nand *n, uint32_t block, uint32_t page)
{
	return ((uint64_t)block << n->geo.page_shift) | page;
}

kvf_status nand_image_program(struct nand *n, uint32_t block, uint32_t page,
			      const void *data, size_t landed,
			      const uint64_t *hash)
{
	struct nand_image *im = n->img;
	uint64_t q = ppn_of(n, block, page);
	uint32_t ps = n->geo.page_size;
	struct img_rec r;
	kvf_status rc;

	r.hash = hash ? *hash : data ? XXH3_64bits(data, ps) : im->zero_hash;
	r.seq_stream = (++im->seq & SEQ_MASK) |
		       (uint64_t)(n->spare_stream & 0xff) << SEQ_BITS;
	r.epoch = im->epoch[block];
	r.lpn = n->spare_lpn;
	r.check = rec_check(&r, q, im->id);
	im->dirty = 1;
	im->hash[q] = r.hash;
	if (data == NULL) {
		/* zeros: the punched or fresh range may hold an earlier
		 * life's bytes, so write them */
		unsigned char *z = n->bounce;

		memset(z, 0, ps);
		data = z;
	}
	if ((rc = img_pwrite(im, data, landed, im->off_data + q * ps,
			     "page bytes")) != KVF_OK)
		return rc;
	return img_pwrite(im, &r, sizeof(r), im->off_oob + q * REC_BYTES,
			  "a spare-area record");
}

kvf_status nand_image_read(struct nand *n, uint32_t block, uint32_t page,
			   void *buf, int verify)
{
	struct nand_image *im = n->img;
	uint64_t q = ppn_of(n, block, page);
	uint32_t ps = n->geo.page_size;
	kvf_status rc;

	if ((rc = img_pread(im, buf, ps, im->off_data + q * ps,
			    "page bytes")) != KVF_OK)
		return rc;
	if (verify && XXH3_64bits(buf, ps) != im->hash[q])
		return kvf_fail(KVF_ECORRUPT,
				"flash: block %u page %u of image %s fails its spare-area checksum (expected %016llx); its data is not returned",
				block, page, im->path,
				(unsigned long long)im->hash[q]);
	return KVF_OK;
}

uint64_t nand_image_hash(const struct nand *n, uint32_t block, uint32_t page)
{
	return n->img->hash[ppn_of(n, block, page)];
}

kvf_status nand_image_erase(struct nand *n, uint32_t block, uint32_t new_ec)
{
	struct nand_image *im = n->img;
	uint32_t ps = n->geo.page_size, ppb = n->geo.pages_per_block;
	struct img_slot s;
	kvf_status rc;

	/* the barrier: what this erase destroys is superseded durably */
	if (im->dirty) {
		if ((rc = img_fdatasync(im)) != KVF_OK)
			return rc;
		im->st.barriers++;
		im->durable_seq = im->seq;
	}
	memset(&s, 0, sizeof(s));
	s.a = ++im->seq;
	s.b = (uint64_t)new_ec | (uint64_t)block << 32;
	s.check = slot_check(&s, im->id);
	if ((rc = img_pwrite(im, &s, sizeof(s),
			     OFF_BLOCKS + ((uint64_t)block * 2 + (new_ec & 1)) *
						  SLOT_BYTES,
			     "a block slot")) != KVF_OK)
		return rc;
	im->epoch[block] = s.a;
	memset(&im->hash[ppn_of(n, block, 0)], 0, ppb * sizeof(uint64_t));
	/* best effort: a file system without hole punching keeps the bytes */
	(void)kvf_sysio->fallocate(im->fd,
				   FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				   (off_t)(im->off_data + ppn_of(n, block, 0) * ps),
				   (off_t)ppb * ps);
	return KVF_OK;
}

kvf_status nand_image_trim(struct nand *n, uint32_t part, uint64_t lpn,
			   uint64_t count)
{
	struct nand_image *im = n->img;
	struct img_trim buf[256];
	uint64_t g0 = (uint64_t)part * im->lpn_per_part + lpn;
	uint64_t seq = ++im->seq;
	kvf_status rc = KVF_OK;

	im->dirty = 1;
	for (uint64_t i = 0; i < count && rc == KVF_OK;) {
		uint64_t k = count - i < 256 ? count - i : 256;

		for (uint64_t j = 0; j < k; j++) {
			buf[j].seq = seq;
			buf[j].check = trim_check(seq, g0 + i + j, im->id);
		}
		rc = img_pwrite(im, buf, k * TRIM_BYTES,
				im->off_trim + (g0 + i) * TRIM_BYTES,
				"trim entries");
		i += k;
	}
	return rc;
}

kvf_status nand_image_sync(struct nand *n)
{
	struct nand_image *im = n->img;
	uint64_t upto = im->seq;
	struct img_slot s;
	kvf_status rc;

	if ((rc = img_fdatasync(im)) != KVF_OK)
		return rc;
	im->durable_seq = upto;
	memset(&s, 0, sizeof(s));
	s.a = upto;
	s.b = ++im->n_syncs;
	s.check = slot_check(&s, im->id);
	/* not synced itself: a lost record only makes the next open verify
	 * more pages */
	return img_pwrite(im, &s, sizeof(s),
			  OFF_SYNC + (s.b & 1) * SLOT_BYTES, "a sync record");
}

void nand_image_stats(const struct nand *n, struct nand_image_stats *out)
{
	if (n->img == NULL) {
		memset(out, 0, sizeof(*out));
		return;
	}
	*out = n->img->st;
}
