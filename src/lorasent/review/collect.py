"""What git and DVC hold of two revisions: the reading half of ``lorasent compare``.

- ``dvc params diff``, ``dvc metrics diff --all`` and ``dvc plots diff`` of A and B;
- each side's committed ``metrics/eval.json`` (:class:`lorasent.contracts.EvalMetrics`),
  ``metrics/baseline.json``, predictions file (read strictly:
  :func:`read_predictions_strict`), test-label audit (``metrics/label_issues.csv``,
  :func:`read_label_issues`), the same two files of each extra test set of its eval.json
  (``metrics/test_sets/<name>/``) and training record (:func:`read_side`);
- whether a side is stale (:func:`workspace_staleness` from ``dvc status``,
  :func:`commit_staleness` from a commit's dvc.lock against its dvc.yaml and params);
- revisions checked before DVC reads them (:func:`check_revisions`: close matches for a
  typo), and groups of experiments by name or pattern (:func:`expand_group`).

:func:`collect` reads all of it and judges it (:func:`lorasent.review.verdict.judge`).
"""

from __future__ import annotations

import csv
import difflib
import fnmatch
import io
import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lorasent.addresses import redact
from lorasent.contracts import EvalMetrics, ValidationMetrics, parse
from lorasent.errors import LorasentError
from lorasent.git import git_bytes, git_or_none
from lorasent.metrics import (
    NoRowIdsError,
    Predictions,
    csv_header,
    csv_rows,
    probability,
    read_predictions,
)
from lorasent.paths import (
    BASELINE_METRICS,
    EVAL_LABEL_ISSUES,
    EVAL_METRICS,
    EVAL_PREDICTIONS,
    EVAL_TEST_SETS,
    PROVENANCE_DIR,
    VALIDATION_METRICS,
)
from lorasent.programs import environment, program
from lorasent.provenance import machine_path, with_machine_facts
from lorasent.review.markup import md_text
from lorasent.review.verdict import LabelIssue, Review, Side, Stale, class_order, judge

WORKSPACE = "workspace"  # DVC's name for the files as they are, uncommitted changes too


@dataclass(frozen=True)
class Comparison:
    """What :func:`collect` read from DVC and git for revision B against A, and the
    review of it: everything the report and a pull request comment show."""

    rev_a: str
    rev_b: str
    commits: dict[str, str]       # {rev: short commit} of those git resolves
    params: dict[str, Any]        # `dvc params diff A B --all --json`
    metrics: dict[str, Any]       # `dvc metrics diff A B --all --json`
    plots: dict[str, Any]         # `dvc plots diff A B --json`'s "data"
    sides: tuple[Side, Side]
    review: Review
    runs: dict[str, dict[str, Any]]  # the dvc.lock of each stale side

    def changed_params(self) -> list[tuple[str, Any, Any]]:
        """``(key, A's value, B's value)`` of each param that differs, sorted by key (DVC
        gives them in no fixed order); keys of files other than params.yaml are
        ``<file>: <key>``."""
        return sorted((key if file == "params.yaml" else f"{file}: {key}", v.get("old"),
                       v.get("new")) for file, keys in self.params.items()
                      for key, v in keys.items() if v.get("old") != v.get("new"))


