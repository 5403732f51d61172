"""Hostile review of a report written again into the same folder: ``figures/`` holds the page's figures only.

Found by rerunning the commands into their folders: ``monai-unc report`` with fewer case figures (``--cases``,
another ``--budget``, or the evaluation folder evaluated again with other predictions) left the earlier run's
``figures/case_<id>.png`` beside the new page's figures, although the figures there are documented as the page's
(docs/report.md): a reader who takes a PNG from the folder got another run's overlay.
"""

from __future__ import annotations

import base64
import os
import re
import warnings

import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.report.html import build_report


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerun")
    data = write_toy_cohort(root / "data", n_cases=4, shape=(12, 12, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], root / "eval", EvaluationConfig(budget=0.25))
    return root / "eval"


def _embedded(html) -> set[bytes]:
    return {base64.b64decode(m) for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html.read_text())}


def test_a_report_written_again_keeps_only_its_own_figures(evaluation):
    build_report(evaluation, n_cases=3)
    cases_before = sorted(p.name for p in (evaluation / "report" / "figures").glob("case_*.png"))
    assert len(cases_before) >= 3
    html = build_report(evaluation, n_cases=0)
    files = sorted((evaluation / "report" / "figures").glob("*.png"))
    assert not [p.name for p in files if p.name.startswith("case_")], "an earlier report's case figures remain"
    embedded = _embedded(html)
    assert files and all(p.read_bytes() in embedded for p in files)


def _linked_figures(tmp_path):
    """``(a page folder whose figures/ links to another folder, that folder holding keep.png)``."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.png").write_bytes(b"\x89PNG")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(elsewhere, out / "figures")
    return out, elsewhere


def test_a_linked_figures_folder_is_refused_and_its_files_kept(evaluation, tmp_path):
    """The figures are removed in ``figures/`` only when it is the report's own folder, not a link elsewhere."""
    out, elsewhere = _linked_figures(tmp_path)
    with pytest.raises(ValueError, match="symbolic link"):
        build_report(evaluation, out, n_cases=0)
    assert (elsewhere / "keep.png").exists()


def test_a_users_own_figures_in_the_output_folder_are_kept(evaluation, tmp_path):
    """Found by hostile review: a report into an existing folder (``-o paper``) removed every ``*.png`` of its
    ``figures/``, a user's own figures included; only the PNGs a report recorded writing there are removed."""
    out = tmp_path / "paper"
    (out / "figures").mkdir(parents=True)
    mine = out / "figures" / "figure1_my_results.png"
    mine.write_bytes(b"\x89PNG my own figure")
    build_report(evaluation, out, n_cases=3)
    assert mine.read_bytes() == b"\x89PNG my own figure"
    assert len(list((out / "figures").glob("case_*.png"))) >= 3
    build_report(evaluation, out, n_cases=0)  # the earlier report's case figures go, the user's figure stays
    assert not list((out / "figures").glob("case_*.png"))
    assert mine.read_bytes() == b"\x89PNG my own figure"


