/*
 * store_header.c - the caller's options and the store header: the checks
 * of every option field and of the model, the header a new store is made
 * with, the agreement of a reopen's options with it, and the header file
 * read, judged (damaged, newer, older) and written atomically.  A file of
 * its own: it is the whole of what a store's configuration may be, and it
 * touches no open store.  Called by kvf_open (store.c) only; no locking.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/codec.h"
#include "engine/reads/kt_layout.h"
#include "engine/base/store_header.h"
#include "engine/base/store_int.h"

uint64_t store_header_checksum(const struct store_header *h)
{
	return XXH3_64bits(h, offsetof(struct store_header, checksum));
}

/* ---- options and header ------------------------------------------------ */

static int is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* Ranges of the option fields that are not part of the model. */
#define MAX_THREADS 1024u      /* pool workers: beyond this is a mistake */
#define MAX_QUEUE_DEPTH 4096u  /* io_uring ring entries */
#define MAX_FLASH_CHANNELS 256u
#define MIN_DRAM_BUDGET (1ull << 20) /* less holds no useful share of a
						* store's pages */

/* check_model - the model a store is created for, or that a reopen names */
static kvf_status check_model(const kvf_options *o)
{
	const kvf_model *m = &o->model;

	if (m->n_layers == 0 || m->n_layers > KV_MAX_LAYERS)
		return kvf_fail(KVF_EINVAL, "kvf_open: model.n_layers %u out of range (1..%u)",
				m->n_layers, KV_MAX_LAYERS);
	if (m->n_kv_heads == 0 || m->n_kv_heads > KV_MAX_HEADS)
		return kvf_fail(KVF_EINVAL, "kvf_open: model.n_kv_heads %u out of range (1..%u)",
				m->n_kv_heads, KV_MAX_HEADS);
	if (m->n_q_heads == 0 || m->n_q_heads > KV_MAX_HEADS ||
	    m->n_q_heads % m->n_kv_heads != 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: model.n_q_heads %u must be a multiple of n_kv_heads %u, at most %u",
				m->n_q_heads, m->n_kv_heads, KV_MAX_HEADS);
	if ((unsigned)m->dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "kvf_open: model.dtype %d is not a kvf_dtype",
				(int)m->dtype);
	if (m->head_dim == 0 || m->head_dim > KVF_HEAD_DIM_MAX)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: model.head_dim %u out of range (1..%u)",
				m->head_dim, KVF_HEAD_DIM_MAX);
	if (o->kt_pages && m->head_dim > 512)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: kt_pages needs head_dim <= 512 (SparF's per-task dim tables), got %u",
				m->head_dim);
	if (o->codec != KVF_CODEC_NONE) {
		uint32_t row = m->head_dim * store_dtype_bytes(m->dtype);
		struct group_geom g = store_codec_group(
			o->page_size, (kvf_codec)o->codec, m->head_dim,
			store_codec_layout_for(o->page_size, (kvf_codec)o->codec,
					       m->head_dim));

		/* encoded pages must hold fewer bytes than the rows they
		 * replace, or the codec only loses precision */
		if (g.tokens == 0 ||
		    (uint64_t)g.pages * o->page_size >= (uint64_t)g.tokens * row)
			return kvf_fail(KVF_EINVAL,
					"kvf_open: kvf_options.codec %s cannot store head_dim %u in %s smaller: a group of %u tokens takes %u pages of %u bytes, plain rows %llu bytes",
					kvf_codec_name((kvf_codec)o->codec),
					m->head_dim, kvf_dtype_name(m->dtype),
					g.tokens, g.pages, o->page_size,
					(unsigned long long)g.tokens * row);
	}
	return KVF_OK;
}

