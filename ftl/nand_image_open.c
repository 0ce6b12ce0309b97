/*
 * nand_image_open.c - attaching an image to the device: the file laid out
 * for the geometry, created (header, zeros) or opened, checked against
 * the device, and loaded (sync records, erase counts and epochs, the
 * spare-area records with the write pointers they imply, the pages newer
 * than the durable point verified, the trims); then the scan results the
 * FTLs rebuild from, and detach.  A file of its own: the open-time scan,
 * run once, apart from the operations of a running device.
 *
 * Not thread-safe (see nand_image.h).
 */
#include "ftl/nand_image.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/nand_image_int.h"
#include "ftl/sysio.h"

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
	return nand_img_pwrite(im, &h, sizeof(h), 0, "the header");
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
	if ((rc = nand_img_pread(im, s, bytes, OFF_BLOCKS, "the block table")) != KVF_OK)
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

		rc = nand_img_pread(im, buf, k * REC_BYTES,
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
		rc = nand_img_pread(im, page, n->geo.page_size,
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
			rc = nand_img_pwrite(im, &dead, sizeof(dead),
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

		rc = nand_img_pread(im, buf, k * TRIM_BYTES,
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
		rc = nand_img_pwrite(im, &t, sizeof(t),
				     im->off_trim + l * TRIM_BYTES, "a trim entry");
		im->dirty = 1;
	}
	return rc;
}

static kvf_status load(struct nand_image *im, struct nand *n)
{
	struct img_slot sync[2];
	kvf_status rc;

	if ((rc = nand_img_pread(im, sync, sizeof(sync), OFF_SYNC,
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
		rc = nand_img_fdatasync(im);
	return rc;
}

static kvf_status open_image(struct nand_image *im, struct nand *n,
			     const struct nand_image_desc *d)
{
	struct img_header h;
	struct nand_image_desc got;
	struct stat sb;
	kvf_status rc;

	im->fd = kvf_sysio->open(im->path,
				 im->read_only ? O_RDONLY | O_CLOEXEC
					       : O_RDWR | O_CREAT | O_CLOEXEC,
				 0644);
	if (im->fd < 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "kvf_media_open: flash: cannot open image %s",
				      im->path);
	/* readers share the image; a writer has it alone */
	if (kvf_sysio->flock(im->fd, (im->read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0)
		return kvf_fail_errno(KVF_EBUSY, errno,
				      "kvf_media_open: flash: image %s is in use",
				      im->path);
	if (kvf_sysio->fstat(im->fd, &sb) != 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "kvf_media_open: flash: stat of image %s",
				      im->path);
	if (sb.st_size == 0 && im->read_only)
		return kvf_fail(KVF_EIO,
				"kvf_media_open: flash: image %s is empty, and a read-only open makes none",
				im->path);
	if (sb.st_size == 0) {
		im->st.created = 1;
		if ((rc = create(im, n, d)) != KVF_OK)
			return rc;
		return nand_img_fdatasync(im);
	}
	memset(&h, 0, sizeof(h));
	if ((rc = nand_img_pread(im, &h, sizeof(h), 0, "the header")) != KVF_OK)
		return rc;
	if ((rc = nand_img_decode_header(&h, sizeof(h), im->path, &got)) != KVF_OK ||
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
			     const struct nand_image_desc *d, int read_only)
{
	struct nand_image *im = kvf_calloc(1, sizeof(*im));
	uint64_t t0 = now_ns();
	unsigned char *zero;
	kvf_status rc;

	n->img = NULL;
	if (im == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_media_open: flash: out of memory");
	im->fd = -1;
	im->read_only = read_only;
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
	if (!n->powered_off && !n->img->read_only)
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
