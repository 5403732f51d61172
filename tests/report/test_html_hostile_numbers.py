"""The numbers of the QC report (``report.html``) under the inputs a hostile tester chose.

Each test guards a defect found by hostile testing: a tie at the budget's cut, scores shown with fixed decimals next to
the certified threshold, undefined scores drawn at an invented value, a hand-edited ``metrics.csv`` embedded as the
download, the budget rounded to a whole percent, a region diagram's caption naming another ECE than its title, and a
threshold that accepts every score written as "at most any". The formatting helpers they rely on
(:mod:`monai_unc.product`) are checked here too.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import re
import shutil
import warnings
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.evaluation import load_evaluation, resummarize
from monai_unc.report import html as report_html
from monai_unc.report.html import build_report
from monai_unc.report.plots import plot_scores_by_shift, plot_uncertainty_histograms
from tests.report._hostile_cohorts import ball, binary_probs, evaluate, small_score_cases, write_cases


class Page(HTMLParser):
    """The cards (value, label), the tables (head, rows of cell texts, row attributes) and the text of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.cards: list[tuple[str, str]] = []
        self.tables: dict[str, dict[str, list[Any]]] = {}
        self.text: list[str] = []
        self._table: str | None = None
        self._row: list[str] | None = None
        self._attrs: dict[str, Any] = {}
        self._cell: list[str] | None = None
        self._head = False
        self._card: tuple[str, list[str]] | None = None
        self._value = ""
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id") or f"t{len(self.tables)}"
            self.tables[self._table] = {"head": [], "rows": [], "attrs": []}
        elif tag == "thead":
            self._head = True
        elif tag == "tbody":
            self._head = False
        elif tag == "tr" and self._table:
            self._row, self._attrs = [], a
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "div" and a.get("class") in ("v", "k"):
            self._card = (a["class"], [])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            t = self.tables[self._table]
            if self._head:
                t["head"] = self._row
            else:
                t["rows"].append(self._row)
                t["attrs"].append(self._attrs)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "div" and self._card is not None:
            kind, parts = self._card
            if kind == "v":
                self._value = "".join(parts)
            else:
                self.cards.append((self._value, "".join(parts)))
            self._card = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._card is not None:
            self._card[1].append(data)

    def plain(self) -> str:
        return " ".join("".join(self.text).split())

    def rows(self, table: str = "triage-table") -> list[dict[str, str]]:
        t = self.tables[table]
        return [dict(zip(t["head"], r)) for r in t["rows"]]


def _quiet_build(*args: Any, **kwargs: Any) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return build_report(*args, **kwargs)


# ------------------------------------------------------------------------------------------------ cohorts
@pytest.fixture(scope="module")
def tie(tmp_path_factory):
    """Four cases; a_tied_good and b_tied_bad have the same probabilities (the same score, the lowest two) and
    different references, so a budget of 0.75 refers three cases and cuts through their tie."""
    root = tmp_path_factory.mktemp("tie")
    pred = ball(4)

    def probs(p: float) -> np.ndarray:
        return binary_probs(np.where(pred == 1, p, 1 - p))

    cases = {"a_tied_good": (probs(0.9), pred), "b_tied_bad": (probs(0.9), ball(2)),
             "c": (probs(0.75), pred), "d": (probs(0.65), pred)}
    data = write_cases(root / "data", cases)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        evaluate(data, root / "eval", "--budget", "0.75")
    return root


@pytest.fixture(scope="module")
def small_scores(tmp_path_factory):
    """Ten cases with scores 3e-6 .. 3e-3 and a risk-controlled threshold whose refused calibration case sits one
    float above it (docs/triage.md)."""
    root = tmp_path_factory.mktemp("small")
    data = write_cases(root / "data", small_score_cases())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        evaluate(data, root / "eval", "--measure", "predictive_entropy", "--score", "predictive_entropy_mean",
                 "--target-risk", "0.5", "--risk", "failure", "--delta", "0.5")
    return {"root": root, "data": data, "eval": root / "eval"}


