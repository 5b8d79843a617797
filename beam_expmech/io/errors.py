"""The one error the input can raise before any budget is spent, and what a message may say of any error."""

from __future__ import annotations


class InputError(ValueError):
    """The input cannot be used at all (no file, unreadable file, missing column): stop before spending."""


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


def describe_error(error: BaseException) -> str:
    """What a message may say about ``error``: the first line of the InputError behind it (ours: file
    names, row numbers and column names only), else its type alone, since the text of any other error
    (a parser's, a runner's) may quote data."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, InputError):
            return first_line(cause)
        cause = cause.__cause__ or cause.__context__
    return type(error).__name__
