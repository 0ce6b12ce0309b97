/*
 * test_options.c - defaults of the public option structs and the
 * struct_size rules (api/kvflash.h, api/options.h).
 *
 * The rules: _init fills every field with its default and stamps
 * struct_size = sizeof; _init_sized with a smaller struct_size (an older
 * caller) writes exactly that many bytes and no more, and with a
 * struct_size too small to hold struct_size itself writes nothing.
 * kvf_struct_check accepts any struct_size from sizeof(size_t) up to the
 * library's, a larger one only when the unknown tail is all zero
 * (KVF_EVERSION naming the first nonzero byte otherwise), and refuses NULL
 * and too-small sizes with KVF_EINVAL.  A check that passes leaves the
 * last error alone.
 *
 * The "canary" tests fill a buffer with a byte pattern, let _init_sized
 * write into it, and check which bytes changed.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "api/options.h"

#define CANARY 0xa5
#define SLACK 32 /* bytes of canary after the library's struct */

static const kvf_model model = {
	.n_layers = 32,
	.n_q_heads = 32,
	.n_kv_heads = 8,
	.head_dim = 128,
	.dtype = KVF_DTYPE_BF16,
};

Test(options, init_fills_every_default)
{
	kvf_options o;

	memset(&o, CANARY, sizeof(o));
	kvf_options_init(&o, &model);
	cr_assert(eq(sz, o.struct_size, sizeof(kvf_options)));
	cr_assert(eq(u32, o.model.n_layers, 32));
	cr_assert(eq(u32, o.model.n_q_heads, 32));
	cr_assert(eq(u32, o.model.n_kv_heads, 8));
	cr_assert(eq(u32, o.model.head_dim, 128));
	cr_assert(eq(int, o.model.dtype, KVF_DTYPE_BF16));
	cr_assert(eq(int, o.media, KVF_MEDIA_FILE));
	cr_assert(eq(u32, o.page_size, 4096));
	cr_assert(eq(u32, o.n_threads, 0), "0 = online CPUs");
	cr_assert(eq(u32, o.kt_pages, 0), "K^T pages are off by default");
	cr_assert(eq(u64, o.segment_size, 1u << 20));
	cr_assert(eq(u64, o.capacity_bytes, 4ull << 30));
	cr_assert(eq(u32, o.n_stripes, 0));
	cr_assert(eq(u32, o.queue_depth, 32));
	cr_assert(zero(ptr, (void *)o.device_paths));
	cr_assert(eq(u32, o.n_device_paths, 0));
	cr_assert(eq(u32, o.direct_io, 0), "0 = default (on)");
}

Test(options, init_with_null_model_zeroes_the_model)
{
	kvf_options o;

	memset(&o, CANARY, sizeof(o));
	kvf_options_init(&o, NULL);
	cr_assert(eq(sz, o.struct_size, sizeof(kvf_options)));
	cr_assert(eq(u32, o.model.n_layers, 0));
	cr_assert(eq(u32, o.model.n_q_heads, 0));
	cr_assert(eq(u32, o.model.n_kv_heads, 0));
	cr_assert(eq(u32, o.model.head_dim, 0));
	cr_assert(eq(int, o.model.dtype, 0));
	cr_assert(eq(u32, o.page_size, 4096));
}

Test(options, attn_opts_init_fills_every_default)
{
	kvf_attn_opts o;

	memset(&o, CANARY, sizeof(o));
	kvf_attn_opts_init(&o);
	cr_assert(eq(sz, o.struct_size, sizeof(kvf_attn_opts)));
	cr_assert(eq(flt, o.scale, 0.0f), "0 = 1/sqrt(head_dim)");
	cr_assert(eq(u32, o.sparse, 0), "dense");
	cr_assert(eq(u32, o.top_r, 0));
	cr_assert(eq(u32, o.top_k, 0));
	cr_assert(zero(ptr, o.lse));
	cr_assert(eq(u32, o.sink_tokens, 0), "SparF's default sinks");
	cr_assert(eq(u32, o.recent_tokens, 0), "SparF's default recent window");
}

