"""Running a command line as a user does."""

from __future__ import annotations

import subprocess
import sys


def assert_usage_error(module: str, flags: dict, message: str) -> None:
    """``python -m module`` with ``flags`` stops with exit code 2 and one line naming ``message``."""
    run = subprocess.run([sys.executable, "-m", module, *[x for kv in flags.items() for x in kv]],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and message in lines[0], run.stderr