struct group_geom store_codec_group(uint32_t page_size, kvf_codec codec,
				    uint32_t head_dim, uint32_t version)
{
	struct group_geom g = { 0, 0, 0 };

	for (uint32_t p = 1; p <= GROUP_MAX_PAGES; p++) {
		uint64_t room = (uint64_t)p * page_size;
		uint32_t nk = kvc_codec_group_tokens(codec, KVF_KIND_K, head_dim,
						     version, room);
		uint32_t nv = kvc_codec_group_tokens(codec, KVF_KIND_V, head_dim,
						     version, room);
		uint32_t n = nk < nv ? nk : nv;
		size_t bk, bv;

		if (n == 0)
			continue;
		bk = kvc_codec_group_bytes(codec, KVF_KIND_K, n, head_dim, version);
		bv = kvc_codec_group_bytes(codec, KVF_KIND_V, n, head_dim, version);
		g = (struct group_geom){ n, p, (uint32_t)(bk > bv ? bk : bv) };
		if ((room - g.bytes) * 100 <= room * GROUP_WASTE_PCT)
			break;
	}
	return g;
}

uint32_t store_codec_layout_for(uint32_t page_size, kvf_codec codec,
				uint32_t head_dim)
{
	struct group_geom a = store_codec_group(page_size, codec, head_dim,
						KVC_LAYOUT_F16);
	struct group_geom b = store_codec_group(page_size, codec, head_dim,
						KVC_LAYOUT_KBYTE);

	/* b's pages a token, b.pages / b.tokens, below a's */
	if (b.tokens && (a.tokens == 0 || (uint64_t)b.pages * a.tokens <
						  (uint64_t)a.pages * b.tokens))
		return KVC_LAYOUT_KBYTE;
	return KVC_LAYOUT_F16;
}

uint32_t store_codec_layout_of(const struct store_header *h)
{
	return h->format_version >= 6 ? h->codec_layout : KVC_LAYOUT_F16;
}

/* physical_memory - bytes of RAM (a budget past it is a mistake) */
static uint64_t physical_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);

	return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size
				     : UINT64_MAX;
}

/* check_options - every field of o in its range, before anything is made;
 * the model only when one is given (a zero model reopens as stored) */