/* check_common - the fields every optimizer kind shares. */
static void check_common(const kvf_opt_config *c, kvf_opt_kind kind)
{
	cr_assert(eq(sz, c->struct_size, sizeof(kvf_opt_config)));
	cr_assert(eq(int, c->kind, kind));
	cr_assert(eq(int, c->out_dtype, KVF_DTYPE_F32));
}

/* torch.optim.Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0) */
Test(options, opt_config_adam_is_pytorch)
{
	kvf_opt_config c;

	memset(&c, CANARY, sizeof(c));
	kvf_opt_config_init(&c, KVF_OPT_ADAM);
	check_common(&c, KVF_OPT_ADAM);
	cr_assert(eq(flt, c.lr, 1e-3f));
	cr_assert(eq(flt, c.beta1, 0.9f));
	cr_assert(eq(flt, c.beta2, 0.999f));
	cr_assert(eq(flt, c.eps, 1e-8f));
	cr_assert(eq(flt, c.weight_decay, 0.0f));
}

/* torch.optim.AdamW: as Adam, but weight_decay=1e-2 */
Test(options, opt_config_adamw_is_pytorch)
{
	kvf_opt_config c;

	memset(&c, CANARY, sizeof(c));
	kvf_opt_config_init(&c, KVF_OPT_ADAMW);
	check_common(&c, KVF_OPT_ADAMW);
	cr_assert(eq(flt, c.lr, 1e-3f));
	cr_assert(eq(flt, c.beta1, 0.9f));
	cr_assert(eq(flt, c.beta2, 0.999f));
	cr_assert(eq(flt, c.eps, 1e-8f));
	cr_assert(eq(flt, c.weight_decay, 1e-2f));
}

/* torch.optim.SGD(lr=1e-3, momentum=0, dampening=0, weight_decay=0,
 * nesterov=False) */
Test(options, opt_config_sgd_is_pytorch)
{
	kvf_opt_config c;

	memset(&c, CANARY, sizeof(c));
	kvf_opt_config_init(&c, KVF_OPT_SGD);
	check_common(&c, KVF_OPT_SGD);
	cr_assert(eq(flt, c.lr, 1e-3f));
	cr_assert(eq(flt, c.momentum, 0.0f));
	cr_assert(eq(flt, c.dampening, 0.0f));
	cr_assert(eq(u32, c.nesterov, 0));
	cr_assert(eq(flt, c.weight_decay, 0.0f));
}

/* torch.optim.Adagrad(lr=1e-2, lr_decay=0, weight_decay=0,
 * initial_accumulator_value=0, eps=1e-10) */
Test(options, opt_config_adagrad_is_pytorch)
{
	kvf_opt_config c;

	memset(&c, CANARY, sizeof(c));
	kvf_opt_config_init(&c, KVF_OPT_ADAGRAD);
	check_common(&c, KVF_OPT_ADAGRAD);
	cr_assert(eq(flt, c.lr, 1e-2f));
	cr_assert(eq(flt, c.lr_decay, 0.0f));
	cr_assert(eq(flt, c.weight_decay, 0.0f));
	cr_assert(eq(flt, c.initial_accumulator_value, 0.0f));
	cr_assert(eq(flt, c.eps, 1e-10f));
}

/*
 * Canary checks.  init_at fills buf (lib_size + SLACK bytes of CANARY)
 * through one of the _init_sized calls with the given struct_size.
 */
typedef void (*init_at_fn)(void *buf, size_t struct_size);

static void options_at(void *buf, size_t struct_size)
{
	kvf_options_init_sized(buf, &model, struct_size);
}

static void attn_at(void *buf, size_t struct_size)
{
	kvf_attn_opts_init_sized(buf, struct_size);
}

static void opt_adamw_at(void *buf, size_t struct_size)
{
	kvf_opt_config_init_sized(buf, KVF_OPT_ADAMW, struct_size);
}

