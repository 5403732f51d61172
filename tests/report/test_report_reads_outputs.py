"""Issue #35, "the report reads outputs": the pages render what the commands wrote and compute nothing again.

``monai-unc evaluate`` runs on probability-only predictions (no map files, so the uncertainty maps are derived from
the probabilities and written to ``maps/``); then every computation the report must not do is patched to raise,
wherever the package binds it, and ``monai-unc report`` still writes the page with the evaluation's numbers and
figures, from a copy of the evaluation folder. The same for the triage page: ``monai-unc triage`` of new
probability-only cases writes their derived maps, and :func:`~monai_unc.report.triage.build_triage_page` draws its
figures from them with the map computation patched to raise.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import monai_unc.evaluation.case as case_module
import monai_unc.evaluation.cohort as cohort_module
import monai_unc.evaluation.conformal as conformal_module
import monai_unc.evaluation.products as products_module
import monai_unc.evaluation.rows as rows_module
import monai_unc.evaluation.triage as triage_module
from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import RULE_FILE, ReferralRule
from monai_unc.io import CaseFiles, load_case
from monai_unc.report.triage import build_triage_page

MEASURES = ("predictive_entropy", "one_minus_max_prob")

#: what ``monai-unc report`` and the triage page must never compute: they render the files the commands wrote
COMPUTATIONS: tuple[Callable, ...] = (
    cohort_module.summarize,
    cohort_module.resummarize,
    case_module.derived_maps,
    case_module.evaluate_case,
    products_module.fit_products,
    conformal_module.conformal_masks,
    conformal_module.calibration_case_masks,
    conformal_module.fit_conformal_rules,
    triage_module.certify_referral_rule,
    rows_module.write_derived_maps,
    triage_module.triage_case,
)


def refuse_everywhere(monkeypatch: pytest.MonkeyPatch, functions: Iterable[Callable]) -> dict[str, int]:
    """Replace each function, at every attribute of a loaded ``monai_unc`` module that *is* it, by one that raises.

    A ``from x import f`` elsewhere binds the same object under another module, so patching the defining module alone
    would not catch it.

    Returns:
        ``{function name: number of attributes patched}``.
    """
    patched: dict[str, int] = {}
    for fn in functions:
        def refuse(*args, _name=fn.__qualname__, **kwargs):
            raise AssertionError(f"report recomputed {_name}")

        patched[fn.__qualname__] = 0
        for name, module in list(sys.modules.items()):
            if module is None or not (name == "monai_unc" or name.startswith("monai_unc.")):
                continue
            for attr, value in list(vars(module).items()):
                if value is fn:
                    monkeypatch.setattr(module, attr, refuse)
                    patched[fn.__qualname__] += 1
    return patched


def _probability_only(data: dict[str, Path]) -> dict[str, Path]:
    for p in data["predictions"].glob("*_predictive_entropy.nii.gz"):  # keep <case>_seg and <case>_probs only
        p.unlink()
    return data


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Cohort A evaluated (risk-controlled rule, conformal masks) and cohort B of new cases, both probability-only."""
    root = tmp_path_factory.mktemp("reads_outputs")
    a = _probability_only(write_toy_cohort(root / "A", n_cases=12, shape=(16, 16, 16), seed=1))
    b = _probability_only(write_toy_cohort(root / "B", n_cases=6, shape=(16, 16, 16), seed=2))
    ev = root / "evaluation"
    # with conformal masks: evaluate writes each case's masks (products/conformal/) for the report's figures
    argv = ["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--images",
            str(a["images"]), "--no-spatial", "--budget", "0.25", "--target-risk", "0.4", "--delta", "0.2", "-q",
            "--conformal", "outer:fnr=0.3", "--conformal", "inner:fp=0.4"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(argv) == 0
    return {"root": root, "A": a, "B": b, "eval": ev}


def test_report_renders_the_evaluation_folder_and_computes_nothing(runs, tmp_path, monkeypatch, capsys):
    ev = runs["eval"]
    cases = sorted(p.name.removesuffix("_seg.nii.gz") for p in runs["A"]["predictions"].glob("*_seg.nii.gz"))
    assert sorted(p.name for p in (ev / "maps").iterdir()) == sorted(f"{c}_{m}.nii.gz" for c in cases
                                                                     for m in MEASURES)
    copy = tmp_path / "evaluation"
    shutil.copytree(ev, copy)
    summary = json.loads((copy / "summary.json").read_text())
    patched = refuse_everywhere(monkeypatch, COMPUTATIONS)
    assert all(patched.values()), patched  # each computation was found and replaced

    capsys.readouterr()
    hidden = ev.parent / "maps-of-the-original"
    (ev / "maps").rename(hidden)  # the copy reads its own maps/, not the original folder's (a moved evaluation)
    try:
        assert cli.main(["report", "-e", str(copy), "--images", str(runs["A"]["images"]), "--cases", "2", "-q"]) == 0
    finally:
        hidden.rename(ev / "maps")
    out = capsys.readouterr()
    assert "recomputed" not in out.out + out.err
    page = copy / "report" / "report.html"
    text = page.read_text()
    # the numbers of summary.json
    order = summary["triage"]["order"]
    table = re.search(r'<table id="triage-table">(.*?)</table>', text, re.S).group(1)
    assert re.findall(r'data-case="([^"]+)"', table) == order
    kept = summary["triage"]["dice_retained"]
    assert f"retained cases is <b>{kept:.3f}" in text
    # the figures: the cohort plots and the overlays of the most uncertain cases, drawn from maps/
    figures = copy / "report" / "figures"
    assert (figures / f"case_{order[0]}.png").is_file() and (figures / f"case_{order[1]}.png").is_file()
    assert 'id="fig-case-' in text and "predictive_entropy" in text
    # the masks with a guarantee: the section from summary.json, the contours from products/conformal/
    assert sorted(p.name for p in (copy / "products" / "conformal").iterdir()) == sorted(
        f"{c}_{side}.nii.gz" for c in cases for side in ("outer", "inner"))
    assert '<section id="conformal" class="product">' in text and text.count("the conformal outer (white dashed)") >= 2


def test_triage_page_draws_the_maps_triage_wrote(runs, tmp_path, monkeypatch):
    b, out = runs["B"], tmp_path / "triage"
    argv = ["triage", "-p", str(b["predictions"]), "--rule", str(runs["eval"] / RULE_FILE), "-o", str(out),
            "--images", str(b["images"]), "--cases", "3", "-q", "--conformal-rule",
            str(runs["eval"] / "conformal_rule.json")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(argv) == 0
    tri = json.loads((out / "triage.json").read_text())
    assert ReferralRule.from_json(tri["rule"]).map_source == "probabilities"
    # triage wrote the maps it derived, in the case's geometry: the arrays the page will draw
    ids = sorted(c["case"] for c in tri["cases"])
    assert sorted(p.name for p in (out / "maps").iterdir()) == sorted(f"{c}_{m}.nii.gz" for c in ids for m in MEASURES)
    case = load_case(CaseFiles.from_json(tri["files"][ids[0]]))
    for m, u in rows_module.derived_maps(case).items():
        img = nib.load(out / "maps" / f"{ids[0]}_{m}.nii.gz")
        np.testing.assert_array_equal(np.asarray(img.dataobj, dtype=np.float32), u)
        np.testing.assert_allclose(img.affine, case.affine)

    patched = refuse_everywhere(monkeypatch, COMPUTATIONS)
    assert all(patched.values()), patched
    page = build_triage_page(out, tmp_path / "page", n_cases=3, conformal=out / "conformal")
    text = page.read_text()
    assert text.count("the conformal outer (white dashed)") == 3  # the masks monai-unc conformal wrote
    shown = tri["order"][:3]
    for cid in shown:  # the overlays, drawn from maps/ ...
        assert (tmp_path / "page" / "figures" / f"case_{cid}.png").is_file()
        # ... the same figures as the page of the triage run
        assert (tmp_path / "page" / "figures" / f"case_{cid}.png").read_bytes() == (
            out / "figures" / f"case_{cid}.png").read_bytes()
    assert text.count('id="fig-case-') == 3
    got = dict(re.findall(r'data-case="([^"]+)" data-decision="(\w+)"', text))
    assert got == {c["case"]: c["decision"] for c in tri["cases"]}  # the decisions of triage.json
    # a case whose map is gone has no figure: the page does not derive it again
    for m in MEASURES:
        (out / "maps" / f"{shown[0]}_{m}.nii.gz").unlink()
    text = build_triage_page(out, tmp_path / "page2", n_cases=3).read_text()
    assert text.count('id="fig-case-') == 2 and f'id="fig-case-{shown[0]}"' not in text