static kvf_status check_options(const kvf_options *o)
{
	const kvf_model *m = &o->model;
	uint64_t seg = o->segment_size, pps, n_stripes, per_stripe;
	uint32_t page_bits = 0;

	if ((unsigned)o->media > KVF_MEDIA_FLASH)
		return kvf_fail(KVF_EINVAL, "kvf_open: media %d is not a kvf_media_kind",
				(int)o->media);
	if (!is_pow2(o->page_size) || o->page_size < 4096 || o->page_size > 65536)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: page_size %u must be a power of two in 4096..65536",
				o->page_size);
	if (o->n_threads > MAX_THREADS)
		return kvf_fail(KVF_EINVAL, "kvf_open: n_threads %u out of range (0..%u; 0 = online CPUs)",
				o->n_threads, MAX_THREADS);
	if (o->kt_pages > 1)
		return kvf_fail(KVF_EINVAL, "kvf_open: kt_pages %u must be 0 or 1",
				o->kt_pages);
	if (seg == 0 || seg % o->page_size != 0 || seg / o->page_size < 4 ||
	    seg / o->page_size > 65536)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: segment_size %llu must be 4 to 65536 pages of %u bytes",
				(unsigned long long)seg, o->page_size);
	if (o->queue_depth > MAX_QUEUE_DEPTH)
		return kvf_fail(KVF_EINVAL, "kvf_open: queue_depth %u out of range (0..%u; 0 = %u)",
				o->queue_depth, MAX_QUEUE_DEPTH, KVF_MEDIA_DEFAULT_QD);
	if (o->n_stripes > KVF_MEDIA_MAX_STRIPES ||
	    o->n_device_paths > KVF_MEDIA_MAX_STRIPES)
		return kvf_fail(KVF_EINVAL, "kvf_open: n_stripes %u / n_device_paths %u out of range (0..%u)",
				o->n_stripes, o->n_device_paths,
				KVF_MEDIA_MAX_STRIPES);
	n_stripes = o->n_stripes ? o->n_stripes
				 : (o->n_device_paths ? o->n_device_paths : 1);
	if ((o->device_paths != NULL) != (o->n_device_paths != 0) ||
	    (o->n_device_paths && o->n_device_paths != n_stripes))
		return kvf_fail(KVF_EINVAL,
				"kvf_open: device_paths %s with n_device_paths %u for %llu stripes (give one path per stripe, or none)",
				o->device_paths ? "set" : "NULL", o->n_device_paths,
				(unsigned long long)n_stripes);
	for (uint32_t i = 0; i < o->n_device_paths; i++)
		if (o->device_paths[i] == NULL || o->device_paths[i][0] == '\0')
			return kvf_fail(KVF_EINVAL, "kvf_open: device_paths[%u] is %s",
					i, o->device_paths[i] ? "empty" : "NULL");
	if (o->n_device_paths && o->media != KVF_MEDIA_FILE)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: device_paths are for media KVF_MEDIA_FILE, not media %d",
				(int)o->media);
	if (o->direct_io > 2)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: direct_io %u must be 0 (where allowed), 1 (on) or 2 (off)",
				o->direct_io);
	if (o->read_only > 1)
		return kvf_fail(KVF_EINVAL, "kvf_open: read_only %u must be 0 or 1",
				o->read_only);
	if (o->flash_channels > MAX_FLASH_CHANNELS)
		return kvf_fail(KVF_EINVAL, "kvf_open: flash_channels %u out of range (0..%u; 0 = one per stripe)",
				o->flash_channels, MAX_FLASH_CHANNELS);
	if (o->flash_cell > 4)
		return kvf_fail(KVF_EINVAL, "kvf_open: flash_cell %u out of range (0..4)",
				o->flash_cell);
	if (!(o->flash_spare >= 0 && o->flash_spare < 0.9f))
		return kvf_fail(KVF_EINVAL, "kvf_open: flash_spare %g out of range [0, 0.9)",
				(double)o->flash_spare);
	if (o->trim > 2)
		return kvf_fail(KVF_EINVAL, "kvf_open: trim %u must be 0, 1 or 2", o->trim);
	if (o->verify_reads > 1)
		return kvf_fail(KVF_EINVAL, "kvf_open: verify_reads %u must be 0 or 1",
				o->verify_reads);
	if (o->dram_budget != 0 && o->dram_budget < MIN_DRAM_BUDGET)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: dram_budget %llu is below the least a tier can work with (%llu bytes); 0 turns the tier off",
				(unsigned long long)o->dram_budget,
				(unsigned long long)MIN_DRAM_BUDGET);
	if (o->dram_budget > physical_memory())
		return kvf_fail(KVF_EINVAL,
				"kvf_open: dram_budget %llu is more than this machine's %llu bytes of memory",
				(unsigned long long)o->dram_budget,
				(unsigned long long)physical_memory());
	if (o->evict_policy > KVF_EVICT_ENDURANCE)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: evict_policy %u unknown (0 none, 1 LRU, 2 LFU, 3 endurance)",
				o->evict_policy);
	if (!(o->evict_low > 0 && o->evict_low < o->evict_high && o->evict_high <= 1))
		return kvf_fail(KVF_EINVAL,
				"kvf_open: evict_low %g and evict_high %g must satisfy 0 < low < high <= 1",
				(double)o->evict_low, (double)o->evict_high);
	if (o->admit_tokens != 0 && o->dram_budget == 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: admit_tokens %llu keeps sequences in the memory tier, but dram_budget is 0 (no tier)",
				(unsigned long long)o->admit_tokens);
	if (o->admit_tokens != 0 && o->media == KVF_MEDIA_MEMORY)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: admit_tokens %llu keeps sequences off the media, but a memory store has none to keep them off",
				(unsigned long long)o->admit_tokens);
	if (o->profile > 1)
		return kvf_fail(KVF_EINVAL, "kvf_open: profile %u must be 0 or 1",
				o->profile);
	if (o->codec > KVF_CODEC_INT4)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: kvf_options.codec %u is no kvf_codec (0 none, 1 fp8, 2 int8, 3 int4)",
				o->codec);
	pps = seg / o->page_size;
	while ((1ull << page_bits) < pps)
		page_bits++;
	per_stripe = o->capacity_bytes / n_stripes / seg;
	if (per_stripe < 2)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: capacity_bytes %llu holds fewer than 2 segments of %llu bytes per stripe (%llu stripes)",
				(unsigned long long)o->capacity_bytes,
				(unsigned long long)seg,
				(unsigned long long)n_stripes);
	if (per_stripe * n_stripes >= (1ull << (32 - page_bits)) - 1)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: capacity_bytes %llu is too many segments of %llu bytes (at most %llu)",
				(unsigned long long)o->capacity_bytes,
				(unsigned long long)seg,
				(unsigned long long)(1ull << (32 - page_bits)) - 2);
	if (m->n_layers || m->n_q_heads || m->n_kv_heads || m->head_dim)
		return check_model(o);
	return KVF_OK;
}

