/* The call counters of `python -m fastcommon run --report`: one per replaceable, by its place in the registry
 * (fastcommon/_registry.py), read by fast_common.calls(). Process-wide on purpose: a fork child inherits its
 * parent's counts, and the report subtracts them. Atomic where threads run at once (free-threaded CPython). */
#ifndef FASTCOMMON_COUNTERS_H
#define FASTCOMMON_COUNTERS_H

#include <Python.h>

#define FASTCOMMON_MAX_COUNTERS 32
static unsigned long long fastcommon_calls[FASTCOMMON_MAX_COUNTERS];

/* Count n calls at `counter`; -1 counts nothing. */
static inline void
fastcommon_count_by(Py_ssize_t counter, Py_ssize_t n)
{
    if (counter < 0 || counter >= FASTCOMMON_MAX_COUNTERS) {
        return;
    }
#if defined(Py_GIL_DISABLED) && defined(_MSC_VER)
    _InterlockedExchangeAdd64((volatile __int64 *)&fastcommon_calls[counter], (__int64)n);
#elif defined(Py_GIL_DISABLED)
    __atomic_fetch_add(&fastcommon_calls[counter], (unsigned long long)n, __ATOMIC_RELAXED);
#else
    fastcommon_calls[counter] += (unsigned long long)n;
#endif
}

#define fastcommon_count(counter) fastcommon_count_by((counter), 1)

/* Where `counter` counts (0 <= counter < FASTCOMMON_MAX_COUNTERS, checked by the caller), for a caller that counts
   there on every call: one increment, no check. */
static inline unsigned long long *
fastcommon_counter_at(Py_ssize_t counter)
{
    return &fastcommon_calls[counter];
}

static inline void
fastcommon_increment(unsigned long long *slot)
{
#if defined(Py_GIL_DISABLED) && defined(_MSC_VER)
    _InterlockedExchangeAdd64((volatile __int64 *)slot, 1);
#elif defined(Py_GIL_DISABLED)
    __atomic_fetch_add(slot, 1ULL, __ATOMIC_RELAXED);
#else
    (*slot)++;
#endif
}

static inline unsigned long long
fastcommon_count_of(Py_ssize_t counter)
{
    if (counter < 0 || counter >= FASTCOMMON_MAX_COUNTERS) {
        return 0;
    }
#if defined(Py_GIL_DISABLED) && defined(_MSC_VER)
    return (unsigned long long)_InterlockedOr64((volatile __int64 *)&fastcommon_calls[counter], 0);
#elif defined(Py_GIL_DISABLED)
    return __atomic_load_n(&fastcommon_calls[counter], __ATOMIC_RELAXED);
#else
    return fastcommon_calls[counter];
#endif
}

#endif /* FASTCOMMON_COUNTERS_H */
