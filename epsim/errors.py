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


def did_you_mean(value: str, choices, limit: int = 3) -> str:
    """`did you mean ep_size?` for a misspelt name among `choices` (case ignored: `deepseek-v3`
    finds `DeepSeek-V3`), or '' when nothing is close. Only the guesses about as close as the
    best one (`ep_sise` is ep_size, not also tp_size and dp_size, one letter further)."""
    import difflib
    by_lower = {str(c).lower(): str(c) for c in choices}
    value = str(value).lower()
    close = difflib.get_close_matches(value, list(by_lower), n=limit, cutoff=0.6)
    ratio = {c: difflib.SequenceMatcher(None, value, c).ratio() for c in close}
    close = [c for c in close if ratio[c] >= ratio[close[0]] - 0.05] if close else []
    return f"did you mean {' or '.join(by_lower[c] for c in close)}?" if close else ""


def hinted(message: str, hint: str) -> str:
    """`message; hint`, or the message alone when there is no hint."""
    return f"{message}; {hint}" if hint else message
