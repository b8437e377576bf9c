"""The one exception type the CLI turns into a single line on stderr and an exit code."""

from __future__ import annotations

# Exit codes (documented in README "Exit codes").
EXIT_OK = 0
EXIT_FAILURE = 1  # the operation was valid but failed (cloud error, check mismatch, ...)
EXIT_USAGE = 2  # bad input: unknown model, bad option values, unreadable files, nothing fits
EXIT_CHECK_FAILED = 3  # `orch check`: the box answered but does not match the plan
EXIT_INTERRUPTED = 130


class OrchError(Exception):
    """An expected failure with a message meant for the user.

    `exit_code` follows the table above; `hint` is an optional second sentence that says
    what to do about it (it is appended to the same line).
    """

    def __init__(self, message: str, *, exit_code: int = EXIT_FAILURE, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.hint = hint

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message} ({self.hint})"
        return " ".join(text.split())


class UsageError(OrchError):
    """Bad input from the user: exit code 2."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message, exit_code=EXIT_USAGE, hint=hint)
