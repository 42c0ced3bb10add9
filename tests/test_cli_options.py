"""Every numeric option of every command refuses ``nan`` and ``inf`` while the command
line is parsed, in one line (issue 62, kind 5): ``queue --random-share nan`` crashed after
the pool was scored, ``learning-curve --project-to inf`` wrote ``+nan [+nan, +nan]``."""

import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from conftest import REPO
from lorasent.cli import main
from lorasent.commands.options import FiniteFloat


def _numeric_options() -> list[tuple[str, str, object]]:
    found: list[tuple[str, str, object]] = []
    for name, command in sorted(main.commands.items()):
        for param in command.params:
            if isinstance(param.type, (click.types.FloatParamType, click.types.IntParamType)):
                found.append((name, param.opts[0], param.type))
    return found


NUMERIC = _numeric_options()


def test_every_float_option_is_the_one_finite_type():
    assert len(NUMERIC) >= 12
    floats = [(c, o) for c, o, t in NUMERIC if isinstance(t, click.types.FloatParamType)]
    assert {(c, o) for c, o in floats} >= {("queue", "--random-share"),
                                           ("learning-curve", "--project-to"),
                                           ("predict", "--min-confidence"),
                                           ("reproduce", "--tolerance")}
    assert [(c, o) for c, o, t in NUMERIC if isinstance(t, click.types.FloatParamType)
            and not isinstance(t, FiniteFloat)] == []


def test_a_float_option_without_bounds_shows_no_range_in_its_help():
    """click 8 described an unbounded range as ``x<=None`` beside the option's help."""
    helps = {name: CliRunner().invoke(main, [name, "--help"]).output
             for name in {c for c, _, _ in NUMERIC}}
    assert [name for name, text in helps.items() if "None" in text] == []
    assert "[default: 0.0001]" in helps["reproduce"]


@pytest.mark.parametrize(("command", "option"), [(c, o) for c, o, _ in NUMERIC])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e400"])
def test_every_numeric_option_refuses_a_non_finite_value_in_one_line(command, option, value):
    done = CliRunner().invoke(main, [command, option, value], prog_name="lorasent")
    kind = next(t for c, o, t in NUMERIC if (c, o) == (command, option))
    assert done.exit_code == 2, done.output
    assert done.output.count("\n") == 1
    head = f"lorasent {command}: error: Invalid value for '{option}'"
    assert done.output.startswith(head), done.output
    assert f": {value!r} is not a" in done.output
    if isinstance(kind, click.types.FloatParamType):
        assert " finite number (nan and inf are refused); give a number" in done.output
    assert done.output.endswith(f" (see `lorasent {command} --help`)\n")


def test_the_refusal_names_the_range_the_option_takes():
    done = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "2", "--random-share",
                                     "nan"], prog_name="lorasent")
    assert done.output == (
        "lorasent queue: error: Invalid value for '--random-share': 'nan' is not a finite "
        "number (nan and inf are refused); give a number 0<=x<=1 (see `lorasent queue "
        "--help`)\n")
    done = CliRunner().invoke(main, ["learning-curve", "--project-to", "inf"],
                              prog_name="lorasent")
    assert done.output == (
        "lorasent learning-curve: error: Invalid value for '--project-to': 'inf' is not a "
        "finite number (nan and inf are refused); give a number x>=2 (see `lorasent "
        "learning-curve --help`)\n")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_the_tools_float_options_refuse_a_non_finite_value(value, capsys):
    """``python -m lorasent.tools.bench --peak-tflops nan`` and the queue trial's
    ``--random-share`` (argparse): the same rule as the commands'."""
    import argparse

    from lorasent.tools import finite_float

    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--peak-tflops", type=finite_float)
    with pytest.raises(SystemExit) as stop:
        parser.parse_args([f"--peak-tflops={value}"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"bench: error: argument --peak-tflops: {value!r} is not a finite number (nan and "
        "inf are refused)")
    assert finite_float("989") == 989.0


def test_python_dash_m_lorasent_runs_the_command_group():
    """``python -m lorasent`` (issue 70: no ``__main__``) runs the group of the
    ``lorasent`` script, every command listed."""
    done = subprocess.run([sys.executable, "-m", "lorasent", "--help"], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, "COLUMNS": "80",
                                                    "PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Usage: python -m lorasent [OPTIONS] COMMAND [ARGS]..."
    listed = lines[lines.index("Commands:") + 1:]
    assert [line.split()[0] for line in listed] == sorted(main.commands)
