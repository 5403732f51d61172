"""Review 61 of the report pages and the notebook viewer."""

from __future__ import annotations

import gzip
import re
import warnings
from html.parser import HTMLParser

import nibabel as nib
import numpy as np
import pytest

from monai_unc.report.palette import class_colors
from monai_unc.report.viewer import case_viewer


# ------------------------------------------------------- notebook colours of labels above 65535 (and below)
def _sampled_labels(top: int, n: int, seed: int) -> np.ndarray:
    """A 3-D label map of ``n`` label values sampled from 1 .. ``top`` (``top`` and 1 among them), background 0."""
    rng = np.random.default_rng(seed)
    values = np.unique(np.r_[1, top, rng.choice(np.arange(1, top + 1), n - 2, replace=False)])
    seg = np.zeros((10, 10, 10), np.int32)
    seg.reshape(-1)[rng.choice(seg.size, values.size, replace=False)] = values
    return seg


def _hex(rgba) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(c) for c in rgba[:3]))


@pytest.mark.parametrize(("top", "seed"), [(70000, 0), (65536, 1), (65535, 2), (4097, 3), (300, 4)])
def test_notebook_colours_each_label_as_the_pages_viewer_does(tmp_path, top, seed):
    """Found by review 61: a prediction holding a label above 65535 had no label table in ``notebook.view`` (the
    continuous ``winter`` ramp), so label 70000 and every other label of it were not in their colour of the pages'
    viewer. Every label value of the file, sampled from 0 .. ``top``, now has the pages' colour in the widget."""
    pytest.importorskip("ipyniivue")
    from monai_unc.report.notebook import view

    seg = _sampled_labels(top, 120, seed)
    path = tmp_path / "c1_seg.nii.gz"
    nib.save(nib.Nifti1Image(seg, np.diag([1.0, 1.5, 2.0, 1.0])), path)
    volume = view(prediction=path).volumes[0]
    lut = volume.colormap_label
    assert lut is not None and lut.min == 0
    rgba = np.asarray(lut.lut).reshape(-1, 4)
    if volume.data is not None:  # shown by rank, as the pages' viewer: the data's voxels are display indices
        shown = nib.Nifti1Image.from_bytes(gzip.decompress(volume.data))
        index = np.asarray(shown.dataobj)
        np.testing.assert_allclose(shown.affine, np.diag([1.0, 1.5, 2.0, 1.0]))
        assert volume.name == "c1_seg.nii.gz" and not volume.path
    else:
        index = seg
    assert top <= 65535 or volume.data is not None
    values = np.unique(seg[seg > 0])
    # the pages' viewer: its legend's colour of each label value, and its own label table
    page = case_viewer("c1", seg, np.random.default_rng(seed).random(seg.shape))
    page_colour = {lab["value"]: lab["color"] for lab in page["labels"]}
    pred = next(v for v in page["volumes"] if v["role"] == "prediction")
    table = pred["colormap_label"]
    page_table = {lab["value"]: "#{:02x}{:02x}{:02x}".format(table["R"][i], table["G"][i], table["B"][i])
                  for i, lab in enumerate(page["labels"], start=1)}
    expected = class_colors(values)
    for v in values:
        voxel = index[seg == v]
        assert np.unique(voxel).size == 1 and 0 < voxel[0] < rgba.shape[0]
        colour = rgba[int(voxel[0])]
        assert colour[3] == 255
        assert _hex(colour) == page_colour[int(v)] == page_table[int(v)] == expected[int(v)], v
    assert (index[seg == 0] == 0).all() and rgba[0, 3] == 0  # the background transparent
    drawn = {int(i) for i in np.unique(index)}
    assert all(rgba[i, 3] == 0 for i in range(rgba.shape[0]) if i not in drawn)  # absent values too
    if volume.data is not None:  # hovering names the true label value
        assert lut.labels == [""] + [str(int(v)) for v in values]


# ------------------------------------------------ right-to-left case ids isolated wherever a page shows them
RTL_IDS = ["מטופל_12", "مريض_7", "c03", "c04", "מטופל_5"]
_FINGERPRINT = re.compile(r"SHA256:[0-9A-Za-z+/=]+")
_VOID = {"br", "img", "meta", "link", "input", "hr", "col", "source", "wbr", "area", "base"}


