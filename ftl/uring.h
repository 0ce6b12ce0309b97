/*
 * uring.h - batches of file transfers, run through io_uring or plain
 * pread/pwrite.
 *
 * A transfer list is run to completion: every transfer is retried on a
 * short count until all its bytes moved, or the run stops at the first
 * error with a message naming the call, the file, the offset and errno.
 * Both runners consult the kvf_sysio fault hook before each transfer, so
 * injected errors and torn writes behave the same on either path.
 */
#ifndef KVF_FTL_URING_H
#define KVF_FTL_URING_H

#include <stddef.h>
#include <sys/types.h>

#include "ftl/sysio.h"
#include "kvflash.h"

struct kvf_xfer {
	enum kvf_sysio_op op; /* read or write */
	int fd;               /* open file or device */
	void *buf;            /* data; advanced as bytes move */
	size_t len;           /* bytes still to move */
	off_t off;            /* file offset of buf */
	const char *path;     /* file name for messages */
};

struct kvf_ring;

/*
 * kvf_ring_create - an io_uring with `entries` submission slots.
 * Return: KVF_OK; KVF_ENOTSUP when the kernel refuses io_uring (the
 * message has the errno); KVF_ENOMEM.
 */
kvf_status kvf_ring_create(unsigned entries, struct kvf_ring **out);
void kvf_ring_destroy(struct kvf_ring *r);

/*
 * kvf_ring_run - run n transfers with up to `entries` in flight; x is
 * consumed (its buf/len/off advance).  call names the caller for messages.
 * Return: KVF_OK when every byte moved, else KVF_EIO (then some transfers
 * may have completed).  Concurrency: one thread per ring at a time.
 */
kvf_status kvf_ring_run(struct kvf_ring *r, struct kvf_xfer *x, size_t n,
			const char *call);

/*
 * kvf_ring_start / kvf_ring_finish - kvf_ring_run in two halves, so the
 * caller works while the transfers move: start validates, queues up to
 * `entries` and submits without waiting; finish runs the rest and waits
 * for every transfer, with kvf_ring_run's return.  Between the two, x and
 * f must stay, and the ring is the caller's alone.  A start that fails
 * validation returns its error and has queued nothing: no finish then.
 */
struct kvf_ring_flight {
	struct kvf_xfer *x;
	size_t n, next, in_flight;
	kvf_status rc;
	const char *call;
};
kvf_status kvf_ring_start(struct kvf_ring *r, struct kvf_xfer *x, size_t n,
			  const char *call, struct kvf_ring_flight *f);
kvf_status kvf_ring_finish(struct kvf_ring *r, struct kvf_ring_flight *f);

/*
 * kvf_xfer_run_sync - the same contract with pread/pwrite, one transfer at
 * a time.  Concurrency: any number of threads.
 */
kvf_status kvf_xfer_run_sync(struct kvf_xfer *x, size_t n, const char *call);

#endif /* KVF_FTL_URING_H */
