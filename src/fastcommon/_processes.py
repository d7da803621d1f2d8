"""A compare run's processes, in a group of their own: stopped on POSIX by signals to it, on Windows CTRL_BREAK_EVENT,
then taskkill /T /F; which, by what ``os`` has (.ci/simulated-windows takes Windows' way on Linux, with stand-ins)."""

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any

# what stops compare (each where the system has it); each also ends the run that is going on
STOPPING = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK") if hasattr(signal, name))
GRACE = 5  # seconds a run's processes have after each step: SIGINT (where stopped), SIGTERM, then SIGKILL
IN_A_GROUP: dict[str, Any] = {"start_new_session": True} if hasattr(os, "killpg") else {
    "creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}  # Popen's keywords; 0: simulated  # fmt: skip
QUOTED = subprocess.list2cmdline if sys.platform == "win32" else shlex.join  # a command line, as the shell reads it


def end(process: "subprocess.Popen[bytes]", interrupt: bool) -> None:
    """End the group ``process`` leads; ``interrupt`` (compare stopped, a timeout): as Ctrl-C first, so that pytest
    tears its fixtures down; signals to compare wait meanwhile. On Windows, a run that ended leaves its orphans."""
    handlers = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOPPING}
    try:
        if hasattr(os, "killpg") and hasattr(signal, "SIGKILL"):  # POSIX
            with contextlib.suppress(ProcessLookupError, PermissionError):  # the group gone (macOS: zombies left)
                for signum in (signal.SIGINT,) * interrupt + (signal.SIGTERM, signal.SIGKILL):
                    deadline = time.monotonic() + GRACE
                    os.killpg(process.pid, signum)
                    while time.monotonic() < deadline:
                        process.poll()  # the group's leader, reaped: it counts no more
                        os.killpg(process.pid, 0)
                        time.sleep(0.02)
        else:
            try:
                if interrupt and process.poll() is None:  # OSError, SystemError: no console (pythonw), group gone
                    with contextlib.suppress(OSError, SystemError, subprocess.TimeoutExpired):
                        process.send_signal(getattr(signal, "CTRL_BREAK_EVENT", signal.SIGINT))  # SIGINT: simulated
                        process.wait(GRACE)
            finally:
                subprocess.run(["taskkill", "/T", "/F", "/PID", str(process.pid)], capture_output=True, check=False)
    finally:
        process.wait()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
