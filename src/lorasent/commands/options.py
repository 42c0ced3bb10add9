"""The options and option types several commands share (``lorasent.commands``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from lorasent.addresses import CONNECT_TIMEOUT_MAX_S


class FiniteFloat(click.FloatRange):
    """The type of every float option: a number in the range given (if any), never
    ``nan`` or ``inf``, which compare false with every bound and so passed a range:
    ``--random-share nan`` crashed after the pool was scored, ``--project-to inf`` wrote
    ``+nan [+nan, +nan]``. Refused while the command line is parsed, in one line
    (``lorasent.cli``'s one-line usage errors). The integer options are click's ``int`` and
    ``IntRange``, which refuse ``nan`` and ``inf`` as not integers."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number (nan and inf are refused); give a "
                      f"number{self._range_phrase()}", param, ctx)
        return super().convert(number, param, ctx)

    def _range_phrase(self) -> str:
        return " " + self._describe_range() if self._describe_range() else ""

    def _describe_range(self) -> str:
        """click's range for the help, none without bounds (click 8 wrote ``x<=None``)."""
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()


# ``--connect-timeout``'s type: seconds above 0, at most what the waits it feeds take
# (:data:`lorasent.addresses.CONNECT_TIMEOUT_MAX_S`); 1e308 crashed a socket's timeout.
CONNECT_SECONDS = FiniteFloat(min=0, min_open=True, max=CONNECT_TIMEOUT_MAX_S)

ADAPTER = click.option("--adapter", "adapter_dir", default="models/adapter", show_default=True,
                        type=click.Path(file_okay=False, path_type=Path),
                        help="Adapter folder written by the train stage.")
BASE = click.option("--base", "base_dir", default="models/base", show_default=True,
                     type=click.Path(file_okay=False, path_type=Path),
                     help="Base model folder the adapter was trained on (checked by hash).")
TEXT_COLUMN = click.option("--text-column", default="text", show_default=True,
                            help="Column (CSV, TSV, Parquet) or key (JSONL) holding the text.")
SEPARATOR = click.option("--separator", default="auto", show_default=True,
                          help="CSV separator: auto (detected from the header) or one "
                          "character.")
BATCH_SIZE = click.option("--batch-size", default=16, show_default=True,
                           type=click.IntRange(min=1), help="Texts per forward pass.")
DEVICE = click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "rocm", "mps"]),
                       help="Device to run on; default: as recorded at training time.")
