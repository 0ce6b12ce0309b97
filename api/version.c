/* version.c - the library version at run time (see KVF_VERSION_* macros). */
#include "kvflash.h"

#define KVF_STR2(x) #x
#define KVF_STR(x) KVF_STR2(x)

unsigned kvf_version_number(void)
{
	return KVF_VERSION_NUMBER;
}

const char *kvf_version_string(void)
{
	return KVF_STR(KVF_VERSION_MAJOR) "." KVF_STR(KVF_VERSION_MINOR) "."
		KVF_STR(KVF_VERSION_PATCH);
}
