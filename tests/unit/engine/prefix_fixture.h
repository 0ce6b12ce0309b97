/*
 * prefix_fixture.h - what the prefix and export tests share: K/V values
 * that depend only on a token's id and position (so a sequence that
 * shares a prefix must read exactly the values its own ids give), and
 * appends and checks of them.  Uses store_fixture.h's model (LAYERS,
 * KVH, DIM, f16, G tokens a group).
 */
#ifndef KVF_TEST_PREFIX_FIXTURE_H
#define KVF_TEST_PREFIX_FIXTURE_H

#include <stdint.h>

#include "kvflash.h"

/* px_byte - byte i of head h (kind 0 K, 1 V, 2 X with h the query head)
 * of the token with id tok at position t of a layer */
unsigned char px_byte(uint32_t tok, uint64_t t, uint32_t layer, int kind,
		      uint32_t h, uint32_t i);
/* px_append - K/V of tokens[t0, t1) to every layer of seq */
kvf_status px_append(kvf_store *st, uint64_t seq, const uint32_t *tokens,
		     uint64_t t0, uint64_t t1);
/* px_append_x - X of tokens[t0, t1) to one layer of seq */
kvf_status px_append_x(kvf_store *st, uint64_t seq, uint32_t layer,
		       const uint32_t *tokens, uint64_t t0, uint64_t t1);
/* px_check - every layer of seq holds exactly n tokens, with the values
 * of tokens[0, n); 1 if so (else prints the first difference) */
int px_check(kvf_store *st, uint64_t seq, const uint32_t *tokens, uint64_t n);
/* px_tokens - n token ids from seed (distinct seeds give distinct ids) */
void px_tokens(uint32_t *out, uint64_t n, uint32_t seed);

#endif /* KVF_TEST_PREFIX_FIXTURE_H */
