/*
 * syncmark.c - the durable-point mark (see syncmark.h for the format and
 * why it exists).
 *
 * A slot is written with one pwrite and not fsynced: the catalog commit
 * before it already is, so the mark can only lag the catalog, never lead
 * it; a mark the kernel had not written back before a power cut weakens the
 * check for that one point and raises no false alarm.
 */
#include "engine/base/syncmark.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/status.h"

#define SLOT_BYTES 64
#define SLOT_STRIDE 4096
#define MAGIC "KVFSYNC1"

struct slot {
	char magic[8];
	uint64_t store_id;
	uint64_t n_points;
	uint64_t seqno;
	uint64_t n_syncs;
	unsigned char reserved[16];
	uint64_t checksum;
};

_Static_assert(sizeof(struct slot) == SLOT_BYTES, "sync mark slot");

static uint64_t slot_sum(const struct slot *s)
{
	return XXH3_64bits(s, offsetof(struct slot, checksum));
}

kvf_status syncmark_write(int fd, const char *path, uint64_t store_id,
			  const struct syncmark *m)
{
	struct slot s;
	off_t off = (off_t)(m->n_points % 2) * SLOT_STRIDE;

	memset(&s, 0, sizeof(s));
	memcpy(s.magic, MAGIC, 8);
	s.store_id = store_id;
	s.n_points = m->n_points;
	s.seqno = m->seqno;
	s.n_syncs = m->n_syncs;
	s.checksum = slot_sum(&s);
	if (pwrite(fd, &s, sizeof(s), off) != (ssize_t)sizeof(s))
		return kvf_fail_errno(KVF_EIO, errno ? errno : EIO,
				      "writing the durable-point mark %s", path);
	return KVF_OK;
}

kvf_status syncmark_read(int fd, const char *path, uint64_t store_id,
			 struct syncmark *out)
{
	int found = 0;

	for (int i = 0; i < 2; i++) {
		struct slot s;
		ssize_t n = pread(fd, &s, sizeof(s), (off_t)i * SLOT_STRIDE);

		if (n < 0)
			return kvf_fail_errno(KVF_EIO, errno, "kvf_open: reading %s",
					      path);
		if (n != (ssize_t)sizeof(s) || memcmp(s.magic, MAGIC, 8) != 0 ||
		    s.store_id != store_id || slot_sum(&s) != s.checksum ||
		    s.n_points % 2 != (uint64_t)i)
			continue;
		if (!found || s.n_points > out->n_points) {
			out->n_points = s.n_points;
			out->seqno = s.seqno;
			out->n_syncs = s.n_syncs;
		}
		found = 1;
	}
	if (!found)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: %s is damaged: neither of its two slots is whole, so the catalog cannot be checked for lost records",
				path);
	return KVF_OK;
}

kvf_status syncmark_open(const char *dir, int create, int read_only,
			 uint64_t store_id, int *fd_out)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, SYNCMARK_FILE);
	fd = open(path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC |
			(create ? O_CREAT | O_TRUNC : 0), 0644);
	if (fd < 0) {
		if (errno == ENOENT)
			return kvf_fail(KVF_ECORRUPT,
					"kvf_open: %s is missing: the store's durable-point mark is gone, so the catalog cannot be checked for lost records",
					path);
		return kvf_fail_errno(KVF_EIO, errno, "kvf_open: open %s", path);
	}
	if (create) {
		struct syncmark m = { 0 };
		kvf_status rc = syncmark_write(fd, path, store_id, &m);

		if (rc == KVF_OK && fsync(fd) != 0)
			rc = kvf_fail_errno(KVF_EIO, errno, "kvf_open: fsync %s",
					    path);
		if (rc != KVF_OK) {
			close(fd);
			return rc;
		}
	}
	*fd_out = fd;
	return KVF_OK;
}
