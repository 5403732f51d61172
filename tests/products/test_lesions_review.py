"""``evaluate --lesions`` for review: per-sample masks (``--lesion-samples``) end to end, the retention curves and the
lesion list of the report, and the report's 3D viewer opened at a listed lesion (in Chromium, when installed)."""

from __future__ import annotations

import html as html_lib
import json
import re
import sys
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

from monai_unc.cli import main
from monai_unc.io import save_region_maps
from monai_unc.products.lesions import LesionMetrics
from monai_unc.report.html import product_section

sys.path.insert(0, str(Path(__file__).parents[1] / "metrics"))
sys.path.insert(0, str(Path(__file__).parents[1] / "report"))
from lesion_cohort import CASES, make_case  # noqa: E402

N = 2
FULL = ndimage.generate_binary_structure(3, 3)


def _samples(pred: np.ndarray, seed: int, n: int = 4) -> np.ndarray:
    """``n`` label maps: the prediction with each of its lesions (per class) kept with probability 0.7."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        s = np.zeros_like(pred)
        for c in (1, 2, 3):
            lab, k = ndimage.label(pred == c, FULL)
            keep = np.flatnonzero(rng.uniform(size=k) < 0.7) + 1
            s[np.isin(lab, keep)] = c
        out.append(s)
    return np.stack(out)


def _write(root: Path, with_samples: bool = True) -> tuple[Path, Path, Path]:
    labels, preds, samples = root / "labels", root / "predictions", root / "samples"
    for d in (labels, preds, samples):
        d.mkdir()
    for i in range(N):
        pred, truth, spacing, u = make_case(i)
        affine = np.diag([*spacing, 1.0])
        nib.save(nib.Nifti1Image(truth, affine), labels / f"{CASES[i]}.nii.gz")
        nib.save(nib.Nifti1Image(pred, affine), preds / f"{CASES[i]}_seg.nii.gz")
        nib.save(nib.Nifti1Image(u.astype(np.float32), affine), preds / f"{CASES[i]}_predictive_entropy.nii.gz")
        if with_samples:
            save_region_maps(_samples(pred, i).astype(np.float32), affine, samples / f"{CASES[i]}_samples.nii.gz")
    return labels, preds, samples


def _evaluate(labels, preds, out, *extra) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--lesions", "--no-spatial",
                     "--num-classes", "4", "--lesion-settings", "met", "--quiet", *extra])


@pytest.mark.slow
def test_samples_end_to_end_and_the_report(tmp_path, capsys):
    """Existence probability and volume spread through ``evaluate`` equal a direct count over the sample files; the
    report shows the retention curves and the lesion list with each lesion's case and centre on its row."""
    labels, preds, samples = _write(tmp_path)
    out = tmp_path / "ev"
    assert _evaluate(labels, preds, out, "--lesion-samples", str(samples)) == 0
    block = json.loads((out / "summary.json").read_text())["lesions"]
    assert block["samples"] == {"min": 4, "max": 4} and block["notes"] == []
    assert block["options"]["samples"] == str(samples.resolve())
    listed = block["lesions"]
    assert listed and all(d["existence"] is not None for d in listed)
    for d in listed:  # the existence of each listed lesion: the share of samples with a voxel of its class inside it
        i = CASES.index(d["case"])
        pred, _, spacing, _ = make_case(i)
        c = int(d["task"])
        lab, _ = ndimage.label(pred == c, FULL)
        lesion = lab == d["lesion"]
        s = _samples(pred, i) == c
        assert d["existence"] == pytest.approx(np.mean([(si & lesion).any() for si in s]))
        assert d["center_mm"] == pytest.approx([round(x * sp, 2) for x, sp in zip(d["center"], spacing)], abs=0.1)
    for task in block["per_task"].values():
        if task["n_predicted_lesions"]:
            assert {"existence_uncertainty", "volume_cv"} <= set(task["failure_detection"])
            ret = task["retention"]
            assert ret["kept"][0] == task["n_predicted_lesions"] and len(ret["dice"]) == len(ret["referred"])
    # without samples: said once, in the summary and on the command line; no existence anywhere
    out2 = tmp_path / "ev2"
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out2), "--lesions", "--no-spatial",
                     "--num-classes", "4", "--lesion-settings", "met"]) == 0
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    block2 = json.loads((out2 / "summary.json").read_text())["lesions"]
    assert block2["samples"] is None and len(block2["notes"]) == 1
    assert all(d["existence"] is None for d in block2["lesions"])
    assert printed.count("existence probability and volume spread are not computed") == 1, printed[-2000:]
    assert "mean Dice of the predicted lesions kept" in printed
    # the report: retention tables and the lesion rows with their case and centre
    assert main(["report", "--evaluation", str(out), "--cases", "0"]) == 0
    page = (out / "report" / "report.html").read_text()
    assert 'id="product-lesions-list"' in page and "Lesion-level retention, 1" in page
    rows = re.findall(r'<tr data-lesion-case="([^"]+)" data-lesion-voxel="([^"]+)" data-lesion-mm="([^"]+)"', page)
    assert [(c, v) for c, v, _ in rows] == [
        (d["case"], ",".join(str(int(np.floor(x + 0.5))) for x in d["center"])) for d in listed]


