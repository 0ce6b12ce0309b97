/*
 * kt_read.h - reading K^T (kt_read.c): the block being filled, rebuilt
 * from K when it is not in memory, and dims of complete blocks.  Every
 * function needs the sequence's lock.
 */
#ifndef KVF_ENGINE_KT_READ_H
#define KVF_ENGINE_KT_READ_H

#include <stdint.h>

#include "api/status.h"
#include "engine/sequences/seq_state.h"
#include "kvflash.h"

/*
 * kt_read - dims [dg*E, (dg+1)*E) of tokens [t0, t1) of K head `head`, as
 * [E][t1 - t0] in the store dtype, from K^T pages (and the block buffer).
 * Return: KVF_OK, KVF_ECORRUPT, KVF_EIO, KVF_ENOMEM.
 */
kvf_status kt_read(kvf_store *st, struct seq *seq, uint32_t layer,
		   uint32_t head, uint32_t dg, uint64_t t0, uint64_t t1,
		   void *out);

/*
 * kt_open_block - the buffer of K head `head`'s open block (kt_groups
 * pages of [E][T]; tokens past the layer's length are zero), rebuilt from
 * K if needed.  It changes with the next append.
 */
kvf_status kt_open_block(kvf_store *st, struct seq *seq, uint32_t layer,
			 uint32_t head, const unsigned char **buf);

/*
 * kt_block_fill - scatter K head `head`'s tokens from the start of the
 * block holding token `upto` up to `upto` (K holding `tokens`) into buf,
 * kt_groups zeroed pages of [E][T]: the open block after an append, or
 * after a truncation to `upto`.
 */
kvf_status kt_block_fill(kvf_store *st, struct seq *seq, uint32_t layer,
			 uint32_t head, uint64_t tokens, uint64_t upto,
			 unsigned char *buf);

#endif /* KVF_ENGINE_KT_READ_H */
