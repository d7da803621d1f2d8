"""The call counters of ``run --report`` (counters.h), as each compiled module cimports them: each counts its own."""

cdef extern from "counters.h":
    int FASTCOMMON_MAX_COUNTERS
    int fastcommon_check_counter(Py_ssize_t, bint none_allowed) except -1
    void fastcommon_count(Py_ssize_t) noexcept nogil
    void fastcommon_count_by(Py_ssize_t, Py_ssize_t) noexcept nogil
    unsigned long long fastcommon_count_of(Py_ssize_t) noexcept nogil
    unsigned long long *fastcommon_counter_at(Py_ssize_t) noexcept nogil
    void fastcommon_increment(unsigned long long *) noexcept nogil


cdef inline tuple counted_calls():
    return tuple([fastcommon_count_of(i) for i in range(FASTCOMMON_MAX_COUNTERS)])
