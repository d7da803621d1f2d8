# cython: language_level=3, binding=False, freethreading_compatible=True, autotestdict=False
"""The SIGTERM relay of ``run --report`` (_report.py), on POSIX.

CPython runs a signal's Python handler in the main thread only. Where the kernel hands SIGTERM to another thread
(one of grpc's) while the main thread waits with no timeout, CPython marks the signal and the main thread waits
on: the handler the report put where SIGTERM was at its default, which would have ended the process, never runs.
The relay, a C signal handler in front of CPython's own, sends the signal on to the main thread, which wakes and
runs the handler. It makes only async-signal-safe calls; CPython's handler marks the signal, as without it.
"""

from posix.types cimport pid_t
from posix.unistd cimport getpid

ctypedef void (*handler_t)(int) noexcept nogil

cdef extern from "<signal.h>" nogil:
    ctypedef struct sigaction_t "struct sigaction":  # the fields used here; the rest copied along
        handler_t sa_handler
        int sa_flags
    int sigaction(int, const sigaction_t *, sigaction_t *)
    enum: SIGTERM, SA_SIGINFO
    handler_t SIG_DFL, SIG_IGN

cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t  # opaque: only passed, and compared with pthread_equal
    pthread_t pthread_self()
    int pthread_equal(pthread_t, pthread_t)

# pthread_kill, as the caller finds it at run time: glibc 2.34 moved it into libc under a new symbol version,
# which a link to it would make every Linux wheel require.
ctypedef int (*kill_thread_t)(pthread_t, int) noexcept nogil

cdef sigaction_t _cpython_handler  # CPython's C handler for SIGTERM, which the relay calls first
cdef kill_thread_t _kill_thread
cdef pthread_t _main_thread
cdef pid_t _main_pid  # a fork child's getpid() differs: it sends nothing until it calls relay_sigterm()


cdef void _relay(int signum) noexcept nogil:
    _cpython_handler.sa_handler(signum)
    if getpid() == _main_pid and not pthread_equal(pthread_self(), _main_thread):
        _kill_thread(_main_thread, signum)


def relay_sigterm(size_t pthread_kill):
    """From the main thread, once a Python SIGTERM handler is set: put the relay in front of CPython's C handler,
    with its flags and mask (where it is there already, relay to this thread and process). ``pthread_kill`` is
    the address of libc's pthread_kill. Whether the relay is there."""
    cdef sigaction_t current
    if pthread_kill == 0 or sigaction(SIGTERM, NULL, &current) != 0 or current.sa_flags & SA_SIGINFO:
        return False
    if current.sa_handler == SIG_DFL or current.sa_handler == SIG_IGN:
        return False
    global _kill_thread, _main_thread, _main_pid, _cpython_handler
    _kill_thread = <kill_thread_t><void *>pthread_kill
    _main_thread = pthread_self()
    _main_pid = getpid()
    if current.sa_handler != _relay:
        _cpython_handler = current
        current.sa_handler = _relay
    return sigaction(SIGTERM, &current, NULL) == 0
