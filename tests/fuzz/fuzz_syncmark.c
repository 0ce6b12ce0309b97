/*
 * fuzz_syncmark.c - the durable-point mark DIR/SYNCED (engine/base/syncmark.h).
 *
 * Input: one flags byte, then the bytes of the file (at most 8 KiB + 64).
 *   bit 0  each whole 64-byte slot (at 0 and 4096) gets the right checksum
 *   bit 1  each whole slot gets the magic and the store id first
 *   bit 2  also install the bytes as SYNCED of a copy of the template
 *          store and open it (read-only; bit 3: read-write too)
 * syncmark_read must return KVF_OK or KVF_ECORRUPT, and on KVF_OK name a
 * point that one of the slots holds; the opens keep the contract of
 * fuzz_common.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/base/syncmark.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SLOT 64
#define STRIDE 4096
#define CAP (STRIDE + 2 * SLOT)

static FILE *scratch;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char buf[CAP];
	const struct fz_template *t = NULL;
	uint64_t id = 0x6b7666757a7a0001ull;
	struct syncmark m = { 0 };
	unsigned flags;
	size_t n;
	kvf_status rc;
	int fd;

	if (size < 1 || size > 1 + CAP)
		return 0;
	flags = data[0];
	n = size - 1;
	memcpy(buf, data + 1, n);
	if (flags & 4) {
		t = fz_template();
		id = t->store_id;
	}
	for (size_t off = 0; off + SLOT <= n; off += STRIDE) {
		uint64_t sum;

		if (flags & 2) {
			memcpy(buf + off, "KVFSYNC1", 8);
			memcpy(buf + off + 8, &id, 8);
		}
		if (flags & 1) {
			sum = XXH3_64bits(buf + off, SLOT - 8);
			memcpy(buf + off + SLOT - 8, &sum, 8);
		}
	}
	if (scratch == NULL && (scratch = tmpfile()) == NULL)
		abort();
	fd = fileno(scratch);
	if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, n, 0) != (ssize_t)n)
		abort();
	rc = syncmark_read(fd, "SYNCED", id, &m);
	fz_check("syncmark_read", rc, FZ_ST(KVF_ECORRUPT));
	if (rc == KVF_OK) {
		int seen = 0;

		for (size_t off = 0; off + SLOT <= n; off += STRIDE)
			seen |= memcmp(buf + off + 16, &m.n_points, 8) == 0;
		if (!seen) {
			fprintf(stderr, "fuzz: syncmark_read made up point %llu\n",
				(unsigned long long)m.n_points);
			abort();
		}
	}
	if (flags & 4) {
		const char *dir = fz_work();

		fz_write(dir, SYNCMARK_FILE, buf, n, 0, 1);
		fz_exercise(dir, FZ_RO | (flags & 8 ? FZ_RW : 0));
	}
	return 0;
}
