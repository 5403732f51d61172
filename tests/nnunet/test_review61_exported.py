"""``--continue_prediction`` does not take a case for exported on a record naming maps outside ``uncertainty/``
(review 61): ``uncertainty/<case>.json`` is untrusted input, and a ``maps`` entry ``../x`` or an absolute path to an
existing file made :func:`case_exported` true (the case skipped); it is predicted again, with one warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monai_unc.nnunet.export import case_exported


def _folder(tmp_path: Path, entry) -> Path:
    out = tmp_path / "pred"
    (out / "uncertainty").mkdir(parents=True)
    (out / "case.nii.gz").write_bytes(b"seg")
    (out / "uncertainty" / "case_predictive_entropy.nii.gz").write_bytes(b"map")
    (out / "uncertainty" / "case.json").write_text(json.dumps({"maps": {"predictive_entropy": entry}}))
    return out


def test_a_plain_map_name_is_exported(tmp_path):
    out = _folder(tmp_path, "case_predictive_entropy.nii.gz")
    assert case_exported(out / "case", ".nii.gz", ["predictive_entropy"])


@pytest.mark.parametrize("kind", ["parent", "absolute", "in_list"])
def test_a_map_entry_outside_the_uncertainty_folder_is_not_exported(tmp_path, kind):
    outside = tmp_path / "elsewhere.nii.gz"
    outside.write_bytes(b"not this case's map")
    entry = {"parent": "../../elsewhere.nii.gz", "absolute": str(outside),
             "in_list": ["case_predictive_entropy.nii.gz", str(outside)]}[kind]
    out = _folder(tmp_path, entry)
    with pytest.warns(UserWarning, match="names map files outside uncertainty/") as caught:
        assert not case_exported(out / "case", ".nii.gz", ["predictive_entropy"])
    assert len(caught) == 1 and "'case'" in str(caught[0].message)
    assert outside.read_bytes() == b"not this case's map"