@pytest.fixture(scope="module")
def triage_folder(tmp_path_factory):
    """A triage of four new cases by a rule of ``evaluate --target-risk`` (no page options beyond the defaults)."""
    from monai_unc.evaluation.triage import RULE_FILE, run_triage

    root = tmp_path_factory.mktemp("triage_rerun")
    a = write_toy_cohort(root / "A", n_cases=8, shape=(12, 12, 12), seed=1)
    b = write_toy_cohort(root / "B", n_cases=4, shape=(12, 12, 12), seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(a["labels"], a["predictions"], root / "eval",
                     EvaluationConfig(target_risk=0.4, delta=0.2, spatial=False))
        run_triage(b["predictions"], root / "eval" / RULE_FILE, root / "triage", progress=False)
    return root / "triage"


def test_a_triage_page_written_again_keeps_only_its_own_figures(triage_folder, tmp_path):
    """Found by hostile testing: ``build_triage_page`` with fewer case figures (``n_cases``) left the earlier page's
    ``figures/case_<id>.png`` beside its own, as the report did (above)."""
    from monai_unc.report.triage import build_triage_page

    build_triage_page(triage_folder, n_cases=3, viewer=False)
    figures = triage_folder / "figures"
    assert len(list(figures.glob("case_*.png"))) >= 2
    (figures / "mine.png").write_bytes(b"\x89PNG")  # a user's own file there is kept
    html = build_triage_page(triage_folder, n_cases=0, viewer=False)
    files = sorted(figures.glob("*.png"))
    assert not [p.name for p in files if p.name.startswith("case_")], "an earlier page's case figures remain"
    embedded = _embedded(html)
    assert (figures / "mine.png").exists() and all(p.read_bytes() in embedded for p in files if p.name != "mine.png")


def test_a_linked_triage_figures_folder_is_refused(triage_folder, tmp_path):
    out, elsewhere = _linked_figures(tmp_path)
    with pytest.raises(ValueError, match="symbolic link"):
        from monai_unc.report.triage import build_triage_page

        build_triage_page(triage_folder, out, n_cases=0, viewer=False)
    assert (elsewhere / "keep.png").exists()


def test_the_figures_of_a_page_killed_before_recording_them_are_removed_by_the_next_page(evaluation, tmp_path,
                                                                                         monkeypatch):
    """Found by hostile testing of crash consistency: ``monai-unc report --cases 8`` killed (SIGKILL) after writing
    its case figures and before recording them in ``figures/.report_figures.json`` left them unlisted, and the next
    page (``--cases 2``) removed only the figures the earlier record listed: the overlays of cases the page does not
    show stayed in ``figures/`` for good. A user's own file there is still kept."""
    import monai_unc.report.html as html

    out = tmp_path / "page"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "mine.png").write_bytes(b"\x89PNG")  # a user's own
    build_report(evaluation, output=out, n_cases=0)

    def killed(*args, **kwargs):
        raise SystemExit(137)  # the process ends here: the record of this page's figures is not written

    monkeypatch.setattr(html, "keep_page_figures", killed)
    with pytest.raises(SystemExit):
        build_report(evaluation, output=out, n_cases=4)
    assert len(list((out / "figures").glob("case_*.png"))) == 4  # the killed page's
    monkeypatch.undo()
    build_report(evaluation, output=out, n_cases=0)
    names = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert not [n for n in names if n.startswith("case_")], "a killed page's case figures remain"
    assert "mine.png" in names


def test_a_derived_map_another_run_wrote_is_refused_not_drawn(tmp_path):
    """Issue: a rerun on other predictions replaced ``maps/<case>_<measure>.nii.gz`` and was killed before its
    summary step; ``report`` drew its uncertainty map beside the first run's segmentation, Dice and score (exit 0).
    The state records the sha256 of each map evaluate derived; a map that is another file now is refused, naming it."""
    import hashlib
    import json
    import shutil

    from monai_unc import cli

    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(12, 12, 12))
    for f in data["predictions"].glob("*_predictive_entropy*"):
        f.unlink()  # probabilities only: evaluate derives the maps into <output>/maps
    out = tmp_path / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], out, EvaluationConfig(budget=0.3))
    recorded = json.loads((out / "state" / "rows.json").read_text())["derived_maps_sha256"]
    for cid, digests in recorded.items():
        for measure, digest in digests.items():
            path = out / "maps" / f"{cid}_{measure}.nii.gz"
            assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    build_report(out, n_cases=3)  # every map as written: drawn
    assert len(list((out / "report" / "figures").glob("case_*.png"))) == 3
    cid = sorted(recorded)[0]  # another run's map of the same name (here: another case's)
    maps = out / "maps"
    shutil.copy(maps / f"{sorted(recorded)[1]}_predictive_entropy.nii.gz", maps / f"{cid}_predictive_entropy.nii.gz")
    with pytest.raises(ValueError, match=rf"{cid}_predictive_entropy\.nii\.gz.*not the map evaluate derived"):
        build_report(out, n_cases=3)
    assert cli.main(["report", "-e", str(out), "-q"]) != 0
