"""evaluate_synthetic --report: the page shows the JSON's numbers, escapes what it quotes, and renders in headless
Chromium (a screenshot that is not blank, no broken image). Without Chromium the rendering tests skip, or fail
where the CI variable is set (make test installs Debian's chromium as root)."""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from headless_chromium import Elements, dom_after_load, image_counts, png_colours, require
from PIL import Image
from public_tables import csv_path, domain_path

from pipelines import evaluate_synthetic, evaluation_report, svg_charts

REGIONS = ["north", "south", "east", "<b>west</b> & co"]  # a label that must be escaped
ODD = "c<i>'\" &"  # and a column name


def write_tables(folder: Path) -> None:
    """A real table (Parquet: labels, an integer column on a grid, a float one on a grid, codes) of 8 columns, and a
    synthetic one drawn from its columns independently (the joint marginals then differ)."""
    rng = np.random.default_rng(7)
    n = 2_000
    region = rng.integers(0, 4, n)
    sex = rng.integers(0, 2, n)
    real = {
        "sex": np.array(["female", "male"])[sex],
        "age": np.clip(rng.normal(35 + 10 * region, 12, n), 0, 99).astype(np.int64),
        "region": np.array(REGIONS)[region],
        "smoker": (rng.random(n) < 0.15 + 0.2 * sex).astype(np.int64),
        "income": np.round(rng.gamma(2 + region, 10, n), 2),
        "a": (region + rng.integers(0, 2, n)) % 3,
        "b": rng.integers(0, 2, n),
        ODD: (sex + rng.integers(0, 2, n)) % 2,
    }
    pq.write_table(pa.table(real), folder / "real.parquet")
    synthetic = {c: v[rng.integers(0, n, 1_200)] for c, v in real.items()}
    pq.write_table(pa.table(synthetic), folder / "synthetic.parquet")
    domain = {"sex": ["female", "male"], "age": {"lower": 0, "upper": 100, "bins": 5}, "region": REGIONS,
              "smoker": 2, "income": {"lower": 0, "upper": 120, "bins": 4}, "a": 3, "b": 2, ODD: 2}  # fmt: skip
    (folder / "domain.json").write_text(json.dumps(domain))


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> tuple[Path, dict, Path]:
    """The report and the JSON of one run of the command, and the folder of the tables it read."""
    folder, owner = tmp_path_factory.mktemp("report"), tmp_path_factory.mktemp("owner")  # not beside the table
    write_tables(folder)
    run = subprocess.run([sys.executable, "-m", "pipelines.evaluate_synthetic", str(folder / "real.parquet"),
                          str(folder / "domain.json"), str(folder / "synthetic.parquet"), "--json",
                          str(owner / "evaluation.json"), "--report", str(owner / "report.html"),
                          "--target", "smoker"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return owner / "report.html", json.loads((owner / "evaluation.json").read_text()), folder


def shown(element) -> tuple[float, str]:
    return float(element.attrs["data-value"]), element.text.strip()


def assert_shows_the_json(html: str, result: dict) -> None:
    """Every number of the page, exact (its data-value) and as printed, is the JSON's."""
    elements = Elements.of(html)
    by_id = {e.attrs["id"]: e for e in elements if "id" in e.attrs}
    workload = result["workload"]
    for name in ("average_error", "median_error", "max_error"):
        assert shown(by_id[name.replace("_", "-")]) == (workload[name], f"{workload[name]:.4f}")
    assert by_id["marginals"].attrs["data-value"] == str(workload["marginals"])
    for table in ("real", "synthetic"):
        assert by_id[f"rows-{table}"].attrs["data-value"] == str(result["rows"][table])
        assert by_id[f"rows-{table}"].text == f"{result['rows'][table]:,}"
    assert by_id["notice"].text == result["evaluation"]
    rows = [e for e in elements if e.tag == "tr" and "marginal" in e.classes()]
    cells = [e for e in elements if e.tag == "td" and "error" in e.classes()]
    assert len(rows) == len(cells) == min(evaluation_report.TABLE_ROWS, len(result["errors"]))
    for row, cell, entry in zip(rows, cells, result["errors"], strict=False):
        assert json.loads(row.attrs["data-columns"]) == entry["columns"] and cell.inside("tr", "marginal") is row
        assert shown(cell) == (entry["error"], f"{entry['error']:.4f}")
    rest = [e["error"] for e in result["errors"][evaluation_report.TABLE_ROWS :]] or [0.0]  # none: no line
    spread = (("rest-min", min(rest)), ("rest-max", max(rest)), ("rest-average", float(np.mean(rest))))
    for cls, value in spread if len(result["errors"]) > evaluation_report.TABLE_ROWS else ():
        (element,) = (e for e in elements if cls in e.classes())
        assert shown(element) == (value, f"{value:.4f}")
    figures = [e for e in elements if e.tag == "figure" and "column" in e.classes()]
    assert [f.attrs["data-column"] for f in figures] == [c["name"] for c in result["columns"]]
    errors = [e for e in elements if "error" in e.classes() and e.inside("figure", "column")]
    assert [shown(e) for e in errors] == [(c["error"], f"{c['error']:.4f}") for c in result["columns"]]
    maps = [e for e in elements if e.tag == "figure" and "heat-map" in e.classes()]
    assert [(m.attrs["data-role"], json.loads(m.attrs["data-columns"])) for m in maps] == [
        (h["role"], h["columns"]) for h in result["heat_maps"]
    ]
    errors = [e for e in elements if "error" in e.classes() and e.inside("figure", "heat-map")]
    assert [shown(e) for e in errors] == [(h["error"], f"{h['error']:.4f}") for h in result["heat_maps"]]
    for baseline in ("independent", "bootstrap"):
        value = result["baselines"][baseline]["average_error"]
        assert shown(by_id[f"{baseline}-average-error"]) == (value, f"{value:.4f}")
        cells = [e for e in elements if e.tag == "td" and baseline in e.classes()]
        assert [shown(c) for c in cells] == [
            (e[baseline], f"{e[baseline]:.4f}") for e in result["errors"][: len(cells)]
        ]
        assert cells and all(c.inside("tr", "marginal") for c in cells)
    learned = result["learning"]
    if learned is None:
        assert "learning" not in by_id
    else:
        for key, metric in itertools.product(("trained_on_synthetic", "trained_on_real"), ("auc", "accuracy")):
            value = learned[key][metric]
            assert shown(by_id[f"{key}-{metric}"]) == (value, f"{value:.4f}")
        value = learned["majority_class_accuracy"]
        assert shown(by_id["majority-accuracy"]) == (value, f"{value:.4f}")
    if result["release"] is None:
        assert "release-unknown" in by_id
    else:
        for key, value in result["release"].items():
            assert json.loads(by_id[f"release-{key.replace('_', '-')}"].attrs["data-value"]) == value


def test_the_json_holds_the_workload_and_the_columns(evaluated):
    _, result, _ = evaluated
    assert (
        result["evaluation"].startswith("Evaluation against the real data") and "do not publish" in result["evaluation"]
    )
    assert result["workload"]["marginals"] == len(result["errors"]) == 56  # 8 choose 3
    errors = [e["error"] for e in result["errors"]]
    assert errors == sorted(errors, reverse=True) and result["workload"]["max_error"] == errors[0]
    assert result["workload"]["average_error"] == pytest.approx(np.mean(errors), abs=1e-15)
    columns = {c["name"]: c for c in result["columns"]}
    assert columns["region"]["values"] == REGIONS and columns["region"]["kind"] == "labels"
    assert columns["age"]["values"] == ["0\u201319", "20\u201339", "40\u201359", "60\u201379", "80\u2013100"]
    assert columns["income"]["values"] == ["[0, 30)", "[30, 60)", "[60, 90)", "[90, 120]"]
    assert columns["b"]["values"] == ["0", "1"] and columns["b"]["kind"] == "codes"
    for column in result["columns"]:
        assert sum(column["real"]) == pytest.approx(1) and sum(column["synthetic"]) == pytest.approx(1)
        p, q = np.array(column["real"]), np.array(column["synthetic"])
        assert column["error"] == pytest.approx(np.abs(p - q).sum())
    assert [h["role"] for h in result["heat_maps"]] == ["worst", "typical"]
    assert result["heat_maps"][0]["columns"] == result["errors"][0]["columns"]
    assert result["heat_maps"][1]["rank"] == 29  # the median of 56, worst first
    (real, synthetic) = (pa.table(pq.read_table(evaluated[2] / f"{t}.parquet")) for t in ("real", "synthetic"))
    assert result["rows"] == {"real": real.num_rows, "synthetic": synthetic.num_rows}


def test_the_page_shows_the_json_s_numbers_and_escapes_labels(evaluated):
    report, result, _ = evaluated
    html = report.read_text()
    assert_shows_the_json(html, result)
    assert "<script" not in html.lower() and "<i>" not in html  # nothing runs: a page to read
    elements = Elements.of(html)
    assert any(e.text == ODD for e in elements if e.tag == "td")  # the column name, escaped and read back
    images = [e.attrs["src"] for e in elements if e.tag == "img"]
    assert len(images) == len(result["columns"]) == 8  # the columns' bar charts; the heat maps are inline
    svgs = [ElementTree.fromstring(base64.b64decode(src.split(",", 1)[1])) for src in images]  # well-formed
    assert all(src.startswith("data:image/svg+xml;base64,") for src in images)
    assert all(svg.get("width") and svg.get("height") for svg in svgs)  # a natural size for the <img>
    inline = inline_svgs(html)
    assert len(inline) == len(result["heat_maps"]) == 2
    texts = {"".join(t.itertext()) for svg in svgs + inline for t in svg.iter(SVG + "text")}
    assert any(REGIONS[3] in text for text in texts)


SVG = "{http://www.w3.org/2000/svg}"


def inline_svgs(html: str) -> list[ElementTree.Element]:
    """The heat maps' SVG, inlined in the page, each parsed as XML (well-formed: its texts escaped)."""
    return [ElementTree.fromstring("<svg " + part.split("</svg>", 1)[0] + "</svg>") for part in html.split("<svg ")[1:]]


def test_the_baselines_are_the_real_tables_own(evaluated):
    """Independent columns: the product of the real 1-way shares; the bootstrap: a resample of as many rows as the
    synthetic table. Both errors recomputed here for one marginal from the real table."""
    _, result, folder = evaluated
    columns = ["sex", "region", "smoker"]
    real = pq.read_table(folder / "real.parquet", columns=columns).to_pydict()
    rows = list(zip(*(real[c] for c in columns), strict=True))
    entry = next(e for e in result["errors"] if e["columns"] == columns)
    joint = {cell: count / len(rows) for cell, count in Counter(rows).items()}
    shares = [{v: count / len(rows) for v, count in Counter(real[c]).items()} for c in columns]
    product = {cell: shares[0][cell[0]] * shares[1][cell[1]] * shares[2][cell[2]]
               for cell in itertools.product(*shares)}  # fmt: skip
    assert entry["independent"] == pytest.approx(sum(abs(joint.get(c, 0.0) - p) for c, p in product.items()))
    assert result["baselines"]["bootstrap"]["rows"] == result["rows"]["synthetic"]
    errors = [e["bootstrap"] for e in result["errors"]]
    assert result["baselines"]["bootstrap"]["average_error"] == pytest.approx(np.mean(errors))
    assert min(errors) > 0 and max(errors) < 0.5  # sampling's error at 1,200 rows: small, never nothing
    assert result["release"] is None  # a table drawn by the test: no manifest beside it


def test_the_learning_section_trains_on_the_synthetic_rows_and_on_real_ones(evaluated):
    """smoker follows sex in the real table; the synthetic one drew each column on its own: trained on it, a model
    of smoker learns nothing of sex, while one trained on real rows does."""
    _, result, _ = evaluated
    learned = result["learning"]
    assert learned["target"] == "smoker" and learned["held_out"]["rows"] == 400
    assert learned["trained_on_real"]["rows"] == 1_600 and learned["trained_on_synthetic"]["rows"] == 1_200
    assert learned["trained_on_real"]["auc"] > learned["trained_on_synthetic"]["auc"] + 0.05
    assert learned["synthesized_for"] is None  # no manifest to say otherwise
    said = json.loads(json.dumps(result))
    said["learning"]["synthesized_for"] = "no target"
    assert 'id="synthesized-for">The synthetic rows were synthesized for no target' in evaluation_report.render(said)
    assert "synthesized-for" not in evaluation_report.render(result)


def test_the_number_check_sees_a_wrong_number(evaluated):
    report, result, _ = evaluated
    wrong = json.loads(json.dumps(result))
    wrong["errors"][3]["error"] += 1e-9
    with pytest.raises(AssertionError):
        assert_shows_the_json(report.read_text(), wrong)
    wrong = json.loads(json.dumps(result))
    wrong["learning"]["trained_on_synthetic"]["auc"] += 1e-9
    with pytest.raises(AssertionError):
        assert_shows_the_json(report.read_text(), wrong)


def test_chromium_renders_the_report_with_every_image(evaluated, tmp_path):
    chromium = require()
    report, result, _ = evaluated
    png = tmp_path / "report.png"
    dom = dom_after_load(chromium, report, screenshot=png, size=(1200, 3000))
    with Image.open(png) as image:
        assert image.size == (1200, 3000)
    assert png_colours(png) > 50  # text, bars and heat maps, not a blank page
    assert image_counts(dom) == (len(result["columns"]), 0)
    assert_shows_the_json(dom, result)
    assert len(inline_svgs(dom)) == len(result["heat_maps"])


def test_the_image_check_sees_a_broken_image(tmp_path):
    chromium = require()
    good = svg_charts.data_uri(svg_charts.bar_chart(["a", "b"], [0.5, 0.5], [0.25, 0.75]))
    broken = good[:-40] + "not base64 at all"
    page = tmp_path / "page.html"
    page.write_text(f'<!DOCTYPE html><html><body><img src="{good}"><img src="{broken}"></body></html>')
    assert image_counts(dom_after_load(chromium, page)) == (2, 1)


def test_a_blank_screenshot_has_one_colour(tmp_path):
    Image.new("RGB", (300, 200), "white").save(tmp_path / "blank.png")
    assert png_colours(tmp_path / "blank.png") == 1


def test_heat_maps_are_drawn_among_the_marginals_small_enough(tmp_path):
    """Titanic's Age (91 codes) x Fare (32) x Cabin (9) and Age x Fare x Sex (2) have more than HEAT_MAP_CELLS
    cells: the worst and the typical marginal are chosen among the other two, and the page says so."""
    lines = csv_path("titanic").read_text().splitlines()
    (tmp_path / "synthetic.csv").write_text("\n".join(lines[:501]) + "\n")
    real, domain, synthetic = str(csv_path("titanic")), str(domain_path("titanic")), str(tmp_path / "synthetic.csv")
    result = evaluate_synthetic.evaluation(real, domain, synthetic, 3, ["Age", "Fare", "Cabin", "Sex"])
    assert result["marginals_too_large_to_draw"] == 2
    drawn = sorted(tuple(h["columns"]) for h in result["heat_maps"])
    assert drawn == [("Age", "Cabin", "Sex"), ("Fare", "Cabin", "Sex")]
    assert "2 larger ones are in the table only" in evaluation_report.render(result)


def test_a_synthesize_release_s_report_states_its_parameters_and_keeps_a_wide_heat_map_readable(tmp_path):
    """A release made by synthesize (its manifest beside it) over a column of 150 long labels: the page states the
    release's parameters from the manifest; the heat map shows the X_CELLS - 1 largest values and the rest
    summed as "other (N values)", each cell and each shortened label whole on hover; Chromium renders it."""
    rng = np.random.default_rng(11)
    n = 4_000
    places = [f"postcode area {i:03d} ({'north' if i % 2 else 'south'}ern district, long name)" for i in range(150)]
    place = np.minimum(rng.zipf(1.3, n) - 1, 149)
    pq.write_table(pa.table({"place": np.array(places)[place], "region": (place + rng.integers(0, 2, n)) % 4,
                             "age": rng.integers(0, 5, n)}), tmp_path / "real.parquet")  # fmt: skip
    (tmp_path / "domain.json").write_text(json.dumps({"place": places, "region": 4, "age": 5}))
    (tmp_path / "release").mkdir()
    synthetic = tmp_path / "release" / "synthetic.parquet"
    made = subprocess.run([sys.executable, "-m", "pipelines.synthesize", "--input", str(tmp_path / "real.parquet"),
                           "--domain", str(tmp_path / "domain.json"), "--epsilon", "2", "--workload-degree", "2",
                           "--output", str(synthetic), "--release-id", "places/2026-12-01", "--budget-ledger",
                           str(tmp_path / "ledger.json"), "--dataset-id", "places"], capture_output=True, text=True,
                          timeout=300, input=None)  # fmt: skip
    assert made.returncode == 2 and "has no budget" in made.stderr  # a named release needs its ledger's budget
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.ledger",
            "init",
            "--budget-ledger",
            str(tmp_path / "ledger.json"),
            "--dataset-id",
            "places",
            "--epsilon",
            "2",
            "--delta",
            "1e-6",
        ],
        check=True,
        capture_output=True,
    )
    made = subprocess.run(made.args, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    report = tmp_path / "owner" / "report.html"
    run = subprocess.run([sys.executable, "-m", "pipelines.evaluate_synthetic", str(tmp_path / "real.parquet"),
                          str(tmp_path / "domain.json"), str(synthetic), "--degree", "2", "--report", str(report),
                          "--json", str(tmp_path / "owner" / "evaluation.json")], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "owner" / "evaluation.json").read_text())
    manifest = json.loads((tmp_path / "release" / "synthetic.manifest.json").read_text())
    assert result["release"] == {key: manifest.get(key) for key in evaluate_synthetic.RELEASE_FIELDS}
    assert (result["release"]["mechanism"], result["release"]["epsilon"]) == ("auto", 2.0)
    assert result["release"]["generator"] in ("aim", "independent")
    assert result["release"]["release_id"] == "places/2026-12-01" and result["release"]["rows"] > 0

    html = report.read_text()
    assert_shows_the_json(html, result)
    wide = [h for h in result["heat_maps"] if "place" in h["columns"]]
    assert wide, "a marginal of place is drawn"
    for svg in inline_svgs(html):
        labels = [t for t in svg.iter(SVG + "text") if t.find(SVG + "title") is not None]
        if not any("postcode area" in t.find(SVG + "title").text for t in labels):
            continue
        cells = [r.find(SVG + "title").text for r in svg.iter(SVG + "rect") if r.find(SVG + "title") is not None]
        assert len(cells) == 3 * evaluation_report.X_CELLS * 4  # three panels of 24 x 4 cells, each told on hover
        places_shown = {cell.split(": ", 1)[0].split(" \u00b7 ")[1] for cell in cells}
        assert len(places_shown) == evaluation_report.X_CELLS and "other (127 values)" in places_shown
        assert places_shown - {"other (127 values)"} <= set(places)  # whole labels, the largest kept
        full = next(t for t in labels if t.find(SVG + "title").text.startswith("postcode area"))
        assert "".join(full.itertext()).endswith("\u2026")  # shortened on the page, whole on hover
        assert full.find(SVG + "title").text in places_shown
        assert any(t.find(SVG + "title").text == "other (127 values)" for t in labels)  # the last label, drawn
        assert any(": synthetic \u2212 real " in cell for cell in cells)
        break
    else:
        pytest.fail("no heat map of place")

    chromium = require()
    png = tmp_path / "report.png"
    dom = dom_after_load(chromium, report, screenshot=png, size=(1200, 2400))
    assert png_colours(png) > 50 and image_counts(dom) == (len(result["columns"]), 0)
    assert_shows_the_json(dom, result)
    assert len(inline_svgs(dom)) == len(result["heat_maps"])
