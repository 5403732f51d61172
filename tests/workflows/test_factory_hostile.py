"""Hostile options for ``monai_unc.workflows.factory``: noise level, Rate-In target and ROI sizes."""

from __future__ import annotations

import math

import pytest


def test_build_inferer_validates_noise_and_targets():
    from monai_unc.workflows.factory import build_inferer, check_roi

    for bad in (-1.0, math.nan, math.inf, "0.1"):
        with pytest.raises(ValueError, match="--tta-noise must be a finite standard deviation >= 0"):
            build_inferer("tta", tta_noise=bad)
    with pytest.raises(ValueError, match="tta source only"):
        build_inferer("mcdropout", tta_noise=0.1)
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="--ratein-target must be"):
            build_inferer("mcdropout", ratein_target=bad)
    assert len(build_inferer("tta", tta_noise=0.1).sources) == 2  # flips and noise
    with pytest.raises(ValueError, match=r"--roi gives 2 sizes \(8, 8\) but the network takes 3D input"):
        check_roi([8, 8], 3)
    for ok in (8, [8], (8, 8, 8), None):
        check_roi(ok, 3)
    check_roi([8, 8], None)  # dimensionality unknown: nothing assumed


@pytest.mark.parametrize("method", ["mcdropout++tta", "+tta", "tta+", "tta+ +mcdropout"])
def test_a_method_with_an_empty_name_is_refused(method):
    """Found by hostile testing: ``--method mcdropout++tta`` ran (recorded verbatim), and the same run spelt
    ``mcdropout+tta`` was then refused as different settings."""
    from monai_unc.workflows.factory import build_inferer

    with pytest.raises(ValueError, match="'\\+'-joined names"):
        build_inferer(method, samples=2)


@pytest.mark.parametrize("option, value, message", [
    ("--samples", "9" * 20, "expected a positive integer of at most 2147483647"),
    ("--samples", str(2**31), "expected a positive integer of at most 2147483647"),
    ("--seed", "9" * 24, f"expected a non-negative integer of at most {2**64 - 1}"),
    ("--seed", "-1", "expected a non-negative integer, got -1"),
])
def test_counts_and_seeds_beyond_their_range_are_refused_before_any_work(tmp_path, capsys, option, value, message):
    """Found by hostile testing: ``--samples 10**20`` or ``--seed 10**24`` failed every case (OverflowError, exit 1,
    ``failures.json`` written) instead of one line and exit 2 before any work."""
    from monai_unc import cli

    images, out = tmp_path / "images", tmp_path / "out"
    images.mkdir()
    with pytest.raises(SystemExit) as exc:  # argparse's error: exit status 2
        cli.main(["infer", "-i", str(images), "-o", str(out), "--quiet", option, value])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert exc.value.code == 2 and len(err) == 1 and message in err[0], (exc.value.code, err)
    assert not out.exists()


def test_a_changed_model_file_is_named_as_such_when_a_resume_is_refused(tmp_path):
    """The ``weights`` setting digests every file of the model, a ``--network`` spec included: a resume refused
    because the spec changed said "different settings (weights)"."""
    from monai_unc.workflows.infer import InferSettings, check_run_settings

    def settings(digest: str) -> InferSettings:
        return InferSettings(model="m", method="tta", samples=2, roi=None, overlap=0.25, intensity="none",
                             measures=["predictive_entropy"], seed=0, activation="softmax", checkpoints=[],
                             weights=[{"file": "unet.json", "sha256": digest}])

    check_run_settings(tmp_path, settings("a" * 64))
    (tmp_path / "case.json").write_text("{}")  # a started run
    with pytest.raises(ValueError, match="different settings \\(model files: the checkpoints' or the network spec's"):
        check_run_settings(tmp_path, settings("b" * 64))
