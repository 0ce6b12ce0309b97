/*
 * nand.c - the emulated NAND chips: rules, erase counts, retirement, the
 * power-cut hook, and the page bytes in memory or in a sparse file.
 *
 * Invariants: for every block, pages [0, wp) are programmed and pages
 * [wp, pages_per_block) are erased; a torn page's bit is set in `torn`
 * until its block is erased; a retired block has erase_count == pe_limit
 * and is never programmed or erased again.  Every operation is charged to
 * the timing model before it can fail on a power cut, as the chip was
 * busy with it.
 *
 * Not thread-safe (see nand.h).
 */
#include "ftl/nand.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/nand_image.h"
#include "ftl/sysio.h"

#define ERASED_BYTE 0xff /* what an erased NAND cell reads as */

void kvf_flash_config_init(struct kvf_flash_config *c)
{
	memset(c, 0, sizeof(*c));
}

static uint32_t log2_ceil(uint32_t x)
{
	uint32_t s = 0;

	while ((1u << s) < x)
		s++;
	return s;
}

/* layout - block -> die and die -> channel, as nand_init describes */
static void layout(struct nand *n)
{
	const struct nand_geometry *g = &n->geo;
	uint32_t dies_per_part = g->n_dies / g->n_parts;

	for (uint32_t d = 0; d < g->n_dies; d++)
		n->die_channel[d] = d % g->channels;
	for (uint32_t b = 0; b < g->n_blocks; b++) {
		uint32_t p = b / g->blocks_per_part;
		uint32_t l = b % g->blocks_per_part;

		/* the (l % dies_per_part)-th die d with d % n_parts == p */
		n->block_die[b] = p + (l % dies_per_part) * g->n_parts;
	}
}

static kvf_status open_file(struct nand *n, const char *path)
{
	const struct nand_geometry *g = &n->geo;
	off_t size = (off_t)((uint64_t)g->n_blocks << g->page_shift) *
		     g->page_size;
	int fd;

	n->path = kvf_strdup(path);
	n->bounce = kvf_aligned_alloc(KVF_MEDIA_ALIGN, g->page_size);
	if (n->path == NULL || n->bounce == NULL)
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: out of memory for the file backing");
	fd = kvf_sysio->open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "kvf_media_open: flash: cannot open backing file %s",
				      path);
	n->fd = fd;
	if (kvf_sysio->flock(fd, LOCK_EX | LOCK_NB) != 0)
		return kvf_fail_errno(KVF_EBUSY, errno,
				      "kvf_media_open: flash: backing file %s is in use",
				      path);
	/* a fresh device: drop old contents, then extend sparsely */
	if (kvf_sysio->ftruncate(fd, 0) != 0 ||
	    kvf_sysio->ftruncate(fd, size) != 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "kvf_media_open: flash: cannot size backing file %s to %llu bytes",
				      path, (unsigned long long)size);
	return KVF_OK;
}

kvf_status nand_init(struct nand *n, const struct nand_geometry *g,
		     const struct kvf_flash_timing *t, uint32_t pe_limit,
		     enum kvf_flash_backing backing, const char *path)
{
	struct nand_geometry geo = *g;
	uint64_t n_ppn;
	kvf_status rc;

	memset(n, 0, sizeof(*n));
	n->fd = -1;
	n->spare_lpn = UINT32_MAX;
	geo.n_dies = geo.channels * geo.dies_per_channel;
	if (geo.n_parts == 0 || geo.n_dies % geo.n_parts != 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: %u dies cannot be shared evenly by %u stripes",
				geo.n_dies, geo.n_parts);
	geo.n_blocks = geo.n_dies * geo.planes_per_die * geo.blocks_per_plane;
	geo.blocks_per_part = geo.n_blocks / geo.n_parts;
	geo.page_shift = log2_ceil(geo.pages_per_block);
	n->geo = geo;
	n->pe_limit = pe_limit;
	n->backing = backing;
	n_ppn = (uint64_t)geo.n_blocks << geo.page_shift;

