"""Progress lines: rates and ETAs on a fake clock, reminders during a wait, training's plan and ETA."""

from __future__ import annotations

import threading

from tasks.progress import Meter, duration, rate_and_eta, waiting
from tasks.training.trainer import LOSS, SEPARATION, TOTAL_STEPS, TrainProgress


class Clock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_durations_read_at_a_glance():
    assert [duration(s) for s in (0, 59.4, 60, 3599, 3600, 7620)] == ["0 s", "59 s", "1 min 00 s", "59 min 59 s",
                                                                     "1 h 00 min", "2 h 07 min"]


def test_rate_and_eta():
    assert rate_and_eta(10, 40, 5.0, "rows") == "2 rows/s, ETA 15 s"
    assert rate_and_eta(40, 40, 5.0, "rows") == "8 rows/s"  # done: no ETA
    assert rate_and_eta(0, 40, 5.0, "rows") == "0 rows/s"
    assert rate_and_eta(10, None, 5.0, "rows") == "2 rows/s"


def test_meter_paces_its_lines_and_always_says_the_last():
    clock, lines = Clock(), []
    meter = Meter("synthesis", 30, "rows", lines.append, every_s=10, clock=clock)
    clock.t = 100.0
    meter.start()  # the wait before the first answer does not count against the rate
    for t in (102.0, 105.0, 113.0, 115.0):
        clock.t = t
        meter.advance(5)
    clock.t = 120.0
    meter.advance(10, "7 accepted")
    assert lines == ["synthesis: 5/30 rows (17%), 2.5 rows/s, ETA 10 s",
                     "synthesis: 15/30 rows (50%), 1.15 rows/s, ETA 13 s",
                     "synthesis: 30/30 rows (100%), 1.5 rows/s; 7 accepted"]


def test_a_meter_with_no_total_says_its_count_when_told_it_is_finished():
    clock, lines = Clock(), []
    meter = Meter("synthesis", None, "rows", lines.append, every_s=10, clock=clock)
    for t in (1.0, 2.0, 3.0):
        clock.t = t
        meter.advance(4)
    assert lines == ["synthesis: 4 rows, 4 rows/s"]  # paced: the rest fell inside the interval
    meter.finish("12 accepted")
    assert lines[-1] == "synthesis: 12 rows, 4 rows/s; 12 accepted"


def test_a_wait_is_announced_and_reminded_until_it_stops():
    lines, reminded = [], threading.Event()

    def emit(line: str) -> None:
        lines.append(line)
        if len(lines) >= 3:
            reminded.set()

    with waiting("synthesis", "starting the vLLM engine", "on CPU", emit, every_s=0.01) as wait:
        assert reminded.wait(5)
        wait.stop()
        count = len(lines)
    assert lines[0] == "synthesis: starting the vLLM engine (on CPU)"
    assert lines[1].startswith("synthesis: still starting the vLLM engine (") and lines[1].endswith(" so far)")
    assert len(lines) == count  # nothing after stop


def test_a_reminder_says_what_moves_during_the_wait_and_survives_a_failing_status():
    lines, reminded, planned = [], threading.Event(), iter([3, 7])

    def emit(line: str) -> None:
        lines.append(line)
        if len(lines) >= 4:
            reminded.set()

    def status() -> str:
        n = next(planned, None)
        if n is None:
            raise OSError("listing timed out")
        return f"{n} of 46 chunks planned"

    with waiting("synthesis", "starting the Ray Data client stage", "", emit, every_s=0.01, status=status):
        assert reminded.wait(5)
    assert lines[0] == "synthesis: starting the Ray Data client stage"
    assert lines[1].startswith("synthesis: still starting the Ray Data client stage (")
    assert lines[1].endswith(" so far; 3 of 46 chunks planned)") and lines[2].endswith(" so far; 7 of 46 chunks planned)")
    assert lines[3].endswith(" so far)")  # the status failed: the reminder goes on without it


def test_training_progress_has_the_plan_the_share_and_an_eta():
    clock = Clock(0.0)
    lines = TrainProgress(every=10, clock=clock)
    assert lines(0, {TOTAL_STEPS: 40}) == "train: 40 optimizer steps to run"
    assert lines(5, {LOSS: 1.0}) is None
    clock.t = 30.0
    assert lines(10, {LOSS: 0.5}) == "train: step 10/40 (25%) loss 0.5, ETA 1 min 30 s"
    assert lines(12, {SEPARATION: 0.25}) == "train: step 12/40 (30%) instruction_separation 0.25, ETA 1 min 10 s"
    clock.t = 120.0
    assert lines(40, {LOSS: 0.1}) == "train: step 40/40 (100%) loss 0.1"
    resumed = TrainProgress(clock=clock)
    assert resumed(20, {TOTAL_STEPS: 40}) == "train: 40 optimizer steps to run, resuming after step 20"


def test_work_that_arrived_in_one_lump_counts_as_done_but_not_in_the_rate():
    clock, lines = Clock(100.0), []
    meter = Meter("synthesis", 66, "rows", lines.append, clock=clock)
    meter.start(already=16)  # the engine answered a whole batch while it was still starting
    clock.t = 110.0
    meter.advance(16)
    assert lines == ["synthesis: 32/66 rows (48%), 1.6 rows/s, ETA 21 s"]
