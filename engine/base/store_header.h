/*
 * store_header.h - the store header file DIR/KVFLASH, read and checked
 * (store_header.c).
 */
#ifndef KVF_ENGINE_STORE_HEADER_H
#define KVF_ENGINE_STORE_HEADER_H

#include <stddef.h>

#include "api/status.h"
#include "engine/base/segfmt.h"
#include "kvflash.h"

/* store_read_header - the header DIR/KVFLASH at path, checked: KVF_ENOENT
 * when there is none, KVF_ECORRUPT when it is damaged, KVF_EVERSION */
kvf_status store_read_header(const char *path, struct store_header *h);

/* store_header_decode - the header in buf (n bytes read from the file
 * path, named in messages), checked as store_read_header does; *h is
 * written only on KVF_OK.  No I/O: the fuzz target calls it directly.
 * Return: KVF_OK; KVF_ECORRUPT; KVF_EVERSION. */
/* store_group_of - the token group of a store with header h (checked by
 * store_header_decode): stated by format 4, implied by format 3 */
struct group_geom store_group_of(const struct store_header *h);

/* store_codec_group - the token group a store of codec (not NONE) gets in
 * layout version `version` (compute/codec.h): group_layout's rule
 * (segfmt.h) over the encoded bytes of G tokens, the larger of K's and
 * V's; tokens 0 when none fits */
struct group_geom store_codec_group(uint32_t page_size, kvf_codec codec,
				    uint32_t head_dim, uint32_t version);

/* store_codec_layout_for - the layout version a new store of codec gets:
 * version 2 (K's scales of a byte) where its group takes fewer page bytes
 * a token than version 1's, else version 1, whose f16 scales are
 * exact to more bits */
uint32_t store_codec_layout_for(uint32_t page_size, kvf_codec codec,
				uint32_t head_dim);

/* store_codec_layout_of - the layout version of a codec store's groups
 * (header h checked): stated by format 6, 1 before */
uint32_t store_codec_layout_of(const struct store_header *h);

kvf_status store_header_decode(const void *buf, size_t n, const char *path,
			       struct store_header *h);

#endif /* KVF_ENGINE_STORE_HEADER_H */