	n->erase_count = kvf_calloc(geo.n_blocks, sizeof(uint32_t));
	n->wp = kvf_calloc(geo.n_blocks, sizeof(uint32_t));
	n->flags = kvf_calloc(geo.n_blocks, sizeof(uint8_t));
	n->block_die = kvf_calloc(geo.n_blocks, sizeof(uint32_t));
	n->die_channel = kvf_calloc(geo.n_dies, sizeof(uint32_t));
	n->torn = kvf_calloc((n_ppn + 63) / 64, sizeof(uint64_t));
	if (!n->erase_count || !n->wp || !n->flags || !n->block_die ||
	    !n->die_channel || !n->torn) {
		rc = kvf_fail(KVF_ENOMEM,
			      "kvf_media_open: flash: cannot allocate the state of %u blocks",
			      geo.n_blocks);
		goto out_release;
	}
	layout(n);
	if (backing == KVF_FLASH_BACKING_MEMORY) {
		n->mem = kvf_calloc(geo.n_blocks, sizeof(*n->mem));
		if (n->mem == NULL) {
			rc = kvf_fail(KVF_ENOMEM,
				      "kvf_media_open: flash: cannot allocate the block table");
			goto out_release;
		}
	} else if (backing == KVF_FLASH_BACKING_FILE) {
		if ((rc = open_file(n, path)) != KVF_OK)
			goto out_release;
	} else if (backing == KVF_FLASH_BACKING_IMAGE) {
		/* the image itself comes with nand_image_attach */
		n->bounce = kvf_aligned_alloc(KVF_MEDIA_ALIGN, geo.page_size);
		if (n->bounce == NULL) {
			rc = kvf_fail(KVF_ENOMEM,
				      "kvf_media_open: flash: out of memory for the image backing");
			goto out_release;
		}
	}
	if ((rc = ftl_time_init(&n->time, geo.n_dies, geo.channels, t,
				geo.page_size + geo.oob_bytes)) != KVF_OK)
		goto out_release;
	return KVF_OK;

out_release:
	nand_release(n);
	return rc;
}

void nand_release(struct nand *n)
{
	nand_image_detach(n);
	if (n->mem) {
		for (uint32_t b = 0; b < n->geo.n_blocks; b++)
			kvf_free(n->mem[b]);
		kvf_free(n->mem);
	}
	if (n->fd >= 0)
		kvf_sysio->close(n->fd);
	kvf_free(n->path);
	kvf_free(n->bounce);
	kvf_free(n->erase_count);
	kvf_free(n->wp);
	kvf_free(n->flags);
	kvf_free(n->block_die);
	kvf_free(n->die_channel);
	kvf_free(n->torn);
	ftl_time_release(&n->time);
	memset(n, 0, sizeof(*n));
	n->fd = -1;
	n->spare_lpn = UINT32_MAX;
}

static kvf_status dark(const struct nand *n, const char *op, uint32_t block,
		       uint32_t page)
{
	return kvf_fail(KVF_EIO,
			"flash: %s of block %u page %u refused: the power is cut (block %u page %u was torn); power the device on first",
			op, block, page, n->cut_block, n->cut_page);
}

/* check_program - every rule a program of (block, page) must meet */
static kvf_status check_program(const struct nand *n, uint32_t block,
				uint32_t page)
{
	if (n->powered_off)
		return dark(n, "program", block, page);
	if (block >= n->geo.n_blocks)
		return kvf_fail(KVF_ERANGE,
				"flash: program of block %u refused: the device has %u blocks",
				block, n->geo.n_blocks);
	if (page >= n->geo.pages_per_block)
		return kvf_fail(KVF_ERANGE,
				"flash: program of block %u page %u refused: a block has %u pages",
				block, page, n->geo.pages_per_block);
	if (n->flags[block] & NAND_RETIRED)
		return kvf_fail(KVF_EINVAL,
				"flash: program of block %u page %u refused: the block is retired (%u erases, P/E limit %u)",
				block, page, n->erase_count[block], n->pe_limit);
	if (page < n->wp[block])
		return kvf_fail(KVF_EINVAL,
				"flash: program of block %u page %u refused: the page is already programmed; erase the block before programming it again",
				block, page);
	if (page > n->wp[block])
		return kvf_fail(KVF_EINVAL,
				"flash: program of block %u page %u refused: pages of a block are programmed in order and the next one is page %u",
				block, page, n->wp[block]);
	return KVF_OK;
}

