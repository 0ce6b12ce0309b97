/*
 * media.c - the checked front of every media backend.
 *
 * Each kvf_media_* call validates its arguments against the geometry, so
 * backends see only well-formed requests, then calls the backend's ops.
 * Nothing reaches a backend once the handle is closed.  It calls no
 * backend by name: the backends sit above it (they take media.h's types
 * and kvf_media_check_io), and kvf_media_open, which picks one, above
 * them in media_open.c.
 */
#include "ftl/media.h"

#include "api/alloc.h"
#include "api/status.h"

void (*kvf_media_trace_hook)(const struct kvf_media *m,
			     enum kvf_media_trace_op op, uint32_t stripe,
			     uint64_t seg, uint32_t page, uint32_t n_pages);

/* trace_writes - show n_io written requests to the trace hook */
static void trace_writes(const struct kvf_media *m,
			 const struct kvf_media_io *io, uint32_t n_io)
{
	if (kvf_media_trace_hook == NULL)
		return;
	for (uint32_t i = 0; i < n_io; i++)
		kvf_media_trace_hook(m, KVF_MEDIA_TRACE_WRITE, io[i].stripe,
				     io[i].seg, io[i].page, io[i].n_pages);
}

/* refuse_read_only - writes and trims on a read-only media */
static kvf_status refuse_read_only(const char *call, struct kvf_media *m)
{
	if (m->read_only)
		return kvf_fail(KVF_ENOTSUP, "%s: the media is open read-only",
				call);
	return KVF_OK;
}

/* kvf_media_check_io - see media.h: shared by reads, writes and the flash
 * backend's stream writes */
kvf_status kvf_media_check_io(const char *call, struct kvf_media *m,
			      const struct kvf_media_io *io, uint32_t n_io)
{
	const struct kvf_media_geometry *g;

	if (m == NULL)
		return kvf_fail(KVF_EINVAL, "%s: media is NULL", call);
	if (m->closed)
		return kvf_fail(KVF_ECLOSED, "%s: media is closed", call);
	if (io == NULL && n_io != 0)
		return kvf_fail(KVF_EINVAL, "%s: io is NULL", call);
	g = &m->geo;
	for (uint32_t i = 0; i < n_io; i++) {
		const struct kvf_media_io *r = &io[i];

		if (r->stripe >= g->n_stripes)
			return kvf_fail(KVF_ERANGE,
					"%s: request %u: stripe %u out of range (media has %u)",
					call, i, r->stripe, g->n_stripes);
		if (r->seg >= g->segs_per_stripe)
			return kvf_fail(KVF_ERANGE,
					"%s: request %u: segment %llu out of range (stripe holds %llu)",
					call, i, (unsigned long long)r->seg,
					(unsigned long long)g->segs_per_stripe);
		if (r->n_pages == 0)
			return kvf_fail(KVF_EINVAL,
					"%s: request %u: n_pages is 0", call, i);
		if (r->page >= g->pages_per_segment ||
		    r->n_pages > g->pages_per_segment - r->page)
			return kvf_fail(KVF_ERANGE,
					"%s: request %u: pages %u..%u past the segment end (%u pages)",
					call, i, r->page,
					r->page + r->n_pages - 1,
					g->pages_per_segment);
		if (r->buf == NULL)
			return kvf_fail(KVF_EINVAL, "%s: request %u: buf is NULL",
					call, i);
		if ((uintptr_t)r->buf % KVF_MEDIA_ALIGN != 0)
			return kvf_fail(KVF_EINVAL,
					"%s: request %u: buf %p is not %u-byte aligned",
					call, i, r->buf, KVF_MEDIA_ALIGN);
	}
	return KVF_OK;
}

kvf_status kvf_media_write(struct kvf_media *m, const struct kvf_media_io *io,
			   uint32_t n_io)
{
	kvf_status rc = kvf_media_check_io("kvf_media_write", m, io, n_io);

	if (rc == KVF_OK)
		rc = refuse_read_only("kvf_media_write", m);
	if (rc != KVF_OK || n_io == 0)
		return rc;
	if ((rc = m->ops->write(m, io, n_io)) == KVF_OK)
		trace_writes(m, io, n_io);
	return rc;
}