@pytest.mark.slow
def test_a_changed_sample_file_is_evaluated_again(tmp_path):
    """The sample file's signature is part of the case's resume fingerprint: rewritten, the case is recomputed (its
    lesions' existence follows the new file); untouched, the rerun resumes with the same numbers."""
    labels, preds, samples = _write(tmp_path)
    out = tmp_path / "ev"
    assert _evaluate(labels, preds, out, "--lesion-samples", str(samples)) == 0
    first = json.loads((out / "summary.json").read_text())["lesions"]["lesions"]
    assert _evaluate(labels, preds, out, "--lesion-samples", str(samples)) == 0
    assert json.loads((out / "summary.json").read_text())["lesions"]["lesions"] == first
    pred, _, spacing, _ = make_case(0)
    save_region_maps(np.zeros((3, *pred.shape), np.float32), np.diag([*spacing, 1.0]),
                     samples / f"{CASES[0]}_samples.nii.gz")  # no lesion in any sample now
    assert _evaluate(labels, preds, out, "--lesion-samples", str(samples)) == 0
    block = json.loads((out / "summary.json").read_text())["lesions"]
    assert block["samples"] == {"min": 3, "max": 4}
    changed = [d for d in block["lesions"] if d["case"] == CASES[0]]
    assert changed and all(d["existence"] == 0.0 for d in changed)


def test_missing_sample_files_are_refused_before_any_work(tmp_path):
    labels, preds, samples = _write(tmp_path, with_samples=False)
    out = tmp_path / "ev"
    assert _evaluate(labels, preds, out, "--lesion-samples", str(samples)) == 2
    assert _evaluate(labels, preds, out, "--lesion-samples", str(tmp_path / "nowhere")) == 2
    assert main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--lesion-samples",
                 str(samples)]) == 2  # without --lesions
    assert not out.exists() or not (out / "summary.json").exists()


def test_sample_files_of_another_grid_are_refused_before_any_work(tmp_path, capsys):
    """Found by hostile testing: a sample file on another grid failed its case after the other cases' work (exit 1);
    the grids are read from the NIfTI headers and refused up front (exit 2, one line naming the case)."""
    labels, preds, samples = _write(tmp_path)
    path = samples / f"{CASES[1]}_samples.nii.gz"
    img = nib.load(str(path))
    data = np.asarray(img.dataobj)
    nib.save(nib.Nifti1Image(data[:, :, :-1], img.affine), path)  # one slice fewer
    out = tmp_path / "ev"
    capsys.readouterr()
    assert _evaluate(labels, preds, out, "--lesion-samples", str(samples)) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "another grid" in err[0] and CASES[1] in err[0] and CASES[0] not in err[0], err
    assert not (out / "summary.json").exists() and not (out / "state").exists()


