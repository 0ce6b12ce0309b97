/*
 * fuzz_seqfile.c - the sequence file of kvf_seq_export / kvf_seq_import
 * (engine/portable/seqfile.h, engine/portable/seq_import.c).
 *
 * Input: one flags byte, then the bytes of the file (at most 1 MiB).
 *   bit 0  the 64-byte header gets the right checksum
 *   bit 1  every chunk header found by walking the stored sizes gets the
 *          right checksum (payload checksums stay as they are)
 * The file is imported into a memory store of the template's model.  The
 * import must answer KVF_OK, KVF_ECORRUPT, KVF_ENOTSUP, KVF_EMISMATCH,
 * KVF_ENOSPC or KVF_ENOMEM, with a message when it fails, and leave no
 * sequence behind when it fails; a sequence it made must export and
 * import again, and free.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/portable/seqfile.h"
#include "fuzz_common.h"
#include "testutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP (1u << 20)

static kvf_store *st;
static char *dir;

static void done(void)
{
	kvf_close(st);
	tmpdir_remove(dir);
}

static void open_store(void)
{
	kvf_options o;

	dir = tmpdir_make("fuzz_seqfile");
	fz_options(&o);
	o.media = KVF_MEDIA_MEMORY;
	o.capacity_bytes = 4u << 20;
	if (dir == NULL || kvf_open(dir, &o, &st) != KVF_OK) {
		fprintf(stderr, "fuzz_seqfile: cannot open the store: %s\n",
			kvf_last_error());
		abort();
	}
	atexit(done);
}

/* fix - the checksums the flags ask for */
static void fix(unsigned char *buf, size_t n, unsigned flags)
{
	struct seqfile_header h;
	size_t off = sizeof(h);

	if (n < sizeof(h))
		return;
	if (flags & 1) {
		memcpy(&h, buf, sizeof(h));
		h.check = seqfile_header_check(&h);
		memcpy(buf, &h, sizeof(h));
	}
	while ((flags & 2) && off + sizeof(struct seqfile_chunk) <= n) {
		struct seqfile_chunk c;

		memcpy(&c, buf + off, sizeof(c));
		c.check = seqfile_chunk_check(&c);
		memcpy(buf + off, &c, sizeof(c));
		off += sizeof(c) + c.stored_bytes;
	}
}

static void expect(int ok, const char *what, kvf_status rc)
{
	if (!ok) {
		fprintf(stderr, "fuzz_seqfile: %s: %s (%s)\n", what,
			kvf_strerror(rc), kvf_last_error());
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char buf[CAP];
	char path[4096], again[4096];
	uint64_t id = 0, len;
	size_t n;
	kvf_status rc;
	FILE *f;

	if (size < 1 || size > 1 + CAP)
		return 0;
	if (st == NULL)
		open_store();
	n = size - 1;
	memcpy(buf, data + 1, n);
	fix(buf, n, data[0]);
	snprintf(path, sizeof(path), "%s/in.kvx", dir);
	snprintf(again, sizeof(again), "%s/again.kvx", dir);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(buf, 1, n, f) != n || fclose(f) != 0)
		abort();
	rc = kvf_seq_import(st, path, 77, &id);
	if (rc != KVF_OK) {
		expect(rc == KVF_ECORRUPT || rc == KVF_ENOTSUP ||
		       rc == KVF_EMISMATCH || rc == KVF_ENOSPC ||
		       rc == KVF_ENOMEM, "import answered outside the contract", rc);
		expect(*kvf_last_error() != '\0', "a failure without a message", rc);
		expect(kvf_seq_len(st, 77, 0, &len) == KVF_ENOENT,
		       "a failed import left its sequence", rc);
		return 0;
	}
	expect(id == 77, "import named another id", rc);
	rc = kvf_seq_export(st, 77, again);
	expect(rc == KVF_OK, "export of an imported sequence", rc);
	rc = kvf_seq_import(st, again, 78, NULL);
	expect(rc == KVF_OK || rc == KVF_ENOSPC, "import of its export", rc);
	if (rc == KVF_OK) {
		rc = kvf_seq_free(st, 78);
		expect(rc == KVF_OK, "free 78", rc);
	}
	rc = kvf_seq_free(st, 77);
	expect(rc == KVF_OK, "free 77", rc);
	rc = kvf_sync(st); /* the freed room back */
	expect(rc == KVF_OK, "sync", rc);
	unlink(again);
	return 0;
}
