"""Headless Chromium for the tests that render a page: find it, take a screenshot, count broken images, read a
PNG back, and the numbers a page shows (parsed with the standard library's html.parser)."""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image  # apache-beam depends on Pillow: always installed with the package

NAMES = ("chromium", "chromium-browser", "google-chrome", "headless_shell")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
# Injected into a copy of the page: once everything has loaded, the <body> states how many images it has and
# how many did not decode (naturalWidth 0), for --dump-dom to print.
COUNT_IMAGES = """<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  document.body.dataset.images = images.length;
  document.body.dataset.brokenImages = images.filter((i) => !i.complete || i.naturalWidth === 0).length;
});
</script>"""


def find() -> str | None:
    """The first headless-capable Chromium on PATH, or None."""
    return next((path for path in map(shutil.which, NAMES) if path), None)


def require() -> str:
    """Chromium's path; without one, a failure where the CI variable is set (make test installs it there), else a
    skip that says why."""
    path = find()
    if path is None:
        reason = f"no headless Chromium on PATH (looked for {', '.join(NAMES)}); `make test` installs Debian's as root"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {reason}")
        pytest.skip(reason)
    return path


def _run(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               "--disable-dev-shm-usage", f"--user-data-dir={profile}", *args]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run


def dom_after_load(
    chromium: str, page: Path, screenshot: Path | None = None, size: tuple[int, int] = (1200, 3000)
) -> str:
    """The DOM of a copy of ``page`` (beside it) with COUNT_IMAGES injected, once every image has loaded; with
    ``screenshot``, the page as drawn in a window of ``size`` too, to that PNG (one Chromium run does both)."""
    checked = page.with_name(page.stem + ".checked.html")
    checked.write_text(page.read_text().replace("</body>", COUNT_IMAGES + "</body>", 1))
    shot = [f"--screenshot={screenshot}", f"--window-size={size[0]},{size[1]}"] if screenshot else []
    run = _run(chromium, page.parent / "chromium-profile", *shot, "--virtual-time-budget=10000", "--dump-dom",
               checked.resolve().as_uri())  # fmt: skip
    return run.stdout


def image_counts(dom: str) -> tuple[int, int]:
    """(images, broken images) as COUNT_IMAGES stated them on the <body> of a dumped DOM."""
    body = next(e for e in Elements.of(dom) if e.tag == "body")
    return int(body.attrs["data-images"]), int(body.attrs["data-broken-images"])


def png_colours(path: Path) -> int:
    """How many distinct colours a PNG holds (a blank or failed render has one)."""
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    return len(np.unique(pixels.view(np.dtype((np.void, 3)))))


class Element:
    """A parsed element: its tag, attributes, text (its descendants' too) and enclosing elements' attributes."""

    def __init__(self, tag: str, attrs: dict[str, str], parents: list[Element]):
        self.tag, self.attrs, self.parents, self.text = tag, attrs, parents, ""

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def inside(self, tag: str, cls: str) -> Element | None:
        """The nearest enclosing element ``tag`` of class ``cls``."""
        return next((p for p in reversed(self.parents) if p.tag == tag and cls in p.classes()), None)


class Elements(HTMLParser):
    """Every element of a page, in document order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[Element] = []
        self.open: list[Element] = []

    @classmethod
    def of(cls, html: str) -> list[Element]:
        parser = cls()
        parser.feed(html)
        parser.close()
        return parser.found

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {k: v or "" for k, v in attrs}, list(self.open))
        self.found.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_startendtag(self, tag, attrs):
        self.found.append(Element(tag, {k: v or "" for k, v in attrs}, list(self.open)))

    def handle_endtag(self, tag):
        for i in range(len(self.open) - 1, -1, -1):
            if self.open[i].tag == tag:
                del self.open[i:]
                break

    def handle_data(self, data):
        for element in self.open:
            element.text += data
