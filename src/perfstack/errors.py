"""Errors that reach the user, each carrying the exit code the CLI returns.

PerfstackError
 ├── UsageError        (2) bad flags or values
 ├── InputError        (2) a bundle, trace or Run file that cannot be read
 ├── OutputError       (2) a file to write that cannot be written (missing folder, no permission)
 └── CannotRunHere     (3) the command needs something this machine lacks
"""

from __future__ import annotations


class PerfstackError(Exception):
    exit_code = 4

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(PerfstackError):
    exit_code = 2


class InputError(PerfstackError):
    exit_code = 2


class OutputError(PerfstackError):
    exit_code = 2


class CannotRunHere(PerfstackError):
    exit_code = 3
