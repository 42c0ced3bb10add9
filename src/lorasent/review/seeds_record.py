"""The seeds record, ``metrics/seeds.json``: what ``lorasent seeds`` measured over the
seeds of one set of params, kept in git beside the committed run.

One run is one seed. ``lorasent seeds`` (:mod:`lorasent.experiments.seeds`) runs the
params over several and judges the adapter against each supervised reference as groups;
it writes that here (:func:`write_seeds_record`) when at least 2 runs succeeded, with
the params it ran (less ``base.seed``) and their SHA-256 (:func:`params_sha256`). A
reader takes the record only while the params are the same (:func:`committed_seeds_record`):
``lorasent metrics`` (the workspace's) and the pull-request comment (B's commit's) then
give the group's verdict first and call the committed run's own verdict "this seed
(N)", so that one seed's "better" never reads as the verdict when the group finds no
detectable difference (:func:`seed_line`).

The file is no DVC output (no stage declares it; ``dvc status`` does not look at it);
it is strict JSON, written atomically (:func:`lorasent.atomic.write_json`), and never
replaces a file that is not a seeds record (:func:`check_writable`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from lorasent.atomic import write_json
from lorasent.errors import LorasentError
from lorasent.params import ParamsError, read_yaml
from lorasent.reference_registry import BY_NAME
from lorasent.review.collect import WORKSPACE, read_at

SEEDS_RECORD = Path("metrics/seeds.json")
FORMAT_KEY = "lorasent_seeds_record"  # the key that makes a JSON object a seeds record
FORMAT_VERSION: Literal[1] = 1        # its value: the version of the layout below
NO_DIFFERENCE = "no detectable difference"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Spread(_Strict):
    """Accuracies over seeds (fractions in [0, 1]): each, their mean and sample standard
    deviation (ddof 1; None for one value)."""

    values: list[float]
    mean: float
    sd: float | None


class SeedRunRecord(_Strict):
    """One run: its experiment, ``base.seed``, DVC's status, and its test accuracy and
    macro-F1 (``metrics/eval.json``) and validation accuracy (``metrics/validation.json``),
    fractions; None where the run has none (a failed run, no validation split)."""

    experiment: str
    seed: int
    status: str
    test_accuracy: float | None
    test_macro_f1: float | None
    validation_accuracy: float | None


class ReferenceRecord(_Strict):
    """The adapter against one supervised reference over the seeds
    (:class:`lorasent.experiments.seeds.ReferenceOverSeeds`).

    Attributes:
        name: the reference's key (:data:`lorasent.reference_registry.SUPERVISED`).
        seeds: the runs that fitted it.
        reference, adapter: its and the adapter's test accuracy in those runs.
        test: ``Welch's t-test``, ``one-sample t-test``; None in fewer than 2 runs.
        p_value: that test's p; None without a test or where neither side varies.
        outcome: the group's word: ``better``, ``worse`` (only at p < 0.05),
            ``no detectable difference``, ``cannot be tested``, ``no group test``.
        verdict: the group's sentence, as ``lorasent seeds`` prints it.
        paired: each of those runs' paired verdict word (McNemar), None without one.
    """

    name: str
    seeds: list[int]
    reference: Spread
    adapter: Spread
    test: str | None
    p_value: float | None
    outcome: str
    verdict: str
    paired: list[str | None]

    @property
    def short(self) -> str:
        """How a sentence names it (the registry's ``short``; its key if unknown)."""
        return BY_NAME[self.name].short if self.name in BY_NAME else self.name


class SeedsRecord(_Strict):
    """``metrics/seeds.json``. ``params``: the params every run took (params.yaml with the
    ``-S`` changes) less ``base.seed``; ``params_sha256``: :func:`params_sha256` of them;
    ``strongest``: the references of the highest mean accuracy over the seeds (several
    on a tie); ``not_fitted``: ``{reference: why}`` of those fitted in no run."""

    lorasent_seeds_record: Literal[1]
    name: str
    params_sha256: str
    params: dict[str, Any]
    runs: list[SeedRunRecord]
    references: list[ReferenceRecord]
    strongest: list[str]
    not_fitted: dict[str, str]

    @property
    def seeds(self) -> list[int]:
        """The seeds of the runs that succeeded (those with a test accuracy)."""
        return [run.seed for run in self.runs if run.test_accuracy is not None]

    def reference(self, name: str) -> ReferenceRecord | None:
        return next((r for r in self.references if r.name == name), None)


def params_less_seed(params: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``params`` (params.yaml as :func:`lorasent.params.read_yaml` reads
    it) without ``base.seed``, the one param a group of seeds varies."""
    out = copy.deepcopy(dict(params))
    if isinstance(out.get("base"), dict):
        out["base"].pop("seed", None)
    return out


def _canonical(params: Mapping[str, Any]) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8 characters as they are, strict
    (no NaN); a value JSON has no type for (a YAML date) as its ``str``."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False, default=str)


def params_sha256(params: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the canonical JSON (:func:`_canonical`, UTF-8) of
    :func:`params_less_seed` of ``params``: equal for params that differ only in
    ``base.seed``, in key order or in YAML's spelling (``2.0e-4`` and ``0.0002``)."""
    return hashlib.sha256(_canonical(params_less_seed(params)).encode("utf-8")).hexdigest()


def stored_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`params_less_seed` as the record stores it (JSON's values), so that the
    stored params hash to the stored :func:`params_sha256`."""
    value: dict[str, Any] = json.loads(_canonical(params_less_seed(params)))
    return value


def check_writable(path: Path = SEEDS_RECORD) -> None:
    """Refuse to replace ``path`` unless it is absent or a seeds record (a JSON object
    with :data:`FORMAT_KEY`: this command wrote it, whatever its version or damage).

    Raises:
        LorasentError: ``path`` holds something else (or is a folder); one line naming it.
    """
    if not path.exists():
        return
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        found = None
    if not (isinstance(found, dict) and FORMAT_KEY in found):
        raise LorasentError(f"seeds: {path} exists and is not a seeds record (no "
                            f"{FORMAT_KEY!r} key), so it is not replaced; move it away and "
                            "run again")


def write_seeds_record(record: SeedsRecord, path: Path = SEEDS_RECORD) -> None:
    """Write ``record`` to ``path`` as strict JSON, whole or not at all.

    Raises:
        LorasentError: as :func:`check_writable`.
    """
    check_writable(path)
    write_json(path, record.model_dump(mode="json"))


def parse_seeds_record(text: str, source: str) -> SeedsRecord:
    """``text`` as a seeds record, its params checked against their hash.

    Raises:
        LorasentError: not JSON, not a seeds record, a key missing or of the wrong
            type, or params that do not hash to ``params_sha256``; one line naming
            ``source``.
    """
    try:
        record = SeedsRecord.model_validate_json(text)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise LorasentError(f"{source}: not a seeds record: {where}: {first['msg']}") from None
    if params_sha256(record.params) != record.params_sha256:
        raise LorasentError(f"{source}: params_sha256 {record.params_sha256[:12]}... is not "
                            "the hash of its params (edited by hand?)")
    return record


def params_at(repo: Path = Path("."), at: str = WORKSPACE) -> dict[str, Any] | None:
    """params.yaml at revision ``at`` (``workspace``: the file here), as read by
    :func:`lorasent.params.read_yaml`; None when absent or not a YAML mapping."""
    text = read_at(repo, at, "params.yaml")
    try:
        params = read_yaml(text, "params.yaml") if text else None
    except ParamsError:
        return None
    return params if isinstance(params, dict) else None


def committed_seeds_record(params: Mapping[str, Any] | None, repo: Path = Path("."),
                           at: str = WORKSPACE,
                           warn: Callable[[str], object] = lambda line: None,
                           source: str | None = None) -> SeedsRecord | None:
    """The seeds record at revision ``at`` (:data:`SEEDS_RECORD`; ``workspace``: the file
    here) whose ``params_sha256`` is :func:`params_sha256` of ``params``; None when there
    is none, ``params`` is None, or it is of other params. A damaged record is None too,
    and ``warn`` gets one line saying so and what to do, naming the file as ``source``
    (by default ``metrics/seeds.json``, ``<at>:metrics/seeds.json`` at a commit)."""
    if source is None:
        source = str(SEEDS_RECORD) if at == WORKSPACE else f"{at}:{SEEDS_RECORD}"
    try:
        text = read_at(repo, at, SEEDS_RECORD.as_posix())
    except UnicodeDecodeError as err:
        text = None
        warn(f"{source}: not UTF-8 ({err.reason} at byte {err.start}); ignored: no verdict "
             "over seeds (`make seeds` writes it again)")
    if text is None or params is None:
        return None
    try:
        record = parse_seeds_record(text, source)
    except LorasentError as err:
        warn(f"{err}; ignored: no verdict over seeds (`make seeds` writes it again)")
        return None
    return record if record.params_sha256 == params_sha256(params) else None


def seed_of(params: Mapping[str, Any] | None) -> int | None:
    """``base.seed`` of ``params`` (as read); None where it is not an integer."""
    base = (params or {}).get("base")
    seed = base.get("seed") if isinstance(base, dict) else None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _seeds_text(seeds: list[int]) -> str:
    return ", ".join(map(str, seeds))


def group_line(record: SeedsRecord, source: str = str(SEEDS_RECORD)) -> str:
    """The group's verdict against the strongest reference over the seeds, e.g. ``over 3
    seeds (42, 43, 44; metrics/seeds.json), against the strongest reference, fine-tuned
    encoder (mean accuracy 0.7250): no detectable difference (Welch's t-test p = 0.41)``;
    a tie names each tied reference and its verdict."""
    strongest = [r for name in record.strongest if (r := record.reference(name))]
    head = f"over {len(record.seeds)} seeds ({_seeds_text(record.seeds)}; {source})"
    if not strongest:
        return f"{head}: no supervised reference was fitted in any run"
    if len(strongest) == 1:
        best = strongest[0]
        return (f"{head}, against the strongest reference, {best.short} (mean accuracy "
                f"{best.reference.mean:.4f}): {best.verdict}")
    verdicts = "; ".join(f"against {r.short} {r.verdict}" for r in strongest)
    return (f"{head}, the strongest references tie, "
            f"{' and '.join(r.short for r in strongest)} (mean accuracy "
            f"{strongest[0].reference.mean:.4f}): {verdicts}")


def seed_line(record: SeedsRecord, seed: int | None, verdict: str,
              reference: str | None, word: str | None) -> str:
    """The committed run's own verdict (``verdict``: against ``reference``, its paired
    verdict ``word``) labelled ``this seed (42): ...``; where the word is better or worse
    and the group finds no detectable difference against the same reference, a clause
    says that one seed's word is not the group's."""
    label = f"this seed ({seed})" if seed is not None else "this seed"
    group = record.reference(reference) if reference else None
    if word in ("better", "worse") and group is not None and group.outcome == NO_DIFFERENCE:
        return (f"{label}: {verdict}; one seed's \"{word}\" is not the group's verdict: over "
                f"the seeds against {group.short} there is {NO_DIFFERENCE}")
    return f"{label}: {verdict}"
