/*
 * sysio.h - the one seam between the file backend and the kernel.
 *
 * Every system call the file backend makes goes through the table
 * kvf_sysio points to, and every data transfer (pread/pwrite and io_uring
 * alike) is first shown to the table's `fault` hook.  Tests install their
 * own table to inject EIO, short transfers and torn writes; production
 * uses the real calls and a hook that lets everything through.
 */
#ifndef KVF_FTL_SYSIO_H
#define KVF_FTL_SYSIO_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

enum kvf_sysio_op { KVF_SYSIO_READ, KVF_SYSIO_WRITE };

struct kvf_sysio {
	int (*open)(const char *path, int flags, mode_t mode);
	int (*close)(int fd);
	ssize_t (*pread)(int fd, void *buf, size_t len, off_t off);
	ssize_t (*pwrite)(int fd, const void *buf, size_t len, off_t off);
	int (*fdatasync)(int fd);
	int (*fallocate)(int fd, int mode, off_t off, off_t len);
	int (*ftruncate)(int fd, off_t len);
	int (*fstat)(int fd, struct stat *st);
	int (*flock)(int fd, int op);
	int (*ioctl)(int fd, unsigned long req, void *arg);
	int (*unlink)(const char *path);
	/*
	 * fault - consulted before each transfer of len bytes at off on fd.
	 * Return len to let it through, a smaller count to cut it short
	 * (only that many bytes are transferred: a torn write), or -errno
	 * to fail it without any transfer.
	 */
	ssize_t (*fault)(enum kvf_sysio_op op, int fd, size_t len, off_t off);
};

/* The table in use; never NULL.  Set it only while no media is open. */
extern const struct kvf_sysio *kvf_sysio;
/* The real calls. */
extern const struct kvf_sysio kvf_sysio_real;

/* kvf_sysio_set - install a table (NULL restores the real one). */
void kvf_sysio_set(const struct kvf_sysio *table);

#endif /* KVF_FTL_SYSIO_H */
