/* The call counters of `python -m fastcommon run --report`: one per replaceable, at its place in the registry
 * (fastcommon/_registry.py), read by fast_common.calls(). Process-wide on purpose: a fork child inherits its
 * parent's counts, and the report subtracts them. Atomic where threads run at once (free-threaded CPython). */
#ifndef FASTCOMMON_COUNTERS_H
#define FASTCOMMON_COUNTERS_H

#include <Python.h>

#define FASTCOMMON_MAX_COUNTERS 32
static unsigned long long fastcommon_calls[FASTCOMMON_MAX_COUNTERS];

#if defined(Py_GIL_DISABLED) && defined(_MSC_VER)
#define FASTCOMMON_ADD(slot, n) _InterlockedExchangeAdd64((volatile __int64 *)(slot), (__int64)(n))
#define FASTCOMMON_LOAD(slot) ((unsigned long long)_InterlockedOr64((volatile __int64 *)(slot), 0))
#elif defined(Py_GIL_DISABLED)
#define FASTCOMMON_ADD(slot, n) __atomic_fetch_add((slot), (unsigned long long)(n), __ATOMIC_RELAXED)
#define FASTCOMMON_LOAD(slot) __atomic_load_n((slot), __ATOMIC_RELAXED)
#else
#define FASTCOMMON_ADD(slot, n) (*(slot) += (unsigned long long)(n))
#define FASTCOMMON_LOAD(slot) (*(slot))
#endif

#define fastcommon_counts(counter) ((counter) >= 0 && (counter) < FASTCOMMON_MAX_COUNTERS) /* -1 counts nothing */

static inline void /* count n calls at `counter` */
fastcommon_count_by(Py_ssize_t counter, Py_ssize_t n)
{
    if (fastcommon_counts(counter)) {
        FASTCOMMON_ADD(&fastcommon_calls[counter], n);
    }
}

#define fastcommon_count(counter) fastcommon_count_by((counter), 1)

static inline unsigned long long
fastcommon_count_of(Py_ssize_t counter)
{
    return fastcommon_counts(counter) ? FASTCOMMON_LOAD(&fastcommon_calls[counter]) : 0;
}

/* Where a counter that counts on every call, checked once, counts: one increment a call, no check. */
#define fastcommon_counter_at(counter) (&fastcommon_calls[(counter)])
#define fastcommon_increment(slot) FASTCOMMON_ADD((slot), 1)

#endif /* FASTCOMMON_COUNTERS_H */
