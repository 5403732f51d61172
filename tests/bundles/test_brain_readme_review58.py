"""The brain bundle's README table against what ``evaluate.json`` logs (hostile review 58).

Found by hostile review 58: the README's "mean MI" column (0.0121 for the template) and the OoD AUROC of the mean MI
(0.6) were measured before ``window_disagreement`` became the inferers' default; ``evaluate.json`` logs 0.0078 and
0.8. The first two cases of the cohort, evaluated as the README says (10 samples, seed 0), are compared row by row
in ``tests/bundles/test_bundles.py`` (``test_brain_bundle_evaluation_reproduces_the_readme_table``, on the outputs of
its brain bundle fixture: one evaluation run instead of two).
"""

from __future__ import annotations

import re

import pytest

from tests._paths import ROOT

BUNDLE = ROOT / "bundles" / "brain_tissue_uncertainty"


#: the number of samples of the README's table (``evaluate.json``'s default)
README_SAMPLES = 10


def readme_rows() -> dict[str, dict[str, float]]:
    """The README's per-case table: shift -> {dice_gm, dice_wm, buc, pe, mi}."""
    text = (BUNDLE / "docs" / "README.md").read_text()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| (none|noise|bias field|contrast|blur|resolution)( \(template\))? \|(.*)\|\s*$", line)
        if m:
            values = [float(v) for v in m.group(3).split("|")]
            rows[m.group(1).replace(" ", "_")] = dict(zip(("dice_gm", "dice_wm", "buc", "pe", "mi"), values))
    return rows


def test_readme_table_has_every_case():
    assert set(readme_rows()) == {"none", "noise", "bias_field", "contrast", "blur", "resolution"}


def test_readme_ood_aurocs_follow_its_table():
    """The OoD AUROCs the README states are those of its table (the clean case against the five shifted ones)."""
    from monai_unc.metrics import ood_auroc_by_shift

    rows = readme_rows()
    text = " ".join((BUNDLE / "docs" / "README.md").read_text().split())
    stated = re.search(r"OoD AUROC of the mean scores is ([0-9.]+) \(PE\) and ([0-9.]+) \(MI\)", text)
    assert stated is not None
    groups = list(rows)
    for key, value in zip(("pe", "mi"), stated.groups()):
        res = ood_auroc_by_shift([rows[g][key] for g in groups], groups, ["none"])
        assert res["auroc"] == pytest.approx(float(value)), key