def collect(repo: Path, rev_a: str, rev_b: str, notes: Sequence[str] = ()) -> Comparison:
    """Read and judge revision ``rev_b`` against ``rev_a`` (single revisions, checked by
    :func:`check_revisions`); ``notes`` go first among the warnings.

    Raises:
        LorasentError, PredictionsFileError: as :func:`compare`.
    """
    notes = list(notes)
    commits = resolve_commits(repo, rev_a, rev_b)
    same = rev_b != WORKSPACE and commits.get(rev_a) == commits.get(rev_b)
    if same and rev_a != rev_b:  # DVC diffs one commit under two names as nothing at all
        notes.append(f"A ({md_text(rev_a)}) and B ({md_text(rev_b)}) are the same commit, "
                     f"{commits[rev_a]}: nothing differs")
    revs = [rev_a] + ([] if rev_b == WORKSPACE else [rev_a if same else rev_b])
    metrics = run_dvc(repo, "metrics", "diff", *revs, "--all", "--json")
    params = run_dvc(repo, "params", "diff", *revs, "--all", "--json")
    plots = run_dvc(repo, "plots", "diff", *revs, "--json").get("data", {})  # {} without plots
    evals = metrics.get(str(EVAL_METRICS), {})
    if not evals:
        raise LorasentError(f"compare: neither {rev_a} nor {rev_b} has {EVAL_METRICS}; "
                            "run the pipeline (dvc repro) and commit its metrics first")
    sides = (read_side(repo, rev_a, commits), read_side(repo, rev_b, commits))
    stale = {side: staleness(repo, rev, commits) for side, rev in (("A", rev_a), ("B", rev_b))}
    review = judge(*sides, class_order(params, evals), stale, notes)
    runs = {side: read_lock(repo, commits.get(rev, rev))
            for side, rev in (("A", rev_a), ("B", rev_b)) if stale[side]}
    return Comparison(rev_a, rev_b, commits, params, metrics, plots, sides, review, runs)


def read_side(repo: Path, rev: str, commits: dict[str, str]) -> Side:
    """What revision ``rev`` committed (``workspace``: the files here): its eval.json
    through :class:`lorasent.contracts.EvalMetrics`, baseline.json, predictions file
    (:func:`read_predictions_strict`; one without row ids is said as why there is no
    paired test), test-label audit (:func:`read_label_issues`; None when not committed),
    training record, validation metrics (:func:`read_validation`), and for each of
    eval.json's ``test_sets`` a :class:`Side` of its predictions and audit
    (``metrics/test_sets/<name>/``). ``commits``: :func:`resolve_commits`'s.

    Raises:
        LorasentError: a file that is not JSON, or an eval.json that is not one
            (naming ``<rev>:<path>`` and the first wrong key).
        PredictionsFileError: a damaged predictions file.
        LabelIssuesFileError: a damaged test-label audit.
    """
    at = rev if rev == WORKSPACE else commits.get(rev, rev)

    def read_json(path: Path) -> Any:
        text = read_at(repo, at, path.as_posix())
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise LorasentError(f"compare: {rev}:{path}: not valid JSON ({err}); rerun its "
                                "stage at that revision (dvc repro) and commit it") from None

    evals = read_json(EVAL_METRICS)
    if evals is not None:
        evals = parse(EvalMetrics, evals, f"compare: {rev}:{EVAL_METRICS}",
                      "rerun evaluate at that revision (dvc repro) and commit its metrics")
    sets = {name: _test_set(repo, at, rev, EVAL_TEST_SETS / name)
            for name in (evals.test_sets if evals else {})}
    return Side(rev, evals, read_json(BASELINE_METRICS),
                *_predictions_at(repo, at, rev, EVAL_PREDICTIONS),
                _train_record(repo, at, rev),
                _label_issues_at(repo, at, rev, EVAL_LABEL_ISSUES), sets,
                read_validation(repo, at))


def read_validation(repo: Path, at: str) -> ValidationMetrics | None:
    """``metrics/validation.json`` at revision ``at`` (``workspace``: the file here) through
    :class:`lorasent.contracts.ValidationMetrics`; None when ``at`` has none (a run made
    before the train stage wrote it) or it is not that contract (damaged): such a run has
    no validation score to be chosen on (:mod:`lorasent.experiments.selection`), and its
    eval.json is still read."""
    text = read_at(repo, at, VALIDATION_METRICS.as_posix())
    if not text:
        return None
    try:
        return ValidationMetrics.model_validate_json(text)
    except ValidationError:
        return None


def _train_record(repo: Path, at: str, rev: str) -> dict[str, Any] | None:
    """Train's provenance record at ``at`` with the machine facts this checkout holds for
    it (:func:`lorasent.provenance.with_machine_facts`: its time, speed and load, when the
    last train run here wrote that same record); None when ``rev`` has none.

    Raises:
        LorasentError: the record is not JSON.
    """
    path = PROVENANCE_DIR / "train.json"
    text = read_at(repo, at, path.as_posix())
    if not text:
        return None
    try:
        return with_machine_facts(text, machine_path(repo / path))
    except json.JSONDecodeError as err:
        raise LorasentError(f"compare: {rev}:{path}: not valid JSON ({err}); rerun its "
                            "stage at that revision (dvc repro) and commit it") from None