static uint64_t ppn_of(const struct nand *n, uint32_t block, uint32_t page)
{
	return ((uint64_t)block << n->geo.page_shift) | page;
}

static off_t file_off(const struct nand *n, uint32_t block, uint32_t page)
{
	return (off_t)ppn_of(n, block, page) * n->geo.page_size;
}

static kvf_status file_write(struct nand *n, uint32_t block, uint32_t page,
			     const void *data, size_t len)
{
	ssize_t got = kvf_sysio->fault(KVF_SYSIO_WRITE, n->fd, len,
				       file_off(n, block, page));

	if (got < 0)
		return kvf_fail_errno(KVF_EIO, (int)-got,
				      "flash: writing block %u page %u to %s",
				      block, page, n->path);
	got = kvf_sysio->pwrite(n->fd, data, (size_t)got,
				file_off(n, block, page));
	if (got < 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "flash: writing block %u page %u to %s",
				      block, page, n->path);
	if ((size_t)got != len)
		return kvf_fail(KVF_EIO,
				"flash: writing block %u page %u to %s: short write of %zd of %zu bytes",
				block, page, n->path, got, len);
	return KVF_OK;
}

static kvf_status file_read(struct nand *n, uint32_t block, uint32_t page,
			    void *buf)
{
	size_t len = n->geo.page_size;
	ssize_t got = kvf_sysio->fault(KVF_SYSIO_READ, n->fd, len,
				       file_off(n, block, page));

	if (got < 0)
		return kvf_fail_errno(KVF_EIO, (int)-got,
				      "flash: reading block %u page %u from %s",
				      block, page, n->path);
	got = kvf_sysio->pread(n->fd, buf, (size_t)got,
			       file_off(n, block, page));
	if (got < 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "flash: reading block %u page %u from %s",
				      block, page, n->path);
	if ((size_t)got != len)
		return kvf_fail(KVF_EIO,
				"flash: reading block %u page %u from %s: short read of %zd of %zu bytes",
				block, page, n->path, got, len);
	return KVF_OK;
}

/* mem_page - the block's buffer (allocated on first use) + page offset */
static unsigned char *mem_page(struct nand *n, uint32_t block, uint32_t page)
{
	size_t bytes = (size_t)n->geo.pages_per_block * n->geo.page_size;

	if (n->mem[block] == NULL) {
		n->mem[block] = kvf_malloc(bytes);
		if (n->mem[block] == NULL)
			return NULL;
	}
	return n->mem[block] + (size_t)page * n->geo.page_size;
}

/* store - put page bytes in the backing; len < page_size tears the page */
static kvf_status store(struct nand *n, uint32_t block, uint32_t page,
			const void *data, size_t len)
{
	unsigned char *dst;

	switch (n->backing) {
	case KVF_FLASH_BACKING_NONE:
		return KVF_OK;
	case KVF_FLASH_BACKING_MEMORY:
		dst = mem_page(n, block, page);
		if (dst == NULL)
			return kvf_fail(KVF_ENOMEM,
					"flash: cannot allocate memory for block %u (%u pages of %u bytes)",
					block, n->geo.pages_per_block,
					n->geo.page_size);
		if (data)
			memcpy(dst, data, len);
		else
			memset(dst, 0, len);
		return KVF_OK;
	case KVF_FLASH_BACKING_FILE:
		if (data == NULL) {
			memset(n->bounce, 0, n->geo.page_size);
			data = n->bounce;
		}
		return file_write(n, block, page, data, len);
	case KVF_FLASH_BACKING_IMAGE:
		return nand_image_program(n, block, page, data, len, NULL);
	}
	return KVF_OK;
}

/* tear - the armed power cut hits this program: half a page lands */
static kvf_status tear(struct nand *n, uint32_t block, uint32_t page,
		       const void *data)
{
	uint64_t ppn = ppn_of(n, block, page);

	/* a torn cell array: keep half the bytes, whatever they were */
	(void)store(n, block, page, data, n->geo.page_size / 2);
	n->torn[ppn >> 6] |= 1ull << (ppn & 63);
	n->flags[block] |= NAND_HAS_TORN;
	n->wp[block] = page + 1;
	n->programs++;
	n->torn_pages++;
	n->powered_off = 1;
	n->cut_block = block;
	n->cut_page = page;
	return kvf_fail(KVF_EIO,
			"flash: power cut while programming block %u page %u; that page is torn",
			block, page);
}

