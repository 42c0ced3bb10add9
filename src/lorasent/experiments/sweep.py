"""``lorasent sweep``: a grid of params × seeds as Ray tasks, one GPU (or N CPUs) per run,
each run a named DVC experiment.

Usage: ``lorasent sweep -S train.lora.r=4,8 --seeds 3 --name lora-r`` (or ``make sweep``)

The command (:func:`sweep`) checks everything before a run starts, then runs the missing
runs and reads what landed; each step is a module of its own:

- :mod:`~lorasent.experiments.grid`: the runs ``--name``, ``--seeds`` and ``-S`` make
  (Hydra's override grammar, as ``dvc exp run --queue -S``), and their params checked;
- :mod:`~lorasent.experiments.repo_checks`: HEAD clean and on the git remote, and the
  runs that landed before (reused, not run again);
- :mod:`~lorasent.experiments.cluster`: the runs as Ray tasks on a local cluster or the
  one at ``--address``, with Ctrl-C and a lost machine;
- :mod:`~lorasent.experiments.task`: one run, on whichever machine Ray puts it: a clone
  of HEAD, ``dvc exp run``, ``dvc exp push``.

Each grid point is a group, ``<name>-<key><value>...`` (the last part of each swept key),
and its runs are ``<group>-seed<S>``: ``lorasent compare '<group A>-seed*' '<group
B>-seed*'`` compares two groups over seeds, and ``make exp-show`` lists them. The summary
gives each group's mean ± sd and its verdict over seeds against the first group (Welch's
t-test, :func:`lorasent.review.verdict.group_review`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lorasent.addresses import connect_timeout_s
from lorasent.contracts import EvalMetrics, ValidationMetrics
from lorasent.errors import LorasentError
from lorasent.experiments.cluster import sweep_runs
from lorasent.experiments.grid import RunSpec, check_params, one_value_each, plan
from lorasent.experiments.repo_checks import check_repo
from lorasent.experiments.selection import (
    CHOSEN,
    RESULT_COLUMNS,
    choice_lines,
    chosen_row,
    validation_accuracy,
    validation_text,
)
from lorasent.experiments.task import RunResult, device_text, log_place, run_one
from lorasent.git import git
from lorasent.params import parse_params, read_yaml
from lorasent.review.collect import read_side, resolve_commits
from lorasent.review.render import with_interval_of
from lorasent.review.verdict import Side, group_review
from lorasent.statistics import GroupComparison

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SweepRun:
    spec: RunSpec
    result: RunResult
    side: Side | None  # what its experiment committed, once landed

    @property
    def evals(self) -> EvalMetrics | None:
        return self.side.evals if self.side is not None else None

    @property
    def validation(self) -> ValidationMetrics | None:
        return self.side.validation if self.side is not None else None


@dataclass(frozen=True)
class SweepResult:
    runs: list[SweepRun]

    @property
    def failed(self) -> list[SweepRun]:
        return [run for run in self.runs if run.evals is None]

    def groups(self) -> dict[str, list[SweepRun]]:
        out: dict[str, list[SweepRun]] = {}
        for run in self.runs:
            out.setdefault(run.spec.group, []).append(run)
        return out

    def summary(self) -> str:
        """Each run in grid order (device, validation accuracy, test accuracy and
        macro-F1, each with its 95% interval), the run validation chose marked and the
        lines on that choice (:mod:`lorasent.experiments.selection`), each group's mean ±
        sd over its seeds, each group's verdict against the first, and the compare
        command."""
        width = max(len(run.spec.name) for run in self.runs) + 2
        lines = [f"{'experiment':<{width}}{'base.seed':>9}  {'device':<14}"
                 f"{RESULT_COLUMNS}"]
        scores = [validation_accuracy(run.validation) for run in self.runs]
        tested = [run.evals is not None for run in self.runs]
        chosen = chosen_row(scores, tested)
        for i, run in enumerate(self.runs):
            device = "reused" if run.result.status == "reused" else device_text(run.result)
            head = f"{run.spec.name:<{width}}{run.spec.seed:>9}  {device:<14}"
            if run.evals is None:
                why = run.result.error or "its experiment has no metrics/eval.json"
                lines.append(head + f"failed ({why}): log {log_place(run.result)}")
            else:
                mark = f"  {CHOSEN}" if i == chosen else ""
                lines.append(head + f"{validation_text(run.validation):<36}"
                             f"{with_interval_of(run.evals, 'accuracy'):<30}"
                             f"{with_interval_of(run.evals, 'macro_f1')}{mark}")
        lines += choice_lines(scores, tested)
        groups = self.groups()
        lines.append("")
        for group, runs in groups.items():
            done = [run.evals for run in runs if run.evals is not None]
            spread = ("; ".join(f"{label} {GroupComparison.spread([getattr(e, key) for e in done])}"
                                for key, label in (("accuracy", "accuracy"),
                                                   ("macro_f1", "macro-F1")))
                      if len(done) > 1 else
                      f"{len(done)} run with metrics: no spread over seeds")
            lines.append(f"{group}: {spread}")
        names = list(groups)
        reference = [run for run in groups[names[0]] if run.evals is not None]
        for group in names[1:]:
            other = [run for run in groups[group] if run.evals is not None]
            if min(len(reference), len(other)) < 2:
                lines.append(f"{group} against {names[0]}: no verdict, a group has fewer than "
                             "2 runs with metrics (--seeds 2 or more)")
                continue
            review, _ = group_review([run.side for run in reference if run.side],
                                     [run.side for run in other if run.side])
            lines.append(f"{group} against {names[0]}: {review.verdict}")
        lines += [f"WARNING {run.spec.name}: {warning}" for run in self.runs if run.evals
                  for warning in run.evals.warnings]
        if len(names) > 1:
            lines.append(f"Compare two groups: lorasent compare '{names[0]}-seed*' "
                         f"'{names[1]}-seed*'")
        return "\n".join(lines)



def sweep(*, name: str, sets: Sequence[str] = (), seeds: int = 3, repo: Path = Path("."),
          address: str | None = None, num_gpus: int | None = None,
          cpus_per_run: int | None = None, git_remote: str | None = None,
          cache_dir: str | None = None, progress: Progress = lambda line: None,
          runner: Callable[..., RunResult] = run_one,
          checked: Callable[[str, list[RunSpec]], None] | None = None,
          command: str = "sweep", connect_timeout: float | None = None) -> SweepResult:
    """Run the grid ``sets`` × ``seeds`` seeds as Ray tasks and wait for them.

    Args:
        name: the experiments' prefix (:func:`plan`).
        sets: ``-S`` settings, a setting with several values a grid axis.
        seeds: runs per grid point (``base.seed``, ``base.seed + 1``, ... from HEAD).
        address: a Ray cluster (``auto``: the one ``ray start`` started here); None: a
            local cluster for this sweep (``ray.init``), GPUs as Ray detects them.
        num_gpus: declare this many GPUs to the local cluster (GPUs Ray does not detect;
            a fake list on a CPU machine, for tests).
        cpus_per_run: CPUs per run; default 1 beside a GPU, else all of a machine's.
        git_remote: clone from and push to this git remote of the repo (several
            machines); None: this folder.
        cache_dir: the DVC cache of the runs on other machines (a shared filesystem);
            None: one per machine, ``<temp>/lorasent-sweep/dvc-cache``.
        progress: called with a line at each run's change of state.
        runner: the task's function (:func:`run_one`; tests give one that records).
        checked: called with HEAD's commit and the runs to make once the settings and
            the repo are checked, before Ray starts (``lorasent learning-curve`` says
            there how many runs and about how long).
        command: the command the user ran, the prefix of the errors of the checks
            (``learning-curve`` runs a sweep).
        connect_timeout: the seconds each address (the git remote, the default DVC
            remote, here and in each run, and ``address``) gets to connect and give its
            first answer; None: :func:`lorasent.addresses.connect_timeout_s`
            (``LORASENT_CONNECT_TIMEOUT``, else 10).

    Runs of the grid that landed before as experiments of HEAD with the same params
    (:func:`~lorasent.experiments.repo_checks.reusable`) are taken as they are (status
    ``reused``), not run again: the same command run again after a failure or a lost
    machine makes the missing runs.

    Returns:
        every run, in grid order, with its metrics when it landed.

    Raises:
        LorasentError: bad settings or repo state (an experiment of a run's name with
            other params among them), a git remote that does not answer or lacks HEAD,
            or a default DVC remote that refuses this machine or does not answer, within
            ``connect_timeout`` (all before anything runs), no Ray cluster at
            ``address`` (nothing there, or something other than Ray), or Ctrl-C (after
            stopping the runs; landed ones stay).
    """
    from lorasent.run_pipeline import remote_problem

    repo = repo.resolve()
    check_options(command, address=address, num_gpus=num_gpus, cache_dir=cache_dir)
    timeout_s = connect_timeout_s(connect_timeout)
    params_text = git(repo, "show", "HEAD:params.yaml", command=command)
    base_seed = parse_params(read_yaml(params_text, "params.yaml"), "params.yaml").base.seed
    sets, repeated = one_value_each(params_text, sets, command)
    for line in repeated:
        progress(line)
    runs = plan(name, sets, seeds, base_seed, command=command)
    check_params(params_text, runs, command=command)
    commit, url, reuse = check_repo(repo, runs, git_remote, command, timeout_s)
    if problem := remote_problem(repo, timeout_s):  # the runs pull from it, and this command too
        raise LorasentError(f"{command}: {problem}; no run was started")
    todo = [run for run in runs if run.name not in reuse]
    if checked is not None:
        checked(commit, todo)
    results = {exp: RunResult(exp, "reused", "", {}, "", 0.0, 0.0) for exp in reuse}
    if todo:
        if reuse:
            progress(f"{command}: {len(reuse)} of {len(runs)} runs landed before with these "
                     f"params and are reused ({', '.join(reuse)}); {len(todo)} to run")
        results |= sweep_runs(todo, name=name, repo=repo, commit=commit, url=url,
                              address=address, num_gpus=num_gpus, cpus_per_run=cpus_per_run,
                              git_remote=git_remote, cache_dir=cache_dir, progress=progress,
                              runner=runner, timeout_s=timeout_s)
    commits = resolve_commits(repo, *(r.name for r in results.values()
                                      if r.status in ("succeeded", "reused")))
    return SweepResult([SweepRun(spec, results[spec.name],
                                 read_side(repo, spec.name, commits)
                                 if spec.name in commits else None) for spec in runs])


def check_options(command: str, *, address: str | None, num_gpus: int | None,
                  cache_dir: str | None) -> None:
    """The cluster options that can be checked before Ray starts.

    Raises:
        LorasentError: ``--num-gpus`` with ``--address`` (a cluster declares its own), or a
            ``--cache-dir`` that is not an absolute path (each run's ``dvc cache dir
            --local`` would take it from its own clone's folder).
    """
    if address is not None and num_gpus is not None:
        raise LorasentError(f"{command}: --num-gpus declares the GPUs of a local cluster; a "
                            "cluster at --address has its own (ray start --num-gpus)")
    if cache_dir is not None and not Path(cache_dir).is_absolute():
        raise LorasentError(f"{command}: --cache-dir {cache_dir}: give an absolute path (a "
                            "folder every machine of the cluster sees there); a relative one "
                            "would be taken from each run's clone")
