"""Progress a person can trust: a line before every long wait, and rows/s with an ETA while it runs.

Owns the wording and the pacing of progress lines for every long stage (synthesis, training,
encoding an eval corpus). It prints nothing itself: each line goes to an `emit` callable, which is
`print` on the CLI and the Prefect run logger in a flow, so both show the same lines. It knows
nothing about what is being counted.

    >>> meter = Meter("synthesis", total=66, unit="rows", emit=print, clock=iter([0, 10, 20]).__next__)
    >>> meter.advance(16)
    synthesis: 16/66 rows (24%), 1.6 rows/s, ETA 31 s
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

Progress = Callable[[str], None]  # where progress lines go: print, a logger, a list in tests


def duration(seconds: float) -> str:
    """'42 s', '3 min 05 s', '2 h 07 min' — what a person reads at a glance.

        >>> duration(42.4), duration(185), duration(7620)
        ('42 s', '3 min 05 s', '2 h 07 min')
    """
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def rate_and_eta(done: int, total: int | None, elapsed: float, unit: str) -> str:
    """'1.6 rows/s, ETA 31 s' (no ETA without a total or before anything is done)."""
    if elapsed <= 0 or done <= 0:
        return f"0 {unit}/s"
    rate = done / elapsed
    text = f"{rate:.3g} {unit}/s"
    if total is not None and total > done:
        text += f", ETA {duration((total - done) / rate)}"
    return text


class Meter:
    """Counts units of work and emits a progress line at most every `every_s` seconds (and at the end).

    The rate counts from construction or from `start()`: call `start()` when the work proper
    begins, so a start-up wait announced separately does not make the rate look slow. Work that
    arrived in one lump at that moment (answers an engine finished while it was still starting)
    is passed as `already`: it counts as done but not in the rate.
    """

    def __init__(self, label: str, total: int | None, unit: str, emit: Progress, every_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.unit, self.emit, self.every_s, self.clock = label, total, unit, emit, every_s, clock
        self.done = self.baseline = 0
        self.started = clock()
        self._last_emit = float("-inf")

    def start(self, already: int = 0) -> None:
        """Restart the clock: the work proper begins now, with `already` units done."""
        self.started, self.done, self.baseline = self.clock(), self.done + already, self.done + already

    def advance(self, n: int, extra: str = "") -> None:
        self.done += n
        now = self.clock()
        finished = self.total is not None and self.done >= self.total
        if finished or now - self._last_emit >= self.every_s:
            self._last_emit = now
            self.emit(self.line(now, extra))

    def finish(self, extra: str = "") -> None:
        """Say the count reached, whenever the last line was emitted (a meter with no total never
        knows by itself that it is done)."""
        now = self.clock()
        self._last_emit = now
        self.emit(self.line(now, extra))

    def line(self, now: float, extra: str = "") -> str:
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        tail = f"; {extra}" if extra else ""
        timed = rate_and_eta(self.done - self.baseline, None if self.total is None else self.total - self.baseline,
                             now - self.started, self.unit)
        return f"{self.label}: {count} {self.unit}{share}, {timed}{tail}"


class Waiting:
    """A wait in progress: `stop()` ends the reminders (also called when the `with` block exits)."""

    def __init__(self, label: str, what: str, detail: str, emit: Progress, every_s: float, clock: Callable[[], float],
                 status: Callable[[], str] | None = None):
        self._stop, self.started, self.clock = threading.Event(), clock(), clock
        emit(f"{label}: {what}" + (f" ({detail})" if detail else ""))

        def remind() -> None:
            while not self._stop.wait(every_s):
                line = f"{label}: still {what} ({duration(self.clock() - self.started)} so far{_status(status)})"
                if not self._stop.is_set():  # a slow status must not remind of a wait that has ended
                    emit(line)

        self._thread = threading.Thread(target=remind, name="progress-reminder", daemon=True)
        self._thread.start()

    def stop(self) -> float:
        """End the reminders; return how long the wait took, in seconds."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=1)
        return self.clock() - self.started


def _status(status: Callable[[], str] | None) -> str:
    """'; <what else is moving>' for a reminder, or nothing (also when asking fails: a progress line
    never stops the work it describes)."""
    if status is None:
        return ""
    try:
        text = status()
    except Exception:  # e.g. a listing of an object store that timed out
        return ""
    return f"; {text}" if text else ""


@contextlib.contextmanager
def waiting(label: str, what: str, detail: str, emit: Progress, every_s: float = 30.0,
            clock: Callable[[], float] = time.monotonic, status: Callable[[], str] | None = None) -> Iterator[Waiting]:
    """Say '<label>: <what> (<detail>)' now, then '<label>: still <what> (45 s so far)' every
    `every_s` seconds until `stop()` or the end of the block; with `status`, each reminder adds what
    it returns ('still ... (45 s so far; 12 of 46 chunks planned)').

    For waits whose end nobody can predict (an engine loading its weights): silence for minutes
    reads as a hang. And where other work goes on during the wait (a streamed run plans its chunks
    while the engine starts, and sends nothing while every call is cached), `status` shows it moving.
    The reminder runs on a daemon thread.
    """
    wait = Waiting(label, what, detail, emit, every_s, clock, status)
    try:
        yield wait
    finally:
        wait.stop()
