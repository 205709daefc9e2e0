"""Errors that the CLI turns into one-line messages.

Every user-facing failure names the offending field and says how to fix it, so a
message is always actionable without reading a traceback.
"""

from __future__ import annotations


class MltcpError(Exception):
    """Base class for errors reported to the user as a single line."""


class SpecError(MltcpError, ValueError):
    """An input field is invalid; the message names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field}: {problem}; {fix}")

    def __reduce__(self) -> tuple:
        # Rebuilt from its three fields (the default pickles only the message), so a
        # Dask worker's error reaches the client as the same one-line SpecError.
        return (type(self), (self.field, self.problem, self.fix))


class CapabilityError(MltcpError):
    """The host lacks something (root, CAP_BPF, BTF, clang, ...) that an action needs."""
