/*
 * sysio.c - the real system calls behind the kvf_sysio seam.
 *
 * The wrappers exist so that the table holds plain function pointers with
 * fixed signatures (open and ioctl are variadic in libc).
 */
#include "ftl/sysio.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int real_open(const char *path, int flags, mode_t mode)
{
	return open(path, flags, mode);
}

static int real_ioctl(int fd, unsigned long req, void *arg)
{
	return ioctl(fd, req, arg);
}

static ssize_t pass_fault(enum kvf_sysio_op op, int fd, size_t len, off_t off)
{
	(void)op;
	(void)fd;
	(void)off;
	return (ssize_t)len;
}

const struct kvf_sysio kvf_sysio_real = {
	.open = real_open,
	.close = close,
	.pread = pread,
	.pwrite = pwrite,
	.fdatasync = fdatasync,
	.fallocate = fallocate,
	.ftruncate = ftruncate,
	.fstat = fstat,
	.flock = flock,
	.ioctl = real_ioctl,
	.unlink = unlink,
	.fault = pass_fault,
};

const struct kvf_sysio *kvf_sysio = &kvf_sysio_real;

void kvf_sysio_set(const struct kvf_sysio *table)
{
	kvf_sysio = table ? table : &kvf_sysio_real;
}
