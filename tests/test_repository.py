"""The repository stands alone: nothing in it reaches for a folder beside the clone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("beam_expmech", "pipelines", "tests", "benchmarks", "deploy", "docs", ".ci")
FILES = ("README.md", "Makefile", "setup.py")
TEXT = {".py", ".md", ".json", ".txt", ".yaml", ".yml", ""}
UP = re.compile(r"(?<![.\w])\.\./[A-Za-z]")  # "../name", not ".../name"
PARENTS = re.compile(r"parents\[(\d+)\]|ROOT\.parent\b")


def sources() -> list[Path]:
    found = [ROOT / name for name in FILES]
    for folder in FOLDERS:
        found += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in TEXT]
    return [p for p in found if "__pycache__" not in p.parts and p != Path(__file__).resolve()]


def reaches_outside(line: str, depth: int) -> bool:
    """Whether ``line`` of a file ``depth`` folders below the root names a path above the root:
    "../name" in text, or ``parents[k]`` with k >= depth + 1 (parents[depth] is the root itself)."""
    if UP.search(line):
        return True
    return any(m.group(1) is None or int(m.group(1)) > depth for m in PARENTS.finditer(line))


def test_no_file_refers_to_a_folder_beside_the_clone():
    outside = []
    for path in sources():
        depth = len(path.relative_to(ROOT).parts) - 1
        lines = path.read_text().splitlines()
        outside += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(lines, 1) if reaches_outside(line, depth)]
    assert not outside, f"these lines reach outside the repository: {outside}"


def test_the_check_sees_such_a_line():
    assert reaches_outside('DATA = Path(__file__).resolve().parents[2] / "data"', depth=1)  # tests/x.py
    assert not reaches_outside('DATA = Path(__file__).resolve().parents[2] / "data"', depth=2)  # tests/audit/x.py
    assert reaches_outside("the design is in ../" + "shared/DESIGN.md", depth=0)
    assert reaches_outside("NLTCS = ROOT.parent / 'data'", depth=1)
    assert not reaches_outside("see .../synthesize.dead_letter.csv and ./local/path", depth=0)
