"""`CliError`: a failure the CLI reports as one line on stderr with exit code 1.

Why: scripts check the exit code and people read one line naming the
problem — never a traceback for an error the broker or the user caused.

Code raising it must never print a traceback for a user's or broker's error.
"""

from __future__ import annotations

__all__ = ["CliError"]


class CliError(Exception):
    """Printed as `kelp: error: <message>`; the process exits with `exit_code`."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