/* store_take_options - the caller's options over our defaults, each checked */
kvf_status store_take_options(const kvf_options *in, kvf_options *o)
{
	kvf_status rc;

	kvf_options_init(o, NULL);
	if (in == NULL)
		return KVF_OK;
	if ((rc = kvf_struct_check("kvf_open", "opts", in, sizeof(*o))) != KVF_OK)
		return rc;
	memcpy(o, in, in->struct_size < sizeof(*o) ? in->struct_size : sizeof(*o));
	o->struct_size = sizeof(*o);
	/* zero in a field means its default (kvflash.h's conventions); the
	 * fields whose 0 is documented as a setting of its own (dram_budget,
	 * admit_tokens, prefix_cache_bytes, n_threads, ...) keep it */
	if (o->page_size == 0)
		o->page_size = KVF_DEFAULT_PAGE_SIZE;
	if (o->segment_size == 0)
		o->segment_size = KVF_DEFAULT_SEGMENT_SIZE;
	if (o->capacity_bytes == 0)
		o->capacity_bytes = KVF_DEFAULT_CAPACITY;
	if (o->evict_high == 0)
		o->evict_high = KVF_DEFAULT_EVICT_HIGH;
	if (o->evict_low == 0)
		o->evict_low = KVF_DEFAULT_EVICT_LOW;
	return check_options(o);
}

/* store_build_header - describe a new store made with o (check_options passed) */
kvf_status store_build_header(const kvf_options *o, struct store_header *h)
{
	const kvf_model *m = &o->model;
	uint64_t seg = o->segment_size, pps, n_stripes, per_stripe;
	uint32_t page_bits = 0;
	struct group_geom g;
	kvf_status rc;

	if ((rc = check_model(o)) != KVF_OK)
		return rc;
	pps = seg / o->page_size;
	while ((1ull << page_bits) < pps)
		page_bits++;
	n_stripes = o->n_stripes ? o->n_stripes
				 : (o->n_device_paths ? o->n_device_paths : 1);
	per_stripe = o->capacity_bytes / n_stripes / seg;
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, STORE_MAGIC, 8);
	h->format_version = STORE_FORMAT_PLAIN;
	h->header_size = sizeof(*h);
	h->n_layers = m->n_layers;
	h->n_q_heads = m->n_q_heads;
	h->n_kv_heads = m->n_kv_heads;
	h->head_dim = m->head_dim;
	h->dtype = (uint32_t)m->dtype;
	h->page_size = o->page_size;
	h->segment_size = seg;
	h->segs_per_stripe = per_stripe;
	h->n_stripes = (uint32_t)n_stripes;
	h->media = (uint32_t)o->media;
	h->kt_pages = o->kt_pages;
	h->page_bits = page_bits;
	h->kt_dims = o->kt_pages ? kt_choose_dims(m->head_dim) : 0;
	if (o->codec == KVF_CODEC_NONE)
		g = group_layout(o->page_size,
				 m->head_dim * store_dtype_bytes(m->dtype));
	else {
		uint32_t v = store_codec_layout_for(o->page_size,
						    (kvf_codec)o->codec,
						    m->head_dim);

		/* version 1 stays format 5, which older libraries open */
		h->format_version = v == KVC_LAYOUT_F16 ? STORE_FORMAT_CODEC
							: STORE_FORMAT_VERSION;
		h->codec_layout = v == KVC_LAYOUT_F16 ? 0 : v;
		g = store_codec_group(o->page_size, (kvf_codec)o->codec,
				      m->head_dim, v);
	}
	h->group_tokens = g.tokens;
	h->group_pages = g.pages;
	h->group_bytes = g.bytes;
	h->codec = o->codec;
	return KVF_OK;
}

