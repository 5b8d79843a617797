"""evaluate_synthetic's ``--report``: its evaluation (the dict that ``--json`` writes) as one self-contained HTML page.

Drawn from that dict alone, so the page and the JSON hold the same numbers: the summary beside two baselines, the
release's parameters (its manifest's), with a target what the rows teach a classifier of it, each column's
distribution in both tables, the worst and a typical
marginal as heat maps (at most X_CELLS by Y_CELLS, the rest summed; every cell and label whole on hover), and the
errors, worst first. Images are SVG (bar charts as ``data:`` URIs, heat maps inline for their hover; no file beside
the page, no script); every text from the inputs is escaped.
Every number the page prints carries its exact value in a ``data-value`` attribute (tests compare them).
"""

from __future__ import annotations

import itertools
import json
from html import escape

import numpy as np

from pipelines import svg_charts

TABLE_ROWS = 30  # the worst marginals listed one by one; the rest in one line
X_CELLS, Y_CELLS = 24, 30  # a heat map's columns and rows at most: the largest cells, the rest summed as "other"

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; color: #222;
       margin: 0 auto; max-width: 1180px; padding: 0 16px 40px; line-height: 1.4; }
.notice { background: #b00020; color: #fff; font-weight: 600; padding: 12px 16px; margin: 0 -16px 16px;
          font-size: 17px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.files { color: #555; margin: 0 0 12px; word-break: break-all; }
code { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; }
.summary { display: flex; flex-wrap: wrap; gap: 10px; margin: 0; }
.summary div { border: 1px solid #ddd; border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.summary dt { color: #555; font-size: 13px; }
.summary dd { margin: 0; font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 12px; }
figure { margin: 0; border: 1px solid #e3e3e3; border-radius: 6px; padding: 8px; }
figcaption { font-size: 14px; margin-bottom: 4px; }
figcaption .kind { color: #777; font-size: 12px; }
img { display: block; max-width: 100%; height: auto; }
div.svg { overflow-x: auto; }
div.svg svg { display: block; max-width: 100%; height: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; }
th { border-bottom: 2px solid #ccc; }
td.error, td.independent, td.bootstrap { text-align: right; }
td.independent, td.bootstrap { color: #666; }
#release th { font-weight: normal; color: #555; border-bottom: 1px solid #eee; }
td.bar { width: 220px; }
td.bar div { background: #c44e52; height: 10px; }
.note { color: #555; font-size: 14px; }
"""


def _number(value: float, *, id: str | None = None, tag: str = "span", cls: str | None = None) -> str:
    """``value`` to 4 decimals, with its exact value in ``data-value``."""
    attributes = (f' id="{id}"' if id else "") + (f' class="{cls}"' if cls else "")
    return f'<{tag}{attributes} data-value="{value!r}">{value:.4f}</{tag}>'


def _columns_attribute(columns: list[str]) -> str:
    return escape(json.dumps(columns), quote=True)


def _img(svg: str, alt: str) -> str:
    return f'<img src="{svg_charts.data_uri(svg)}" alt="{escape(alt, quote=True)}">'


def _summary(result: dict) -> str:
    workload, rows = result["workload"], result["rows"]
    degree = result["degree"]
    items = [
        ("real rows", f'<dd id="rows-real" data-value="{rows["real"]}">{rows["real"]:,}</dd>'),
        ("synthetic rows", f'<dd id="rows-synthetic" data-value="{rows["synthetic"]}">{rows["synthetic"]:,}</dd>'),
        (
            f"{degree}-way marginals",
            f'<dd id="marginals" data-value="{workload["marginals"]}">{workload["marginals"]:,}</dd>',
        ),
        ("average L1 error", _number(workload["average_error"], id="average-error", tag="dd")),
        ("median L1 error", _number(workload["median_error"], id="median-error", tag="dd")),
        ("max L1 error", _number(workload["max_error"], id="max-error", tag="dd")),
    ]
    baselines = result["baselines"]
    items += [
        ("independent columns: average", _number(baselines["independent"]["average_error"],
                                                 id="independent-average-error", tag="dd")),
        ("bootstrap resample: average", _number(baselines["bootstrap"]["average_error"],
                                                id="bootstrap-average-error", tag="dd")),
    ]  # fmt: skip
    return '<dl class="summary">' + "".join(f"<div><dt>{escape(t)}</dt>{d}</div>" for t, d in items) + "</dl>"


def _baselines_note(result: dict) -> str:
    bootstrap = result["baselines"]["bootstrap"]
    return (
        '<p class="note">Two baselines on the same workload, from the real table (this page is not a release): '
        "<b>independent columns</b>, the real columns' exact 1-way shares multiplied together (what a generator "
        "that measured only 1-way marginals, without noise, would reach: below it, the synthetic table keeps "
        "some of the columns' dependence); and a <b>bootstrap resample</b>, "
        f"{bootstrap['rows']:,} rows (the synthetic table's number) drawn from the real table with replacement "
        f"(seed {bootstrap['seed']}): sampling's own error at that size, which no generator beats by much.</p>"
    )


RELEASE_NAMES = {"mechanism": "method", "generator": "generator (auto's choice)", "target": "target (auto)",
                 "epsilon": "epsilon",
                 "delta": "delta", "rho": "rho (zCDP)",
                 "privacy_unit": "privacy unit", "max_rows_per_unit": "K, rows a unit at most", "rows": "rows drawn",
                 "release_id": "release id", "private_randomness": "private randomness"}  # fmt: skip


def _release(result: dict) -> str:
    """The release's parameters, from the manifest beside the synthetic table."""
    release = result["release"]
    if release is None:
        return '<p class="note" id="release-unknown">No manifest beside the synthetic table: the parameters of its ' \
               "release are unknown.</p>"  # fmt: skip
    rows = []
    for key, name in RELEASE_NAMES.items():
        value = release.get(key)
        shown = "\u2014" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))
        rows.append(f'<tr><th>{escape(name)}</th><td id="release-{key.replace("_", "-")}" '
                    f'data-value="{escape(json.dumps(value), quote=True)}">{escape(shown)}</td></tr>')  # fmt: skip
    return f'<table id="release">{"".join(rows)}</table>'


def _learning(result: dict) -> str:
    """The learning section (``--target``): a classifier trained on the synthetic rows against one trained on real
    rows, both scored on the real rows held out; empty without a target."""
    learned = result.get("learning")
    if not learned:
        return ""
    rows = []
    for key, name in (("trained_on_synthetic", "the synthetic rows"), ("trained_on_real", "real rows (the ceiling)")):
        scores = learned[key]
        auc = "<td>\u2014</td>" if scores["auc"] is None else _number(scores["auc"], id=f"{key}-auc", tag="td")
        rows.append(f"<tr><th>{escape(name)}</th><td>{scores['rows']:,}</td>{auc}"
                    f"{_number(scores['accuracy'], id=f'{key}-accuracy', tag='td')}</tr>")  # fmt: skip
    held = learned["held_out"]
    mismatch = ""
    if learned.get("synthesized_for"):
        mismatch = (f'\n<p class="note" id="synthesized-for">The synthetic rows were synthesized for '
                    f"{escape(learned['synthesized_for'])} (their manifest), not this one.</p>")  # fmt: skip
    return f"""<h2>Learning: train on synthetic, test on real</h2>
<table id="learning"><thead><tr><th>trained on</th><th>rows</th><th>AUC</th><th>accuracy</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<p class="note">Predicting <code>{escape(learned["target"])}</code> from the other columns: a
{escape(learned["classifier"])}, scored on {held["rows"]:,} real rows held out ({held["share"]:.0%}, seed
{held["seed"]}); always guessing the most common class scores an accuracy of
{_number(learned["majority_class_accuracy"], id="majority-accuracy")}. The synthetic table was drawn from all the
real rows, the held-out ones too: its score is a little optimistic (by at most what its privacy allows). Rows
are held out, not privacy units: one unit's rows may fall on both sides, which flatters the ceiling a
little.</p>{mismatch}"""


def _column_figures(result: dict) -> str:
    figures = []
    for column in result["columns"]:
        chart = svg_charts.bar_chart(column["values"], column["real"], column["synthetic"])
        figures.append(
            f'<figure class="column" data-column="{escape(column["name"], quote=True)}">'
            f"<figcaption><b>{escape(column['name'])}</b> <span class=kind>({escape(column['kind'])}, "
            f"{len(column['values'])} values)</span> \u00b7 L1 error {_number(column['error'], cls='error')}"
            f"</figcaption>{_img(chart, 'the shares of ' + column['name'] + ' in the real and synthetic tables')}"
            "</figure>"
        )
    return '<div class="grid">' + "".join(figures) + "</div>"


def top_cells(labels: list[str], real: np.ndarray, synthetic: np.ndarray, limit: int, axis: int):
    """At most ``limit`` labels along ``axis``: where there are more, the ``limit - 1`` of the largest share in either
    table, in their order, and the rest summed as "other (N values)"; the labels and both arrays so cut."""
    if len(labels) <= limit:
        return labels, real, synthetic
    mass = np.moveaxis(np.maximum(real, synthetic), axis, 0).reshape(len(labels), -1).sum(axis=1)
    kept = np.sort(np.argsort(-mass, kind="stable")[: limit - 1])
    rest = np.setdiff1d(np.arange(len(labels)), kept)

    def cut(a: np.ndarray) -> np.ndarray:
        return np.concatenate([np.take(a, kept, axis=axis), np.take(a, rest, axis=axis).sum(axis=axis, keepdims=True)],
                              axis=axis)  # fmt: skip

    return [labels[i] for i in kept] + [f"other ({len(rest):,} values)"], cut(real), cut(synthetic)


def _heat_map_figure(heat_map: dict) -> str:
    """Rows: the cells of every column but one, columns: the values of the column with the most (the x axis); at
    most X_CELLS columns and Y_CELLS rows, the rest summed (``top_cells``). Inlined: each cell tells its labels
    and value on hover."""
    columns, values = heat_map["columns"], heat_map["values"]
    real, synthetic = np.array(heat_map["real"], dtype=float), np.array(heat_map["synthetic"], dtype=float)
    x = max(range(len(columns)), key=lambda i: (len(values[i]), i))
    rest = [i for i in range(len(columns)) if i != x]
    real, synthetic = (np.moveaxis(a, x, -1).reshape(-1, len(values[x])) for a in (real, synthetic))
    row_labels = [" \u00b7 ".join(combo) for combo in itertools.product(*(values[i] for i in rest))] or [""]
    column_labels, real, synthetic = top_cells(list(values[x]), real, synthetic, X_CELLS, 1)
    row_labels, real, synthetic = top_cells(row_labels, real, synthetic, Y_CELLS, 0)
    y_title = " \u00b7 ".join(columns[i] for i in rest)
    top = float(max(real.max(), synthetic.max()))
    difference = synthetic - real
    extent = float(np.abs(difference).max())
    panels = [
        svg_charts.Panel("real", real.tolist(), svg_charts.sequential(top), top),
        svg_charts.Panel("synthetic", synthetic.tolist(), svg_charts.sequential(top), top),
        svg_charts.Panel("synthetic \u2212 real", difference.tolist(), svg_charts.diverging(extent), extent, True),
    ]
    svg = svg_charts.heat_map(row_labels, column_labels, panels, x_title=columns[x], y_title=y_title)
    described = f"the shares of the cells of {', '.join(columns)} in the real and synthetic tables"
    name = {"worst": "The worst marginal", "typical": "A typical marginal (the median error)"}[heat_map["role"]]
    return (
        f'<figure class="heat-map" data-role="{heat_map["role"]}" data-columns="{_columns_attribute(columns)}">'
        f"<figcaption><b>{escape(name)}</b>: {escape(', '.join(columns))} \u00b7 L1 error "
        f"{_number(heat_map['error'], cls='error')} \u00b7 rank {heat_map['rank']} of the workload \u00b7 shares "
        f"in percent; hover a cell or a label for the whole of it</figcaption>"
        f'<div class="svg" role="img" aria-label="{escape(described, quote=True)}">{svg}</div></figure>'
    )


def _heat_maps(result: dict) -> str:
    if result["degree"] < 2:
        return '<p class="note">A 1-way workload: the columns above are its marginals.</p>'
    parts = [_heat_map_figure(h) for h in result["heat_maps"]]
    skipped = result["marginals_too_large_to_draw"]
    if skipped:
        parts.append(
            f'<p class="note">Chosen among the marginals of at most {result["heat_map_cells"]:,} cells: '
            f"{skipped:,} larger ones are in the table only.</p>"
        )
    return "".join(parts)


def _error_table(result: dict) -> str:
    errors, degree = result["errors"], result["degree"]
    largest = max(e["error"] for e in errors) or 1.0
    head = "".join(f"<th>column {i + 1}</th>" for i in range(degree))
    head += "<th>L1 error</th><th></th><th>independent</th><th>bootstrap</th>"
    rows = []
    for rank, entry in enumerate(errors[:TABLE_ROWS], 1):
        cells = "".join(f"<td>{escape(c)}</td>" for c in entry["columns"])
        rows.append(
            f'<tr class="marginal" data-columns="{_columns_attribute(entry["columns"])}"><td>{rank}</td>{cells}'
            f"{_number(entry['error'], tag='td', cls='error')}"
            f'<td class="bar"><div style="width: {100 * entry["error"] / largest:.1f}%"></div></td>'
            f"{_number(entry['independent'], tag='td', cls='independent')}"
            f"{_number(entry['bootstrap'], tag='td', cls='bootstrap')}</tr>"
        )
    rest = errors[TABLE_ROWS:]
    if rest:
        values = [e["error"] for e in rest]
        rows.append(
            f'<tr class="rest"><td colspan="{degree + 5}">and {len(rest):,} more marginals, L1 errors from '
            f"{_number(min(values), cls='rest-min')} to {_number(max(values), cls='rest-max')} "
            f"(average {_number(float(np.mean(values)), cls='rest-average')})</td></tr>"
        )
    return f'<table id="errors-table"><thead><tr><th>rank</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def render(result: dict) -> str:
    """The page: the notice, the summary, the columns' charts, the heat maps, the error table."""
    degree = result["degree"]
    files = " \u00b7 ".join(f"{name}: <code>{escape(result[name])}</code>" for name in ("real", "synthetic", "domain"))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Evaluation of a synthetic table against the real data (not a release)</title>
<style>{STYLE}</style>
</head>
<body>
<div class="notice" id="notice">{escape(result["evaluation"])}</div>
<h1>Synthetic data: evaluation against the real table</h1>
<p class="files">{files}</p>
{_summary(result)}
{_baselines_note(result)}
<h2>The release</h2>
{_release(result)}
<p class="note">Each marginal's L1 error is the sum over its cells of |real share \u2212 synthetic share|: 0 when
the two tables agree, 2 when they share no cell (twice the total variation distance; McKenna et al. 2022).
The workload is every {degree}-way marginal of the columns.</p>
{_learning(result)}
<h2>Columns: real and synthetic shares</h2>
{_column_figures(result)}
<h2>{degree}-way marginals as heat maps</h2>
{_heat_maps(result)}
<h2>The {degree}-way marginals' errors, worst first</h2>
{_error_table(result)}
</body>
</html>
"""
