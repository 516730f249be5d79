"""Errors the live backend reports to a user as one line (`<name> (<value>) must <rule>`)."""

from __future__ import annotations

from epsim.errors import EpsimError


class LiveError(EpsimError, ValueError):
    """A live-module configuration is invalid: backend, shapes, placement or weights."""


class BackendUnavailableError(LiveError):
    """The requested backend cannot run here: a library does not import or no GPU is visible."""
