"""Element ids and figure files of one page are unique for any set of names (review 70).

Found by review 70: an ASCII name's id part is its slug (every run of characters other than ASCII letters and digits
as ``_``), so regions ``"a b"`` and ``"a_b"`` both had ``fig-reliability-a_b``: the links jumped to the first, and
``reliability-a_b.png`` was written twice, the second region's diagram over the first's (a wrong picture for a region).
Names that differ only in case (``"WT"``, ``"wt"``) have distinct ids but name one file on a case-insensitive file
system (macOS, Windows). A name that collides with nothing keeps the id of earlier versions.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.product import ReportSection, ReportTable
from monai_unc.report import html as html_module
from monai_unc.report.html import (
    _unique_anchors,
    build_report,
    case_figure_paths,
    product_section,
    product_sections,
    section_ids,
)
from tests.report._hostile_cohorts import ball, binary_probs, evaluate, write_cases


def _ids(text: str) -> list[str]:
    return re.findall(r'\bid="([^"]*)"', text)


@pytest.fixture(scope="module")
def region_evaluation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-case evaluation of two sigmoid regions, ``"a b"`` and ``"zz"`` (8^3 voxels)."""
    root = tmp_path_factory.mktemp("regions")
    lab, pred = root / "labels", root / "predictions"
    lab.mkdir()
    pred.mkdir()
    for i in range(3):
        y = np.zeros((8, 8, 8), np.int16)
        y[2:6, 2:6, 2:6] = 1
        y[3:5, 3:5, 3:5] = 2
        p = np.stack([(y >= 1) * 0.8 + 0.1 + 0.01 * i, (y == 2) * 0.7 + 0.15], -1).astype(np.float32)
        nib.save(nib.Nifti1Image(y, np.eye(4)), lab / f"c{i}.nii.gz")
        nib.save(nib.Nifti1Image(p, np.eye(4)), pred / f"c{i}_probs.nii.gz")
        nib.save(nib.Nifti1Image((p > 0.5).astype(np.int16), np.eye(4)), pred / f"c{i}_seg.nii.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_evaluate(lab, pred, root / "eval", EvaluationConfig(regions={"a b": [1, 2], "zz": [2]}, spatial=False))
    return root / "eval"


def _page(evaluation: Path, out: Path, second: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    """The page of ``evaluation`` with region ``"zz"`` renamed ``second``, each figure file holding what it draws.

    ``evaluate`` refuses two regions of one column (``"a b"`` and ``"a_b"``); the page is made from what it reads,
    so the names are changed where the page reads them. The plots are stand-ins that name what they draw (fast).
    """
    load = html_module.load_evaluation
    drawn: dict[int, str] = {}

    def renamed(folder: Path):
        state, saved = load(folder)
        state.region_histograms = {second if k == "zz" else k: v for k, v in state.region_histograms.items()}
        per_region = saved["regions"]["per_region"]
        saved["regions"]["per_region"] = {second if k == "zz" else k: v for k, v in per_region.items()}
        drawn.update({id(h): f"region {k}" for k, h in state.region_histograms.items()})
        return state, saved

    monkeypatch.setattr(html_module, "load_evaluation", renamed)
    monkeypatch.setattr(html_module, "plot_reliability_diagram", lambda hist, **_: drawn.get(id(hist), "all"))
    for name in ("plot_qu_brats_curves", "plot_referral_curve", "plot_uncertainty_histograms"):
        monkeypatch.setattr(html_module, name, lambda *a, _n=name, **k: _n)

    def save(fig, path=None):
        data = str(fig).encode()
        if path is not None:
            Path(path).write_bytes(data)
        return data

    monkeypatch.setattr(html_module, "save_png", save)
    page = build_report(evaluation, out, n_cases=0)
    files = {p.name: p.read_text() for p in (out / "figures").glob("*.png")}
    return page.read_text(), files


def _region_figures(text: str) -> dict[str, str]:
    """``{id: region named in the figure's title}`` of the region diagrams of a page."""
    found = re.findall(r'<figure id="(fig-reliability-[^"]*)"><img alt="Reliability diagram, region ([^"]*) \(pooled\)',
                       text)
    return {i: r for i, r in found}


@pytest.mark.parametrize("second", ["a_b", "a-b", "A B"])
def test_regions_of_one_slug_get_two_ids_and_two_figure_files(region_evaluation, tmp_path, monkeypatch, second):
    text, files = _page(region_evaluation, tmp_path / "report", second, monkeypatch)
    ids = _ids(text)
    assert len(ids) == len(set(ids)), ids
    figures = _region_figures(text)
    assert sorted(figures.values()) == sorted(["a b", second])  # one figure, one id per region
    for fig_id, region in figures.items():  # each link (#fig-reliability-...) goes to its own region's figure,
        name = fig_id[len("fig-"):] + ".png"  # whose file is that region's diagram
        assert files[name] == f"region {region}", (fig_id, files)
    region_files = [n for n in files if n.startswith("reliability-")]
    assert len(region_files) == 2 and len({n.casefold() for n in region_files}) == 2, region_files  # any file system
    record = json.loads((tmp_path / "report" / "figures" / ".report_figures.json").read_text())
    assert set(record["figures"]) == set(files)  # the record names both (the next page removes them if not its own)


def test_names_of_one_slug_keep_their_own_ids_whatever_their_order():
    one = _unique_anchors(["a b", "a_b", "x", "WT", "wt"])
    two = _unique_anchors(["wt", "x", "a_b", "WT", "a b"])
    assert one == two
    assert one["x"] == "x" and one["a_b"] == "a_b" and one["WT"] == "WT"  # the name that is its own id keeps it
    assert one["a b"].startswith("a_b-") and one["wt"].startswith("wt-")
    assert len({v.casefold() for v in one.values()}) == 5
    # a name that collides with nothing keeps the id of earlier versions
    assert _unique_anchors(["a b", "c.d", "水 肿"]) == {"a b": "a_b", "c.d": "c_d", "水 肿": "水-20-肿"}
    # adding a name never renames one that is its own id
    assert _unique_anchors(["a_b"])["a_b"] == _unique_anchors(["a_b", "a b", "a-b"])["a_b"] == "a_b"


def test_table_and_banner_keys_of_one_slug_get_their_own_ids():
    tables = [ReportTable(["case"], [["c1"]], key=k) for k in ("a b", "a_b", "x.")]
    banners = [("x", "note", "text"), ("a_b", "note", "again")]
    ids = _ids(str(product_section(ReportSection("P", tables=tables, banners=banners), "p")))
    assert len(ids) == len(set(ids)) == 6, ids
    assert ids[0] == "product-p" and "product-p-a_b" in ids and "product-p-x" in ids  # the names' own ids kept


def test_product_sections_and_page_ids_are_unique(monkeypatch):
    sections = {"one": ReportSection("One", anchor="summary"), "two": ReportSection("Two", anchor="shared"),
                "three": ReportSection("Three", anchor="shared")}

    class Product:
        def __init__(self, key):
            self.key = key

        def report_section(self, block):
            return sections[block["key"]]

    monkeypatch.setattr(html_module, "product_type", lambda key: Product(key) if key in sections else None)
    out = product_sections({k: {"key": k} for k in sections})
    ids = [_ids(str(s))[0] for s in out]
    assert len(set(ids)) == 3 and "summary" not in ids, ids  # the page's own "summary" section keeps its id
    assert "shared" in ids  # one of the two keeps the id it asked for


def _save_stand_in(fig, path=None) -> bytes:
    """``save_png`` of a stand-in figure (a string): its text, also written to ``path`` when given."""
    data = str(fig).encode()
    if path is not None:
        Path(path).write_bytes(data)
    return data


def test_case_ids_of_one_file_name_get_two_figure_files(tmp_path, monkeypatch):
    """Case ids ``"A"`` and ``"a"``: two figure files on a case-insensitive file system too, each its case's."""
    cases = {cid: (binary_probs(np.where(ball(3) == 1, 0.9 - 0.1 * i, 0.1)), ball(3)) for i, cid in
             enumerate(["A", "a", "b"])}
    data = write_cases(tmp_path / "data", cases)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluation = evaluate(data, tmp_path / "eval", "--no-spatial")
    monkeypatch.setattr(html_module, "plot_case_overlay", lambda cid, *a, **k: f"case {cid}")
    for name in ("plot_reliability_diagram", "plot_referral_curve", "plot_uncertainty_histograms"):
        monkeypatch.setattr(html_module, name, lambda *a, _n=name, **k: _n)
    monkeypatch.setattr(html_module, "save_png", _save_stand_in)
    build_report(evaluation, tmp_path / "report", n_cases=3)
    files = {p.name: p.read_text() for p in (tmp_path / "report" / "figures").glob("case_*.png")}
    assert sorted(files.values()) == ["case A", "case a", "case b"], files
    assert len({n.casefold() for n in files}) == 3 and files["case_A.png"] == "case A"  # the first keeps its name
    assert files["case_b.png"] == "case b"


def test_case_figure_paths_refuse_what_cannot_name_a_file():
    assert case_figure_paths("f", ["x", "X", "x"]) == {"x": Path("f/case_x-2d711642.png"), "X": Path("f/case_X.png")}
    with pytest.raises(ValueError, match="case id 'a/b'"):
        case_figure_paths("f", ["a/b"])


def test_section_ids_avoid_the_triage_pages_own_ids():
    from monai_unc.report.triage import TRIAGE_PAGE_IDS

    ids = section_ids([(ReportSection("A", anchor="mismatch"), "a"), (ReportSection("B", anchor="fig-x"), "b"),
                       (ReportSection("C"), "c")], page_ids=TRIAGE_PAGE_IDS)
    assert ids[0].startswith("mismatch-") and ids[1] == "product-fig-x"  # the page's ids are its own
    assert ids[2] == "product-c" and len(set(ids)) == 3


def test_the_ascii_rule_is_one_function():
    from monai_unc.evaluation import config

    for name in ("a b", "x.", "--", "W-T", "Ödem 2", "a__b"):
        assert html_module._slug(name) == (config.former_region_suffix(name) or "region")
        assert config._former_slug(name) == (config.former_region_suffix(name) or "class").lower()


def test_tables_take_no_id_of_another_section_or_of_the_page():
    sections = {"one": ReportSection("One", anchor="x", tables=[ReportTable(["case"], [["c1"]], key="y")]),
                "two": ReportSection("Two", anchor="x-y"),
                "three": ReportSection("Three", anchor="fig", banners=[("referral", "note", "text")])}

    class Product:
        def report_section(self, block):
            return sections[block["key"]]

    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as m:
        m.setattr(html_module, "product_type", lambda key: Product() if key in sections else None)
        ids = [i for s in product_sections({k: {"key": k} for k in sections}) for i in _ids(str(s))]
    assert len(ids) == len(set(ids)) == 5, ids
    assert "x-y" in ids and "fig-referral" not in ids and "product-fig" in ids, ids


# ------------------------------------------------------------------------------------------------ second review
class _Products:
    """Stand-in products whose sections are ``sections[name]`` (for :func:`product_sections`)."""

    def __init__(self, sections: dict[str, ReportSection]):
        self.sections = sections

    def report_section(self, block):
        return self.sections[block["key"]]


def _product_ids(sections: dict[str, ReportSection], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setattr(html_module, "product_type", lambda key: _Products(sections) if key in sections else None)
    return [i for s in product_sections({k: {"key": k} for k in sections}) for i in _ids(str(s))]


def test_tables_of_two_sections_never_share_an_id(monkeypatch):
    """Found by review 70: section ``a``'s table ``x·y`` (``a-x-b7-y``) and section ``a-x-b7``'s table ``y`` had one
    id; the ids of all sections, tables and banners of a page are now allocated together."""
    sections = {"one": ReportSection("One", anchor="a", tables=[ReportTable(["c"], [["1"]], key="x\u00b7y")]),
                "two": ReportSection("Two", anchor="a-x-b7", tables=[ReportTable(["c"], [["1"]], key="y")],
                                     banners=[("x\u00b7y", "note", "text")])}
    ids = _product_ids(sections, monkeypatch)
    assert len(ids) == len(set(ids)) == 5, ids
    assert ids[:2] == ["a", "a-x-b7-y-" + ids[1].rsplit("-", 1)[1]] and ids[2:4] == ["a-x-b7", "a-x-b7-y"], ids


def test_element_ids_compare_exactly(monkeypatch):
    """Found by review 70: ids that name no file were compared case-insensitively, so anchors ``Masks`` and ``masks``,
    table keys ``A`` and ``a`` and an anchor ``Summary`` (the page has ``summary``) were renamed; HTML ids are
    case-sensitive, and names that collide with nothing keep the ids of earlier versions."""
    tables = [ReportTable(["c"], [["1"]], key=k) for k in ("A", "a")]
    assert _ids(str(product_section(ReportSection("P", tables=tables), "p"))) == ["product-p", "product-p-A",
                                                                                  "product-p-a"]
    assert section_ids([(ReportSection("A", anchor="Masks"), "a"), (ReportSection("B", anchor="masks"), "b"),
                        (ReportSection("C", anchor="Summary"), "c"), (ReportSection("D", anchor="Fig-x"), "d")]) \
        == ["Masks", "masks", "Summary", "Fig-x"]
    sections = {"one": ReportSection("One", anchor="Plots", banners=[("Note", "n", "t"), ("note", "n", "t")])}
    assert _product_ids(sections, monkeypatch) == ["Plots", "Plots-Note", "Plots-note"]


def test_file_names_are_compared_without_compatibility_folding():
    """Found by review 70: NFKC folded ``x²`` to ``x2`` and ``①`` to ``1``, which no file system does; canonically
    equal names (NFC ``é``, NFD ``é``) and names differing in case still get two files."""
    assert _unique_anchors(["x2", "x\u00b2"]) == {"x2": "x2", "x\u00b2": "x\u00b2"}
    assert sorted(p.name for p in case_figure_paths("f", ["1", "\u2460"]).values()) == ["case_1.png", "case_\u2460.png"]
    nfc, nfd = "\u00e9", "e\u0301"
    paths = case_figure_paths("f", [nfc, nfd, "\u00c9"])
    assert len({p.name.casefold() for p in paths.values()}) == 3 and paths[nfd].name == f"case_{nfd}.png", paths


def test_page_ids_are_reserved_per_page(monkeypatch):
    """Found by review 70: ``report.html`` renamed an anchor ``mismatch`` (an id of the triage page only)."""
    from monai_unc.report.triage import TRIAGE_PAGE_IDS

    assert section_ids([(ReportSection("A", anchor="mismatch"), "a"), (ReportSection("B", anchor="triage-check"),
                                                                        "b")]) == ["mismatch", "triage-check"]
    assert _product_ids({"one": ReportSection("One", anchor="unverified")}, monkeypatch) == ["unverified"]
    on_triage = section_ids([(ReportSection("A", anchor="mismatch"), "a"), (ReportSection("B", anchor="regions"), "b")],
                            page_ids=TRIAGE_PAGE_IDS)
    assert on_triage[0].startswith("mismatch-") and on_triage[1] == "regions", on_triage  # no regions on that page
    assert section_ids([(ReportSection("A", anchor="regions"), "a")])[0].startswith("regions-")


def test_keep_page_figures_never_removes_the_file_it_wrote(tmp_path):
    """Found by review 70: page 1 drew cases ``A`` and ``a`` (``case_A.png``, ``case_a-<digest>.png``), page 2 only
    ``a`` (``case_a.png``) and then removed ``case_A.png``: on a case-insensitive file system, the file it had just
    written. An earlier name of the file key of one this page wrote is kept, and recorded, so that a later page
    removes it when it shows neither."""
    from monai_unc.report.html import Figure, figures_folder, keep_page_figures

    fig_dir, _ = figures_folder(tmp_path)
    first = case_figure_paths(fig_dir, ["A", "a"])
    for p in first.values():
        p.write_bytes(b"one")
    keep_page_figures(fig_dir, set(), [Figure(f"case-{c}", "t", "c", b"", p) for c, p in first.items()])
    fig_dir, earlier = figures_folder(tmp_path)
    assert earlier == {"case_A.png", first["a"].name}
    second = case_figure_paths(fig_dir, ["a"])["a"]
    second.write_bytes(b"two")
    keep_page_figures(fig_dir, earlier, [Figure("case-a", "t", "c", b"", second)])
    assert second.read_bytes() == b"two" and (fig_dir / "case_A.png").exists() and not first["a"].exists()
    fig_dir, earlier = figures_folder(tmp_path)
    assert earlier == {"case_a.png", "case_A.png"}
    keep_page_figures(fig_dir, earlier, [])  # a page without these cases removes both names
    assert not list(fig_dir.glob("*.png"))


def test_a_case_without_a_figure_takes_no_file_name(tmp_path, monkeypatch):
    """Found by review 70: a case whose files cannot be read (or without a map) has no figure, but still made the
    other case of its file name take ``case_<id>-<digest>.png``."""
    cases = {cid: (binary_probs(np.where(ball(3) == 1, 0.9 - 0.1 * i, 0.1)), ball(3)) for i, cid in
             enumerate(["A", "a"])}
    data = write_cases(tmp_path / "data", cases)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluation = evaluate(data, tmp_path / "eval", "--no-spatial")
    load = html_module.load_figure_case

    def unreadable_a(files, *args, **kwargs):
        if files.case_id == "A":
            args[-1].append("A: no figure and no viewer: unreadable")
            return None
        return load(files, *args, **kwargs)

    monkeypatch.setattr(html_module, "load_figure_case", unreadable_a)
    monkeypatch.setattr(html_module, "plot_case_overlay", lambda cid, *a, **k: f"case {cid}")
    for name in ("plot_reliability_diagram", "plot_referral_curve", "plot_uncertainty_histograms"):
        monkeypatch.setattr(html_module, name, lambda *a, _n=name, **k: _n)
    monkeypatch.setattr(html_module, "save_png", _save_stand_in)
    text = build_report(evaluation, tmp_path / "report", n_cases=2, viewer=False).read_text()
    files = {p.name: p.read_text() for p in (tmp_path / "report" / "figures").glob("case_*.png")}
    assert files == {"case_a.png": "case a"}, files
    assert "<bdi>A</bdi>: no figure and no viewer: unreadable" in text  # its line is still on the page


def test_a_triage_case_without_a_figure_takes_no_file_name(tmp_path, monkeypatch):
    """As above, on the triage page: case ``A``'s files cannot be read, case ``a`` keeps ``case_a.png``."""
    from types import SimpleNamespace

    from monai_unc.evaluation.triage import ReferralRule
    from monai_unc.report import triage as triage_module
    from tests.report.test_triage_hostile_numbers import triage_json

    doc = json.loads(json.dumps(triage_json()).replace('"b"', '"A"'))  # cases a, A (referred) and c
    measure = ReferralRule.from_json(doc["rule"], "rule").measure
    doc["files"] = {c: {"case": c, "label": str(tmp_path / f"{c}_label.nii.gz"),
                        "maps": {measure: str(tmp_path / f"{c}_map.nii.gz")}} for c in ("A", "a")}
    (tmp_path / "triage.json").write_text(json.dumps(doc))

    def load(files, measure, *args, **kwargs):
        if files.case_id == "A":
            args[-1].append("A: no figure and no viewer: unreadable")
            return None
        return SimpleNamespace(seg=np.zeros((2, 2, 2), int), maps={measure: np.zeros((2, 2, 2))}, image=None,
                               spacing=(1.0, 1.0, 1.0), affine=np.eye(4), image_unit=None)

    monkeypatch.setattr(triage_module, "load_figure_case", load)
    monkeypatch.setattr(triage_module, "plot_triage_overlay", lambda cid, *a, **k: f"case {cid}")
    monkeypatch.setattr(triage_module, "plot_score_distribution", lambda *a, **k: "scores")
    monkeypatch.setattr(triage_module, "save_png", _save_stand_in)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the file is not signed
        text = triage_module.build_triage_page(tmp_path, n_cases=3, viewer=False).read_text()
    files = {p.name: p.read_text() for p in (tmp_path / "figures").glob("*.png")}
    assert files == {"case_a.png": "case a", "scores.png": "scores"}, files
    assert "<bdi>A</bdi>: no figure and no viewer: unreadable" in text


def test_page_ids_and_element_ids_are_checked():
    with pytest.raises(TypeError, match="page_ids"):
        section_ids([(ReportSection("A"), "a")], page_ids="summary")
    section = ReportSection("P", tables=[ReportTable(["c"], [["1"]], key="t")], banners=[("b", "n", "t")])
    with pytest.raises(ValueError, match="element_ids"):
        product_section(section, "p", "product-p", element_ids=["product-p-t"])
    ids = _ids(str(product_section(section, "p", "mine", element_ids=["x1", "x2"])))
    assert ids == ["mine", "x1", "x2"]
