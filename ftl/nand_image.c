/*
 * nand_image.c - the persistent image of the emulated NAND device (see
 * nand_image.h for what is kept and the crash rules): the file I/O
 * through the sysio seam and the operations on an attached image
 * (program, read, erase with its barrier, trim, sync, statistics).  The
 * header is in nand_image_header.c, attach and the scan at open in
 * nand_image_open.c; the file layout, its invariants and what the files
 * share are in nand_image_int.h.
 *
 * Not thread-safe (see nand_image.h).
 */
#include "ftl/nand_image.h"

#include <errno.h>
#include <linux/falloc.h>
#include <string.h>
#include <xxhash.h>

#include "api/status.h"
#include "ftl/nand_image_int.h"
#include "ftl/sysio.h"

/* ---- I/O through the seam ---- */

kvf_status nand_img_pwrite(struct nand_image *im, const void *buf,
			   size_t len, uint64_t off, const char *what)
{
	ssize_t got;

	if (im->read_only) /* a mend of the load, kept in memory */
		return KVF_OK;
	got = kvf_sysio->fault(KVF_SYSIO_WRITE, im->fd, len, (off_t)off);

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

kvf_status nand_img_pread(struct nand_image *im, void *buf, size_t len,
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

kvf_status nand_img_fdatasync(struct nand_image *im)
{
	if (im->read_only) {
		im->dirty = 0;
		return KVF_OK;
	}
	if (kvf_sysio->fdatasync(im->fd) != 0)
		return kvf_fail_errno(KVF_EIO, errno, "flash image %s: fdatasync",
				      im->path);
	im->st.fdatasyncs++;
	im->dirty = 0;
	return KVF_OK;
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
	if ((rc = nand_img_pwrite(im, data, landed, im->off_data + q * ps,
				  "page bytes")) != KVF_OK)
		return rc;
	return nand_img_pwrite(im, &r, sizeof(r), im->off_oob + q * REC_BYTES,
			       "a spare-area record");
}

kvf_status nand_image_read(struct nand *n, uint32_t block, uint32_t page,
			   void *buf, int verify)
{
	struct nand_image *im = n->img;
	uint64_t q = ppn_of(n, block, page);
	uint32_t ps = n->geo.page_size;
	kvf_status rc;

	if ((rc = nand_img_pread(im, buf, ps, im->off_data + q * ps,
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
		if ((rc = nand_img_fdatasync(im)) != KVF_OK)
			return rc;
		im->st.barriers++;
		im->durable_seq = im->seq;
	}
	memset(&s, 0, sizeof(s));
	s.a = ++im->seq;
	s.b = (uint64_t)new_ec | (uint64_t)block << 32;
	s.check = slot_check(&s, im->id);
	if ((rc = nand_img_pwrite(im, &s, sizeof(s),
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
		rc = nand_img_pwrite(im, buf, k * TRIM_BYTES,
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

	if ((rc = nand_img_fdatasync(im)) != KVF_OK)
		return rc;
	im->durable_seq = upto;
	memset(&s, 0, sizeof(s));
	s.a = upto;
	s.b = ++im->n_syncs;
	s.check = slot_check(&s, im->id);
	/* not synced itself: a lost record only makes the next open verify
	 * more pages */
	return nand_img_pwrite(im, &s, sizeof(s),
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