kvf_status kvf_media_read(struct kvf_media *m, const struct kvf_media_io *io,
			  uint32_t n_io)
{
	kvf_status rc = kvf_media_check_io("kvf_media_read", m, io, n_io);

	if (rc != KVF_OK || n_io == 0)
		return rc;
	return m->ops->read(m, io, n_io);
}

kvf_status kvf_media_read_start(struct kvf_media *m,
				const struct kvf_media_io *io, uint32_t n_io,
				struct kvf_media_read_op *op)
{
	kvf_status rc;

	op->ring = -1;
	if (n_io > KVF_MEDIA_ASYNC_IO)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_read_start: %u requests, more than %u",
				n_io, KVF_MEDIA_ASYNC_IO);
	rc = kvf_media_check_io("kvf_media_read", m, io, n_io);
	if (rc != KVF_OK || n_io == 0)
		return rc;
	if (m->ops->read_start == NULL)
		return m->ops->read(m, io, n_io);
	return m->ops->read_start(m, io, n_io, op);
}

kvf_status kvf_media_read_finish(struct kvf_media *m,
				 struct kvf_media_read_op *op)
{
	if (op->ring < 0)
		return KVF_OK;
	return m->ops->read_finish(m, op);
}

/* segment_io - the request writing len bytes of buf from page 0 */
static kvf_status segment_io(const char *call, struct kvf_media *m,
			     uint32_t stripe, uint64_t seg, const void *buf,
			     size_t len, struct kvf_media_io *io)
{
	if (m == NULL)
		return kvf_fail(KVF_EINVAL, "%s: media is NULL", call);
	if (len == 0 || len % m->geo.page_size != 0)
		return kvf_fail(KVF_EINVAL,
				"%s: length %zu is not a positive multiple of the page size %u",
				call, len, m->geo.page_size);
	if (len / m->geo.page_size > m->geo.pages_per_segment)
		return kvf_fail(KVF_ERANGE, "%s: length %zu exceeds the segment size %llu",
				call, len,
				(unsigned long long)kvf_media_segment_bytes(&m->geo));
	*io = (struct kvf_media_io){ .stripe = stripe, .seg = seg, .page = 0,
				     .n_pages = (uint32_t)(len / m->geo.page_size),
				     .buf = (void *)buf };
	return KVF_OK;
}

kvf_status kvf_media_write_segment(struct kvf_media *m, uint32_t stripe,
				   uint64_t seg, const void *buf, size_t len)
{
	struct kvf_media_io io;
	kvf_status rc = segment_io("kvf_media_write_segment", m, stripe, seg,
				   buf, len, &io);

	return rc != KVF_OK ? rc : kvf_media_write(m, &io, 1);
}

kvf_status kvf_media_give_segment(struct kvf_media *m, uint32_t stripe,
				  uint64_t seg, unsigned char **buf, size_t len)
{
	const char *call = "kvf_media_give_segment";
	struct kvf_media_io io;
	kvf_status rc;

	if (buf == NULL)
		return kvf_fail(KVF_EINVAL, "%s: buf is NULL", call);
	rc = segment_io(call, m, stripe, seg, *buf, len, &io);
	if (rc == KVF_OK)
		rc = kvf_media_check_io(call, m, &io, 1);
	if (rc == KVF_OK)
		rc = refuse_read_only(call, m);
	if (rc != KVF_OK)
		return rc;
	if (m->ops->give_segment == NULL)
		rc = m->ops->write(m, &io, 1);
	else
		rc = m->ops->give_segment(m, stripe, seg, buf, len);
	if (rc == KVF_OK)
		trace_writes(m, &io, 1);
	return rc;
}

kvf_status kvf_media_read_pages(struct kvf_media *m, uint32_t stripe,
				uint64_t seg, uint32_t page, uint32_t n,
				void *buf)
{
	struct kvf_media_io io = {
		.stripe = stripe, .page = page, .seg = seg, .n_pages = n,
		.buf = buf,
	};

	return kvf_media_read(m, &io, 1);
}

