"""SIMULATED WINDOWS, on Linux (tests/test_portability.py, .ci/simulated-windows): with this folder first on PYTHONPATH,
each Python process starts with `signal` and `os` lacking the POSIX names Windows lacks, so that fastcommon, its tests
and its benchmarks fail here where they would read one there. A simulation, not Windows: sys.platform stays "linux",
the files, console and processes stay Linux's; compare takes its Windows way (CTRL_BREAK_EVENT then taskkill, whose
stand-ins are SIGINT and ./taskkill) because `os` has no killpg."""

import os
import signal

ABSENT = {
    signal: "SIGHUP SIGKILL SIGQUIT SIGUSR1 SIGUSR2 SIGALRM SIGCHLD SIGPIPE SIGCONT SIGSTOP SIGTSTP SIGTTIN SIGTTOU "
    "SIGWINCH SIGBUS SIGTRAP SIGPROF SIGVTALRM SIGXCPU SIGXFSZ SIGSYS SIGURG SIGIO SIGPOLL SIGPWR SIGRTMIN SIGRTMAX "
    "alarm pause setitimer getitimer siginterrupt sigpending sigwait sigwaitinfo sigtimedwait pthread_kill "
    "pthread_sigmask pidfd_send_signal",
    os: "killpg getpgid getpgrp setpgid setpgrp setsid getsid fork forkpty register_at_fork mkfifo mknod geteuid "
    "getegid getuid getgid getgroups setuid setgid sched_getaffinity sched_setaffinity getloadavg nice",
}  # what Linux's own subprocess needs of them (WNOHANG, waitpid) stays
for module, names in ABSENT.items():
    for name in names.split():
        if hasattr(module, name):
            delattr(module, name)
