/*
 * fuzz_store_header.c - the store header DIR/KVFLASH (engine/base/segfmt.h).
 *
 * Input: one flags byte, then the bytes of the file (at most 256).
 *   bit 0  put the right XXH3-64 at offset 120, so the fields behind the
 *          checksum are reached
 *   bit 1  also install the bytes as KVFLASH of a copy of the template
 *          store and open it (read-only; bit 2: read-write too)
 *   bit 3  with bit 1, put the same bytes in the catalog as its
 *          configuration record "C", so that open takes them for the
 *          store's own and goes on past the configuration check
 * store_header_decode must return KVF_OK, KVF_ECORRUPT or KVF_EVERSION;
 * the opens keep the contract of fuzz_common.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "engine/base/store_header.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* put_config - the catalog of dir gets buf as its "C" record */
static void put_config(const char *dir, const void *buf, size_t n)
{
	unsigned char tag = META_TAG_CONFIG;
	char path[4096];
	struct catalog *c;
	struct catalog_batch *b;

	snprintf(path, sizeof(path), "%s/meta", dir);
	fz_check("catalog_open",
		 catalog_open(path, 0, 0, CATALOG_NO_FSYNC, &c), 0);
	if ((b = catalog_batch_new()) == NULL)
		abort();
	catalog_batch_put(b, &tag, 1, buf, n);
	fz_check("catalog_commit", catalog_commit(c, b, 1), 0);
	catalog_batch_free(b);
	catalog_close(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char buf[256];
	struct store_header h;
	unsigned flags;
	size_t n;
	kvf_status rc;

	if (size < 1 || size > 1 + sizeof(buf))
		return 0;
	flags = data[0];
	n = size - 1;
	memcpy(buf, data + 1, n);
	if ((flags & 1) && n >= sizeof(h)) {
		uint64_t sum = XXH3_64bits(buf, offsetof(struct store_header, checksum));

		memcpy(buf + offsetof(struct store_header, checksum), &sum, 8);
	}
	rc = store_header_decode(buf, n, "KVFLASH", &h);
	fz_check("store_header_decode", rc,
		 FZ_ST(KVF_ECORRUPT) | FZ_ST(KVF_EVERSION));
	if (rc == KVF_OK && memcmp(&h, buf, sizeof(h)) != 0) {
		fprintf(stderr, "fuzz: store_header_decode changed the header\n");
		abort();
	}
	if (flags & 2) {
		const char *dir = fz_work();

		fz_write(dir, STORE_HEADER_FILE, buf, n, 0, 1);
		if (flags & 8)
			put_config(dir, buf, n);
		fz_exercise(dir, FZ_RO | (flags & 4 ? FZ_RW : 0));
	}
	return 0;
}
