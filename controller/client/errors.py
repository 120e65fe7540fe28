"""The one exception type a user's mistake raises, in gflowctl and in the Python client alike:
its text is the one line gflowctl prints after ``error:``. Standard library only."""

from __future__ import annotations


class GflowError(Exception):
    """A user error: bad input, an unknown job, a manifest that could not be written. ``str()``
    is one line naming what to fix (gflowctl prints it and exits 1)."""


class NotFound(GflowError):
    """The named job or sweep does not exist (gflowctl goes on with the other names)."""


class JobError(GflowError):
    """A function job ended without a result: ``job`` names it, ``reason`` says why
    (``OOMKilled``, ``DeadlineExceeded``, ``Error``, ``UserCancelled``...)."""

    def __init__(self, message: str, job: str, reason: str | None):
        super().__init__(message)
        self.job = job
        self.reason = reason