class _IdText(HTMLParser):
    """Every text of a page (not script, style or title) that holds one of ``ids``: (id, isolated?, text)."""

    def __init__(self, ids):
        super().__init__()
        self.ids, self.stack, self.hits = ids, [], []

    def handle_starttag(self, tag, attrs):
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        if any(t in ("script", "style", "title") for t in self.stack):
            return
        text = _FINGERPRINT.sub("", data)  # a random key's fingerprint may hold e.g. "c04" by chance
        for cid in self.ids:
            if cid in text:
                self.hits.append((cid, data == cid and self.stack[-1:] == ["bdi"], data))


def _unisolated(page: str, ids=RTL_IDS) -> tuple[int, list]:
    parser = _IdText(ids)
    parser.feed(page)
    return len(parser.hits), [(cid, text[:80]) for cid, ok, text in parser.hits if not ok]


@pytest.fixture(scope="module")
def rtl_pages(tmp_path_factory):
    """``evaluate`` / ``report`` / ``triage`` of five cases, three with Hebrew or Arabic ids (no bidi controls)."""
    from monai_unc import cli
    from tests.report._hostile_cohorts import ball, binary_probs, evaluate, write_cases

    root = tmp_path_factory.mktemp("rtl")
    lab = ball(4)
    cases = {}
    for i, cid in enumerate(RTL_IDS):
        fg = np.where(lab == 1, 0.9 - 0.1 * i, 0.05 + 0.02 * i)
        if i >= 3:
            fg[:6] = 0.2
        cases[cid] = (binary_probs(fg), lab)
    data = write_cases(root, cases)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = evaluate(data, root / "ev", "--budget", "0.4", "--target-risk", "0.3")
        assert cli.main(["report", "-e", str(out), "-o", str(root / "rep"), "--quiet"]) == 0
        assert cli.main(["triage", "-r", str(out / "referral_rule.json"), "-p", str(data["predictions"]), "-o",
                         str(root / "tri"), "--images", str(data["images"]), "--allow-unsigned", "--quiet"]) == 0
    return {"report": (root / "rep" / "report.html").read_text(), "triage": (root / "tri" / "triage.html").read_text()}


@pytest.mark.parametrize("page", ["report", "triage"])
def test_every_case_id_a_page_shows_is_isolated(rtl_pages, page):
    """Found by review 61: a right-to-left case id shown inline next to numbers (the triage table, the figure captions
    ``<id>: triage rank 1 of 5``, the viewer's note, the warnings ``<id>: ...``) was reordered with them by the
    browser's bidi algorithm; on main not one of the 23 (report) and 14 (triage) places was isolated. Every text of
    the page holding an id is now that id alone in a ``<bdi>`` element."""
    shown, bad = _unisolated(rtl_pages[page])
    assert shown >= 10 and not bad, bad


def test_case_id_lists_notes_and_warnings_of_the_report_are_isolated():
    """The report's paths the cohort above does not take: cases tied at the budget's cut, cases without a defined
    score, a case whose files could not be read, a case's figure and its warnings."""
    from monai_unc.evaluation import CohortState, EvaluationConfig, summarize
    from monai_unc.report.html import Figure, render_html

    ids = ["מטופל_1", "مريض_2", "מטופל_3", "c4", "c5"]
    scores = [0.9, 0.9, 0.9, float("nan"), 0.1]
    rows = [{"case": c, "dice": d, "measure": "predictive_entropy", "predictive_entropy_fg_mean": s}
            for c, d, s in zip(ids, [0.5, 0.6, 0.9, 0.7, 0.95], scores)]
    state = CohortState(num_classes=2, n_fine_bins=240, rows=rows, warnings=[f"{ids[1]}: BUC is undefined"])
    summary = summarize(state, EvaluationConfig(budget=0.4))
    assert summary["triage"]["tied"] and summary["score"]["undefined"] == ["c4"]
    figure = Figure(f"case-{ids[0]}", f"{ids[0]}: triage rank 2 of 5", "caption", b"png", None, ids[0])
    page = render_html(summary, state.sorted_rows(), [], [figure],
                       case_notes=[f"{ids[2]}: no figure and no viewer: missing file"])
    shown, bad = _unisolated(page, ids)
    assert shown >= 10 and not bad, bad
    tied = summary["triage"]["tied"]
    assert sorted(tied) == sorted(ids[:3])
    assert "Cases " + ", ".join(f"<bdi>{c}</bdi>" for c in tied) + " have the same score" in page
    assert "<b><bdi>מטופל_1</bdi>: triage rank 2 of 5.</b>" in page
    assert 'alt="מטופל_1: triage rank 2 of 5"' in page  # an attribute stays text


