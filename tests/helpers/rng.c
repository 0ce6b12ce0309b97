/* rng.c - seeded splitmix64 generator for random tests (see testutil.h). */
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t rng_seed(const char *test)
{
	const char *env = getenv("KVF_SEED");
	uint64_t seed;

	if (env && *env) {
		seed = strtoull(env, NULL, 0);
	} else {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_sec * 1000000007u + (uint64_t)ts.tv_nsec;
	}
	fprintf(stderr, "%s: seed %" PRIu64 " (reproduce: KVF_SEED=%" PRIu64
		" and run this test alone)\n", test, seed, seed);
	return seed;
}

uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t rng_below(uint64_t *state, uint64_t n)
{
	return rng_next(state) % n;
}

void rng_fill(uint64_t *state, void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len >= 8) {
		uint64_t r = rng_next(state);

		memcpy(p, &r, 8);
		p += 8;
		len -= 8;
	}
	if (len) {
		uint64_t r = rng_next(state);

		memcpy(p, &r, len);
	}
}
