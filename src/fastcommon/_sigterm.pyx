# cython: language_level=3, binding=False, freethreading_compatible=True, autotestdict=False
"""The SIGTERM relay of ``run --report`` (_launcher.py), on POSIX: a C handler in front of CPython's. Python handlers run
in the main thread, which a wait with no timeout blocks when another thread takes SIGTERM: the relay sends it on to the
main thread, where CPython's handler marks it (docs/adoption.md). Async-signal-safe calls only, errno as found."""

from libc.errno cimport errno
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

cdef sigaction_t _cpython_handler  # CPython's C handler for SIGTERM, which the relay calls
cdef kill_thread_t _kill_thread
cdef pthread_t _main_thread
cdef volatile pid_t _main_pid  # a fork child's getpid() differs: it only marks the signal until relay_here()


cdef void _relay(int signum) noexcept nogil:
    global errno
    cdef int saved_errno = errno
    # Another thread sends the signal on, unmarked; the main thread, a fork child before relay_here(), and a thread
    # whose copy cannot be sent mark it, as CPython's handler does.
    if getpid() != _main_pid or pthread_equal(pthread_self(), _main_thread) or _kill_thread(_main_thread, signum):
        _cpython_handler.sa_handler(signum)
    errno = saved_errno


def relay_sigterm(size_t pthread_kill):
    """From the main thread, just after a Python SIGTERM handler is set: put the relay in front of CPython's C
    handler, with its flags and mask. ``pthread_kill``: the address of libc's. Whether the relay is there."""
    global _kill_thread, _cpython_handler
    cdef sigaction_t current
    if pthread_kill == 0 or sigaction(SIGTERM, NULL, &current) != 0 or current.sa_flags & SA_SIGINFO:
        return False
    if current.sa_handler == _relay:
        return relay_here()
    if current.sa_handler == SIG_DFL or current.sa_handler == SIG_IGN:
        return False
    _kill_thread = <kill_thread_t><void *>pthread_kill
    _cpython_handler = current
    relay_here()
    current.sa_handler = _relay
    return sigaction(SIGTERM, &current, NULL) == 0


def relay_here():
    """Relay to this thread (a fork child's), behind any handler chained in front of the relay; whether there is one."""
    global _main_thread, _main_pid
    if _kill_thread == NULL:
        return False
    _main_thread = pthread_self()
    _main_pid = getpid()  # last: until then, a fork child's relay only marks the signal
    return True
