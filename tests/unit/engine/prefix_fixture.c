/*
 * prefix_fixture.c - token-determined K/V for the prefix and export tests
 * (prefix_fixture.h).
 */
#include "prefix_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_fixture.h"

unsigned char px_byte(uint32_t tok, uint64_t t, uint32_t layer, int kind,
		      uint32_t h, uint32_t i)
{
	uint64_t x = (uint64_t)tok * 0x9e3779b97f4a7c15ull ^
		     (t * 0x100000001b3ull) ^
		     (layer * 7919u + (uint32_t)kind * 104729u + h * 31u + i);

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	/* keep f16 values finite: clear the exponent's top bit */
	return (unsigned char)((x >> 32) & (i & 1 ? 0x3f : 0xff));
}

kvf_status px_append(kvf_store *st, uint64_t seq, const uint32_t *tokens,
		     uint64_t t0, uint64_t t1)
{
	size_t n = (size_t)(t1 - t0), row = (size_t)KVH * ROW;
	unsigned char *k = malloc(n * row + 1), *v = malloc(n * row + 1);
	kvf_status rc = KVF_OK;

	for (uint32_t l = 0; l < LAYERS && rc == KVF_OK; l++) {
		for (size_t j = 0; j < n; j++)
			for (uint32_t h = 0; h < KVH; h++)
				for (uint32_t i = 0; i < ROW; i++) {
					k[j * row + h * ROW + i] = px_byte(
						tokens[t0 + j], t0 + j, l, 0, h, i);
					v[j * row + h * ROW + i] = px_byte(
						tokens[t0 + j], t0 + j, l, 1, h, i);
				}
		rc = kvf_append(st, seq, l, (uint32_t)n, k, v);
	}
	free(k);
	free(v);
	return rc;
}

kvf_status px_append_x(kvf_store *st, uint64_t seq, uint32_t layer,
		       const uint32_t *tokens, uint64_t t0, uint64_t t1)
{
	size_t n = (size_t)(t1 - t0), row = (size_t)QH * ROW;
	unsigned char *x = malloc(n * row + 1);
	kvf_status rc;

	for (size_t j = 0; j < n; j++)
		for (uint32_t q = 0; q < QH; q++)
			for (uint32_t i = 0; i < ROW; i++)
				x[j * row + q * ROW + i] = px_byte(
					tokens[t0 + j], t0 + j, layer, 2, q, i);
	rc = kvf_append_x(st, seq, layer, (uint32_t)n, x);
	free(x);
	return rc;
}

int px_check(kvf_store *st, uint64_t seq, const uint32_t *tokens, uint64_t n)
{
	unsigned char *k = malloc(n * ROW + 1), *v = malloc(n * ROW + 1);
	int ok = 1;

	for (uint32_t l = 0; l < LAYERS && ok; l++) {
		uint64_t len = 0;

		if (kvf_seq_len(st, seq, l, &len) != KVF_OK || len != n) {
			printf("px_check: seq %llu layer %u has %llu tokens, not %llu (%s)\n",
			       (unsigned long long)seq, l,
			       (unsigned long long)len, (unsigned long long)n,
			       kvf_last_error());
			ok = 0;
			break;
		}
		for (uint32_t h = 0; h < KVH && ok; h++) {
			if (n && kvf_read(st, seq, l, h, 0, n, k, v) != KVF_OK) {
				printf("px_check: read: %s\n", kvf_last_error());
				ok = 0;
				break;
			}
			for (uint64_t t = 0; t < n && ok; t++)
				for (uint32_t i = 0; i < ROW && ok; i++)
					if (k[t * ROW + i] != px_byte(tokens[t], t, l, 0, h, i) ||
					    v[t * ROW + i] != px_byte(tokens[t], t, l, 1, h, i)) {
						printf("px_check: seq %llu layer %u head %u token %llu byte %u differs\n",
						       (unsigned long long)seq, l, h,
						       (unsigned long long)t, i);
						ok = 0;
					}
		}
	}
	free(k);
	free(v);
	return ok;
}

void px_tokens(uint32_t *out, uint64_t n, uint32_t seed)
{
	for (uint64_t i = 0; i < n; i++)
		out[i] = seed * 100003u + (uint32_t)i * 7u + 1u;
}
