"""Known-harmless error lines that libraries print straight to file descriptor 2, kept off the terminal.

Ray Data's actors log one error-level line from Ray's C++ core each time an actor pool starts
("Actor … has constructor arguments in the object store and max_restarts > 0"): Ray Data itself
passes its detached location tracker to every map actor (ray-project/ray#57733), so the warning
says nothing about our run. C++ logging bypasses Python's `logging`, hence a filter on the file
descriptor. Only lines matching `KNOWN_NOISE` are dropped; everything else passes unchanged, and
the filter lasts for the rest of the process (children inherit the pipe, so it is never removed).
"""

from __future__ import annotations

import atexit
import os
import re
import select
import sys
import threading

KNOWN_NOISE = (
    re.compile(rb"core_worker\.cc:\d+: Actor with class name: .* has constructor arguments in the object store "
               rb"and max_restarts > 0"),
)
_installed = False


def _keep(line: bytes) -> bool:
    return not any(p.search(line) for p in KNOWN_NOISE)


def _pump(source: int, target: int, idle: threading.Event) -> None:
    pending = b""
    while True:
        if not select.select([source], [], [], 0.05)[0]:
            idle.set()
            continue
        idle.clear()
        if not (chunk := os.read(source, 65536)):
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        out = b"".join(line + b"\n" for line in lines if _keep(line))
        if pending and not pending.startswith(b"["):  # a progress bar or prompt, not a log line: show it now
            out, pending = out + pending, b""
        if out:
            os.write(target, out)
    if pending and _keep(pending):
        os.write(target, pending)
    idle.set()


def install() -> None:
    """Route this process's fd 2 through the filter (once; a no-op when stderr is not a real fd)."""
    global _installed
    if _installed:
        return
    try:
        sys.stderr.flush()
        real = os.dup(2)
    except (OSError, ValueError):
        return
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    idle = threading.Event()
    threading.Thread(target=_pump, args=(read, real, idle), name="stderr-filter", daemon=True).start()
    atexit.register(_drain, real, idle)
    _installed = True


def _drain(real: int, idle: threading.Event) -> None:
    """At exit (after any traceback was printed): write straight to the terminal again, and give the
    pump a moment to pass on what is still in the pipe."""
    sys.stderr.flush()
    os.dup2(real, 2)
    idle.clear()
    idle.wait(2.0)
