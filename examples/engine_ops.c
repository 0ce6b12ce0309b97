/*
 * engine_ops.c - an inference engine's KV-cache operations, one kvflash
 * call each: (re)start a request, prefill with prefix reuse, append at a
 * position, attend, roll back rejected draft tokens, fork for beam search,
 * free.  The README's "Embedding kvflash in an inference engine" shows
 * the body of serve() below; ctest builds and runs this file (it checks
 * that every call succeeds, and that a rollback and a fork give the
 * lengths an engine expects).
 *
 *	engine_ops [DIR]   (default: a new directory under $TMPDIR, removed)
 *
 * Exit status 0 on success, 1 on a failed call, 2 for usage.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp: builds as plain C11 too */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvflash.h>

enum { LAYERS = 2, HQ = 8, HKV = 2, D = 64, PROMPT = 48, DRAFT = 4 };

#define CHECK(call)                                                      \
	do {                                                             \
		if ((call) != KVF_OK) {                                  \
			fprintf(stderr, "%s: %s\n", #call, kvf_last_error()); \
			exit(1);                                         \
		}                                                        \
	} while (0)

static float k_rows[PROMPT][HKV][D], v_rows[PROMPT][HKV][D]; /* f32 */
static float q[HQ][D], out[HQ][D];

/* kv - a view of n f32 rows of K or V: the store (f16) converts them */
static kvf_tensor kv(const void *rows, uint64_t n)
{
	kvf_tensor t;

	kvf_tensor_init(&t);
	t.dtype = KVF_DTYPE_F32;
	t.data = rows;
	t.n_tokens = n;
	t.n_heads = HKV;
	t.head_dim = D;
	return t;
}

/* serve - one request: the README's sketch */
static void serve(kvf_store *st, uint64_t req, const uint32_t *ids,
		  uint64_t n_ids)
{
	uint64_t pos, reused, len;

	/* start empty whatever a crashed run left under this id; with the
	 * prompt's ids, share the longest prefix of them the store holds */
	reused = 0;
	if (ids == NULL) {
		CHECK(kvf_seq_reset(st, req));
	} else {
		(void)kvf_seq_free(st, req); /* KVF_ENOENT: nothing was left */
		CHECK(kvf_seq_create_tokens(st, req, ids, n_ids, &reused));
	}
	/* prefill what was not shared, stating the position */
	for (uint32_t l = 0; l < LAYERS; l++) {
		kvf_tensor k = kv(k_rows[reused], n_ids - reused);
		kvf_tensor v = kv(v_rows[reused], n_ids - reused);

		CHECK(kvf_append_tensor_at(st, req, l, reused, &k, &v));
	}
	pos = n_ids;
	/* speculative decoding: append DRAFT tokens at pos, verify them
	 * with attention, keep the first 1 and roll the rest back */
	for (uint32_t l = 0; l < LAYERS; l++) {
		kvf_tensor k = kv(k_rows[0], DRAFT), v = kv(v_rows[0], DRAFT);

		CHECK(kvf_append_tensor_at(st, req, l, pos, &k, &v));
		CHECK(kvf_attend(st, req, l, &q[0][0], &out[0][0], NULL));
	}
	CHECK(kvf_seq_truncate(st, req, pos + 1));
	pos += 1;
	/* beam search / parallel sampling: a second beam shares every page */
	(void)kvf_seq_free(st, req + 1000);
	CHECK(kvf_seq_fork(st, req, req + 1000, pos));
	/* the beam is done: free it; req stays, so a later request with the
	 * same prompt shares its prefix (a sync makes it durable) */
	CHECK(kvf_seq_len(st, req, LAYERS - 1, &len));
	if (len != pos) {
		fprintf(stderr, "length %llu, expected %llu\n",
			(unsigned long long)len, (unsigned long long)pos);
		exit(1);
	}
	CHECK(kvf_sync(st));
	CHECK(kvf_seq_free(st, req + 1000));
}

int main(int argc, char **argv)
{
	kvf_model m = { LAYERS, HQ, HKV, D, KVF_DTYPE_F16 };
	char tmpl[4096], cmd[4200];
	const char *dir = argc > 1 ? argv[1] : NULL;
	uint32_t ids[PROMPT];
	kvf_options o;
	kvf_store *st;

	if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
		fprintf(stderr, "usage: engine_ops [DIR]\n");
		return 2;
	}
	snprintf(tmpl, sizeof(tmpl), "%s/kvflash-engine-ops-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (dir == NULL && (dir = mkdtemp(tmpl)) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	for (uint32_t t = 0; t < PROMPT; t++) {
		ids[t] = 100 + t;
		for (uint32_t i = 0; i < HKV * D; i++) {
			(&k_rows[t][0][0])[i] = (float)((t * 7 + i) % 13) / 13.0f;
			(&v_rows[t][0][0])[i] = (float)((t * 5 + i) % 11) / 11.0f;
		}
	}
	for (uint32_t i = 0; i < HQ * D; i++)
		(&q[0][0])[i] = (float)(i % 9) / 9.0f;
	kvf_options_init(&o, &m);
	o.capacity_bytes = 64u << 20;
	CHECK(kvf_open(dir, &o, &st));
	serve(st, 1, ids, PROMPT);       /* a first request */
	serve(st, 2, ids, PROMPT);       /* the same prompt: its prefix reused */
	serve(st, 3, NULL, PROMPT);      /* no ids: kvf_seq_reset */
	serve(st, 3, NULL, PROMPT);      /* again: the id is reset */
	CHECK(kvf_close(st));
	printf("engine_ops: reset, prefill with prefix reuse, append at a position, attend, rollback, fork, free: ok\n");
	if (argc == 1) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		return system(cmd) == 0 ? 0 : 1;
	}
	return 0;
}