/*
 * check_smaller - for every struct_size from 0 to lib_size: sizes below
 * sizeof(size_t) write nothing; others write struct_size, then the first
 * struct_size bytes of the full default, and not one byte more.
 */
static void check_smaller(const char *what, init_at_fn init_at, size_t lib_size)
{
	unsigned char full[512 + SLACK], buf[512 + SLACK];

	cr_assert(le(sz, lib_size, 512));
	memset(full, 0, sizeof(full));
	init_at(full, lib_size);
	for (size_t n = 0; n <= lib_size; n++) {
		size_t stamped;

		memset(buf, CANARY, sizeof(buf));
		init_at(buf, n);
		if (n < sizeof(size_t)) {
			for (size_t i = 0; i < lib_size + SLACK; i++)
				cr_assert(eq(u8, buf[i], CANARY),
					  "%s: struct_size %zu wrote byte %zu",
					  what, n, i);
			continue;
		}
		memcpy(&stamped, buf, sizeof(stamped));
		cr_assert(eq(sz, stamped, n), "%s: struct_size not stamped",
			  what);
		cr_assert(eq(int,
			     memcmp(buf + sizeof(size_t), full + sizeof(size_t),
				    n - sizeof(size_t)),
			     0),
			  "%s: struct_size %zu: defaults differ", what, n);
		for (size_t i = n; i < lib_size + SLACK; i++)
			cr_assert(eq(u8, buf[i], CANARY),
				  "%s: struct_size %zu wrote byte %zu", what, n,
				  i);
	}
}

Test(options, smaller_struct_size_writes_only_that_many_bytes)
{
	check_smaller("kvf_options", options_at, sizeof(kvf_options));
	check_smaller("kvf_attn_opts", attn_at, sizeof(kvf_attn_opts));
	check_smaller("kvf_opt_config", opt_adamw_at, sizeof(kvf_opt_config));
}

Test(options, old_caller_gets_the_fields_it_has)
{
	/* an older caller whose kvf_options ended after page_size */
	size_t old_size = offsetof(kvf_options, page_size) + sizeof(uint32_t);
	kvf_options o;

	memset(&o, CANARY, sizeof(o));
	kvf_options_init_sized(&o, &model, old_size);
	cr_assert(eq(sz, o.struct_size, old_size));
	cr_assert(eq(u32, o.model.head_dim, 128));
	cr_assert(eq(int, o.media, KVF_MEDIA_FILE));
	cr_assert(eq(u32, o.page_size, 4096));
	cr_assert(eq(u32, o.queue_depth, 0xa5a5a5a5u));
	cr_assert(eq(int,
		     kvf_struct_check("kvf_open", "opts", &o,
				      sizeof(kvf_options)),
		     KVF_OK));
}

Test(options, null_struct_is_ignored_by_init)
{
	/* nothing to check but that these return */
	kvf_options_init_sized(NULL, &model, sizeof(kvf_options));
	kvf_attn_opts_init_sized(NULL, sizeof(kvf_attn_opts));
	kvf_opt_config_init_sized(NULL, KVF_OPT_ADAM, sizeof(kvf_opt_config));
}

/* A struct from a newer caller: ours, then fields we do not know. */
struct newer_options {
	kvf_options o;             /* the part this library knows */
	unsigned char tail[SLACK]; /* fields of a later version */
};

static void set_size(void *p, size_t struct_size)
{
	memcpy(p, &struct_size, sizeof(struct_size));
}

/*
 * A caller built against a newer header passes its larger sizeof.  The
 * library fills what it knows and must zero the rest (the caller owns
 * struct_size bytes), so the unknown fields mean "default" and the struct
 * passes kvf_struct_check, instead of carrying the caller's stack garbage.
 */