# ------------------------------------------------------------------------------------------------ 1. ties
def _capture_figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The figures the report saves from now on, by file stem (``report_html.save_png`` still writes them)."""
    figures: dict[str, Any] = {}
    save = report_html.save_png

    def keep(fig: Any, path: Any = None) -> bytes:
        if path is not None:
            figures[Path(path).stem] = fig
        return save(fig, path)

    monkeypatch.setattr(report_html, "save_png", keep)
    return figures


def test_a_tie_at_the_budgets_cut_counts_the_rows_the_table_marks(tie, tmp_path):
    """Found by hostile testing: with two cases tied at the budget's cut the table flagged one of them (by case id)
    while the "Dice kept" card and the note gave the referral curve's expectation over the tie (0.693 for a kept row
    of Dice 0.386): the numbers of the page did not add up. The card and the note now give the mean Dice of the rows
    the table marks, the tied rows are marked, and the expectation is shown labelled as such."""
    state, summary = load_evaluation(tie / "eval")
    t = summary["triage"]
    assert t["tied"] == ["a_tied_good", "b_tied_bad"] and t["referred"] == ["d", "c", "a_tied_good"]
    dice = {r["case"]: r["dice"] for r in state.rows}
    assert t["dice_kept"] == pytest.approx(dice["b_tied_bad"])
    assert t["dice_referred"] == pytest.approx(np.mean([dice[c] for c in t["referred"]]))
    assert 3 * t["dice_referred"] + t["dice_kept"] == pytest.approx(4 * t["dice_all"])  # the page adds up
    assert t["dice_retained"] != pytest.approx(t["dice_kept"])  # the expectation over the tie is another number
    page = Page(_quiet_build(tie / "eval", tmp_path / "r", n_cases=0, viewer=False).read_text())
    rows = page.rows()
    kept = [float(r["Dice"]) for r in rows if r["budget"].startswith("budget: kept")]
    card = [v for v, k in page.cards if k.startswith("mean Dice of the kept cases")]
    assert card == [f"{t['dice_kept']:.3f}"] and float(card[0]) == pytest.approx(np.mean(kept), abs=1e-3)
    assert {r["case"] for r in rows if "tied at the cut" in r["budget"]} == {"a_tied_good", "b_tied_bad"}
    text = page.plain()
    assert f"the mean Dice of the 1 retained cases is {t['dice_kept']:.3f}" in text
    assert f"expected mean Dice of the retained cases is {t['dice_retained']:.3f}" in text


# ------------------------------------------------------------------------------------------------ 2. score digits
_OPS = {"<": float.__lt__, "<=": float.__le__, "≤": float.__le__, ">": float.__gt__, ">=": float.__ge__}


def test_report_scores_keep_significant_digits_and_never_read_equal_to_the_threshold(small_scores, tmp_path):
    """Found by hostile testing: scores shown with 4 fixed decimals (3.3e-06 .. 4.1e-05 all read 0.0000) next to a
    threshold with 6 decimals, so the case one float above the threshold read like it. Every score now has 4
    significant digits and the rule is written so that every row's printed score is on its side of the printed
    bound."""
    ev = small_scores["eval"]
    state, summary = load_evaluation(ev)
    rc = summary["risk_control"]
    scores = {r["case"]: r["predictive_entropy_mean"] for r in state.rows}
    cut = math.nextafter(rc["threshold"], math.inf)
    assert cut in scores.values()  # the case the hostile tester used: one float above the threshold
    page = Page(_quiet_build(ev, tmp_path / "r", n_cases=0, viewer=False).read_text())
    rows = page.rows()
    shown = {r["case"]: r["predictive_entropy_mean"] for r in rows}
    assert len(set(shown.values())) == len(scores)  # distinct scores stay distinct
    for cid, text in shown.items():
        assert float(text) == pytest.approx(scores[cid], rel=1e-3) and text != "0.0000"
    m = re.search(r"Accept a case when its score is (below|at most) (\S+?) ", page.plain())
    assert m, page.plain()[:2000]
    op_accept = "<" if m.group(1) == "below" else "<="
    bound = float(m.group(2))
    for r in rows:
        accepted = r["rule (risk-controlled)"] == "rule: accept"
        holds = _OPS[op_accept](float(r["predictive_entropy_mean"]), bound)
        assert holds == accepted, (r, m.group(0))


def test_triage_page_and_reasons_never_read_a_score_equal_to_the_threshold(small_scores, tmp_path):
    """Found by hostile testing: the triage page showed "score 0.00102105 > threshold 0.00102105" for the case one
    float above the threshold, and its score column "0.0010" (fixed decimals). The header's rule, the score column
    and every reason now read true with the numbers as printed."""
    from monai_unc.evaluation import run_triage
    from monai_unc.report.triage import build_triage_page

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_triage(small_scores["data"]["predictions"], small_scores["eval"] / "referral_rule.json", tmp_path / "t")
        page = Page(build_triage_page(tmp_path / "t", n_cases=0, viewer=False).read_text())
    m = re.search(r"accept score (<|≤) (\S+)", page.plain())
    assert m, page.plain()[:1000]
    bound = float(m.group(2))
    rows = page.rows()
    assert len({r["predictive_entropy_mean"] for r in rows}) == len(rows)
    for r in rows:
        score = float(r["predictive_entropy_mean"])
        assert _OPS[m.group(1)](score, bound) == (r["rule decision"] == "rule: accept"), r
        why = re.search(r"score (\S+) (<=|>|<|>=) threshold (\S+?),?(?: |$)", r["reason"])
        assert why, r["reason"]
        a, op, b = float(why.group(1)), why.group(2), float(why.group(3))
        assert _OPS[op](a, b), r["reason"]  # the reason is true as printed
        assert why.group(1) != why.group(3) or op in ("<=", ">="), r["reason"]


def test_threshold_text_separates_every_score_from_the_bound():
    """The statement of a threshold (found by hostile testing: see above) on random scores near it: printed score and
    printed bound always compare as the exact values do."""
    from monai_unc.product import ThresholdText, format_score, separating_digits

    rng = np.random.default_rng(0)
    for _ in range(300):
        thr = float(rng.uniform(1e-6, 2.0)) * float(10.0 ** rng.integers(-5, 2))
        near = [math.nextafter(thr, math.inf), math.nextafter(thr, -math.inf), thr, thr * (1 + 1e-9), thr * 1.0004,
                thr * 0.9996, thr * 1.5, thr * 0.5]
        scores = [near[i] for i in rng.choice(len(near), size=3, replace=False)]
        t = ThresholdText.choose(thr, scores)
        bound = float(t.bound_text())
        for s in scores:
            accepted = s <= thr
            assert t.accepts(s) == accepted
            assert _OPS["<" if t.strict else "<="](float(t.score(s)), bound) == accepted, (thr, s, t)
    assert format_score(3.263803819208988e-06) == "3.264e-06" and format_score(float("nan")) == "–"
    assert separating_digits(0.2, 0.25) == 4 and separating_digits(0.3, 0.3) == 4
    assert separating_digits(0.1, math.nextafter(0.1, 1.0)) == 17


# ------------------------------------------------------------------------------------------------ 3. undefined scores
def test_undefined_scores_are_left_out_of_the_score_plots(tmp_path, monkeypatch):
    """Found by hostile testing: a case with an empty predicted foreground (no defined fg_mean score) was filled with
    max + 1 for the ranking and then drawn at that invented value in the histogram of good and failed cases and in the
    scores by shift (a predictive entropy of 1.36 > ln 2). Those plots now leave it out and their captions count it."""
    lab = ball(4)
    rng = np.random.default_rng(1)

    def probs(noise: float, empty: bool = False) -> np.ndarray:
        z = np.stack([3.0 * (lab == c) for c in range(2)]) + rng.normal(0, noise, (2, *lab.shape))
        if empty:
            z[0] += 100  # no foreground predicted: fg_mean undefined
        e = np.exp(z - z.max(0))
        return e / e.sum(0)

    cases = {"a": (probs(0.5), lab), "b": (probs(1.0), lab), "c": (probs(1.5), lab), "empty": (probs(0.5, True), lab)}
    data = write_cases(tmp_path / "data", cases, shifts={"a": "none", "b": "none", "c": "scanner", "empty": "none"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        evaluate(data, tmp_path / "eval")
    state, summary = load_evaluation(tmp_path / "eval")
    key = summary["score"]["column"]
    defined = sorted(r[key] for r in state.rows if r[key] is not None and math.isfinite(r[key]))
    assert len(defined) == 3 and summary["score"]["undefined"] == ["empty"]
    figures = _capture_figures(monkeypatch)
    text = _quiet_build(tmp_path / "eval", tmp_path / "r", n_cases=0, viewer=False).read_text()
    bars = figures["histograms"].axes[0].patches
    assert max(p.get_x() + p.get_width() for p in bars) <= defined[-1] + 1e-9
    assert sum(p.get_height() for p in bars) == 3  # three cases counted, the undefined one left out
    ys = np.concatenate([c.get_offsets()[:, 1] for c in figures["shifts"].axes[0].collections
                         if type(c).__name__ == "PathCollection"])
    np.testing.assert_allclose(np.sort(ys), defined)
    assert text.count("1 case(s) without a defined score (e.g. an empty predicted foreground) are left out") == 2
    # the plot functions themselves leave a NaN out
    fig = plot_uncertainty_histograms(np.array([0.2, np.nan, 0.3]), np.array([0.9, 0.1, 0.5]), 0.8)
    assert sum(p.get_height() for p in fig.axes[0].patches) == 2
    fig = plot_scores_by_shift(np.array([0.2, np.nan]), ["none", "scanner"], ["none"], "s")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["none"]
    fig = plot_uncertainty_histograms(np.array([np.nan, np.nan]), np.array([0.9, 0.1]), 0.8)  # none defined
    assert not fig.axes[0].patches


# ------------------------------------------------------------------------------------------------ 4. download
def test_the_metrics_download_is_the_table_of_the_rows_shown(tie, tmp_path):
    """Found by hostile testing: the report embedded metrics.csv as it was on disk as "Download metrics.csv" while
    its table came from state/rows.json, so a hand-edited metrics.csv (a Dice changed, a case removed) was handed out
    beside a table that contradicted it. The download is now written from the rows the page shows."""
    ev = tmp_path / "eval"
    shutil.copytree(tie / "eval", ev)
    with open(ev / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    rows[0]["dice"] = "0.1"
    with open(ev / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows[:3])
    text = _quiet_build(ev, tmp_path / "r", n_cases=0, viewer=False).read_text()
    link = re.search(r'href="data:text/csv;base64,([^"]+)"', text).group(1)
    embedded = base64.b64decode(link).decode()
    assert {r["case"] for r in csv.DictReader(embedded.splitlines())} == {r["case"] for r in Page(text).rows()}
    assert embedded == (tie / "eval" / "metrics.csv").read_text()  # as evaluate wrote it
    from monai_unc.io import csv_text

    state, _ = load_evaluation(ev)
    assert embedded == csv_text(state.sorted_rows())


# ------------------------------------------------------------------------------------------------ 9. budget
@pytest.mark.parametrize("budget, shown", [(0.004, "0.4% (1 of 4 cases)"), (0.125, "12.5% (1 of 4 cases)"),
                                           (0.5, "50% (2 of 4 cases)")])
def test_the_budget_is_written_with_significant_digits_and_its_count(tie, tmp_path, budget, shown):
    """Found by hostile testing: the budget was rounded to a whole percent (--budget 0.004 read "budget of 0%" and
    "Dice kept at 0% referral" while one case was flagged; 0.125 read 12%)."""
    state, saved = load_evaluation(tie / "eval")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        summary = resummarize(state, saved, budget)
    page = Page(_quiet_build(tie / "eval", tmp_path / "r", n_cases=0, viewer=False, summary=summary).read_text())
    assert f"With a referral budget of {shown} the" in page.plain()
    label = shown.split(" (")[0]
    assert [k for _, k in page.cards if k.startswith("mean Dice of the kept cases")] == [
        f"mean Dice of the kept cases, budget {label} ({summary['triage']['n_referred']} of 4 referred)"]


def test_fractions_and_shares_never_round_to_0_or_100_percent():
    """Found by hostile testing: budgets and rates rounded to a whole percent (0.004 read 0%, 299 of 300 read 100%)."""
    from monai_unc.product import format_fraction, format_share

    assert format_fraction(0.004) == "0.4%" and format_fraction(0.125) == "12.5%" and format_fraction(0.2) == "20%"
    assert format_fraction(0.99999) == "99.999%" and format_fraction(1e-5) == "0.001%"
    assert format_fraction(1.0) == "100%" and format_fraction(0.0) == "0%"
    assert format_share(299, 300) == "99.7% (299 of 300)" and format_share(1, 250) == "0.4% (1 of 250)"
    for k in range(1, 2000):
        assert format_fraction(1 - k / 2000) != "100%" and format_fraction(k / 2000) != "0%"


# ------------------------------------------------------------------------------------------------ 11. regions
def test_region_diagram_caption_names_the_ece_of_its_title(tmp_path, monkeypatch):
    """Found by hostile testing: each region's reliability diagram was titled "all-label ECE 0.1909" and captioned
    "Pooled ECE 0.2033" (the top-label ECE of the region table): two numbers both called the pooled ECE. The caption
    now names both, as the class diagram's caption does."""
    from tests.evaluation.test_evaluate_regions import write_region_cohort

    data = write_region_cohort(tmp_path / "data", n_cases=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(data["labels"]), "-p", str(data["pred"]), "-o",
                         str(tmp_path / "eval"), "--regions", "brats", "--no-spatial", "--quiet"]) == 0
    figures = _capture_figures(monkeypatch)
    text = _quiet_build(tmp_path / "eval", tmp_path / "r", n_cases=0, viewer=False).read_text()
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    for name, block in summary["regions"]["per_region"].items():
        cal = block["calibration"]
        assert f"{cal['all_label_ece']:.4f}" != f"{cal['ece']:.4f}"  # two numbers: the caption must say which
        title = figures[f"reliability-{name}"].axes[0].get_title()
        assert f"all-label ECE {cal['all_label_ece']:.4f}" in title
        caption = re.search(rf"Reliability diagram, region {name} \(pooled\)\.</b> ([^<]*)", text).group(1)
        assert f"all-label ECE {cal['all_label_ece']:.4f}" in caption and f"top-label ECE {cal['ece']:.4f}" in caption
        assert "Pooled ECE" not in caption