def test_isolated_ids_are_escaped_by_construction():
    from monai_unc.report.markup import case_line, isolate, isolated_list

    assert str(isolate("<img src=x onerror=alert(1)>")) == "<bdi>&lt;img src=x onerror=alert(1)&gt;</bdi>"
    assert str(isolated_list(["a&b", "\u202ex"])) == "<bdi>a&amp;b</bdi>, <bdi>[U+202E]x</bdi>"
    assert str(case_line("c1<: x", ["c1<", "c1"])) == "<bdi>c1&lt;</bdi>: x"
    assert str(case_line("c1x: y", ["c1"])) == "c1x: y"  # an id must be followed by ": "


def test_monitor_site_names_are_isolated(tmp_path):
    """A site's name (text from the store, e.g. a Hebrew hospital name) shown in the overview, its heading and its
    alarms, each isolated."""
    from monai_unc.monitoring import VerifyResult, monitor_status
    from monai_unc.report.monitor import build_monitor_page

    site = "בית_חולים_3"
    rows = [{"case_id": f"c{i}", "site": site, "triaged_at": f"t{i}", "score": 5.0 + i, "image_z_max": 0.5,
             "decision": "accept", "rule_digest": "r1", "loss": None} for i in range(60)]
    groups = [g for g in monitor_status(rows, {"r1": {"calibration_scores": [0.1, 0.2, 0.3], "target_risk": 0.1}},
                                        alpha=0.05) if g.site == site]
    page = build_monitor_page(groups, [], VerifyResult(True, 0, ""), tmp_path / "m.html").read_text()
    shown, bad = _unisolated(page, [site])
    assert shown >= 3 and not bad, bad


def test_a_product_tables_case_column_is_isolated():
    from monai_unc.product import ReportSection
    from monai_unc.report.html import product_section

    section = ReportSection(title="Lesions", table_head=["case", "lesion", "Dice"],
                            table_rows=[["מטופל_12", 3, 0.5], ["c2", 1, 0.9]])
    page = str(product_section(section, "lesions"))
    shown, bad = _unisolated(page, ["מטופל_12", "c2"])
    assert shown == 2 and not bad, bad
    assert "<td>1</td>" in page  # other columns as they were


def test_an_undefined_ood_auroc_reads_as_undefined_on_the_report():
    """Every case's score undefined: summary.json's OoD AUROC is null with a warning (it was 0.5, review 61); the
    report's card reads "–" rather than leaving the card out without a word."""
    from monai_unc.evaluation import CohortState, EvaluationConfig, summarize
    from monai_unc.report.html import render_html

    rows = [{"case": f"c{i}", "dice": 0.8, "measure": "predictive_entropy", "predictive_entropy_fg_mean": float("nan"),
             "shift": s} for i, s in enumerate(["none", "none", "blur", "blur"])]
    state = CohortState(num_classes=2, n_fine_bins=240, rows=rows)
    summary = summarize(state, EvaluationConfig(shifts={r["case"]: r["shift"] for r in rows}))
    assert summary["ood"]["auroc"] is None
    assert any("ood_auroc_by_shift: every one of the 4 scores is undefined" in w for w in summary["warnings"])
    page = render_html(summary, state.sorted_rows(), [], [])
    card = re.search(r'<div class="v">([^<]*)</div><div class="k">OoD AUROC</div>', page)
    assert card is not None and card.group(1) == "–", page[page.find("OoD AUROC") - 100:page.find("OoD AUROC") + 100]
