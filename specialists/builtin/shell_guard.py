"""Between the `shell` kind and its command, in a process of its own (the standard library
only, run by path): the command dies with its replica, whatever kills the replica.

    python -I shell_guard.py REPLICA_PID COMMAND [ARG...]

The guard leads the process group the kind starts it in and starts the command in that
group, with its own environment, directory and standard streams; it waits for it and
exits as it did (its exit code, or killed by the same signal). When the replica is gone
(SIGKILL, the OOM killer: nothing of the replica runs to kill the group) the guard kills
its group, itself with it: on Linux the kernel tells it at once (PR_SET_PDEATHSIG), and
everywhere it looks at its parent every POLL_S. A command that cannot start exits 127,
its reason on stderr after CANNOT_RUN.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from types import FrameType

POLL_S = 0.5
CANNOT_RUN = "callboard shell guard: cannot run: "
_PR_SET_PDEATHSIG = 1


def _kill_group(signum: int = 0, frame: FrameType | None = None) -> None:
    """The replica is gone: the command's whole group goes, the guard with it."""
    os.killpg(0, signal.SIGKILL)


def _watch(replica: int) -> None:
    """Kill the group once the guard's parent is no longer the replica."""
    with contextlib.suppress(Exception):  # not on Linux, or no libc: the poll alone
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != replica:  # gone before the kernel was asked to say so
        _kill_group()

    def poll() -> None:
        while True:
            time.sleep(POLL_S)
            if os.getppid() != replica:
                _kill_group()

    threading.Thread(target=poll, daemon=True).start()


def main(argv: list[str]) -> int:
    replica, command = int(argv[0]), argv[1:]
    signal.signal(signal.SIGTERM, _kill_group)  # the kernel's word that the replica died
    _watch(replica)
    try:
        child = subprocess.Popen(command)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{CANNOT_RUN}{exc}\n")
        return 127
    code = child.wait()
    if code < 0:  # killed by a signal: so is the guard, for the replica to see the same
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
