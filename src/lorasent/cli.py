"""``lorasent``: the command group, its usage errors in one line, and its commands.

The commands live in :mod:`lorasent.commands`: the five stages' in
:mod:`lorasent.commands.stages` (the one command module in the stages' deps), the
others beside it. ``dvc.yaml`` runs ``lorasent <stage>``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import click

from lorasent.commands import adapter, experiments, project, review, stages

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# transformers' own deprecation notice, raised inside peft on every model load.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


def _progress_bars_only_in_a_terminal() -> None:
    """Progress bars only when stderr is a terminal; plain lines in a log file or CI.

    A bar redrawn with carriage returns fills a log with one line per redraw. Off a
    terminal this turns off the bars of huggingface_hub, transformers (model loading,
    and Trainer's, which ``lorasent.stages.train`` follows) and datasets, here and in the
    processes started from here (``accelerate launch``); a value the user set wins.
    lorasent's own bars (tqdm ``disable=None``) and DVC's check the terminal themselves.
    The libraries read these variables when first imported: after this, in the commands.
    """
    if not sys.stderr.isatty():
        for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
            os.environ.setdefault(name, "1")


class _OneLineUsageError(click.UsageError):
    """A bad option, argument or command, shown in one line as every other error is."""

    def show(self, file: Any = None) -> None:
        path = self.ctx.command_path if self.ctx else "lorasent"
        click.echo(f"{path}: error: {self.format_message().removesuffix('.')} (see "
                   f"`{path} --help`)", file=file, err=True)


@contextlib.contextmanager
def _usage_errors_in_one_line() -> Iterator[None]:
    try:
        yield
    except click.UsageError as err:
        raise _OneLineUsageError(err.format_message(), err.ctx) from None


class _Group(click.Group):
    """click's group, its usage errors (and its commands', parsed in ``invoke``) in one
    line instead of click's three (usage, hint, error); the exit status stays click's 2."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _usage_errors_in_one_line():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        with _usage_errors_in_one_line():
            return super().invoke(ctx)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lorasent")
def main() -> None:
    """lorasent: LoRA fine-tuning for text classification, one DVC stage per command.

    Stages in order: fetch, split, baseline, train, evaluate. `dvc repro` runs them.
    """
    _progress_bars_only_in_a_terminal()


for _command in (stages.fetch, stages.split, stages.baseline, stages.train, stages.evaluate,
                 project.doctor, adapter.predict, adapter.export, adapter.queue, project.preset,
                 review.compare, review.pr_comment, project.metrics, experiments.seeds,
                 experiments.sweep, experiments.learning_curve, review.reproduce):
    main.add_command(_command)


if __name__ == "__main__":
    main()
