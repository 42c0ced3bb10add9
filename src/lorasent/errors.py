"""The one base class of errors a user can fix.

The CLI prints their message, without a traceback, and exits with status 1. Each
message names the file, row, key or label that is wrong and what to do about it.
"""


class LorasentError(Exception):
    """A problem in the inputs, params or environment, not a bug in lorasent."""