kvf_status nand_program(struct nand *n, uint32_t block, uint32_t page,
			const void *data)
{
	kvf_status rc = check_program(n, block, page);

	if (rc != KVF_OK)
		return rc;
	ftl_time_program(&n->time, n->block_die[block],
			 nand_channel_of(n, block));
	if (n->cut_countdown != 0 && --n->cut_countdown == 0)
		rc = tear(n, block, page, data);
	else if (n->backing != KVF_FLASH_BACKING_NONE)
		rc = store(n, block, page, data, n->geo.page_size);
	n->spare_lpn = UINT32_MAX;
	if (rc != KVF_OK)
		return rc;
	n->wp[block] = page + 1;
	n->programs++;
	return KVF_OK;
}

/* check_read - range, power and torn checks of a read of (block, page) */
static kvf_status check_read(const struct nand *n, uint32_t block,
			     uint32_t page)
{
	if (n->powered_off)
		return dark(n, "read", block, page);
	if (block >= n->geo.n_blocks || page >= n->geo.pages_per_block)
		return kvf_fail(KVF_ERANGE,
				"flash: read of block %u page %u refused: the device has %u blocks of %u pages",
				block, page, n->geo.n_blocks,
				n->geo.pages_per_block);
	if (page < n->wp[block] && nand_page_torn(n, ppn_of(n, block, page)))
		return kvf_fail(KVF_ECORRUPT,
				"flash: block %u page %u is torn (a power cut hit its program); its data is not returned",
				block, page);
	return KVF_OK;
}

kvf_status nand_read(struct nand *n, uint32_t block, uint32_t page,
		     void *buf)
{
	kvf_status rc;

	if ((rc = check_read(n, block, page)) != KVF_OK) {
		if (rc == KVF_ECORRUPT) {
			/* the chip did read it; the ECC then gave up */
			ftl_time_read(&n->time, n->block_die[block],
				      nand_channel_of(n, block));
			n->reads++;
		}
		return rc;
	}
	ftl_time_read(&n->time, n->block_die[block], nand_channel_of(n, block));
	n->reads++;
	if (buf == NULL)
		return KVF_OK;
	if (page >= n->wp[block]) {
		memset(buf, ERASED_BYTE, n->geo.page_size);
		return KVF_OK;
	}
	switch (n->backing) {
	case KVF_FLASH_BACKING_NONE:
		return kvf_fail(KVF_ENOTSUP,
				"flash: backing 'none' keeps no data: block %u page %u cannot be returned",
				block, page);
	case KVF_FLASH_BACKING_MEMORY:
		memcpy(buf, n->mem[block] + (size_t)page * n->geo.page_size,
		       n->geo.page_size);
		return KVF_OK;
	case KVF_FLASH_BACKING_FILE:
		return file_read(n, block, page, buf);
	case KVF_FLASH_BACKING_IMAGE:
		return nand_image_read(n, block, page, buf, 1);
	}
	return KVF_OK;
}