def _test_set(repo: Path, at: str, rev: str, folder: Path) -> Side:
    """An extra test set of ``rev``: a :class:`Side` of the predictions file and label
    audit in ``folder``, named as the test split's."""
    return Side(rev, None, None, *_predictions_at(repo, at, rev, folder / EVAL_PREDICTIONS.name),
                None, _label_issues_at(repo, at, rev, folder / EVAL_LABEL_ISSUES.name))


def _predictions_at(repo: Path, at: str, rev: str,
                    path: Path) -> tuple[Predictions | None, str | None]:
    """``(predictions, None)`` of the file ``path`` at ``at`` (:func:`read_at`), read by
    :func:`read_predictions_strict`; ``(None, why)`` when it is absent or has no row ids."""
    text = read_at(repo, at, path.as_posix())
    if text is None:
        return None, f"{rev} has no {path}"
    try:
        return read_predictions_strict(text, f"{rev}:{path}"), None
    except NoRowIdsError as err:  # an older file: the report goes on, unpaired
        return None, str(err)


def _label_issues_at(repo: Path, at: str, rev: str, path: Path) -> dict[str, LabelIssue] | None:
    """:func:`read_label_issues` of the file ``path`` at ``at``; None when it is absent."""
    text = read_at(repo, at, path.as_posix())
    return None if text is None else read_label_issues(text, f"{rev}:{path}")


class LabelIssuesFileError(LorasentError):
    """A test-label audit (``metrics/label_issues.csv``) that is not as evaluate writes
    it: the message names the file (revision and path) and the line."""


LABEL_ISSUE_COLUMNS = ("rank", "id", "actual", "suggested", "self_confidence")


def read_label_issues(text: str, source: str) -> dict[str, LabelIssue]:
    """A test-label audit, ``rank,id,actual,suggested,self_confidence`` (columns found by
    name), as ``{row id: issue}`` in rank order; a header alone is an audit that flagged
    no row. Read as strictly as :func:`read_predictions_strict`, with the same checks of
    each row (:func:`lorasent.metrics.csv_rows`, which also takes off the quote that
    neutralised a formula-like cell: :func:`lorasent.tables.spreadsheet_text`).

    Args:
        source: the file as the user names it, ``<rev>:metrics/label_issues.csv``.

    Raises:
        LabelIssuesFileError: an empty file; a column named twice or missing; a blank
            line; a row with another field count than the header; an empty cell; an id
            on two lines; a rank that is not the row's place (1, 2, ...); a
            self_confidence that is not a probability. One line naming ``source``, the
            line and the id.
    """
    reader = csv.reader(io.StringIO(text))
    header = csv_header(reader, source, LabelIssuesFileError)
    missing = [name for name in LABEL_ISSUE_COLUMNS if name not in header]
    if missing:
        raise LabelIssuesFileError(
            f"{source} line 1: no column {', '.join(missing)} in the header {','.join(header)};"
            f" expected {','.join(LABEL_ISSUE_COLUMNS)} as evaluate writes it: rerun its stage "
            "(dvc repro)")
    col = {name: header.index(name) for name in LABEL_ISSUE_COLUMNS}
    found: dict[str, LabelIssue] = {}
    for where, row_id, row in csv_rows(reader, header, source, LabelIssuesFileError,
                                       "a test-label audit has one row per flagged test row"):
        rank = row[col["rank"]]
        if rank != str(len(found) + 1):
            raise LabelIssuesFileError(f"{where}: rank {rank!r} where {len(found) + 1} was "
                                       "due (rows are ranked 1, 2, ... in order); rerun its "
                                       "stage (dvc repro)")
        found[row_id] = LabelIssue(
            len(found) + 1, row_id, row[col["actual"]], row[col["suggested"]],
            probability(row[col["self_confidence"]], "self_confidence", where,
                        LabelIssuesFileError))
    return found


