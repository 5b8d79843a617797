"""Progress told across Beam's pickling: a step carries a ``Relay`` (a token, pickled with it); the process that
runs the step finds the listener registered there under the token, if any (``listening``).

A runner that runs steps in this process (the DirectRunner) reaches the listener; one whose workers are other
processes (Dask, Dataflow, the DirectRunner's multi_processing mode) finds none there, and nothing is told.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

_LISTENERS: dict[str, Callable[..., None]] = {}


@contextlib.contextmanager
def listening(token: str, listener: Callable[..., None]) -> Iterator[None]:
    """Within the block, a ``Relay(token)`` called in this process calls ``listener`` with its arguments."""
    _LISTENERS[token] = listener
    try:
        yield
    finally:
        del _LISTENERS[token]


class Relay:
    """A callable that pickles as its token and calls the listener registered under it where it runs."""

    def __init__(self, token: str):
        self.token = token

    def __call__(self, *args) -> None:
        listener = _LISTENERS.get(self.token)
        if listener is not None:
            listener(*args)
