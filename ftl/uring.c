/*
 * uring.c - transfer lists over io_uring, and the pread/pwrite runner.
 *
 * The only file that includes <liburing.h>.  kvf_ring_run keeps the ring
 * full: it submits up to `entries` transfers, and each completion either
 * finishes its transfer, resubmits the rest of a short one, or records the
 * first error; after an error nothing new is submitted and the transfers
 * in flight are drained before returning, so no completion outlives the
 * call (the caller's buffers are free to go).
 */
#include "ftl/uring.h"

#include <errno.h>
#include <liburing.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"

struct kvf_ring {
	struct io_uring ring; /* the kernel ring */
	unsigned entries;     /* submission slots = max transfers in flight */
};

kvf_status kvf_ring_create(unsigned entries, struct kvf_ring **out)
{
	struct kvf_ring *r = kvf_calloc(1, sizeof(*r));
	int ret;

	if (r == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_ring_create: out of memory");
	ret = io_uring_queue_init(entries, &r->ring, 0);
	if (ret < 0) {
		kvf_free(r);
		return kvf_fail_errno(KVF_ENOTSUP, -ret,
				      "io_uring_queue_init(%u)", entries);
	}
	r->entries = entries;
	*out = r;
	return KVF_OK;
}

void kvf_ring_destroy(struct kvf_ring *r)
{
	if (r == NULL)
		return;
	io_uring_queue_exit(&r->ring);
	kvf_free(r);
}

static const char *op_name(enum kvf_sysio_op op)
{
	return op == KVF_SYSIO_READ ? "read" : "write";
}

/* xfer_error - the message for a failed transfer; err is a positive errno,
 * 0 for a transfer that moved no bytes */
static kvf_status xfer_error(const char *call, const struct kvf_xfer *x,
			     int err)
{
	if (err == 0)
		return kvf_fail(KVF_EIO,
				"%s: %s of %zu bytes at offset %lld of %s moved no bytes (end of file or device)",
				call, op_name(x->op), x->len, (long long)x->off,
				x->path);
	return kvf_fail_errno(KVF_EIO, err,
			      "%s: %s of %zu bytes at offset %lld of %s", call,
			      op_name(x->op), x->len, (long long)x->off,
			      x->path);
}

/* advance - account for `done` bytes of x having moved */
static void advance(struct kvf_xfer *x, size_t done)
{
	x->buf = (char *)x->buf + done;
	x->len -= done;
	x->off += (off_t)done;
}

/*
 * queue_one - put x's next piece in the ring.  Returns 1 if queued, 0 if
 * the fault hook failed it (*err set to the positive errno, 0 for a zero
 * count) without any I/O.
 */
static int queue_one(struct kvf_ring *r, struct kvf_xfer *x, size_t idx,
		     int *err)
{
	ssize_t allow = kvf_sysio->fault(x->op, x->fd, x->len, x->off);
	struct io_uring_sqe *sqe;

	if (allow <= 0) {
		*err = allow < 0 ? (int)-allow : 0;
		return 0;
	}
	if ((size_t)allow > x->len)
		allow = (ssize_t)x->len;
	sqe = io_uring_get_sqe(&r->ring);
	/* never NULL: at most `entries` transfers are ever in flight */
	if (x->op == KVF_SYSIO_READ)
		io_uring_prep_read(sqe, x->fd, x->buf, (unsigned)allow,
				   (__u64)x->off);
	else
		io_uring_prep_write(sqe, x->fd, x->buf, (unsigned)allow,
				    (__u64)x->off);
	io_uring_sqe_set_data64(sqe, idx);
	return 1;
}

kvf_status kvf_ring_start(struct kvf_ring *r, struct kvf_xfer *x, size_t n,
			  const char *call, struct kvf_ring_flight *f)
{
	*f = (struct kvf_ring_flight){ .x = x, .n = n, .call = call };
	for (size_t i = 0; i < n; i++)
		if (x[i].len > (1u << 30))
			return f->rc = kvf_fail(KVF_EINVAL,
					"%s: transfer of %zu bytes exceeds 1 GiB",
					call, x[i].len);
	while (f->next < n && f->in_flight < r->entries) {
		int err;

		if (x[f->next].len == 0) {
			f->next++;
			continue;
		}
		if (!queue_one(r, &x[f->next], f->next, &err)) {
			f->rc = xfer_error(call, &x[f->next], err);
			break;
		}
		f->next++;
		f->in_flight++;
	}
	/* a failed submission is retried, and reported, by kvf_ring_finish */
	if (f->in_flight)
		(void)io_uring_submit(&r->ring);
	return KVF_OK;
}

kvf_status kvf_ring_finish(struct kvf_ring *r, struct kvf_ring_flight *f)
{
	struct kvf_xfer *x = f->x;
	size_t n = f->n;
	const char *call = f->call;
	kvf_status rc = f->rc;

	while (f->next < n || f->in_flight > 0) {
		struct io_uring_cqe *cqe;
		int ret, err;

		while (rc == KVF_OK && f->next < n && f->in_flight < r->entries) {
			if (x[f->next].len == 0) {
				f->next++;
				continue;
			}
			if (!queue_one(r, &x[f->next], f->next, &err)) {
				rc = xfer_error(call, &x[f->next], err);
				break;
			}
			f->next++;
			f->in_flight++;
		}
		if (f->in_flight == 0)
			break;
		ret = io_uring_submit_and_wait(&r->ring, 1);
		if (ret < 0 && ret != -EINTR) {
			/* nothing we queued can be trusted to run: treat the
			 * ring as broken for this call after draining */
			if (rc == KVF_OK)
				rc = kvf_fail_errno(KVF_EIO, -ret,
						    "%s: io_uring_submit", call);
		}
		while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
			size_t idx = (size_t)io_uring_cqe_get_data64(cqe);
			int res = cqe->res;

			io_uring_cqe_seen(&r->ring, cqe);
			f->in_flight--;
			if (res == -EINTR || res == -EAGAIN)
				res = 0, err = -1; /* resubmit as is */
			else
				err = 0;
			if (res < 0 || (res == 0 && err == 0)) {
				if (rc == KVF_OK)
					rc = xfer_error(call, &x[idx],
							res < 0 ? -res : 0);
				continue;
			}
			advance(&x[idx], (size_t)res);
			if (x[idx].len == 0 || rc != KVF_OK)
				continue;
			if (!queue_one(r, &x[idx], idx, &err)) {
				rc = xfer_error(call, &x[idx], err);
				continue;
			}
			f->in_flight++;
		}
		if (ret < 0 && ret != -EINTR && f->in_flight > 0) {
			/* submission failed: wait out what the kernel has */
			if (io_uring_wait_cqe(&r->ring, &cqe) < 0)
				break;
		}
	}
	f->rc = rc;
	return rc;
}

