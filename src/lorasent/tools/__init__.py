"""The tools around the pipeline, none of them a stage: they read its outputs or time its
parts, and write nothing the stages read.

- :mod:`~lorasent.tools.predict`: ``lorasent predict`` and ``lorasent export`` on a trained
  adapter;
- :mod:`~lorasent.tools.bench`: ``make bench``, the speed and memory benchmarks
  (``bench/``);
- :mod:`~lorasent.tools.device_check`: ``make device-check``, the GPU check (doctor, bench,
  the tiny pipeline on the CPU and the device).

The review of a change (``lorasent compare``, ``pr-comment``) is :mod:`lorasent.review`;
the experiment runners (``lorasent sweep``, ``seeds``, ``learning-curve``)
:mod:`lorasent.experiments`.
"""


def finite_float(text: str) -> float:
    """The ``type`` of the tools' float options (argparse): a number, never ``nan`` or
    ``inf`` (``lorasent.commands.options.FiniteFloat`` is the commands')."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number (nan and inf are "
                                         "refused)")
    return value
