"""``lorasent seeds``, ``sweep`` and ``learning-curve``: the commands that run experiments
(DVC's queue, or Ray across machines)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from lorasent.command_errors import user_errors
from lorasent.commands.options import CONNECT_SECONDS, FiniteFloat
from lorasent.errors import LorasentError
from lorasent.params import load_params


@click.command()
@click.option("-n", "n", default=3, show_default=True,
              help="Runs, at least 2: base.seed, base.seed + 1, ... (from params.yaml).")
@click.option("--name", default="seeds", show_default=True,
              help="Experiments are named <NAME>-seed<S>.")
@click.option("-S", "--set-param", "sets", multiple=True, metavar="KEY=VALUE",
              help="A params change for every run, as `dvc exp run -S` takes it.")
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="Experiments run at once (`dvc queue start -j`).")
@click.option("--params", "params_path", default="params.yaml", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Params whose base.seed is the first seed.")
@user_errors
def seeds(n: int, name: str, sets: tuple[str, ...], jobs: int, params_path: Path) -> None:
    """Run the params over N seeds as queued DVC experiments; print mean ± sd.

    Waits for the queue. Then `lorasent compare 'A-seed*' 'B-seed*'` compares two groups.
    With at least 2 runs done, writes metrics/seeds.json (the params less base.seed, each
    run, the verdicts over the seeds): commit it, and `lorasent metrics` and the
    pull-request comment give its verdict first while params.yaml is those params. An
    existing metrics/seeds.json that is not such a record is refused before anything runs.
    """
    from lorasent.experiments.seeds import run_seeds
    from lorasent.review.seeds_record import SEEDS_RECORD, check_writable, write_seeds_record

    check_writable(SEEDS_RECORD)
    result = run_seeds(n=n, name=name, sets=sets, jobs=jobs,
                       base_seed=load_params(params_path).base.seed,
                       progress=lambda line: click.echo(line, err=True))
    click.echo(result.summary())
    record = result.record()
    if record is not None:
        write_seeds_record(record, SEEDS_RECORD)
        click.echo(f"wrote {SEEDS_RECORD}: commit it, and `lorasent metrics` and the "
                   "pull-request comment give the verdict over these seeds first while "
                   "params.yaml (less base.seed) is these params")
    if any(run.evals is None for run in result.runs):
        sys.exit(1)


def _ray_options(command: Callable[..., None]) -> Callable[..., None]:
    """The Ray cluster options of ``sweep`` and ``learning-curve`` (which runs a sweep)."""
    for option in reversed((
            click.option("--address", help="A Ray cluster to run on (`auto`: the one `ray "
                         "start --head` started here)  [default: a local cluster for this "
                         "sweep]"),
            click.option("--cpus-per-run", type=click.IntRange(min=1),
                         help="CPUs (and torch threads) per run  [default: 1 beside a GPU; all "
                              "of a machine's without GPUs]"),
            click.option("--num-gpus", type=click.IntRange(min=0),
                         help="GPUs of the local cluster, when Ray does not detect them."),
            click.option("--git-remote", help="Clone from and push to this git remote (a "
                         "cluster of several machines); the experiments are pulled back from "
                         "it."),
            click.option("--cache-dir", help="DVC cache of the runs on other machines (a "
                         "shared filesystem)  [default: one per machine]"),
            click.option("--connect-timeout", type=CONNECT_SECONDS,
                         help="Seconds each address (--address, the git remote, the DVC "
                              "remote) gets to connect and answer  [default: "
                              "$LORASENT_CONNECT_TIMEOUT, else 10]"))):
        command = option(command)
    return command


@click.command()
@click.option("-S", "--set-param", "sets", multiple=True, metavar="KEY=VALUES",
              help="A params change, as `dvc exp run --queue -S` takes it; several values "
                   "(KEY=a,b or range(...)) make a grid axis.")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1),
              help="Runs per grid point: base.seed, base.seed + 1, ... (HEAD's params.yaml).")
@click.option("--name", default="sweep", show_default=True,
              help="Experiments are named <NAME>-<key><value>...-seed<S>.")
@_ray_options
@user_errors
def sweep(sets: tuple[str, ...], seeds: int, name: str, address: str | None,
          cpus_per_run: int | None, num_gpus: int | None, git_remote: str | None,
          cache_dir: str | None, connect_timeout: float | None) -> None:
    """Run a grid of params x seeds on Ray, one GPU (or --cpus-per-run CPUs) per run.

    Each run clones HEAD, runs `dvc exp run --temp` and lands as the DVC experiment
    <NAME>-<key><value>-seed<S>. Prints each run's state as it changes, then each run's
    metrics, each group's mean ± sd and its verdict against the first group
    (docs/scale-out.md).
    """
    from lorasent.experiments.sweep import sweep as run_sweep

    result = run_sweep(name=name, sets=sets, seeds=seeds, address=address,
                       num_gpus=num_gpus, cpus_per_run=cpus_per_run, git_remote=git_remote,
                       cache_dir=cache_dir, connect_timeout=connect_timeout,
                       progress=lambda line: click.echo(line, err=True))
    click.echo(result.summary())
    if result.failed:
        raise LorasentError(f"sweep: {len(result.failed)} of {len(result.runs)} runs failed: "
                            + ", ".join(run.spec.name for run in result.failed)
                            + "; the same command again makes only the runs that did not land")


@click.command("learning-curve")
@click.option("--fractions", default="0.125,0.25,0.5,1", show_default=True,
              help="Shares of the training split, each in (0, 1]: nested stratified subsets "
                   "(train.fraction).")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1),
              help="Runs per fraction: base.seed, base.seed + 1, ... (HEAD's params.yaml).")
@click.option("--name", default="lc", show_default=True,
              help="Experiments are named <NAME>-fraction<f>-seed<S>; a rerun reuses them.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Output folder, replaced as a whole  [default: reports/learning-curve-<NAME>]")
@click.option("--force", is_flag=True,
              help="Replace an --out folder that learning-curve did not write (never "
              "git-tracked files it did not write).")
@click.option("--project-to", default=2.0, show_default=True, type=FiniteFloat(min=2),
              help="Project the fit to this many times the largest fraction's training rows "
                   "(the further, the less a backtest vouches for it).")
@_ray_options
@user_errors
def learning_curve(fractions: str, seeds: int, name: str, out_dir: Path | None, force: bool,
                   project_to: float, address: str | None, cpus_per_run: int | None,
                   num_gpus: int | None, git_remote: str | None, cache_dir: str | None,
                   connect_timeout: float | None) -> None:
    """Would more labels help? Train HEAD's params on fractions of the training split.

    Each fraction x seed is a run of `lorasent sweep` (a DVC experiment); runs that
    landed before with the same params are reused. Writes learning_curve.json, the plot
    and learning_curve.md, and prints the answer: the accuracy that doubling the labels
    is expected to add, from the form (a - b*n^(-c), 1 - b*n^(-c) or the last observation)
    that best predicted the largest fraction from the smaller ones (docs/learning-curve.md).
    """
    from lorasent.experiments.grid import check_name
    from lorasent.experiments.learning_curve import MD_FILE, OUT_MARKER, parse_fractions
    from lorasent.experiments.learning_curve import learning_curve as run_curve
    from lorasent.output_guard import check_output_folder

    shares = parse_fractions(fractions)
    check_name(name, "learning-curve")  # before the default --out, named after it
    folder = out_dir or Path("reports") / f"learning-curve-{name}"
    check_output_folder(folder, command=OUT_MARKER, force=force,
                        option="--out" if out_dir else "the output folder")
    curve = run_curve(name=name, fractions=shares, seeds=seeds, out=folder,
                      project_to=project_to,
                      progress=lambda line: click.echo(line, err=True), address=address,
                      cpus_per_run=cpus_per_run, num_gpus=num_gpus, git_remote=git_remote,
                      cache_dir=cache_dir, connect_timeout=connect_timeout)
    click.echo(curve.sweep.summary())
    click.echo(f"learning-curve: {curve.summary_sentence}")
    click.echo(f"wrote {folder / MD_FILE}")
    if curve.failed:
        raise LorasentError(
            f"learning-curve: {len(curve.failed)} of {len(curve.sweep.runs)} runs failed "
            "(the curve is drawn from the others): " + "; ".join(
                f"{run.spec.name} ({' '.join(run.spec.sets)})" for run in curve.failed))