struct group_geom store_group_of(const struct store_header *h)
{
	uint32_t row = h->head_dim * store_dtype_bytes((kvf_dtype)h->dtype);

	if (h->format_version < 4) /* one page a group, rows dividing it */
		return (struct group_geom){ h->page_size / row, 1,
					    h->page_size / row * row };
	return (struct group_geom){ h->group_tokens, h->group_pages,
				    h->group_bytes };
}

/* store_check_against - o (from the caller) must agree with the stored h */
kvf_status store_check_against(const kvf_options *o, const struct store_header *h,
				const char *path)
{
	const kvf_model *m = &o->model;
	int model_given = m->n_layers || m->n_q_heads || m->n_kv_heads ||
			  m->head_dim;
	uint64_t n_stripes = o->n_stripes ? o->n_stripes
					  : (o->n_device_paths ? o->n_device_paths : 1);

	/* a read-only open with no model (tools) takes everything as stored */
	if (!model_given && o->read_only)
		return KVF_OK;

#define MISMATCH(field, have, want)                                            \
	kvf_fail(KVF_EMISMATCH,                                                \
		 "kvf_open: %s %llu contradicts the store's %llu (%s)", field, \
		 (unsigned long long)(have), (unsigned long long)(want), path)
	if (model_given) {
		if (m->n_layers != h->n_layers)
			return MISMATCH("model.n_layers", m->n_layers, h->n_layers);
		if (m->n_q_heads != h->n_q_heads)
			return MISMATCH("model.n_q_heads", m->n_q_heads, h->n_q_heads);
		if (m->n_kv_heads != h->n_kv_heads)
			return MISMATCH("model.n_kv_heads", m->n_kv_heads, h->n_kv_heads);
		if (m->head_dim != h->head_dim)
			return MISMATCH("model.head_dim", m->head_dim, h->head_dim);
		if ((uint32_t)m->dtype != h->dtype)
			return MISMATCH("model.dtype", m->dtype, h->dtype);
	}
	if (o->page_size != h->page_size)
		return MISMATCH("page_size", o->page_size, h->page_size);
	if (o->segment_size != h->segment_size)
		return MISMATCH("segment_size", o->segment_size, h->segment_size);
	if (n_stripes != h->n_stripes)
		return MISMATCH("n_stripes", n_stripes, h->n_stripes);
	if (o->capacity_bytes / h->n_stripes / h->segment_size != h->segs_per_stripe)
		return MISMATCH("capacity_bytes", o->capacity_bytes,
				h->segs_per_stripe * h->n_stripes * h->segment_size);
	if ((uint32_t)o->media != h->media)
		return MISMATCH("media", o->media, h->media);
	if (o->kt_pages != h->kt_pages)
		return MISMATCH("kt_pages", o->kt_pages, h->kt_pages);
	if (o->codec != h->codec)
		return kvf_fail(KVF_EMISMATCH,
				"kvf_open: kvf_options.codec %s contradicts the store's %s (%s)",
				kvf_codec_name((kvf_codec)o->codec),
				kvf_codec_name((kvf_codec)h->codec), path);
#undef MISMATCH
	return KVF_OK;
}

