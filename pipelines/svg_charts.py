"""Small SVG charts for the evaluation report: grouped bars (real beside synthetic) and heat maps with a legend.

Each function returns one standalone SVG document (with its width and height, so that an ``<img>`` has a natural
size, or it is inlined in a page); ``data_uri`` makes it an image source. Every text is escaped: column names and
labels come from files.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

REAL = "#1f66a8"
SYNTHETIC = "#f28e2b"
INK = "#333"
GRID = "#ddd"
FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
CHAR = 6.2  # the width of a character at 11 px, roughly: room for labels
BLUES = ("#f7fbff", "#c6dbef", "#6baed6", "#2171b5", "#08306b")
DIVERGING = ("#2166ac", "#92c5de", "#f7f7f7", "#f4a582", "#b2182b")  # below, level, above


def data_uri(svg: str) -> str:
    """``svg`` as a data: URI for an ``<img src>``."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")


def _document(width: float, height: float, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FONT}" font-size="11" fill="{INK}">'
        + "".join(body)
        + "</svg>"
    )


def _text(x: float, y: float, text: str, *, anchor: str = "middle", size: int = 11, rotate: float = 0,
          fill: str = INK, weight: str = "normal", hover: str | None = None) -> str:  # fmt: skip
    """A text; ``hover``: what a page that inlines the SVG shows over it (a label it shortened, whole)."""
    turn = f' transform="rotate({rotate:g} {x:.1f} {y:.1f})"' if rotate else ""
    title = "" if hover is None else f"<title>{escape(hover)}</title>"
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{fill}" '
        f'font-weight="{weight}"{turn}>{title}{escape(text)}</text>'
    )


