"""About how long a learning curve's runs train (:func:`estimate`), from the last training
on this machine, scaled by each run's share of the training rows; the train record a
time was measured for is found in git's history (:func:`measured_for`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lorasent.experiments.grid import RunSpec
from lorasent.git import git_bytes, git_or_none
from lorasent.provenance import read_machine_record, record_sha256
from lorasent.run_pipeline import one_line

TRAIN_RECORD = "metrics/provenance/train.json"  # the tracked record of the train stage
MACHINE_RECORD = "metrics/provenance/machine/train.json"  # its machine facts (git-ignored)
HISTORY_COMMITS = 500  # the newest commits (all refs) searched for the record a time belongs to


def estimate(repo: Path, runs: Sequence[RunSpec], fractions: dict[str, float]) -> str:
    """About how long the runs train, from the last training here: its wall time
    (:data:`MACHINE_RECORD`, git-ignored, :func:`lorasent.provenance.read_machine_record`)
    times each run's fraction of the training split over the fraction it trained.

    The time belongs to the tracked record it was written with (its ``record_sha256``).
    When that is not the record here now (a run since, or a checkout of a record made on
    another machine), the fraction is that record's, found in the history
    (:func:`measured_for`), and the line says which commit's record and which params
    differ from the one here; a record no commit holds is taken as a training on all the
    rows, and said so. ``unknown`` only without a time: no machine record ("no record"),
    a damaged one, or one of a failed training."""
    where = MACHINE_RECORD
    try:
        machine = read_machine_record(repo / TRAIN_RECORD)
    except ValueError:
        return f"about how long: unknown ({where} is damaged: not a JSON object)"
    if machine is None:
        return f"about how long: unknown (no record of a training on this machine: {where})"
    if machine.get("status") == "failed":
        return ("about how long: unknown (the last training on this machine failed: "
                f"{one_line(machine.get('error'))}; {where})")
    seconds = machine.get("wall_time_s")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
        return f"about how long: unknown ({where} holds no training time)"
    try:
        here = (repo / TRAIN_RECORD).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        here = None
    note = ""
    if here is not None and machine.get("record_sha256") == record_sha256(here):
        record = _json_object(here)
    else:
        found = measured_for(repo, machine.get("record_sha256"))
        if found is None:
            record = {}
            note = (", measured for a train record no commit here holds (its params unknown: "
                    "taken as a training on all the rows)")
        else:
            commit, record = found
            other = _params_differ(record, _json_object(here) if here is not None else {})
            note = (f", measured for the train record of commit {commit[:7]}, not the one here "
                    f"(train.fraction {_fraction(record):g}"
                    + (f"; other params: {', '.join(other)}" if other else "") + ")")
    share = _fraction(record)
    total = sum(seconds * fractions[run.group] / share for run in runs)
    return (f"about {total / 60:.0f} min of training one after the other (the last training "
            f"here took {seconds:.0f} s{note}; each run scaled by its share of the rows; "
            "evaluation not counted, runs side by side take less)")


def _json_object(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _fraction(record: dict[str, Any]) -> float:
    """The ``train.fraction`` a train record's params hold (1.0: all, before the key)."""
    params = record.get("params")
    train = params.get("train") if isinstance(params, dict) else None
    value = train.get("fraction") if isinstance(train, dict) else None
    return float(value) if isinstance(value, int | float) and 0 < value <= 1 else 1.0


def _params_differ(record: dict[str, Any], here: dict[str, Any], most: int = 4) -> list[str]:
    """The params keys (``a.b.c``) whose values differ between two train records, other
    than ``train.fraction`` (the estimate scales by it), at most ``most`` then ``...``."""
    def flat(node: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(node, dict):
            return {prefix: node}
        return {k: v for key, sub in node.items() for k, v in flat(sub, f"{prefix}{key}.").items()}

    a, b = flat(record.get("params", {})), flat(here.get("params", {}))
    keys = [k.rstrip(".") for k in dict.fromkeys([*a, *b])
            if a.get(k) != b.get(k) and k.rstrip(".") != "train.fraction"]
    return keys[:most] + (["..."] if len(keys) > most else [])


def measured_for(repo: Path, sha256: Any) -> tuple[str, dict[str, Any]] | None:
    """``(commit, record)``: the newest commit of any ref (branches, tags, DVC experiments'
    refs) among the newest :data:`HISTORY_COMMITS` that changed :data:`TRAIN_RECORD` to a
    file whose SHA-256 is ``sha256`` (:func:`lorasent.provenance.record_sha256`), and that
    record; None when none does (or ``sha256`` is not a string)."""
    if not isinstance(sha256, str):
        return None
    blobs: dict[str, str] = {}  # blob id -> the newest commit that wrote it
    commit = ""
    log = git_or_none(repo, "log", "--all", f"-n{HISTORY_COMMITS}", "--format=%H", "--raw",
                      "--no-abbrev", "--no-renames", "--", TRAIN_RECORD)
    for line in log.splitlines() if log is not None else []:
        fields = line.split()
        if len(fields) == 1:
            commit = fields[0]
        elif line.startswith(":") and len(fields) >= 4:
            blobs.setdefault(fields[3], commit)
    wanted = [blob for blob in blobs if set(blob) != {"0"}]  # a deletion writes no blob
    if not wanted:
        return None
    out = git_bytes(repo, "cat-file", "--batch",
                    input="".join(f"{blob}\n" for blob in wanted).encode()) or b""
    at = 0
    for blob in wanted:  # "<id> blob <size>\n<bytes>\n" each, in the order asked
        header_end = out.find(b"\n", at)
        header = out[at:header_end].split()
        if len(header) != 3:
            break
        size = int(header[2])
        body = out[header_end + 1:header_end + 1 + size]
        at = header_end + 1 + size + 1
        text = body.decode("utf-8", errors="replace")
        if record_sha256(text) == sha256:
            return blobs[blob], _json_object(text)
    return None