def read_predictions_strict(text: str, source: str) -> Predictions:
    """:func:`lorasent.metrics.read_predictions`: a damaged file is one error. A file of
    one row is read as it is (evaluate scores such a set, without intervals): the
    verdict says that it is too few for a paired test
    (:func:`lorasent.review.verdict.too_few_rows`), and the comparison goes on.

    Raises:
        NoRowIdsError, PredictionsFileError: as :func:`lorasent.metrics.read_predictions`.
    """
    return read_predictions(text, source)


def expand_group(repo: Path, spec: str, command: str = "compare") -> list[str]:
    """The revisions of one side: ``spec`` split at commas, patterns expanded against the
    experiments' names (``dvc exp list --all-commits --name-only``); a ``spec`` that git
    resolves whole (a tag or branch whose name holds a comma) is that one revision.

    Raises:
        LorasentError: a pattern no experiment's name matches; the message starts with
            ``command``, the command whose argument it is.
    """
    if "," in spec and spec in resolve_commits(repo, spec):
        return [spec]
    revs: list[str] = []
    names: list[str] | None = None
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if not any(c in part for c in "*?["):
            revs.append(part)
            continue
        if names is None:
            listed = run_dvc(repo, "exp", "list", "--all-commits", "--name-only", as_json=False,
                             command=command)
            names = sorted(set(listed.split()))
        matched = fnmatch.filter(names, part)
        if not matched:
            raise LorasentError(f"{command}: no experiment name matches {part!r}; experiments: "
                                f"{_listing(names)} (`dvc exp list --all-commits --name-only`)")
        revs += matched
    return list(dict.fromkeys(revs)) or [spec]


_MISSING = object()  # a params key a file does not hold


_NOT_RUN = ("deleted", "not in cache")  # a file that is not here: not pulled, not stale


def workspace_staleness(repo: str | Path = ".") -> Stale | None:
    """The workspace's out-of-date stages, from one ``dvc status --json``; None when it is
    clean, or when DVC cannot tell (no pipeline here).

    Outputs and deps that are only missing (not pulled, ``deleted`` / ``not in cache``)
    do not count: they leave the committed metrics as they were made.
    """
    try:
        status = run_dvc(Path(repo), "status", "--json")
    except LorasentError:
        return None
    stages: list[str] = []
    changed: list[str] = []
    for stage, entries in (status or {}).items():
        found = []
        for entry in entries:
            if isinstance(entry, str):
                found += [] if entry == "always changed" else [entry.removeprefix("changed ")]
                continue
            for kind, files in entry.items():
                for path, state in files.items():
                    if isinstance(state, dict):  # a params file: {key: state}
                        found += [f"{path} {key}" for key in state]
                    elif state not in _NOT_RUN:
                        found.append(path if kind == "changed deps" else f"{path} (output)")
        if found:
            stages.append(stage)
            changed += found
    return Stale(stages, list(dict.fromkeys(changed)), "`dvc status`") if stages else None


def read_at(repo: Path, rev: str, path: str) -> str | None:
    """``path`` as ``rev`` holds it (``workspace``: the file here); None when absent."""
    if rev == WORKSPACE:
        return (repo / path).read_text(encoding="utf-8") if (repo / path).is_file() else None
    return git_or_none(repo, "show", f"{rev}:{path}")


def lookup(params: Any, key: str, missing: Any = _MISSING) -> Any:
    """``params[a][b]`` for the DVC key ``a.b``; ``missing`` (by default
    :data:`_MISSING`) when absent."""
    for part in key.split("."):
        if not isinstance(params, dict) or part not in params:
            return missing
        params = params[part]
    return params


def read_lock(repo: Path, rev: str) -> dict[str, Any]:
    """``rev``'s dvc.lock, ``{}`` when it has none."""
    from lorasent.params import read_yaml

    text = read_at(repo, rev, "dvc.lock")
    lock = read_yaml(text, f"{rev}:dvc.lock") if text else None
    return lock if isinstance(lock, dict) else {}


def ran_with(lock: dict[str, Any], file: str, key: str) -> list[Any]:
    """The values of params ``key`` of ``file`` that ``lock``'s stages ran with."""
    values = []
    for stage in (lock.get("stages") or {}).values():
        for name, value in ((stage.get("params") or {}).get(file) or {}).items():
            found = value if key == name else lookup(value, key[len(name) + 1:]) \
                if key.startswith(f"{name}.") else _MISSING
            if found is not _MISSING:
                values.append(found)
    return values