def _short(label: str, limit: int) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "\u2026"


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k at or above ``value`` (> 0)."""
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value * (1 - 1e-12))


def _percent(value: float) -> str:
    return f"{value * 100:.3g}%"


def bar_chart(labels: Sequence[str], real: Sequence[float], synthetic: Sequence[float], *, width: int = 560,
              height: int = 230) -> str:  # fmt: skip
    """Each value's share in the real table beside its share in the synthetic one; past 60 values, two step
    lines instead of bars. The x axis names every value that fits, the y axis is the share in percent."""
    n = len(labels)
    longest = max(len(label) for label in labels)
    left, right, top = 46, 12, 26
    plot_width = width - left - right
    slot = plot_width / n
    every = max(1, math.ceil(14 / slot)) if longest * CHAR > slot else 1  # rotated labels need 14 px each
    rotate = longest * CHAR > slot * every
    label_limit = 18
    bottom = 18 + (min(longest, label_limit) * CHAR * 0.72 + 6 if rotate else 0)
    plot_height = height - top - bottom
    top_value = _nice_ceiling(max(max(real), max(synthetic), 1e-9))
    body = []
    for i in range(5):  # the y axis: 0, 1/4, ... of the top value
        y = top + plot_height * (1 - i / 4)
        body.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        body.append(_text(left - 5, y + 4, _percent(top_value * i / 4), anchor="end", size=10))

    def y_of(value: float) -> float:
        return top + plot_height * (1 - value / top_value)

    if n <= 60:
        bar = slot * 0.38
        for i, (p, q) in enumerate(zip(real, synthetic, strict=True)):
            x = left + i * slot + slot / 2
            for offset, value, colour in ((-bar, p, REAL), (0, q, SYNTHETIC)):
                y = y_of(value)
                body.append(f'<rect x="{x + offset:.2f}" y="{y:.2f}" width="{bar:.2f}" '
                            f'height="{top + plot_height - y:.2f}" fill="{colour}"/>')  # fmt: skip
    else:
        for values, colour in ((real, REAL), (synthetic, SYNTHETIC)):
            points = []
            for i, value in enumerate(values):
                y = y_of(value)
                points += [f"{left + i * slot:.2f},{y:.2f}", f"{left + (i + 1) * slot:.2f},{y:.2f}"]
            body.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" stroke-width="1.6"/>')
    baseline = top + plot_height
    body.append(f'<line x1="{left}" x2="{width - right}" y1="{baseline}" y2="{baseline}" stroke="{INK}"/>')
    for i in range(0, n, every):
        x = left + i * slot + slot / 2
        label = _short(labels[i], label_limit)
        if rotate:
            body.append(_text(x + 3, baseline + 10, label, anchor="end", size=10, rotate=-45))
        else:
            body.append(_text(x, baseline + 13, label, size=10))
    for i, (name, colour) in enumerate((("real", REAL), ("synthetic", SYNTHETIC))):
        x = width - right - 150 + i * 70
        body.append(f'<rect x="{x}" y="6" width="11" height="11" fill="{colour}"/>')
        body.append(_text(x + 15, 16, name, anchor="start"))
    return _document(width, height, body)


def _interpolate(stops: Sequence[str], t: float) -> str:
    t = min(max(t, 0.0), 1.0) * (len(stops) - 1)
    i = min(int(t), len(stops) - 2)
    a, b = (tuple(int(stop[k : k + 2], 16) for k in (1, 3, 5)) for stop in stops[i : i + 2])
    return "#" + "".join(f"{round(x + (y - x) * (t - i)):02x}" for x, y in zip(a, b, strict=True))


def sequential(top: float) -> Callable[[float], str]:
    """White at 0 to dark blue at ``top``, by the square root (small shares stay visible beside a large one)."""
    return lambda value: _interpolate(BLUES, math.sqrt(max(value, 0) / top) if top > 0 else 0)


def diverging(extent: float) -> Callable[[float], str]:
    """Blue at -``extent``, white at 0, red at +``extent``, by the square root of the distance from 0."""

    def colour(value: float) -> str:
        if extent <= 0:
            return _interpolate(DIVERGING, 0.5)
        return _interpolate(DIVERGING, 0.5 + math.copysign(math.sqrt(min(abs(value) / extent, 1)), value) / 2)

    return colour


@dataclass(frozen=True)
class Panel:
    """One grid of a heat map: ``values[row][column]`` (shares) coloured by ``colour``, whose legend runs from 0 to
    ``top`` (from -``top`` to ``top`` when ``signed``, the values then shown with their sign)."""

    title: str
    values: Sequence[Sequence[float]]
    colour: Callable[[float], str]
    top: float
    signed: bool = False


def _cell_text(value: float, signed: bool) -> str:
    percent = value * 100
    if abs(percent) < 0.05:
        return "0"
    return ("+" if signed and percent > 0 else "") + f"{percent:.1f}"


def heat_map(row_labels: Sequence[str], column_labels: Sequence[str], panels: Sequence[Panel], *, x_title: str,
             y_title: str) -> str:  # fmt: skip
    """The panels' grids side by side over the same rows and columns (the row labels once, on the left), each with
    its title, the column labels, ``x_title`` and a colour legend, square-root spaced as ``sequential`` and
    ``diverging`` colour; a cell big enough shows its value in percent. Inlined in a page, every cell and every
    shortened label tells its whole label and value on hover (an SVG ``<title>``)."""
    rows, columns = len(row_labels), len(column_labels)
    cell_width = min(max(260 // columns, 3), 44)
    cell_height = min(max(420 // rows, 3), 24)
    row_every = max(1, math.ceil(11 / cell_height))
    longest_column = max(len(label) for label in column_labels)
    column_every = max(1, math.ceil(13 / cell_width)) if longest_column * CHAR > cell_width else 1
    rotate = longest_column * CHAR > cell_width * column_every
    row_limit, column_limit = 26, 22  # characters; the whole label on hover
    left = 26 + min(max(len(label) for label in row_labels), row_limit) * CHAR * 0.92
    grid_top = 30
    grid_width, grid_height = columns * cell_width, rows * cell_height
    panel_width = max(grid_width, 210) + 24
    x_room = (min(longest_column, column_limit) * CHAR * 0.72 + 8) if rotate else 16
    legend_top = grid_top + grid_height + x_room + 22
    width, height = left + len(panels) * panel_width, legend_top + 34
    body = [_text(12, grid_top + grid_height / 2, y_title, size=11, weight="bold", rotate=-90)]
    for r in range(0, rows, row_every):
        y = grid_top + r * cell_height + cell_height / 2 + 4
        body.append(_text(left - 5, y, _short(row_labels[r], row_limit), anchor="end", size=10, hover=row_labels[r]))
    show_values = cell_width >= 36 and cell_height >= 18
    for p, panel in enumerate(panels):
        x0 = left + p * panel_width
        body.append(_text(x0, 20, panel.title, anchor="start", size=13, weight="bold"))
        for r, row in enumerate(panel.values):
            for c, value in enumerate(row):
                x, y = x0 + c * cell_width, grid_top + r * cell_height
                fill = panel.colour(value)
                hover = f"{row_labels[r]} \u00b7 {column_labels[c]}: {panel.title} {_cell_text(value, panel.signed)}%"
                body.append(f'<rect x="{x:.1f}" y="{y}" width="{cell_width}" height="{cell_height}" fill="{fill}">'
                            f"<title>{escape(hover)}</title></rect>")  # fmt: skip
                if show_values:
                    dark = sum(int(fill[k : k + 2], 16) for k in (1, 3, 5)) < 3 * 150
                    body.append(_text(x + cell_width / 2, y + cell_height / 2 + 4, _cell_text(value, panel.signed),
                                      size=10, fill="#fff" if dark else INK))  # fmt: skip
        body.append(f'<rect x="{x0:.1f}" y="{grid_top}" width="{grid_width}" height="{grid_height}" fill="none" '
                    'stroke="#999"/>')  # fmt: skip
        labelled = list(range(0, columns, column_every))
        labelled[-1] = columns - 1  # the last label always (a heat map's "other"), in place of the one before it
        for c in labelled:
            x = x0 + c * cell_width + cell_width / 2
            label, y = _short(column_labels[c], column_limit), grid_top + grid_height + 12
            full = column_labels[c]
            body.append(_text(x + 3, y, label, anchor="end", size=10, rotate=-45, hover=full) if rotate else
                        _text(x, y, label, size=10, hover=full))  # fmt: skip
        body.append(_text(x0 + grid_width / 2, legend_top - 8, x_title, size=11, weight="bold"))
        body.extend(_legend(x0, legend_top, panel))
    return _document(width, height, body)


def _legend(left: float, top: float, panel: Panel) -> list[str]:
    """A colour bar under a panel, evenly spaced in colour (so at the square-root scale's values), with 3 ticks."""
    steps, width, body = 40, 200, []
    for i in range(steps):
        t = (i + 0.5) / steps
        value = panel.top * t * t if not panel.signed else math.copysign(panel.top * (2 * t - 1) ** 2, t - 0.5)
        body.append(f'<rect x="{left + i * width / steps:.2f}" y="{top}" width="{width / steps + 0.3:.2f}" '
                    f'height="10" fill="{panel.colour(value)}"/>')  # fmt: skip
    top_value = panel.top
    ticks = ((0, -top_value), (0.5, 0.0), (1, top_value)) if panel.signed else ((0, 0.0), (0.5, top_value / 4),
                                                                               (1, top_value))  # fmt: skip
    for t, value in ticks:
        x = left + t * width
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + 10}" y2="{top + 14}" stroke="{INK}"/>')
        text = ("+" if panel.signed and value > 0 else "") + (_percent(value) if value else "0")
        body.append(_text(x, top + 25, text, anchor={0: "start", 1: "end"}.get(t, "middle"), size=10))
    return body
