"""The grid of ``lorasent sweep``, ``lorasent learning-curve`` and ``lorasent seeds``: the
runs that ``--name``, ``--seeds`` and ``-S`` make, checked before anything runs.

Each ``-S key=v1,v2`` expands as ``dvc exp run --queue -S`` expands it (Hydra's override
grammar, which DVC uses: ``a,b``, ``range(1,4)``, ``choice(a,b)``; quote a value that holds
a comma) and is crossed with ``--seeds`` seeds ``base.seed``, ``base.seed + 1``, ...
(HEAD's ``base.seed``). Each grid point is a group, ``<name>-<key><value>...`` (the last
part of each swept key), and its runs are ``<group>-seed<S>`` (:func:`plan`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lorasent.errors import LorasentError
from lorasent.params import ParamsError, merge, parse_params, read_yaml


@dataclass(frozen=True)
class RunSpec:
    """One run of the grid: the experiment's name, its group, seed and params changes
    (``key=value`` as ``dvc exp run -S`` takes them, ``base.seed`` last)."""

    name: str
    group: str
    seed: int
    sets: tuple[str, ...]



def _overrides(sets: Sequence[str], command: str = "sweep", grid: bool = True) -> list[Any]:
    """``sets`` parsed by Hydra's override parser, as DVC parses ``-S``.

    ``grid``: several values of a key make a grid axis (``sweep``, ``learning-curve``);
    False: each key takes one value (``seeds``: every run takes the same params).

    Raises:
        LorasentError: a setting Hydra cannot parse, of a file other than params.yaml, of
            ``base.seed`` (what the runs vary), that adds or deletes a key, a key given
            twice (the second would silently replace the first: DVC applies them in
            turn), or, without ``grid``, several values of a key; one line, prefixed
            ``command``.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    verb = "swept" if grid else "set"
    plain = []
    for s in sets:
        file, sep, rest = s.partition(":")
        if sep and "=" not in file:
            if file != "params.yaml":
                raise LorasentError(f"{command}: -S {s}: only params.yaml keys can be {verb}")
            s = rest
        plain.append(s)
    try:
        parsed = OverridesParser.create().parse_overrides(plain)
    except HydraException as err:
        raise LorasentError(f"{command}: -S: {' '.join(str(err).split())}") from None
    given: dict[str, list[Any]] = {}
    for s, o in zip(sets, parsed, strict=True):
        if o.key_or_group == "base.seed":
            raise LorasentError(f"{command}: -S base.seed is what the runs vary; set the first "
                                "seed in params.yaml and the number with --seeds"
                                if grid else f"{command}: -S base.seed is what the runs vary; "
                                "set the first seed in params.yaml instead")
        if o.is_add() or o.is_delete() or o.is_force_add():
            raise LorasentError(f"{command}: -S {s}: only changes of keys params.yaml has")
        if o.value_type == ValueType.GLOB_CHOICE_SWEEP:
            raise LorasentError(f"{command}: -S {s}: a glob sweep has no values here; list them")
        if not grid and o.is_sweep_override():
            raise LorasentError(f"{command}: -S {s}: every run takes one value of a key; "
                                f"`lorasent sweep -S {s}` runs each value over seeds")
        given.setdefault(o.key_or_group, []).append(o)
    for key, twice in given.items():
        if len(twice) > 1:
            raise LorasentError(_twice(command, key, twice, grid))
    return parsed


def _twice(command: str, key: str, overrides: Sequence[Any], grid: bool) -> str:
    """The one line that refuses ``key`` given in several ``-S``: each value it was given,
    and (``grid``) the one ``-S`` that makes them a grid axis."""
    values = [v for o in overrides for v in (o.sweep_string_iterator() if o.is_sweep_override()
                                             else [o.get_value_element_as_str()])]
    said = f"{command}: -S {key} is given {len(overrides)} times ({', '.join(values)})"
    if not grid:
        return f"{said}: every run takes one value of a key; give it once"
    axis = (f"-S {key}={','.join(dict.fromkeys(values))}"
            if all(re.fullmatch(r"[\w.+-]+", v) for v in values) else f"-S {key}=a,b")
    return f"{said}: give it once, its values as one grid axis: {axis}"



