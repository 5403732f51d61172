"""The ``1 - max p`` map is called ``one_minus_max_prob``; its old name ``max_softmax`` still works for one release.

Every place that takes a measure name from a user or from disk accepts the old name with a ``DeprecationWarning``
and gives the same numbers as the new one: inferer keys and outputs, file matching of ``evaluate`` (maps written
by older versions as ``<case>_max_softmax.nii.gz``), the evaluation config and the command line.
"""

from __future__ import annotations

import warnings

import nibabel as nib
import numpy as np
import pytest
import torch
from torch import nn

from monai_unc import cli
from monai_unc.evaluation import EvaluationConfig, evaluate_case
from monai_unc.inferers import SoftmaxInferer
from monai_unc.io import match_cases

OLD, NEW = "max_softmax", "one_minus_max_prob"


class Pointwise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, -x, 0.5 * x], dim=1)


def test_inferer_accepts_and_serves_the_old_key():
    x = torch.randn(2, 1, 5, 6)
    out = SoftmaxInferer()(x, Pointwise())
    p = torch.softmax(torch.cat([x, -x, 0.5 * x], 1), 1)
    torch.testing.assert_close(out[NEW], 1 - p.amax(1, keepdim=True), atol=1e-6, rtol=0)
    with pytest.warns(DeprecationWarning, match="'max_softmax' is deprecated"):
        old = out[OLD]
    assert old is out[NEW]
    with pytest.raises(KeyError):
        out["variance"]  # a missing key that is not a deprecated name still raises
    with pytest.warns(DeprecationWarning, match="'max_softmax' is deprecated"):
        keyed = SoftmaxInferer(keys=["pred", OLD])(x, Pointwise())
    assert set(keyed) == {"pred", NEW}
    torch.testing.assert_close(keyed[NEW], out[NEW])


def _case_folder(tmp_path, map_name: str):
    rng = np.random.default_rng(0)
    labels, preds = tmp_path / "labels", tmp_path / "preds"
    labels.mkdir()
    preds.mkdir()
    affine = np.diag([1.0, 1.0, 2.0, 1.0])
    p = rng.dirichlet([1, 1], size=(8, 8, 6)).astype(np.float32)  # (X, Y, Z, C)
    label = (rng.random((8, 8, 6)) > 0.5).astype(np.uint8)
    nib.save(nib.Nifti1Image(label, affine), labels / "c0.nii.gz")
    nib.save(nib.Nifti1Image(p, affine), preds / "c0_probs.nii.gz")
    nib.save(nib.Nifti1Image(p.argmax(-1).astype(np.uint8), affine), preds / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(1 - p.max(-1), affine), preds / f"c0_{map_name}.nii.gz")
    return labels, preds, p


def test_evaluate_reads_maps_written_under_the_old_name(tmp_path):
    labels, preds, p = _case_folder(tmp_path, OLD)
    with pytest.warns(DeprecationWarning, match="<case>_max_softmax maps"):
        cases = match_cases(labels, preds)
    assert list(cases[0].maps) == [NEW]
    with pytest.warns(DeprecationWarning):
        assert list(match_cases(labels, preds, measures=[OLD])[0].maps) == [NEW]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        row = evaluate_case(cases[0], EvaluationConfig(spatial=False)).row
    assert row[f"{NEW}_mean"] == pytest.approx(float((1 - p.max(-1)).astype(np.float64).mean()), rel=1e-6)


def test_new_files_win_and_old_names_are_not_taken_for_segmentations(tmp_path):
    labels, preds, p = _case_folder(tmp_path, NEW)
    nib.save(nib.Nifti1Image(np.zeros((8, 8, 6), np.float32), np.eye(4)), preds / f"c0_{OLD}.nii.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new file is found: no fallback, no warning
        cases = match_cases(labels, preds)
    np.testing.assert_allclose(nib.load(cases[0].maps[NEW]).get_fdata(), 1 - p.max(-1), atol=1e-6)
    # nnU-Net layout (segmentation suffix ""): an old map in the prediction folder is not a case of its own
    nn_preds = tmp_path / "nn"
    nn_preds.mkdir()
    (nn_preds / "c0.nii.gz").write_bytes((preds / "c0_seg.nii.gz").read_bytes())
    (nn_preds / f"c0_{OLD}.nii.gz").write_bytes((preds / f"c0_{NEW}.nii.gz").read_bytes())
    with pytest.warns(DeprecationWarning):
        cases = match_cases(labels, nn_preds, layout="nnunet", uncertainty=nn_preds)
    assert [c.case_id for c in cases] == ["c0"] and list(cases[0].maps) == [NEW]


def test_config_and_command_line_accept_the_old_name():
    with pytest.warns(DeprecationWarning, match="'max_softmax' is deprecated"):  # at the construction
        config = EvaluationConfig(measure=OLD)
    config.validate()
    assert config.measure == NEW
    parser, _ = cli.build_parser("evaluate")
    with pytest.warns(DeprecationWarning, match="'max_softmax' is deprecated"):
        args = parser.parse_args(["evaluate", "-l", "L", "-p", "P", "-o", "O", "--measures", OLD, "predictive_entropy",
                                  "--measure", OLD])
    assert args.measures == [NEW, "predictive_entropy"] and args.measure == NEW
    parser, _ = cli.build_parser("infer")
    with pytest.warns(DeprecationWarning):
        args = parser.parse_args(["infer", "-i", "I", "-o", "O", "--model", "example", "--measures", OLD])
    assert args.measures == [NEW]
    with pytest.raises(SystemExit):
        parser.parse_args(["infer", "-i", "I", "-o", "O", "--model", "example", "--measures", "max_prob"])
