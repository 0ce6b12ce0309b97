/*
 * nand_image_header.c - the image's header: its decoding and checks, the
 * file size the device it describes needs (in saturating arithmetic, as
 * nothing is sized from a header before that check), and nand_image_peek,
 * which reads the device an existing image holds before the media is
 * built.  A file of its own: the one place that trusts nothing it reads.
 */
#include "ftl/nand_image.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "api/status.h"
#include "ftl/nand_image_int.h"
#include "ftl/sysio.h"

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

kvf_status nand_img_decode_header(const struct img_header *h, size_t n,
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
	if ((rc = nand_img_decode_header(&h, (size_t)n, path, d)) != KVF_OK)
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