kvf_status kvf_ring_run(struct kvf_ring *r, struct kvf_xfer *x, size_t n,
			const char *call)
{
	struct kvf_ring_flight f;
	kvf_status rc = kvf_ring_start(r, x, n, call, &f);

	return rc == KVF_OK ? kvf_ring_finish(r, &f) : rc;
}

kvf_status kvf_xfer_run_sync(struct kvf_xfer *x, size_t n, const char *call)
{
	for (size_t i = 0; i < n; i++) {
		struct kvf_xfer *t = &x[i];

		while (t->len > 0) {
			ssize_t allow = kvf_sysio->fault(t->op, t->fd, t->len,
							 t->off);
			ssize_t got;

			if (allow <= 0)
				return xfer_error(call, t,
						  allow < 0 ? (int)-allow : 0);
			if ((size_t)allow > t->len)
				allow = (ssize_t)t->len;
			if (t->op == KVF_SYSIO_READ)
				got = kvf_sysio->pread(t->fd, t->buf,
						       (size_t)allow, t->off);
			else
				got = kvf_sysio->pwrite(t->fd, t->buf,
							(size_t)allow, t->off);
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got <= 0)
				return xfer_error(call, t,
						  got < 0 ? errno : 0);
			advance(t, (size_t)got);
		}
	}
	return KVF_OK;
}
