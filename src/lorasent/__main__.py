"""``python -m lorasent``: the ``lorasent`` command group (:func:`lorasent.cli.main`, the
console script's entry point in pyproject.toml), for a machine where the script is not on
``PATH`` (the package installed without its scripts, or run from a source tree)."""

from lorasent.cli import main

if __name__ == "__main__":
    main()