def commit_staleness(repo: Path, rev: str) -> Stale | None:
    """Whether committed revision ``rev``'s dvc.lock matches its dvc.yaml, params files and
    git-tracked deps (`dvc status` covers only the workspace): each stage's command, the
    params it ran with against the revision's params files, and the md5 of each
    git-tracked file dep against the lock. Deps DVC caches (not in git) are not checked.
    None when the lock matches or ``rev`` has no dvc.yaml."""
    from lorasent.params import read_yaml

    text = read_at(repo, rev, "dvc.yaml")
    pipeline = read_yaml(text, f"{rev}:dvc.yaml") if text else None
    if not isinstance(pipeline, dict):
        return None
    lock = read_lock(repo, rev)
    files: dict[str, Any] = {}

    def params_of(file: str) -> Any:
        if file not in files:
            content = read_at(repo, rev, file)
            files[file] = read_yaml(content, f"{rev}:{file}") if content else {}
        return files[file]

    locked = lock.get("stages") or {}
    deps = {d["path"]: d["md5"] for stage in locked.values() for d in stage.get("deps") or []
            if d.get("hash") == "md5" and not str(d.get("md5", "")).endswith(".dir")}
    md5s = _blob_md5s(repo, rev, list(deps))
    stages, changed = [], []
    for name, spec in (pipeline.get("stages") or {}).items():
        if not isinstance(spec, dict) or "foreach" in spec or "matrix" in spec:
            continue
        ran = locked.get(name)
        if not isinstance(ran, dict):
            stages.append(name)
            changed.append(f"{name} never run")
            continue
        found = [] if spec.get("cmd") == ran.get("cmd") or "${" in str(spec.get("cmd")) \
            else [f"{name} command"]
        declared = [(f, k) for item in spec.get("params") or []
                    for f, keys in ({"params.yaml": [item]} if isinstance(item, str)
                                    else item).items() for k in keys]
        for file, keys in (ran.get("params") or {}).items():
            found += [f"{file} {key}" for key, value in keys.items()
                      if lookup(params_of(file), key) != value]
        found += [f"{file} {key}" for file, key in declared if "${" not in key
                  and key not in ((ran.get("params") or {}).get(file) or {})]
        ran_deps = {d.get("path") for d in ran.get("deps") or []}
        found += [d["path"] for d in ran.get("deps") or []
                  if d.get("path") in md5s and md5s[d["path"]] != deps.get(d["path"])]
        found += [d for d in spec.get("deps") or [] if isinstance(d, str) and d not in ran_deps]
        if found:
            stages.append(name)
            changed += found
    return Stale(stages, list(dict.fromkeys(changed)), "its dvc.lock") if stages else None


def _blob_md5s(repo: Path, rev: str, paths: list[str]) -> dict[str, str]:
    """``{path: md5 of its bytes}`` of the ``paths`` git holds at ``rev`` (one ``git
    cat-file --batch``); paths git does not hold are left out."""
    import hashlib

    if not paths:
        return {}
    out = git_bytes(repo, "cat-file", "--batch",
                    input="".join(f"{rev}:{path}\n" for path in paths).encode()) or b""
    at, found = 0, {}
    for path in paths:
        end = out.index(b"\n", at)
        head = out[at:end].split()
        at = end + 1
        if len(head) == 3 and head[1] == b"blob":
            size = int(head[2])
            found[path] = hashlib.md5(out[at:at + size]).hexdigest()
            at += size + 1
        elif len(head) == 3:  # a tree or another object: skip its bytes
            at += int(head[2]) + 1
    return found


def staleness(repo: Path, rev: str, commits: dict[str, str]) -> Stale | None:
    return (workspace_staleness(repo) if rev == WORKSPACE
            else commit_staleness(repo, commits.get(rev, rev)))


