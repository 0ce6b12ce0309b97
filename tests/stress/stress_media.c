/*
 * stress_media.c - many threads on one media, for ThreadSanitizer.
 *
 * A plain C program (Criterion does not run under TSan).  Each thread owns
 * a set of segments and writes, reads back and trims them in a loop while
 * the other threads do the same, on the memory and the file backend; the
 * file backend's ring pool is smaller than the thread count so callers
 * wait for rings.  Every read is checked against what its thread wrote.
 * Exit 0 on success, 1 with a message on the first failure.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "ftl/media.h"
#include "testutil.h"

#define THREADS 6
#define PAGE 4096u
#define PPS 8u
#define SEGS_PER_THREAD 4u
#define ROUNDS 60

struct worker {
	struct kvf_media *m;
	uint32_t id;
	int failed;
	char msg[256];
};

static void *work(void *arg)
{
	struct worker *w = arg;
	unsigned char *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PPS * PAGE);
	unsigned char *back = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PPS * PAGE);

	if (!buf || !back) {
		w->failed = 1;
		snprintf(w->msg, sizeof(w->msg), "out of memory");
		goto out;
	}
	for (uint32_t r = 0; r < ROUNDS && !w->failed; r++) {
		uint64_t seg = w->id * SEGS_PER_THREAD + r % SEGS_PER_THREAD;
		uint32_t stripe = r % w->m->geo.n_stripes;

		memset(buf, (int)(w->id * 31 + r), PPS * PAGE);
		if (kvf_media_write_segment(w->m, stripe, seg, buf, PPS * PAGE) != KVF_OK ||
		    kvf_media_read_pages(w->m, stripe, seg, 0, PPS, back) != KVF_OK) {
			w->failed = 1;
			snprintf(w->msg, sizeof(w->msg), "%s", kvf_last_error());
		} else if (memcmp(buf, back, PPS * PAGE) != 0) {
			w->failed = 1;
			snprintf(w->msg, sizeof(w->msg),
				 "thread %u round %u: segment %llu read back wrong data",
				 w->id, r, (unsigned long long)seg);
		} else if (r % 7 == 6 &&
			   kvf_media_trim_segment(w->m, stripe, seg) != KVF_OK) {
			w->failed = 1;
			snprintf(w->msg, sizeof(w->msg), "%s", kvf_last_error());
		}
	}
out:
	kvf_free(buf);
	kvf_free(back);
	return NULL;
}

static int run(kvf_media_kind kind, const char *dir)
{
	const char *paths[2] = { NULL, NULL };
	char p0[4096], p1[4096];
	struct kvf_media_config cfg = {
		.kind = kind,
		.geo = { .n_stripes = 2, .page_size = PAGE,
			 .pages_per_segment = PPS,
			 .segs_per_stripe = THREADS * SEGS_PER_THREAD },
		.queue_depth = 4,
		.max_rings = 3,
	};
	struct kvf_media *m = NULL;
	struct worker w[THREADS];
	pthread_t t[THREADS];
	int bad = 0;

	if (kind == KVF_MEDIA_FILE) {
		snprintf(p0, sizeof(p0), "%s/s0", dir);
		snprintf(p1, sizeof(p1), "%s/s1", dir);
		paths[0] = p0;
		paths[1] = p1;
		cfg.paths = paths;
	}
	if (kvf_media_open(&cfg, &m) != KVF_OK) {
		fprintf(stderr, "stress_media: open: %s\n", kvf_last_error());
		return 1;
	}
	for (uint32_t i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .m = m, .id = i };
		pthread_create(&t[i], NULL, work, &w[i]);
	}
	for (uint32_t i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		if (w[i].failed) {
			fprintf(stderr, "stress_media: %s\n", w[i].msg);
			bad = 1;
		}
	}
	kvf_media_free(m);
	return bad;
}

int main(void)
{
	char *dir = tmpdir_make("stress-media");
	int bad;

	if (dir == NULL) {
		fprintf(stderr, "stress_media: cannot make a temporary directory\n");
		return 1;
	}
	bad = run(KVF_MEDIA_MEMORY, dir) | run(KVF_MEDIA_FILE, dir);
	tmpdir_remove(dir);
	printf("%d passed, %d failed\n", bad ? 0 : 1, bad ? 1 : 0);
	return bad;
}