kvf_status kvf_media_allocate_segment(struct kvf_media *m, uint32_t stripe,
				      uint64_t seg)
{
	if (m == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_media_allocate_segment: media is NULL");
	if (m->closed)
		return kvf_fail(KVF_ECLOSED,
				"kvf_media_allocate_segment: media is closed");
	if (stripe >= m->geo.n_stripes || seg >= m->geo.segs_per_stripe)
		return kvf_fail(KVF_ERANGE,
				"kvf_media_allocate_segment: segment %llu of stripe %u out of range (%u stripes of %llu)",
				(unsigned long long)seg, stripe, m->geo.n_stripes,
				(unsigned long long)m->geo.segs_per_stripe);
	if (m->ops->allocate_segment == NULL || m->read_only)
		return KVF_OK;
	return m->ops->allocate_segment(m, stripe, seg);
}

kvf_status kvf_media_release_tail(struct kvf_media *m, uint32_t stripe,
				  uint64_t seg, uint32_t page)
{
	if (m == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_media_release_tail: media is NULL");
	if (m->closed)
		return kvf_fail(KVF_ECLOSED,
				"kvf_media_release_tail: media is closed");
	if (stripe >= m->geo.n_stripes || seg >= m->geo.segs_per_stripe ||
	    page > m->geo.pages_per_segment)
		return kvf_fail(KVF_ERANGE,
				"kvf_media_release_tail: page %u of segment %llu of stripe %u out of range (%u stripes of %llu segments of %u pages)",
				page, (unsigned long long)seg, stripe,
				m->geo.n_stripes,
				(unsigned long long)m->geo.segs_per_stripe,
				m->geo.pages_per_segment);
	if (m->ops->release_tail == NULL || m->read_only ||
	    page == m->geo.pages_per_segment)
		return KVF_OK;
	return m->ops->release_tail(m, stripe, seg, page);
}

kvf_status kvf_media_trim_segment(struct kvf_media *m, uint32_t stripe,
				  uint64_t seg)
{
	kvf_status rc;

	if (m == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_media_trim_segment: media is NULL");
	if (m->closed)
		return kvf_fail(KVF_ECLOSED,
				"kvf_media_trim_segment: media is closed");
	if (stripe >= m->geo.n_stripes)
		return kvf_fail(KVF_ERANGE,
				"kvf_media_trim_segment: stripe %u out of range (media has %u)",
				stripe, m->geo.n_stripes);
	if (seg >= m->geo.segs_per_stripe)
		return kvf_fail(KVF_ERANGE,
				"kvf_media_trim_segment: segment %llu out of range (stripe holds %llu)",
				(unsigned long long)seg,
				(unsigned long long)m->geo.segs_per_stripe);
	if (m->read_only)
		return refuse_read_only("kvf_media_trim_segment", m);
	rc = m->ops->trim_segment(m, stripe, seg);
	if (rc == KVF_OK && kvf_media_trace_hook)
		kvf_media_trace_hook(m, KVF_MEDIA_TRACE_TRIM, stripe, seg, 0,
				     m->geo.pages_per_segment);
	return rc;
}

kvf_status kvf_media_sync(struct kvf_media *m)
{
	if (m == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_media_sync: media is NULL");
	if (m->closed)
		return kvf_fail(KVF_ECLOSED, "kvf_media_sync: media is closed");
	if (m->read_only)
		return KVF_OK; /* nothing was written */
	return m->ops->sync(m);
}

const unsigned char *kvf_media_map(struct kvf_media *m, uint32_t stripe,
				   uint64_t seg, uint32_t page)
{
	if (m == NULL || m->closed || m->ops->map == NULL)
		return NULL;
	return m->ops->map(m, stripe, seg, page);
}

void kvf_media_stats(struct kvf_media *m, struct kvf_media_stats *out)
{
	if (m == NULL || out == NULL)
		return;
	*out = (struct kvf_media_stats){ .backend = m->ops->name };
	m->ops->stats(m, out);
}

void kvf_media_close(struct kvf_media *m)
{
	if (m == NULL || m->closed)
		return;
	m->ops->close(m);
	m->closed = 1;
}

void kvf_media_free(struct kvf_media *m)
{
	if (m == NULL)
		return;
	kvf_media_close(m);
	kvf_free(m);
}
