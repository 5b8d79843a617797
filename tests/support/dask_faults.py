"""A fault for Beam's Dask runner: a worker that kills itself, once, mid-job (tests/pipelines/test_dask.py)."""

from __future__ import annotations

import os
import signal

from distributed.diagnostics.plugin import WorkerPlugin


class KillOnce(WorkerPlugin):
    """Kills its worker's process (SIGKILL, as the kernel's OOM killer would) when the ``nth`` task this
    worker runs starts executing, once in the whole cluster: the first worker to create ``marker`` dies,
    and the worker its nanny starts in its place finds the marker there and lives."""

    def __init__(self, marker: str, nth: int = 1):
        self.marker = marker
        self.nth = nth
        self.started = 0

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing":
            return
        self.started += 1
        if self.started < self.nth:
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)