/* store_read_header - the store header at path; KVF_ENOENT if none.
 * A file that is there but is not a whole, intact header of ours is
 * damage (KVF_ECORRUPT): the name KVFLASH is the store's. */
kvf_status store_read_header(const char *path, struct store_header *h)
{
	unsigned char buf[sizeof(*h)];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0) {
		if (errno == ENOENT)
			return KVF_ENOENT;
		return kvf_fail_errno(KVF_EIO, errno, "kvf_open: open %s", path);
	}
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return kvf_fail_errno(KVF_EIO, errno, "kvf_open: read %s", path);
	return store_header_decode(buf, (size_t)n, path, h);
}

/* check_group - the header's token group is the one its model gets
 * (group_layout), or for format 3 the only one format 3 made: rows that
 * divide the page.  KVF_ECORRUPT with why set otherwise. */
static kvf_status check_group(const struct store_header *h, char *why,
			      size_t why_cap)
{
	uint32_t row = h->head_dim * store_dtype_bytes((kvf_dtype)h->dtype);
	struct group_geom want;

	if (h->format_version < 4) {
		if (h->page_size % row == 0 && h->head_dim <= h->page_size / 2)
			return KVF_OK;
		snprintf(why, why_cap,
			 "format %u with head_dim %u, rows of %u bytes that do not divide the page of %u",
			 h->format_version, h->head_dim, row, h->page_size);
		return KVF_ECORRUPT;
	}
	if (h->codec > KVF_CODEC_INT4 ||
	    (h->codec != CODEC_NONE && h->format_version < 5) ||
	    (h->codec == CODEC_NONE && h->format_version >= 6)) {
		snprintf(why, why_cap, "codec %u in format %u", h->codec,
			 h->format_version);
		return KVF_ECORRUPT;
	}
	/* format 6 states the layout version that made it format 6 */
	if (h->format_version >= 6 ? h->codec_layout != KVC_LAYOUT_KBYTE
				   : h->format_version == 5 && h->codec_layout) {
		snprintf(why, why_cap, "codec layout %u in format %u",
			 h->codec_layout, h->format_version);
		return KVF_ECORRUPT;
	}
	want = h->codec == CODEC_NONE
		       ? group_layout(h->page_size, row)
		       : store_codec_group(h->page_size, (kvf_codec)h->codec,
					   h->head_dim, store_codec_layout_of(h));
	if (h->group_tokens == want.tokens && h->group_pages == want.pages &&
	    h->group_bytes == want.bytes)
		return KVF_OK;
	snprintf(why, why_cap,
		 "token group of %u tokens, %u pages, %u bytes, codec %u; head_dim %u gets %u, %u, %u",
		 h->group_tokens, h->group_pages, h->group_bytes, h->codec,
		 h->head_dim, want.tokens, want.pages, want.bytes);
	return KVF_ECORRUPT;
}

/* check_fields - a header whose checksum holds must still describe a store
 * that could have been made (store_build_header): open divides by its sizes and
 * sizes its tables from it.  Anything else is damage. */
