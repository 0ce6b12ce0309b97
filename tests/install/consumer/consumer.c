/*
 * consumer.c - a program outside kvflash, built against an installed
 * kvflash: with its CMake package (shared and static) and with pkg-config
 * (shared and static).
 *
 * It uses only the public header, as any user does, and checks that the
 * header it was compiled with and the library it runs with agree: the
 * version, kvf_strerror for known and unknown codes, an empty
 * kvf_last_error, and the defaults the _init functions fill.  It prints
 * one line per failed check and exits 1 if there was any, else 0.
 */
#include <kvflash.h>
#include <stdio.h>
#include <string.h>

static int failures;

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "consumer: FAIL: %s\n", what);
		failures++;
	}
}

static void check_version(void)
{
	char want[32];

	snprintf(want, sizeof(want), "%d.%d.%d", KVF_VERSION_MAJOR,
		 KVF_VERSION_MINOR, KVF_VERSION_PATCH);
	check(strcmp(kvf_version_string(), want) == 0,
	      "kvf_version_string() matches the header's version");
	check(kvf_version_number() == KVF_VERSION_NUMBER,
	      "kvf_version_number() matches KVF_VERSION_NUMBER");
}

static void check_errors(void)
{
	const char *s = kvf_strerror(KVF_EINVAL);

	check(s != NULL && *s != '\0', "kvf_strerror(KVF_EINVAL) is a name");
	check(strcmp(kvf_strerror(KVF_OK), s) != 0,
	      "KVF_OK and KVF_EINVAL have different names");
	check(strcmp(kvf_strerror((kvf_status)12345), "unknown status 12345") ==
		      0,
	      "kvf_strerror(12345) is \"unknown status 12345\"");
	check(kvf_last_error() != NULL && kvf_last_error()[0] == '\0',
	      "kvf_last_error() is \"\" before any failure");
}

static void check_defaults(void)
{
	kvf_model m = { 4, 8, 2, 64, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_attn_opts a;
	kvf_opt_config c;

	memset(&o, 0xff, sizeof(o));
	kvf_options_init(&o, &m);
	check(o.struct_size == sizeof(o), "kvf_options.struct_size");
	check(o.model.n_kv_heads == 2 && o.model.head_dim == 64,
	      "kvf_options_init copies the model");
	check(o.page_size == 4096, "default page_size is 4096");
	check(o.kt_pages == 0, "K^T pages are off by default");

	memset(&a, 0xff, sizeof(a));
	kvf_attn_opts_init(&a);
	check(a.struct_size == sizeof(a) && a.sparse == 0 && a.lse == NULL,
	      "kvf_attn_opts_init: dense, no LSE");

	memset(&c, 0xff, sizeof(c));
	kvf_opt_config_init(&c, KVF_OPT_ADAMW);
	check(c.struct_size == sizeof(c) && c.kind == KVF_OPT_ADAMW,
	      "kvf_opt_config_init stamps size and kind");
	check(c.lr == 1e-3f && c.weight_decay == 1e-2f,
	      "AdamW defaults are PyTorch's");
}

int main(void)
{
	check_version();
	check_errors();
	check_defaults();
	if (failures)
		return 1;
	printf("consumer: kvflash %s OK\n", kvf_version_string());
	return 0;
}
