"""`lorasent seeds` without a repo: how it follows DVC's queue (end to end: test_experiments)."""

from pathlib import Path

import pytest

from lorasent.errors import LorasentError
from lorasent.experiments import seeds

HEADER = "Task     Name        Created    Status"


def _queue(*rows: str, workers: int) -> str:
    return "\n".join([HEADER, *rows, "", f"Worker status: {workers} active, 0 idle"])


def _follow(monkeypatch, screens, restarts=None):
    """wait_for over a scripted sequence of `dvc queue status` screens."""
    shown = iter(screens)
    monkeypatch.setattr(seeds, "run_dvc", lambda repo, *args, as_json=True, **_: next(shown))
    monkeypatch.setattr(seeds, "POLL_S", 0)
    lines: list[str] = []
    restart = None if restarts is None else (lambda: restarts.append(1))
    found = seeds.wait_for(Path("."), ["a-seed42", "a-seed43"], progress=lines.append,
                           restart=restart)
    return found, lines


def test_waits_until_every_run_is_done_and_says_each_change(monkeypatch):
    found, lines = _follow(monkeypatch, [
        _queue("1 a-seed42 07:26 PM Running", "2 a-seed43 07:26 PM Queued", workers=1),
        _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Running", workers=1),
        _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Failed", workers=1)])
    assert found == {"a-seed42": "Success", "a-seed43": "Failed"}
    assert [line.split(" (")[0] for line in lines] == [
        "seeds: a-seed42 Running", "seeds: a-seed43 Queued", "seeds: a-seed42 Success",
        "seeds: a-seed43 Running", "seeds: a-seed43 Failed"]


def test_a_queue_left_without_a_worker_gets_one_again(monkeypatch):
    """A worker that stops with runs still queued (it took an earlier `dvc queue stop`):
    three looks without a worker start one again."""
    stuck = _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Queued", workers=0)
    restarts: list[int] = []
    found, lines = _follow(monkeypatch, [stuck] * 3 + [
        _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Success", workers=1)],
        restarts)
    assert restarts == [1] and found["a-seed43"] == "Success"
    assert "seeds: no queue worker runs while a-seed43 wait; starting one again" in lines


def test_without_a_restart_a_stuck_queue_is_an_error(monkeypatch):
    stuck = _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Queued", workers=0)
    with pytest.raises(LorasentError, match="a-seed43 queued but no queue worker runs; "
                                            "`dvc queue start` runs them"):
        _follow(monkeypatch, [stuck] * 3)


def test_a_dvc_failure_while_following_the_queue_is_said_as_seeds_own_line(monkeypatch):
    """Issue 62, kind 8: its lines started with `compare:`, the shared helper's default."""
    import subprocess

    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="ERROR: no queue here")
    calls: list[tuple[object, ...]] = []

    def run(*args: object, **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return failed

    monkeypatch.setattr("lorasent.review.collect.subprocess.run", run)
    monkeypatch.setattr(seeds, "POLL_S", 0)
    with pytest.raises(LorasentError) as err:
        seeds.wait_for(Path("."), ["a-seed42"], progress=lambda line: None)
    assert str(err.value) == (f"seeds: `dvc queue status` failed in {Path('.').resolve()}: "
                              "ERROR: no queue here")
    assert len(calls) == seeds.STATUS_TRIES  # a failed look is taken again before it is one


def test_a_look_that_fails_while_a_worker_writes_is_taken_again(monkeypatch):
    """CI, stop 67: `dvc queue status` read a worker's JSON file half written and failed
    with "Expecting value: line 1 column 1 (char 0)"; the next look found the runs."""
    import subprocess

    race = subprocess.CompletedProcess([], 255, stdout="", stderr=(
        "ERROR: unexpected error - Expecting value: line 1 column 1 (char 0)"))
    done = subprocess.CompletedProcess([], 0, stderr="", stdout=_queue(
        "1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Success", workers=0))
    shown = iter([race, race, done])
    monkeypatch.setattr("lorasent.review.collect.subprocess.run", lambda *a, **k: next(shown))
    monkeypatch.setattr(seeds, "POLL_S", 0)
    assert seeds.wait_for(Path("."), ["a-seed42", "a-seed43"]) == {
        "a-seed42": "Success", "a-seed43": "Success"}