kvf_status nand_copy(struct nand *n, uint32_t src_block, uint32_t src_page,
		     uint32_t dst_block, uint32_t dst_page)
{
	uint64_t src_ppn = ppn_of(n, src_block, src_page);
	const void *data = NULL;
	kvf_status rc;

	if (n->powered_off)
		return dark(n, "copy", src_block, src_page);
	if (src_block >= n->geo.n_blocks || src_page >= n->wp[src_block])
		return kvf_fail(KVF_EINVAL,
				"flash: copy from block %u page %u refused: that page is not programmed",
				src_block, src_page);
	if ((rc = check_program(n, dst_block, dst_page)) != KVF_OK)
		return rc;
	ftl_time_copy(&n->time, n->block_die[src_block],
		      nand_channel_of(n, src_block), n->block_die[dst_block],
		      nand_channel_of(n, dst_block));
	n->reads++;
	if (n->backing == KVF_FLASH_BACKING_MEMORY) {
		data = n->mem[src_block] + (size_t)src_page * n->geo.page_size;
	} else if (n->backing == KVF_FLASH_BACKING_FILE) {
		if ((rc = file_read(n, src_block, src_page, n->bounce)) != KVF_OK)
			return rc;
		data = n->bounce;
	} else if (n->backing == KVF_FLASH_BACKING_IMAGE) {
		/* raw: a page failing its checksum is copied with the
		 * checksum it fails, so it stays detectably bad */
		if ((rc = nand_image_read(n, src_block, src_page, n->bounce,
					  0)) != KVF_OK)
			return rc;
		data = n->bounce;
	}
	if (n->cut_countdown != 0 && --n->cut_countdown == 0) {
		rc = tear(n, dst_block, dst_page, data);
	} else if (n->backing == KVF_FLASH_BACKING_IMAGE) {
		uint64_t h = nand_image_hash(n, src_block, src_page);

		rc = nand_image_program(n, dst_block, dst_page, data,
					n->geo.page_size, &h);
	} else if (n->backing != KVF_FLASH_BACKING_NONE) {
		rc = store(n, dst_block, dst_page, data, n->geo.page_size);
	}
	n->spare_lpn = UINT32_MAX;
	if (rc != KVF_OK)
		return rc;
	if (nand_page_torn(n, src_ppn)) {
		uint64_t d = ppn_of(n, dst_block, dst_page);

		n->torn[d >> 6] |= 1ull << (d & 63);
		n->flags[dst_block] |= NAND_HAS_TORN;
	}
	n->wp[dst_block] = dst_page + 1;
	n->programs++;
	return KVF_OK;
}

/* punch - give an erased block's bytes back to the file system */
static void punch(struct nand *n, uint32_t block)
{
	off_t len = (off_t)n->geo.pages_per_block * n->geo.page_size;

	/* best effort: a file system without hole punching keeps the bytes */
	(void)kvf_sysio->fallocate(n->fd,
				   FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				   file_off(n, block, 0), len);
}

kvf_status nand_erase(struct nand *n, uint32_t block)
{
	if (n->powered_off)
		return dark(n, "erase", block, 0);
	if (block >= n->geo.n_blocks)
		return kvf_fail(KVF_ERANGE,
				"flash: erase of block %u refused: the device has %u blocks",
				block, n->geo.n_blocks);
	if (n->flags[block] & NAND_RETIRED)
		return kvf_fail(KVF_EINVAL,
				"flash: erase of block %u refused: the block is retired (%u erases, P/E limit %u)",
				block, n->erase_count[block], n->pe_limit);
	ftl_time_erase(&n->time, n->block_die[block]);
	if (n->img != NULL) {
		kvf_status rc = nand_image_erase(n, block,
						 n->erase_count[block] + 1);

		if (rc != KVF_OK)
			return rc;
	}
	if (n->flags[block] & NAND_HAS_TORN) {
		for (uint32_t p = 0; p < n->geo.pages_per_block; p++) {
			uint64_t ppn = ppn_of(n, block, p);

			n->torn[ppn >> 6] &= ~(1ull << (ppn & 63));
		}
		n->flags[block] &= (uint8_t)~NAND_HAS_TORN;
	}
	if (n->backing == KVF_FLASH_BACKING_FILE && n->wp[block] != 0)
		punch(n, block);
	n->wp[block] = 0;
	n->erase_count[block]++;
	n->erases++;
	if (n->erase_count[block] >= n->pe_limit) {
		n->flags[block] |= NAND_RETIRED;
		n->retired++;
	}
	return KVF_OK;
}

kvf_status nand_erase_pages(struct nand *n, uint32_t block, uint32_t page,
			    uint32_t n_pages)
{
	if (page != 0 || n_pages != n->geo.pages_per_block)
		return kvf_fail(KVF_EINVAL,
				"flash: erase of block %u pages %u..%llu refused: erases are whole blocks (pages 0..%u)",
				block, page,
				(unsigned long long)page + n_pages - 1,
				n->geo.pages_per_block - 1);
	return nand_erase(n, block);
}

void nand_power_cut_arm(struct nand *n, uint64_t after)
{
	n->cut_countdown = after;
}

void nand_power_on(struct nand *n)
{
	n->powered_off = 0;
}
