/*
 * stress_beside.c - syncs, stats and verify beside a stress program's
 * workers (stress_beside.h).
 */
#include "stress_beside.h"

#include <stdio.h>

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