def _values(o: Any) -> list[str]:
    """An override's values as written: each of a sweep's, or its one value."""
    return list(o.sweep_string_iterator()) if o.is_sweep_override() else [
        o.get_value_element_as_str()]


def _parsed(raw: dict[str, Any], sets: Sequence[str]) -> Any:
    """The params ``raw`` with ``sets`` applied, validated; None when they are refused."""
    try:
        return parse_params(with_sets(raw, sets), "params.yaml")
    except (ParamsError, LorasentError):
        return None


def one_value_each(params_text: str, sets: Sequence[str], command: str = "sweep"
                   ) -> tuple[list[str], list[str]]:
    """``sets`` with each grid axis's values that equal an earlier value of it once
    parsed and validated as params (``-S train.lora.r=8,08``: both train r = 8; ``1e-4,
    0.0001``) left out, and one line per such axis that says so. A value is parsed on
    ``params_text`` with each combination of the other keys' values (:func:`with_sets`,
    then the params' validation: ``-S split.validation_size=0,0.0 -S
    train.eval_strategy=no`` is valid only together); two values are equal when their
    params are in every combination; one the params refuse in all of them is compared as
    written (the grid is then refused by :func:`check_params`). ``sets`` must parse
    (:func:`_overrides`)."""
    raw = read_yaml(params_text, "params.yaml")
    overrides = _overrides(sets, command)
    axes = {o.key_or_group: [f"{o.key_or_group}={v}" for v in _values(o)] for o in overrides}
    kept_sets: list[str] = []
    notes: list[str] = []
    for s, o in zip(sets, overrides, strict=True):
        if not o.is_sweep_override():
            kept_sets.append(s)
            continue
        key = o.key_or_group
        contexts = list(itertools.product(*(v for k, v in axes.items() if k != key)))
        kept: list[tuple[str, Any]] = []
        merged: dict[str, list[str]] = {}
        for value in o.sweep_string_iterator():
            parsed: Any = tuple(_parsed(raw, [*context, f"{key}={value}"])
                                for context in contexts)
            if all(p is None for p in parsed):
                parsed = value
            same = next((v for v, p in kept if p == parsed), None)
            if same is None:
                kept.append((value, parsed))
            else:
                merged.setdefault(same, []).append(value)
        if not merged:
            kept_sets.append(s)
            continue
        axis = f"{key}={','.join(v for v, _ in kept)}"
        # still an axis with one value left, so that its runs keep their names (s-r8-...)
        kept_sets.append(axis if len(kept) > 1 else f"{key}=choice({kept[0][0]})")
        said = "; ".join(
            f"{value} is given {len(others) + 1} times" if set(others) == {value} else
            f"{' and '.join(dict.fromkeys(others))} equal{'s' * (len(set(others)) == 1)} "
            f"{value} once parsed" for value, others in merged.items())
        notes.append(f"{command}: -S {s}: {said}; equal values are one grid point, so the "
                     f"axis is {axis}")
    return kept_sets, notes


# The experiment names DVC refuses (`dvc exp run -n`): dvc.repo.experiments.utils.
# check_ref_format, which takes refs/exps/<2 hex>/<38 hex>/<name> to git's ref-name rules
# (https://git-scm.com/docs/git-check-ref-format, as dulwich.refs.check_ref_format, DVC's
# git backend for it, applies them) and refuses a "/". A name starting with "-" is read
# as an option by dvc's command line.
NAME_RULES = ("git's ref-name rules: no spaces, control characters, '..', '~', '^', ':', '?', "
              "'*', '[', '\\', '@{' or '/', no '.' or '-' at the start, no '.' or '.lock' at "
              "the end")