def run_dvc(repo: Path, *args: str, as_json: bool = True, command: str = "compare") -> Any:
    """``dvc args`` in ``repo``: its output parsed as JSON (``as_json``) or as text.

    Raises:
        LorasentError: dvc failed; the message starts with ``command`` and ends with
            dvc's last lines.
    """
    done = subprocess.run([program("dvc"), *args], cwd=repo, capture_output=True, text=True,
                          env=environment())
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        # dvc's lines may name a remote (exp pull <git remote>): no password, no token
        raise LorasentError(redact(f"{command}: `dvc {' '.join(args)}` failed in "
                                   f"{repo.resolve()}: " + " ".join(detail[-3:])))
    return json.loads(done.stdout or "{}") if as_json else done.stdout


def check_revisions(repo: Path, sides: dict[str, list[str]], command: str = "compare") -> None:
    """Check that git or DVC knows each revision of each side, before DVC reads them, so
    that a typo gets the names it could have meant rather than DVC's error.

    Args:
        sides: ``{the side's name in the message: its revisions}``.
        command: the command whose arguments they are; each message starts with it
            (``reproduce: unknown revision ...``).

    Raises:
        LorasentError: ``repo`` is not in a git repository; a revision is neither a
            commit, branch or tag (``git rev-parse --verify``) nor an experiment (``dvc
            exp list --all-commits --name-only``): the message gives the close matches
            first, then the experiments, branches and tags, and says when the clone is
            shallow (``git fetch --unshallow``).
    """
    revs = {rev: side for side, group in sides.items() for rev in group if rev != WORKSPACE}
    unknown = [rev for rev in revs if rev not in resolve_commits(repo, *revs)]
    if not unknown:
        return
    if git_lines(repo, "rev-parse", "--git-dir") is None:
        named = " and ".join(sides)
        raise LorasentError(f"{command}: {repo.resolve()} is not in a git repository; {named} "
                            f"{'are' if len(sides) > 1 else 'is'} read from git: run {command} "
                            "in the project's folder")
    program("dvc")  # a missing dvc is said as such, not as a repository without experiments
    try:
        listed = run_dvc(repo, "exp", "list", "--all-commits", "--name-only", as_json=False,
                         command=command)
    except LorasentError:  # not a DVC repository: no experiments
        listed = ""
    experiments = sorted(set(listed.split()))
    unknown = [rev for rev in unknown if rev not in experiments]
    if not unknown:
        return
    branches, tags = (git_lines(repo, "for-each-ref", "--format=%(refname:short)", refs) or []
                      for refs in ("refs/heads", "refs/tags"))
    names = list(dict.fromkeys([*experiments, *branches, *tags]))
    parts = []
    for rev in unknown:
        close = difflib.get_close_matches(rev, names, n=3)
        parts.append(f"unknown revision {rev!r} ({revs[rev]})" + (
            f"; did you mean {' or '.join(repr(name) for name in close)}?" if close else
            ": not a commit, branch, tag or experiment here."))
    shallow = (git_lines(repo, "rev-parse", "--is-shallow-repository") or [""])[0] == "true"
    raise LorasentError(
        f"{command}: " + "; ".join(parts) + f" Experiments: {_listing(experiments)}; "
        f"branches: {_listing(branches)}; tags: {_listing(tags)} (`git log --oneline` "
        "lists the commits)" + (
            ". This clone is shallow: it lacks the older commits; `git fetch --unshallow` "
            "fetches them" if shallow else ""))


def _listing(names: list[str], limit: int = 20) -> str:
    if not names:
        return "none"
    more = f", … ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def git_lines(repo: Path, *args: str) -> list[str] | None:
    """The lines ``git args`` prints in ``repo``, None when it fails
    (:func:`lorasent.git.git_or_none`)."""
    out = git_or_none(repo, *args)
    return out.splitlines() if out is not None else None


def resolve_commits(repo: Path, *revs: str) -> dict[str, str]:
    """``{rev: short commit}`` for the revisions git resolves, experiments included
    (their refs are ``refs/exps/<xx>/<baseline>/<name>``)."""
    found = {}
    for rev in revs:
        for cmd in (["rev-parse", "--short", "--verify", "-q", f"{rev}^{{commit}}"],
                    ["for-each-ref", "--format=%(objectname:short)", f"refs/exps/*/*/{rev}"]):
            lines = git_lines(repo, *cmd)
            if lines:
                found[rev] = lines[0].strip()
                break
    return found