# ------------------------------------------------------------------------------------------------ 12. accept all
def test_a_threshold_that_accepts_every_score_reads_as_on_the_triage_page(small_scores, tmp_path):
    """Found by hostile testing: a certified threshold that accepts every score (null in summary.json) read "Accept a
    case when its score is at most any: 8 of 8 accepted"; the report now uses the triage page's sentence."""
    state, saved = load_evaluation(small_scores["eval"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        summary = resummarize(state, saved, target_risk=0.7, risk="failure", delta=0.5)
    rc = summary["risk_control"]
    assert rc["feasible"] and rc["threshold"] is None
    text = Page(_quiet_build(small_scores["eval"], tmp_path / "r", n_cases=0, viewer=False,
                             summary=summary).read_text()).plain()
    assert "Accept every score in the calibration range: 10 of 10 accepted" in text
    assert "at most any" not in text


# ------------------------------------------------------------------------------------------------ 13. fixed decimals
def test_fixed_decimals_never_print_a_nonzero_value_as_zero_nor_across_its_threshold():
    """Found by hostile testing: the pages' one number formatter (``format_cell``, ``format_value``) wrote an E-AURC
    of 2.4e-05 as "0.0000" (a perfect ranking) and had no way to keep a Dice of 0.79988 from reading "0.800" next to
    "Dice below 0.8 is marked as failed". Fixed decimals now fall back to significant digits exactly where they would
    print a non-zero value as zero, or a value judged against a threshold as equal to it or on its other side."""
    from monai_unc.product import format_cell

    assert format_cell(2.400875e-05, 4) == "2.401e-05" and report_html.format_value(2.4e-05, 4) == "2.4e-05"
    assert format_cell(-0.0001) == "-0.0001" and format_cell(-0.0) == "0.000"  # neither zero nor "-0.000"
    assert format_cell(0.79988, threshold=0.8) == "0.7999" and format_cell(0.80012, threshold=0.8) == "0.8001"
    assert report_html.format_value(0.79988, threshold=0.8) == "0.7999"
    # everywhere else: today's fixed decimals
    assert [format_cell(v, threshold=0.8) for v in (0.8, 0.75, 0.81234, 0.9996)] == ["0.800", "0.750", "0.812",
                                                                                     "1.000"]
    assert [format_cell(v, 4) for v in (0.12345, 0.0, 1.5)] == ["0.1235", "0.0000", "1.5000"]
    rng = np.random.default_rng(1)
    for _ in range(2000):
        t = float(rng.choice([0.8, 0.5, 0.1, 0.05, 0.123456, 1.0, 0.0]))
        v = float(np.clip(t + rng.choice([1, -1]) * 10.0 ** rng.uniform(-12, -1), 0.0, 1.0))
        for digits in (3, 4):
            text = format_cell(v, digits, threshold=t)
            shown = float(text)
            assert (shown > t) - (shown < t) == (v > t) - (v < t), (v, t, digits, text)  # on its own side
            assert v == 0.0 or shown != 0.0, (v, text)
            assert shown == pytest.approx(v, rel=10.0 ** -(digits - 1), abs=10.0 ** -digits), (v, text)


@pytest.fixture(scope="module")
def near_threshold(tmp_path_factory):
    """Five binary cases; case ``a`` has Dice 0.79988 (failed: below 0.8) and the uncertainty ranks the near-tie
    ``a`` / ``e`` (Dice 0.79988 / 0.79952) the wrong way round, so the E-AURC is 2.4e-05 (found by hostile
    testing)."""
    root = tmp_path_factory.mktemp("near")
    shape = (20, 20, 10)
    rng = np.random.default_rng(0)
    cases = {}
    # (voxels removed from a 2000-voxel target, confidence of the foreground): Dice = 2 (2000 - k) / (4000 - k)
    for cid, (k, conf) in {"a": (667, 0.72), "b": (20, 0.95), "c": (400, 0.80), "d": (800, 0.70),
                           "e": (668, 0.74)}.items():
        lab = np.zeros(shape, np.int64)
        lab[:20, :10, :] = 1
        seg = lab.copy()
        seg[tuple(np.argwhere(seg == 1)[:k].T)] = 0
        cases[cid] = (binary_probs(np.where(seg == 1, conf, 0.05 + 0.1 * rng.random(shape))), lab)
    data = write_cases(root / "data", cases)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        evaluate(data, root / "eval", "--no-spatial")
    return root / "eval"


def test_a_failed_case_and_a_small_eaurc_read_what_they_are(near_threshold, tmp_path):
    """Found by hostile testing: a case of Dice 0.79988 (failed) read "0.800" in red right under "Dice below 0.8 is
    marked as failed", and an E-AURC of 2.4e-05 (one near-tie misordered) read "0.0000" on its card, a perfect
    ranking. The Dice now reads below the failure Dice as printed, and no card reads zero for a non-zero value."""
    state, summary = load_evaluation(near_threshold)
    dice = {r["case"]: r["dice"] for r in state.rows}
    thr = summary["failures"]["dice_threshold"]
    assert f"{dice['a']:.3f}" == f"{thr:.3f}" and dice["a"] < thr  # the case of the defect
    eaurc = summary["failure_detection"]["eaurc"]
    assert 0 < eaurc < 5e-5
    page = Page(_quiet_build(near_threshold, tmp_path / "r", n_cases=1, viewer=False).read_text())
    assert f"Dice below {thr:g} is marked as failed" in page.plain()
    rows = page.rows()
    t = page.tables["triage-table"]
    for row, attrs in zip(rows, t["attrs"]):
        failed = "failed" in (attrs.get("class") or "")
        assert failed == (dice[row["case"]] < thr)
        assert (float(row["Dice"]) < thr) == failed, row  # the printed Dice is on the side the red marks
        assert float(row["Dice"]) == pytest.approx(dice[row["case"]], abs=1e-3)
    assert {r["case"]: r["Dice"] for r in rows}["a"] == "0.7999"
    cards = {k: v for v, k in page.cards}
    assert float(cards["E-AURC"]) == pytest.approx(eaurc, rel=1e-3) and cards["E-AURC"] != "0.0000"
    for key in ("pooled ECE (top label)", "pooled all-label ECE", "pooled NLL", "pooled Brier", "AURC (risk 1 - Dice)"):
        assert float(cards[key]) != 0.0, (key, cards[key])


def test_risks_and_bounds_never_read_equal_to_their_target():
    """Found by hostile testing (the fixed decimals above): the risk-control line of ``evaluate`` and the conformal
    section wrote a bound or a calibration loss just below the target (0.19996, 0.09996) as the target itself
    ("bound 0.2000" for a target 0.2; "0.1000" under "target 0.1000")."""
    from monai_unc.product import product_type
    from monai_unc.products.risk_control import risk_control_line

    rc = {"method": "sgr", "risk": "dice < 0.8", "target_risk": 0.2, "delta": 0.1, "feasible": True,
          "threshold": 0.5, "bound": 0.19996, "calibration": {"coverage": 0.5, "risk_accepted": 0.19999},
          "accepted": ["a"], "referred": ["b"]}
    line = risk_control_line(rc)
    assert "bound 0.19996" in line and "observed risk 0.19999" in line, line
    conformal = product_type("conformal")
    block = {"family": "threshold", "activation": "sigmoid", "n_calibration": 20,
             "sides": {"outer": {"loss": "fnr", "target": 0.1, "method": "expectation", "guarantee": "g",
                                 "per_task": {"1": {"calibration_loss": 0.099996, "lambda_hat": 0.25}}}}}
    section = conformal.report_section(block)
    assert section.tables[0].rows[0][1:3] == ["0.1000", "0.099996"], section.tables[0].rows
    assert any("calibration 1 0.099996" in s for s in conformal.summary_lines(block))


def test_the_scores_by_shift_plot_reads_the_labels_evaluate_reads_as_in_distribution():
    """Found by hostile testing (one OoD AUROC for evaluate and CaseScoresHandler): the report's "scores by shift" plot
    had its own test of a label (lower-cased, not stripped), so " None " was drawn as a shift while the AUROC counted
    it in-distribution. It now uses ``is_in_distribution``, the one rule of every route."""
    from monai_unc.evaluation import IID_SHIFTS

    fig = plot_scores_by_shift(np.array([0.1, 0.2, 0.7]), [" None ", "noise", "Clean"], IID_SHIFTS, "score")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [" None ", "Clean", "noise"]  # in-distribution first
    from matplotlib.collections import PathCollection

    colors = [tuple(np.round(c.get_facecolor()[0][:3], 3)) for c in ax.collections if isinstance(c, PathCollection)]
    assert colors[0] == colors[1] != colors[2]


def test_an_infeasible_risk_control_line_never_prints_the_bound_as_the_target():
    """Found by hostile testing: ``evaluate --target-risk`` printed "no threshold satisfies the target (best bound 0.1)"
    for a best bound of 0.1000004 against a target 0.1 (4 significant digits)."""
    from monai_unc.products.risk_control import risk_control_line

    rc = {"method": "sgr", "risk": "dice < 0.8", "target_risk": 0.1, "delta": 0.1, "feasible": False,
          "bound": 0.1000004, "accepted": [], "referred": ["a", "b"]}
    line = risk_control_line(rc)
    shown = re.search(r"best bound ([0-9.]+[0-9])", line)
    assert shown and float(shown.group(1)) > 0.1, line
