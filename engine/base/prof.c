/*
 * prof.c - the one definition the stage profile (engine/base/prof.h)
 * needs: each thread's time in timed stages.
 */
#include "engine/base/prof.h"

_Thread_local uint64_t prof_inner;