static kvf_status check_fields(const struct store_header *h, const char *path)
{
	char why[KVF_ERRMSG_CAP];
	uint32_t page_bits = 0;
	kvf_options o;
	kvf_status rc;

	kvf_options_init(&o, NULL);
	o.model = (kvf_model){ h->n_layers, h->n_q_heads, h->n_kv_heads,
			       h->head_dim, (kvf_dtype)h->dtype };
	o.page_size = h->page_size;
	o.segment_size = h->segment_size;
	o.media = (kvf_media_kind)h->media;
	o.kt_pages = h->kt_pages;
	o.codec = h->codec;
	if (h->n_stripes == 0 || h->n_stripes > KVF_MEDIA_MAX_STRIPES ||
	    h->segs_per_stripe == 0 || h->segs_per_stripe > UINT32_MAX ||
	    h->segment_size > UINT32_MAX) {
		snprintf(why, sizeof(why),
			 "%u stripes of %llu segments of %llu bytes",
			 h->n_stripes, (unsigned long long)h->segs_per_stripe,
			 (unsigned long long)h->segment_size);
		goto bad;
	}
	o.n_stripes = h->n_stripes;
	o.capacity_bytes = h->segs_per_stripe * h->n_stripes * h->segment_size;
	if ((rc = check_options(&o)) != KVF_OK || (rc = check_model(&o)) != KVF_OK) {
		snprintf(why, sizeof(why), "%s", kvf_last_error());
		goto bad;
	}
	while ((1ull << page_bits) < h->segment_size / h->page_size)
		page_bits++;
	if (h->page_bits != page_bits ||
	    h->kt_dims != (h->kt_pages ? kt_choose_dims(h->head_dim) : 0)) {
		snprintf(why, sizeof(why), "page_bits %u, kt_dims %u", h->page_bits,
			 h->kt_dims);
		goto bad;
	}
	if ((rc = check_group(h, why, sizeof(why))) != KVF_OK)
		goto bad;
	return KVF_OK;
bad:
	return kvf_fail(KVF_ECORRUPT,
			"kvf_open: %s is damaged: its checksum holds but its fields describe no store (%s)",
			path, why);
}

kvf_status store_header_decode(const void *buf, size_t n, const char *path,
			       struct store_header *out)
{
	struct store_header hh, *h = &hh;
	kvf_status rc;

	memset(h, 0, sizeof(*h));
	memcpy(h, buf, n < sizeof(*h) ? n : sizeof(*h));
	if (n < 12 || memcmp(h->magic, STORE_MAGIC, 8) != 0)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: %s is damaged: %zu bytes without the KVFLASH magic (the store header is unreadable; its segments and catalog are not touched)",
				path, n);
	/* a newer format may lay its header out otherwise: only a header
	 * of our size and checksum can be judged damaged with certainty */
	if (h->format_version > STORE_FORMAT_VERSION &&
	    (h->header_size != sizeof(*h) || store_header_checksum(h) == h->checksum))
		return kvf_fail(KVF_EVERSION,
				"kvf_open: %s has format version %u; this library reads up to %u",
				path, h->format_version, STORE_FORMAT_VERSION);
	if (n != sizeof(*h) || h->header_size != sizeof(*h))
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: %s is damaged: %zu bytes, header_size %u (expected %zu)",
				path, n, h->header_size, sizeof(*h));
	if (store_header_checksum(h) != h->checksum)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: %s is damaged: checksum %016llx, computed %016llx",
				path, (unsigned long long)h->checksum,
				(unsigned long long)store_header_checksum(h));
	/* older headers have this layout; the catalog records of those
	 * before STORE_FORMAT_OLDEST do not */
	if (h->format_version < STORE_FORMAT_OLDEST)
		return kvf_fail(KVF_EVERSION,
				"kvf_open: %s has format version %u, which this library no longer reads (it reads %u to %u); make the store afresh",
				path, h->format_version, STORE_FORMAT_OLDEST,
				STORE_FORMAT_VERSION);
	if ((rc = check_fields(h, path)) != KVF_OK)
		return rc;
	*out = *h;
	return KVF_OK;
}

/* store_write_header - write h to path atomically (temp file, fsync, rename) */
kvf_status store_write_header(const char *dir, const char *path,
			       struct store_header *h)
{
	char *tmp = store_path_join(dir, STORE_HEADER_FILE ".tmp");
	int fd, dfd;

	if (tmp == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	h->checksum = store_header_checksum(h);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, h, sizeof(*h)) != (ssize_t)sizeof(*h) ||
	    fsync(fd) != 0 || rename(tmp, path) != 0) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		unlink(tmp);
		kvf_free(tmp);
		return kvf_fail_errno(KVF_EIO, err, "kvf_open: writing %s", path);
	}
	close(fd);
	kvf_free(tmp);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return KVF_OK;
}
