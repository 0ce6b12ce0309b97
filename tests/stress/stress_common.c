/*
 * stress_common.c - the values stress programs append, and the sync,
 * stats and verify thread beside their workers (stress_common.h).
 */
#include "stress_common.h"

#include <stdio.h>
#include <stdlib.h>

uint16_t stress_val(uint64_t seq, uint64_t t, uint32_t l, uint32_t h,
		    uint32_t i)
{
	uint64_t x = seq * 0x9e3779b97f4a7c15ull ^ (t << 20) ^
		     ((uint64_t)l << 12) ^ (h << 8) ^ i;

	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	return (uint16_t)((x >> 40) & 0x3bff);
}

kvf_status stress_append(kvf_store *st, uint64_t seq, uint64_t t0,
			 uint64_t n, uint32_t layers, uint32_t kvh,
			 uint32_t dim)
{
	uint16_t *k = malloc(n * kvh * dim * 2);
	kvf_status rc = KVF_OK;

	if (k == NULL)
		return KVF_ENOMEM;
	for (uint32_t l = 0; l < layers && rc == KVF_OK; l++) {
		for (uint64_t j = 0; j < n; j++)
			for (uint32_t h = 0; h < kvh; h++)
				for (uint32_t i = 0; i < dim; i++)
					k[(j * kvh + h) * dim + i] =
						stress_val(seq, t0 + j, l, h, i);
		rc = kvf_append(st, seq, l, (uint32_t)n, k, k);
	}
	free(k);
	return rc;
}

void *stress_beside(void *arg)
{
	struct stress_beside *b = arg;

	while (!atomic_load(b->done) && !atomic_load(b->failed)) {
		kvf_stats s = { .struct_size = sizeof(s) };
		kvf_verify_report vr = { .struct_size = sizeof(vr) };
		const char *what = NULL;
		kvf_status rc;

		if ((rc = kvf_sync(b->st)) != KVF_OK)
			what = "kvf_sync";
		else if ((rc = kvf_stats_get(b->st, &s)) != KVF_OK)
			what = "kvf_stats_get";
		else if ((rc = kvf_verify(b->st, NULL, NULL, &vr)) != KVF_OK)
			what = "kvf_verify";
		if (what) {
			fprintf(stderr, "%s: %s: %s (%s)\n", b->name, what,
				kvf_strerror(rc), kvf_last_error());
			atomic_store(b->failed, 1);
			break;
		}
		atomic_fetch_add(&b->syncs, 1);
		if (vr.bad_pages + vr.bad_segments != 0) {
			fprintf(stderr, "%s: kvf_verify: %llu bad pages, %u bad segments\n",
				b->name, (unsigned long long)vr.bad_pages,
				vr.bad_segments);
			atomic_store(b->failed, 1);
			break;
		}
	}
	return NULL;
}
