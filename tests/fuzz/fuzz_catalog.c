/*
 * fuzz_catalog.c - the catalog's records (engine/base/meta.h and the "O"
 * record of engine/optim/optim_int.h) as open, the reads, kvf_verify and
 * kvf_repair decode them.
 *
 * RocksDB checks its own files; what it hands back is trusted by nobody
 * but the engine's decoders, so the target writes records straight into
 * the catalog of a copy of the template store and opens that.
 *
 * Input: one flags byte, then records, each
 *   op (1)  bit 0: delete the key instead of putting it
 *   klen (1), key (klen)
 *   vlen (2, little-endian), value (vlen)   (absent for a delete)
 * until the input ends (a record cut short is dropped).
 *   flags bit 0  open read-write too
 *   flags bit 1  kvf_repair before the opens
 * The opens keep the contract of fuzz_common.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/catalog.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct catalog_batch *b;
	struct catalog *c;
	char path[4096];
	const char *dir;
	unsigned flags;
	size_t i = 1;

	if (size < 1 || size > 1 << 16)
		return 0;
	flags = data[0];
	if ((b = catalog_batch_new()) == NULL)
		abort();
	while (i + 2 <= size) {
		unsigned op = data[i], klen = data[i + 1], vlen;
		const uint8_t *key = data + i + 2;

		if (i + 2 + klen > size || klen == 0)
			break;
		i += 2 + klen;
		if (op & 1) {
			catalog_batch_delete(b, key, klen);
			continue;
		}
		if (i + 2 > size)
			break;
		vlen = data[i] | (unsigned)data[i + 1] << 8;
		i += 2;
		if (i + vlen > size)
			break;
		catalog_batch_put(b, key, klen, data + i, vlen);
		i += vlen;
	}
	dir = fz_work();
	snprintf(path, sizeof(path), "%s/meta", dir);
	fz_check("catalog_open", catalog_open(path, 0, 0, CATALOG_NO_FSYNC, &c), 0);
	fz_check("catalog_commit", catalog_commit(c, b, 1), 0);
	catalog_batch_free(b);
	catalog_close(c);
	fz_exercise(dir, FZ_RO | (flags & 1 ? FZ_RW : 0) |
			 (flags & 2 ? FZ_REPAIR : 0));
	return 0;
}