def test_sample_files_of_probabilities_fail_their_case(tmp_path):
    """A file of non-integer values (probabilities are not samples) fails its case when the case is read, named in
    failures.json; the other case is evaluated (docs/lesions.md)."""
    labels, preds, samples = _write(tmp_path)
    path = samples / f"{CASES[1]}_samples.nii.gz"
    img = nib.load(str(path))
    nib.save(nib.Nifti1Image(np.asarray(img.dataobj, dtype=np.float32) * 0.5, img.affine), path)
    out = tmp_path / "ev"
    assert _evaluate(labels, preds, out, "--lesion-samples", str(samples)) == 1
    failures = json.loads((out / "failures.json").read_text())["failures"]
    assert [f["case"] for f in failures] == [CASES[1]] and "integer label maps" in failures[0]["error"]


def test_report_section_escapes_and_tables():
    hostile = '<img src=x onerror="alert(1)">'
    lesion = {"case": hostile, "task": hostile, "lesion": 1, "center": [1.0, 2.0, 3.0], "center_mm": [1, 2, 3],
              "volume_mm3": 4.0, "score": hostile, "value": 0.5, "false_positive": False, "dice": 0.7,
              "existence": 0.25}
    ret = {"score": hostile, "referred": [0.0, 0.05, 0.1], "kept": [10, 9, 9], "dice": [0.5, 0.55, 0.55],
           "false_positive_share": [0.2, 0.1, 0.1], "oracle_dice": [0.5, 0.6, 0.6]}
    block = {"n_cases": 1, "per_task": {hostile: {"mean": {}, "retention": ret}}, "lesions": [lesion],
             "notes": [hostile]}
    section = LesionMetrics.report_section(block)
    assert [t.key for t in section.tables] == ["list", f"retention-{hostile}"]
    assert section.tables[0].head[-1] == "existence" and section.tables[0].rows[0][-1] == 0.25
    assert [r[0] for r in section.tables[1].rows] == ["0%", "10%"]  # every 10 %
    text = str(product_section(section, "lesions"))
    assert "<img" not in text and "onerror=\"" not in text and html_lib.escape(hostile) in text


# ------------------------------------------------------------------------------------------------ in a browser
@pytest.mark.slow
def test_report_viewer_opens_at_the_lesion(tmp_path):
    """The report opened at ``#lesion=<case>:<mm>`` centres that case's viewer on the lesion's voxel; the listed
    lesions of cases with a viewer are links to that fragment."""
    from test_viewer import _chromium, _open_offline

    exe = _chromium()
    labels, preds, _ = _write(tmp_path, with_samples=False)
    out = tmp_path / "ev"
    assert _evaluate(labels, preds, out) == 0
    block = json.loads((out / "summary.json").read_text())["lesions"]
    assert main(["report", "--evaluation", str(out), "--cases", str(N)]) == 0
    page = out / "report" / "report.html"
    target = block["lesions"][0]
    fragment = f"lesion={target['case']}:{','.join(f'{x:g}' for x in target['center_mm'])}"
    opened = tmp_path / "opened.html"  # Chromium reads a file URL with its fragment: a copy beside the page's assets
    opened.write_text(page.read_text().replace("</body>", f"<script>location.hash={json.dumps(fragment)};"
                                               "</script></body>", 1))
    (tmp_path / "assets").symlink_to(page.parent / "assets")
    dom, _, console = _open_offline(exe, opened, tmp_path, "lesion")
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert "data-viewer-error" not in body, body
    voxel = ",".join(str(int(np.floor(x + 0.5))) for x in target["center"])
    assert f'data-viewer-centre="{target["case"]}:{voxel}"' in body, (body, voxel)
    assert f'href="#{fragment}"' in dom
