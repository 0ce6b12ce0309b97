/*
 * store_faults_inject.c - the fault injector of the store_faults tests
 * (store_faults.h): sysio hooks that fail, cut short, tear or slow the
 * Nth matching transfer, fallocate or fdatasync, armed by fi_arm.  The
 * hooks run on the store's threads; the state is atomics, and fi_lock
 * guards the torn write's continuation.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "store_faults.h"

const char *const kind_name[F_KINDS] = {
	"mixed", "eio-write", "eio-read",  "enospc-write", "short",
	"torn",  "fallocate", "fdatasync", "slow"
};

struct kvf_sysio inject;
struct fault_injector fi;
static pthread_mutex_t fi_lock = PTHREAD_MUTEX_INITIALIZER;
/* ---- the fault injector --------------------------------------------------- */

static uint64_t fi_random(void)
{
	return faults_mix(atomic_fetch_add(&fi.rng, 0x9e3779b97f4a7c15ull));
}

/* due - this matching event is the armed one (exactly one ever is) */
static int due(void)
{
	return atomic_fetch_sub(&fi.countdown, 1) == 1;
}

static void fired(int kind)
{
	atomic_fetch_add(&fi.fired[kind], 1);
}

long fired_total(void)
{
	long n = 0;

	for (int k = 1; k < F_KINDS; k++)
		if (k != F_SLOW)
			n += (long)atomic_load(&fi.fired[k]);
	return n;
}

/* cut_of - bytes to let through of a len-byte transfer: 1..len-1, a
 * multiple of fi.align, and most often not on a page boundary */
static size_t cut_of(size_t len)
{
	size_t units = len / fi.align;
	size_t c;

	if (units < 2)
		return 0;
	c = (1 + fi_random() % (units - 1)) * fi.align;
	if (c % 4096 == 0 && c + fi.align < len && fi.align < 4096)
		c += fi.align; /* part of a page */
	return c;
}

ssize_t fault_hook(enum kvf_sysio_op op, int fd, size_t len, off_t off)
{
	int kind = atomic_load(&fi.kind);
	size_t cut;

	atomic_fetch_add(&fi.xfers[op == KVF_SYSIO_WRITE], 1);
	switch (kind) {
	case F_EIO_WRITE:
	case F_ENOSPC_WRITE:
		if (op == KVF_SYSIO_WRITE && due()) {
			fired(kind);
			return kind == F_EIO_WRITE ? -EIO : -ENOSPC;
		}
		break;
	case F_EIO_READ:
		if (op == KVF_SYSIO_READ && due()) {
			fired(kind);
			return -EIO;
		}
		break;
	case F_SHORT:
		if (len >= 2 * fi.align && due() && (cut = cut_of(len)) > 0) {
			fired(kind);
			return (ssize_t)cut;
		}
		break;
	case F_TORN:
		if (op != KVF_SYSIO_WRITE)
			break;
		pthread_mutex_lock(&fi_lock);
		if (fi.torn_fd == fd && fi.torn_off == off) {
			fi.torn_fd = -1;
			pthread_mutex_unlock(&fi_lock);
			return -EIO; /* the rest of the torn write */
		}
		if (len >= 2 * fi.align && due() && (cut = cut_of(len)) > 0) {
			fi.torn_fd = fd;
			fi.torn_off = off + (off_t)cut;
			pthread_mutex_unlock(&fi_lock);
			fired(kind);
			return (ssize_t)cut;
		}
		pthread_mutex_unlock(&fi_lock);
		break;
	case F_SLOW:
		if (atomic_fetch_add(&fi.events, 1) % 3 == 0) {
			struct timespec ts = { 0, (long)(1 + fi_random() % 4) *
							  1000000 };

			fired(kind);
			nanosleep(&ts, NULL);
		}
		break;
	default:
		break;
	}
	return (ssize_t)len;
}

int fallocate_hook(int fd, int mode, off_t off, off_t len)
{
	if (atomic_load(&fi.kind) == F_FALLOCATE && due()) {
		fired(F_FALLOCATE);
		errno = atomic_load(&fi.falloc_errno);
		return -1;
	}
	return kvf_sysio_real.fallocate(fd, mode, off, len);
}

int fdatasync_hook(int fd)
{
	int kind = atomic_load(&fi.kind);

	if (kind == F_SYNC && due()) {
		fired(kind);
		errno = EIO;
		return -1;
	}
	if (kind == F_SLOW) {
		struct timespec ts = { 0, 2 * 1000000 };

		nanosleep(&ts, NULL);
	}
	return kvf_sysio_real.fdatasync(fd);
}

/* fi_arm - inject kind at the nth matching event (1 = the next) */
void fi_arm(int kind, long n)
{
	pthread_mutex_lock(&fi_lock);
	fi.torn_fd = -1;
	pthread_mutex_unlock(&fi_lock);
	atomic_store(&fi.countdown, n);
	atomic_store(&fi.kind, kind);
}

void fi_disarm(void)
{
	atomic_store(&fi.kind, F_NONE);
}
