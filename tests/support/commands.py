"""Running a command line as a user does."""

from __future__ import annotations

import atexit
import json
import subprocess
import sys

# A Python process that runs one command a line, as `python -m MODULE ARGS` does (console.run_cli on the
# module's main, logging set up afresh on its own stderr), and answers with the exit code and what went
# to stderr. One process serves every usage error of a test process: each `python -m` of its own paid
# 3-4 s of imports (Apache Beam) for a check that stops before any data is read.
_COMMANDS = r"""
import contextlib, importlib, io, json, logging, sys
from pipelines import console

answer = sys.stdout
for line in sys.stdin:
    module, argv = json.loads(line)
    root = logging.getLogger()
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = console.run_cli(importlib.import_module(module).main, argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
    answer.write(json.dumps([code, stderr.getvalue()]) + "\n")
    answer.flush()
"""
_process: subprocess.Popen | None = None


def _commands() -> subprocess.Popen:
    global _process
    if _process is None or _process.poll() is not None:
        _process = subprocess.Popen([sys.executable, "-c", _COMMANDS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True)  # fmt: skip
        atexit.register(_process.kill)
    return _process


def run_command(module: str, argv: list[str]) -> tuple[int, str]:
    """``python -m module argv`` in the command process: its exit code and what it wrote to stderr."""
    process = _commands()
    process.stdin.write(json.dumps([module, argv]) + "\n")
    process.stdin.flush()
    code, stderr = json.loads(process.stdout.readline())
    return code, stderr


def assert_usage_error(module: str, flags: dict, message: str) -> None:
    """``python -m module`` with ``flags`` stops with exit code 2 and one line naming ``message``."""
    code, stderr = run_command(module, [x for kv in flags.items() for x in kv])
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], stderr