def check_name(name: str, command: str) -> None:
    """Refuse ``--name`` when the experiments it names, ``<name>-...-seed<S>`` (the rest
    made of letters, digits and ``._+-``), are names DVC refuses (:data:`NAME_RULES`).

    Raises:
        LorasentError: one line naming the name, an experiment name it makes, the rules
            and what to use.
    """
    from dulwich.refs import Ref, check_ref_format

    run = f"{name}-seed0"
    if run.startswith("-") or "/" in run or not check_ref_format(
            Ref(f"refs/exps/00/{'0' * 38}/{run}".encode())):
        raise LorasentError(
            f"{command}: --name {name!r} makes experiment names such as {run!r} that DVC "
            f"refuses ({NAME_RULES}); use letters, digits, '-', '_' and '.'")


def _slug(key: str, value: str) -> str:
    """``train.lora.r``, ``8`` → ``r8``: a group name's part, git-ref safe."""
    text = re.sub(r"[^A-Za-z0-9._+-]+", "_", key.rsplit(".", 1)[-1] + value).strip("._-")
    return re.sub(r"\.{2,}", ".", text)


def plan(name: str, sets: Sequence[str], seeds: int, base_seed: int, *,
         command: str = "sweep", grid: bool = True) -> list[RunSpec]:
    """The runs of the grid ``sets`` × ``seeds`` seeds from ``base_seed``, grid point by
    grid point (in the order of the values given), each point's seeds in order: the one
    check of ``--name``, ``--seeds`` and ``-S`` of ``sweep``, ``learning-curve`` and
    ``seeds`` (``grid=False``: one value per key), before anything runs.

    Raises:
        LorasentError: ``seeds`` < 1, a ``name`` DVC refuses (:func:`check_name`), a bad
            ``-S`` (:func:`_overrides`), or two grid points that would get the same group
            name; prefixed ``command``.
    """
    if seeds < 1:
        raise LorasentError(f"{command}: --seeds {seeds}: at least 1")
    check_name(name, command)
    overrides = _overrides(sets, command, grid)
    axes = [[(o.key_or_group, v) for v in _values(o)] for o in overrides]
    swept = {o.key_or_group for o in overrides if o.is_sweep_override()}
    runs: list[RunSpec] = []
    groups: dict[str, tuple[tuple[str, str], ...]] = {}
    for point in itertools.product(*axes):
        group = "-".join([name, *(_slug(k, v) for k, v in point if k in swept)])
        if group in groups:
            raise LorasentError(f"{command}: {groups[group]} and {point} both make the group "
                                f"name {group}; choose values that differ in letters or "
                                "digits")
        groups[group] = point
        runs += [RunSpec(f"{group}-seed{seed}", group, seed,
                         (*(f"{k}={v}" for k, v in point), f"base.seed={seed}"))
                 for seed in range(base_seed, base_seed + seeds)]
    return runs


def with_sets(raw: dict[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """The params ``raw`` (params.yaml as read) with a run's ``sets`` (``key=value`` each,
    parsed as ``dvc exp run -S`` parses them) applied."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    changes: dict[str, Any] = {}
    for o in OverridesParser.create().parse_overrides(list(sets)):
        *path, last = o.key_or_group.split(".")
        node = changes
        for part in path:
            node = node.setdefault(part, {})
        node[last] = o.value()
    return merge(raw, changes)


def check_params(params_text: str, runs: Sequence[RunSpec], *, command: str = "sweep",
                 one_process: bool = True) -> None:
    """Validate each run's params (``params_text`` with its changes) before anything
    starts, and (``one_process``) that each runs in one process (``base.num_processes:
    1``: a run of a sweep has one GPU).

    Raises:
        LorasentError: the first run whose params are invalid, naming it and the key;
            prefixed ``command``.
    """
    raw = read_yaml(params_text, "params.yaml")
    for run in runs:
        try:
            params = parse_params(with_sets(raw, run.sets), f"params.yaml of run {run.name}")
        except ParamsError as err:
            raise LorasentError(f"{command}: " + "; ".join(
                line.strip() for line in str(err).splitlines())) from None
        if one_process and params.base.num_processes != 1:
            raise LorasentError(
                f"sweep: run {run.name} has base.num_processes {params.base.num_processes}; "
                "a sweep gives each run one GPU and runs the others beside it: set 1")
