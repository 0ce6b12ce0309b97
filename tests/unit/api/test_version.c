/*
 * test_version.c - the run-time library version agrees with the
 * KVF_VERSION_* macros of the header it was built with.
 *
 * kvf_version_number() is MAJOR * 10000 + MINOR * 100 + PATCH and
 * kvf_version_string() is "MAJOR.MINOR.PATCH", static and never NULL.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>

#include "kvflash.h"

Test(version, number_matches_macros)
{
	cr_assert(eq(u64, kvf_version_number(), KVF_VERSION_NUMBER));
	cr_assert(eq(u64, KVF_VERSION_NUMBER,
		     KVF_VERSION_MAJOR * 10000 + KVF_VERSION_MINOR * 100 +
			     KVF_VERSION_PATCH));
}

Test(version, minor_and_patch_fit_their_digits)
{
	/* otherwise the number would not decode back to the string */
	cr_assert(lt(int, KVF_VERSION_MINOR, 100));
	cr_assert(lt(int, KVF_VERSION_PATCH, 100));
}

Test(version, string_matches_macros)
{
	char want[32];

	snprintf(want, sizeof(want), "%d.%d.%d", KVF_VERSION_MAJOR,
		 KVF_VERSION_MINOR, KVF_VERSION_PATCH);
	cr_assert(not(zero(ptr, (void *)kvf_version_string())));
	cr_assert(eq(str, (char *)kvf_version_string(), want));
}

Test(version, string_is_static)
{
	const char *a = kvf_version_string();
	const char *b = kvf_version_string();

	cr_assert(eq(ptr, (void *)a, (void *)b));
}

Test(version, string_and_number_agree)
{
	unsigned major, minor, patch;
	unsigned n = kvf_version_number();

	cr_assert(eq(int,
		     sscanf(kvf_version_string(), "%u.%u.%u", &major, &minor,
			    &patch),
		     3));
	cr_assert(eq(u64, major, n / 10000));
	cr_assert(eq(u64, minor, n / 100 % 100));
	cr_assert(eq(u64, patch, n % 100));
}
