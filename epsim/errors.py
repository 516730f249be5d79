"""Errors a user can cause, each rendered as one line by the CLI (exit code 2)."""

from __future__ import annotations


class EpsimError(Exception):
    """Base of every error epsim reports to a user without a traceback."""


class SpecError(EpsimError, ValueError):
    """A scenario, spec or CLI value is invalid.

    The message follows `<where>: <field path> (<value>) must <rule>`.
    """


class RecordError(EpsimError, ValueError):
    """A measurement-record file or line is malformed."""


class ProfileError(EpsimError, ValueError):
    """A calibration profile is malformed or does not cover what is asked of it."""


class PlacementError(EpsimError, ValueError):
    """An expert placement (EPLB maps) or the input of a placement algorithm is invalid."""


class WriteError(EpsimError):
    """A file could not be written (disk full, permission, a directory in the way); the message
    names the path, and the file that was there before is left as it was."""