Test(options, larger_struct_size_zeroes_the_unknown_tail)
{
	struct newer_options big;
	kvf_options want;

	kvf_options_init(&want, &model);
	memset(&big, CANARY, sizeof(big));
	kvf_options_init_sized(&big.o, &model, sizeof(big));
	cr_assert(eq(sz, big.o.struct_size, sizeof(big)));
	cr_assert(eq(int,
		     memcmp((char *)&big + sizeof(size_t),
			    (char *)&want + sizeof(size_t),
			    sizeof(want) - sizeof(size_t)),
		     0));
	for (size_t i = 0; i < SLACK; i++)
		cr_assert(eq(u8, big.tail[i], 0), "tail byte %zu", i);
	cr_assert(eq(int,
		     kvf_struct_check("kvf_open", "opts", &big,
				      sizeof(kvf_options)),
		     KVF_OK));
}

Test(options, check_accepts_every_size_up_to_ours)
{
	kvf_options o;

	kvf_options_init(&o, &model);
	kvf_clear_error();
	for (size_t n = sizeof(size_t); n <= sizeof(o); n++) {
		set_size(&o, n);
		cr_assert(eq(int,
			     kvf_struct_check("kvf_open", "opts", &o,
					      sizeof(o)),
			     KVF_OK),
			  "struct_size %zu", n);
	}
	cr_assert(eq(str, (char *)kvf_last_error(), ""),
		  "a passing check leaves the last error alone");
}

Test(options, check_accepts_larger_with_zero_tail)
{
	struct newer_options big;

	memset(&big, 0, sizeof(big));
	kvf_options_init(&big.o, &model);
	set_size(&big, sizeof(big));
	cr_assert(eq(int,
		     kvf_struct_check("kvf_open", "opts", &big,
				      sizeof(kvf_options)),
		     KVF_OK));
}

Test(options, check_refuses_larger_with_nonzero_tail)
{
	char want[64];

	for (size_t at = 0; at < SLACK; at += 7) {
		struct newer_options big;
		size_t byte = sizeof(kvf_options) + at;

		memset(&big, 0, sizeof(big));
		kvf_options_init(&big.o, &model);
		set_size(&big, sizeof(big));
		big.tail[at] = 1;
		cr_assert(eq(int,
			     kvf_struct_check("kvf_open", "opts", &big,
					      sizeof(kvf_options)),
			     KVF_EVERSION),
			  "tail byte %zu", at);
		snprintf(want, sizeof(want), "byte %zu ", byte);
		cr_assert(not(zero(ptr, strstr(kvf_last_error(), want))),
			  "message \"%s\" does not name %s", kvf_last_error(),
			  want);
		cr_assert(not(zero(ptr,
				   strstr(kvf_last_error(), "kvf_open: opts"))),
			  "message \"%s\" does not name the call",
			  kvf_last_error());
	}
}

Test(options, check_ignores_bytes_past_struct_size)
{
	struct newer_options big;

	/* a nonzero byte past the caller's struct_size is not its struct */
	memset(&big, 0, sizeof(big));
	kvf_options_init(&big.o, &model);
	set_size(&big, sizeof(kvf_options) + 4);
	big.tail[4] = 1;
	cr_assert(eq(int,
		     kvf_struct_check("kvf_open", "opts", &big,
				      sizeof(kvf_options)),
		     KVF_OK));
}

Test(options, check_refuses_null)
{
	cr_assert(eq(int,
		     kvf_struct_check("kvf_open", "opts", NULL,
				      sizeof(kvf_options)),
		     KVF_EINVAL));
	cr_assert(eq(str, (char *)kvf_last_error(), "kvf_open: opts is NULL"));
}

Test(options, check_refuses_too_small)
{
	kvf_options o;

	kvf_options_init(&o, &model);
	for (size_t n = 0; n < sizeof(size_t); n++) {
		kvf_clear_error();
		set_size(&o, n);
		cr_assert(eq(int,
			     kvf_struct_check("kvf_open", "opts", &o,
					      sizeof(o)),
			     KVF_EINVAL),
			  "struct_size %zu", n);
		cr_assert(not(zero(ptr, strstr(kvf_last_error(), "too small"))),
			  "message \"%s\"", kvf_last_error());
	}
}
