"""The reproduction's verdict: the tier of this run's outputs against REV's
(:data:`TIERS`, as lorasent.review.reproduce's docstring gives them; :func:`judge`,
:func:`verdict_of`), of a seed group against another (:func:`judge_groups`), and its
text, the machines side by side (:data:`MACHINE_ROWS`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lorasent.errors import LorasentError
from lorasent.git import run_git
from lorasent.metrics import read_predictions
from lorasent.paths import (
    ADAPTER_DIR,
    BASE_MODEL_DIR,
    EVAL_METRICS,
    EVAL_PREDICTIONS,
    EVAL_TEST_SETS,
    PROVENANCE_DIR,
    RAW_DIR,
    SPLIT_DIR,
)
from lorasent.provenance import machine_path, with_machine_facts
from lorasent.review.claims import damage
from lorasent.review.collect import check_revisions, read_at, read_lock, resolve_commits, run_dvc
from lorasent.review.diffs import (
    TOLERANCE,
    FileDiff,
    SetResult,
    json_diff,
    judge_set,
    predictions_files,
    table_diff,
    weights_diff,
)
from lorasent.review.markup import visible
from lorasent.review.verdict import delta_text, p_text, paired_verdict
from lorasent.statistics import PairedComparison, group_comparison

TIERS = ("identical", "equivalent", "consistent", "different")
# The inputs of the stages that score: when one differs, nothing after it is paired.
INPUTS = (RAW_DIR, BASE_MODEL_DIR, SPLIT_DIR)
# A provenance record describes the machine (MACHINE_ROWS), not a result.
DESCRIPTIONS = (PROVENANCE_DIR,)
SHOWN = 10  # rows listed by id at most


@dataclass
class Verdict:
    """The judgement of this machine's outputs against REV's."""

    tier: str
    rev: str
    commit: str
    line: str
    files: list[FileDiff] = field(default_factory=list)
    sets: list[SetResult] = field(default_factory=list)
    machines: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.tier != "different"

    def text(self) -> str:
        """The verdict line, the files that differ, the machines side by side."""
        lines = [f"reproduce: {self.tier}: {self.line}", *self.notes]
        if self.files:
            lines.append(f"files that differ from {self.rev} ({len(self.files)}):")
            lines += [f"  {'  ' if d.within else '✗ '}{visible(d.path)}: {d.deviation}"
                      for d in self.files]
        if self.machines:
            width = max(len(name) for name, _, _ in self.machines)
            # REV's column as wide as its longest value (CPU flags run long), 2 spaces after
            column = max(28, *(len(a) + 2 for _, a, _ in self.machines))
            lines.append(f"  {'':{width}}  {self.rev[:24]:<{column}}this run")
            lines += [f"  {name:{width}}  {a:<{column}}{b}{'' if a == b else '   ≠'}"
                      for name, a, b in self.machines]
        return "\n".join(lines)


def outputs(lock: dict[str, Any]) -> dict[str, str]:
    """``{path: md5}`` of every output in a dvc.lock (a folder's md5 ends in ``.dir``)."""
    return {out["path"]: str(out.get("md5", "")) for stage in (lock.get("stages") or {}).values()
            for out in stage.get("outs") or []}


def under(path: str, folders: Sequence[Path]) -> bool:
    return any(path == f.as_posix() or path.startswith(f"{f.as_posix()}/") for f in folders)


class Sides:
    """REV's and this checkout's files of one output path: REV's from git (an output git
    tracks) or from the DVC cache, these from disk."""

    def __init__(self, repo: Path, commit: str) -> None:
        self.repo, self.commit = repo, commit
        self._cache: Path | None | bool = False  # not asked yet

    def _git(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return run_git(self.repo, *args, text=False)

    def tracked(self, path: str) -> dict[str, bytes] | None:
        """REV's files under ``path`` (``{relative path: bytes}``) when git tracks them."""
        listed = self._git("ls-tree", "-r", "--name-only", self.commit, "--", path)
        names = listed.stdout.decode().splitlines() if listed.returncode == 0 else []
        return {name: self._git("show", f"{self.commit}:{name}").stdout
                for name in names} or None

    def cached(self, path: str, md5: str) -> dict[str, bytes] | None:
        """REV's files of a DVC-cached output from the cache (None: not there)."""
        if self._cache is False:
            found = run_dvc(self.repo, "cache", "dir", as_json=False,
                            command="reproduce").strip()
            self._cache = Path(found) if found else None
        cache = self._cache if isinstance(self._cache, Path) else None
        if cache is None or not md5:
            return None

        def blob(digest: str) -> Path:
            return cache / "files" / "md5" / digest[:2] / digest[2:]

        if not blob(md5).is_file():
            return None
        if not md5.endswith(".dir"):
            return {path: blob(md5).read_bytes()}
        found_files = {}
        for entry in json.loads(blob(md5).read_text(encoding="utf-8")):
            if not blob(entry["md5"]).is_file():
                return None
            found_files[f"{path}/{entry['relpath']}"] = blob(entry["md5"]).read_bytes()
        return found_files

    def here_files(self, path: str) -> dict[str, bytes]:
        root = self.repo / path
        if root.is_file():
            return {path: root.read_bytes()}
        return {p.relative_to(self.repo).as_posix(): p.read_bytes()
                for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() else {}


# ------------------------------------------------------------------ the machines

MACHINE_ROWS: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("device", lambda r: r["device"].get("device")),
    ("CPU", lambda r: r["device"].get("cpu")),
    ("torch CPU capability", lambda r: r["device"].get("kernels", {}).get(
        "torch_cpu_capability")),
    ("numpy SIMD", lambda r: r["device"].get("kernels", {}).get("numpy_simd")),
    ("kernel CPU flags", lambda r: ",".join(r["device"]["kernels"]["cpu_flags"] or [])
     if r["device"].get("kernels", {}).get("cpu_flags") is not None else None),
    ("kernel variables", lambda r: " ".join(
        f"{k}={v}" for k, v in r["device"]["kernels"]["variables"].items()) or "none"
     if "kernels" in r["device"] else None),
    ("torch threads", lambda r: r["device"].get("torch_threads")),
    ("processes", lambda r: r.get("processes")),
    ("precision", lambda r: r.get("compute_dtype") or r["params"]["base"].get("precision")),
    ("torch", lambda r: r["packages"].get("torch")),
    ("numpy", lambda r: r["packages"].get("numpy")),
    ("python", lambda r: r.get("python")),
    ("venv or container", lambda r: None if "container" not in r["device"] else (
        "container" if r["device"]["container"].get("in_container") else "venv")),
)


def machine_rows(old: dict[str, Any] | None, new: dict[str, Any] | None
                 ) -> list[tuple[str, str, str]]:
    """:data:`MACHINE_ROWS` of two provenance records (``not recorded`` where absent)."""
    def value(record: dict[str, Any] | None, get: Callable[[dict[str, Any]], Any]) -> str:
        try:
            found = get(record) if record else None
        except (KeyError, TypeError, AttributeError):
            found = None
        return "not recorded" if found is None else visible(str(found))

    return [(name, value(old, get), value(new, get)) for name, get in MACHINE_ROWS]


# ------------------------------------------------------------------ the judgement


def judge(repo: Path, rev: str, commit: str, tolerance: float = TOLERANCE,
          record_stage: str = "evaluate") -> Verdict:
    """This checkout's outputs against what ``commit`` (named ``rev``) committed.

    An output git tracks is compared by its bytes, REV's blob against the file here; one
    DVC caches by dvc.lock's md5 (REV's against this checkout's), its files read from the
    DVC cache where it holds REV's copy.

    Args:
        repo: the checkout whose outputs (its dvc.lock and files) are judged.
        rev, commit: REV as the user named it, and its commit.
        tolerance: how far a probability may move (absolute).
        record_stage: whose provenance record describes the machines (evaluate: the stage
            that scores last).
    """
    old_outs = outputs(read_lock(repo, commit))
    new_outs = outputs(read_lock(repo, "workspace"))
    sides = Sides(repo, commit)
    pairs: dict[str, tuple[bytes, bytes]] = {}
    beside: dict[str, bytes] = {}  # files the same on both sides, read to check others by
    changed, missing = [], []
    for path in sorted(set(old_outs) | set(new_outs)):
        if under(path, DESCRIPTIONS):
            continue
        tracked = sides.tracked(path)
        if tracked is None and old_outs.get(path) == new_outs.get(path):
            continue
        old = tracked if tracked is not None else sides.cached(path, old_outs.get(path, ""))
        new = sides.here_files(path)
        if old is None:
            changed.append(path)
            missing.append(path)
            continue
        differing = {name: (old.get(name, b""), new.get(name, b""))
                     for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)}
        beside.update({name: data for name, data in old.items() if new.get(name) == data})
        if differing or (tracked is None and old_outs.get(path) != new_outs.get(path)):
            changed.append(path)
        pairs.update(differing)
    return verdict_of(pairs, rev=rev, commit=commit, tolerance=tolerance, beside=beside,
                      inputs=[p for p in changed if under(p, INPUTS)], missing=missing,
                      outputs=len([p for p in old_outs if not under(p, DESCRIPTIONS)]),
                      machines=machine_rows(_record(repo, commit, record_stage),
                                            _record(repo, "workspace", record_stage)))


def verdict_of(pairs: dict[str, tuple[bytes, bytes]], *, rev: str, commit: str = "",
               tolerance: float = TOLERANCE, inputs: Sequence[str] = (),
               missing: Sequence[str] = (), outputs: int | None = None,
               machines: Sequence[tuple[str, str, str]] = (),
               beside: dict[str, bytes] | None = None) -> Verdict:
    """The tier of the files that differ (``{path: (REV's bytes, these bytes)}``; a side
    without the file has ``b""``), as the module says. First, each file read for it is
    checked as what it claims to be (:func:`damage`): one that is not makes the verdict
    "different", the first line naming each such file and why, before anything is judged
    on it.

    Args:
        beside: files the same on both sides (``{path: bytes}``), read to check a file
            that differs by: the predictions a metrics file's records follow from.
        inputs: outputs among :data:`INPUTS` that differ (nothing is paired after them).
        missing: outputs that differ but whose REV copy could not be read.
        outputs: how many outputs were compared, for the identical line.
        machines: :func:`machine_rows`.
    """
    where = f"{visible(rev)}" + (f" ({commit[:7]})" if commit else "")
    machines = list(machines)
    if not pairs and not missing:
        count = f" ({outputs} outputs" if outputs is not None else " ("
        return Verdict("identical", rev, commit,
                       f"every output of {where} byte for byte{count}; the provenance "
                       "records describe the machines, below)", machines=machines)
    sets = []
    for name in predictions_files(pairs):
        old_bytes, new_bytes = pairs[name]
        try:
            sets.append(judge_set(name, read_predictions(old_bytes.decode(), f"{rev}:{name}"),
                                  read_predictions(new_bytes.decode(), name), tolerance))
        except LorasentError as err:
            sets.append(SetResult(name, 0, [], [], math.inf, None, str(err)))
    damaged = damage(pairs, beside or {}, rev, tolerance)
    moved = any(s.flipped for s in sets)
    probs_within = all(s.within(tolerance) for s in sets)
    flags_moved = any(_flagged(old) != _flagged(new) for name, (old, new) in pairs.items()
                      if name.endswith("label_issues.csv"))
    thresholds = moved or flags_moved or any(s.on_edge for s in sets)
    files = [_file_diff(name, *pairs[name], tolerance, (moved, thresholds), probs_within,
                        sets) for name in pairs]
    files += [FileDiff(p, "differs; REV's copy is neither in git nor in the DVC cache "
                       "(dvc pull), so no deviation", under(p, (ADAPTER_DIR,)))
              for p in missing]
    if damaged:
        ours = [d for d in damaged if d.startswith("this run's ")]
        advice = ([f"restore this run's (git checkout, dvc pull) or remake "
                   f"{'them' if len(ours) > 1 else 'it'} (dvc repro), then judge again"]
                  if ours else []) + (
            [f"{visible(rev)}'s are as committed: judge against a revision whose files are "
             "whole"] if len(ours) < len(damaged) else [])
        # what could not be paired, and why (a row missing, a class renamed: often what
        # the damage comes from); a set that could not be read (rows 0) is damage itself
        unpaired = [f"{set_name(s.name)}: {s.problem}" for s in sets
                    if s.problem is not None and s.rows]
        return Verdict("different", rev, commit,
                       f"damaged (not what {'they claim' if len(damaged) > 1 else 'it claims'}, "
                       f"so nothing is judged on {'them' if len(damaged) > 1 else 'it'}): "
                       + "; ".join(damaged + unpaired + advice), files, sets, machines)
    if inputs:
        return Verdict("different", rev, commit,
                       f"its inputs differ from {visible(rev)}'s ({', '.join(inputs)}): the "
                       "same test rows cannot be assumed; rerun from the same data",
                       files, sets, machines)
    if all(d.within for d in files):
        flips = sum(len(s.near_ties) for s in sets)
        deviation = max((s.max_deviation for s in sets), default=0.0)
        ties = [visible(i) for s in sets for i in s.near_ties][:SHOWN]
        said = (f"the same predicted labels on every test row of {where}" if not flips else
                f"the same predicted labels as {where} but {flips} near-tie rows (top-two "
                f"margin under {tolerance:g}: {', '.join(ties)})")
        return Verdict("equivalent", rev, commit,
                       f"{said}; probabilities within {deviation:.2g} (tolerance "
                       f"{tolerance:g}); every metric within its tolerance; {len(files)} "
                       "files differ (below)", files, sets, machines)
    beyond = [d.path for d in files if not d.within]
    if not sets:
        return Verdict("different", rev, commit,
                       f"every predictions file is {where}'s, byte for byte, but "
                       + (f"{len(beyond)} files differ beyond their tolerances"
                          if len(beyond) != 1 else "1 file differs beyond its tolerance")
                       + f": {listing(beyond)}", files, sets, machines)
    paired = [s for s in sets if s.paired is not None]
    if not paired:
        return Verdict("different", rev, commit,
                       "files differ beyond the tolerances and no test set could be paired "
                       f"with {visible(rev)}'s: "
                       + "; ".join(f"{set_name(s.name)}: {s.problem}" for s in sets),
                       files, sets, machines)
    significant = any(s.paired is None or s.paired.significant for s in sets)
    shifted = [s for s in sets if not s.within(tolerance)] or paired[:1]
    lead = next(s for s in [*shifted, *paired] if s.paired is not None)
    counted = [f"{len(s.flipped)} of {s.rows} predictions"
               + ("" if s.name == EVAL_PREDICTIONS.as_posix() else f" of {set_name(s.name)}")
               for s in shifted if s.paired is not None]
    unpaired = [f"{set_name(s.name)} not paired ({s.problem})" for s in shifted
                if s.paired is None]
    assert lead.paired is not None
    line = "; ".join([f"{' and '.join(counted)} differ from {where}", *unpaired]) + "; " + (
        f"{set_name(lead.name)}: " if len(shifted) > 1 else "") + _paired_said(lead.paired, rev)
    notes = [f"  {visible(s.name)}: {len(s.flipped)} of {s.rows} predictions differ; "
             + (_paired_said(s.paired, rev) if s.paired else f"not paired: {s.problem}")
             for s in sets if s is not lead]
    return Verdict("different" if significant else "consistent", rev, commit, line, files,
                   sets, machines, notes)


def set_name(name: str) -> str:
    """A predictions file as its test set: ``the test split``, ``test set reviews-zh``, or
    the file (a baseline's)."""
    if name == EVAL_PREDICTIONS.as_posix():
        return "the test split"
    folder = f"{EVAL_TEST_SETS.as_posix()}/"
    if name.startswith(folder) and name.endswith("/predictions.csv"):
        return f"test set {visible(name[len(folder):-len('/predictions.csv')])}"
    return visible(name)


def _paired_said(paired: PairedComparison, rev: str) -> str:
    """``lorasent compare``'s paired verdict, B this run and A REV, in the line's case (a
    sentence after the first starts upper-case)."""
    said = (paired_verdict(paired).replace("B is", "this run is")
            .replace("than A", f"than {visible(rev)}")
            .replace("A and B are right", f"This run and {visible(rev)} are right"))
    return said[0].lower() + said[1:]


def _flagged(audit: bytes) -> set[str]:
    """The ids a label audit (``label_issues.csv``) flags."""
    return {str(row.get("id")) for row in csv.DictReader(io.StringIO(audit.decode()))}


def _file_diff(name: str, old: bytes, new: bytes, tolerance: float,
               moved: tuple[bool, bool], probs_within: bool, sets: list[SetResult]
               ) -> FileDiff:
    """One differing file, judged by its kind; ``moved``: whether some predicted label,
    and whether some row on a threshold, moved."""
    if not old or not new:
        return FileDiff(name, "only in REV" if old else "only here", False)
    result = next((s for s in sets if s.name == name), None)
    if result is not None:
        if result.problem:
            return FileDiff(name, result.problem, False)
        said = (f"{len(result.flipped)} of {result.rows} predicted labels differ "
                f"({len(result.near_ties)} near a tie); probabilities up to "
                f"{result.max_deviation:.3g} apart")
        return FileDiff(name, said, result.within(tolerance))
    if name.endswith("label_issues.csv"):
        old_rows = {row.get("id"): row for row in csv.DictReader(io.StringIO(old.decode()))}
        new_rows = {row.get("id"): row for row in csv.DictReader(io.StringIO(new.decode()))}
        both = set(old_rows) & set(new_rows)
        moved_by = max((abs(float(old_rows[i].get("self_confidence") or 0)
                            - float(new_rows[i].get("self_confidence") or 0)) for i in both),
                       default=0.0)
        said = (f"{len(set(new_rows) - set(old_rows))} rows flagged only here, "
                f"{len(set(old_rows) - set(new_rows))} only in REV (of {len(old_rows)}); "
                f"self-confidence up to {moved_by:.3g} apart")
        # a flag is a threshold on the probabilities: with each of them within the
        # tolerance, a flag that differs sat on its threshold
        return FileDiff(name, said, probs_within)
    if name.endswith(".json"):
        return json_diff(name, old, new, tolerance, *moved)
    if name.endswith(".tsv"):
        return table_diff(name, old, new, tolerance)
    if name.endswith(".safetensors"):
        return weights_diff(name, old, new)
    return FileDiff(name, f"bytes differ ({len(old)} and {len(new)} bytes)", False)


def _record(repo: Path, rev: str, stage: str) -> dict[str, Any] | None:
    """The provenance record of ``stage`` at ``rev`` (its machine facts joined in here)."""
    path = (PROVENANCE_DIR / f"{stage}.json").as_posix()
    text = read_at(repo, rev, path)
    try:
        record = (None if not text else with_machine_facts(text, repo / machine_path(path))
                  if rev == "workspace" else json.loads(text))
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def listing(paths: list[str], limit: int = 8) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(visible(p) for p in paths[:limit]) + more


def judge_groups(repo: Path, rev_group: str, here_group: str) -> Verdict:
    """REV's runs over seeds against this machine's, MLPerf's way: each group reported by
    its olympic mean (the mean less the highest and the lowest run, where there are at
    least 4) and judged by Welch's t-test (:func:`lorasent.statistics.group_comparison`)
    on their accuracies: consistent when it finds no detectable difference.

    Args:
        rev_group, here_group: experiments or revisions, as ``lorasent compare`` takes a
            group: comma-separated, or a pattern such as ``'ref-seed*'``.

    Raises:
        LorasentError: a group of fewer than 2 runs, or a run without metrics/eval.json.
    """
    from lorasent.review.collect import expand_group

    accuracies, damaged = [], []
    for spec in (rev_group, here_group):
        revs = expand_group(repo, spec, command="reproduce")
        check_revisions(repo, {"a seed group": revs}, command="reproduce")
        commits = resolve_commits(repo, *revs)
        values = []
        for rev in revs:
            text = read_at(repo, commits[rev], "metrics/eval.json")
            if not text:
                raise LorasentError(f"reproduce: {visible(rev)} has no metrics/eval.json")
            predictions = read_at(repo, commits[rev], EVAL_PREDICTIONS.as_posix())
            if predictions is not None:  # the accuracy judged follows from them
                pairs = {EVAL_METRICS.as_posix(): (text.encode(), text.encode()),
                         EVAL_PREDICTIONS.as_posix(): (predictions.encode(),
                                                       predictions.encode())}
                damaged += [d for d in damage(pairs, {}, rev, TOLERANCE)
                            if d.startswith(f"{visible(rev)}'s ")]  # one side is enough
            try:
                values.append(float(json.loads(text)["accuracy"]))
            except (ValueError, KeyError, TypeError):
                damaged.append(f"{visible(rev)}'s metrics/eval.json holds no accuracy")
        if len(values) < 2:
            raise LorasentError(f"reproduce: the group {visible(spec)} holds {len(values)} run; "
                                "a group over seeds needs at least 2 (lorasent seeds -n 3)")
        accuracies.append(values)
    if damaged:
        return Verdict("different", rev_group, "",
                       "damaged (not what it claims, so no accuracy of it is judged): "
                       + "; ".join(damaged) + "; remake those runs (dvc exp run) or judge "
                       "groups whose files are whole")
    test = group_comparison("accuracy", *accuracies)

    def olympic(values: Sequence[float]) -> float:
        kept = sorted(values)[1:-1] if len(values) >= 4 else list(values)
        return float(np.mean(kept))

    said = (f"accuracy over seeds: {visible(rev_group)} {test.spread(test.a)}, olympic mean "
            f"{olympic(test.a):.4f}; {visible(here_group)} {test.spread(test.b)}, olympic mean "
            f"{olympic(test.b):.4f}; Δ {delta_text(test.delta)}")
    if test.p_value is None:
        return Verdict("different", rev_group, "", f"{said}; neither group varies over its "
                       "seeds, so Welch's t-test is undefined")
    said += f", Welch's t-test {p_text(test.p_value)}"
    if test.significant:
        return Verdict("different", rev_group, "", f"{said}: the groups differ")
    return Verdict("consistent", rev_group, "", f"no detectable difference over seeds: {said}")
