"""The per-region score columns of ``nnunet-predict`` (records, ``uncertainty_scores.csv``) are those of ``evaluate``.

Found by hostile testing: nnU-Net's BraTS datasets name their regions ``whole tumor``, ``tumor core``, ``enhancing
tumor``; the nnU-Net records and scores table wrote ``<m>_fg_mean_whole tumor`` where ``metrics.csv`` of
``monai-unc evaluate`` (and ``--score`` of ``evaluate`` / ``triage``) name the same score ``<m>_fg_mean_whole_tumor``.
"""

from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.evaluation.rows import region_score_columns  # noqa: E402
from monai_unc.regions import label_to_regions  # noqa: E402
from tests.nnunet.test_nnunet_regions import REGIONS_JSON, region_predictor  # noqa: E402

REGIONS = {"whole tumor": [1, 2, 3], "tumor core": [2, 3], "enhancing tumor": [3]}


def _case():
    rng = np.random.default_rng(0)
    seg = np.zeros((7, 6, 5), np.int64)
    seg[1:5, 1:5, 1:4] = 1
    seg[2:4, 2:4, 2:3] = 2
    seg[2, 2, 2] = 3
    maps = {"mutual_information": rng.uniform(0, 0.69, size=(3, *seg.shape)).astype(np.float32)}
    return maps, seg


def test_record_columns_are_the_evaluate_columns_with_the_same_values(tmp_path):
    maps, seg = _case()
    record = mun.record_case_scores(maps, seg, patch_size=3, regions=REGIONS)
    table = {f"{m}_{k}": v for m, scores in record.items() for k, v in scores.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        evaluated = region_score_columns(maps, np.asarray(label_to_regions(seg, REGIONS)), list(REGIONS), 3)
    per_region = {k: v for k, v in evaluated.items() if k.endswith(("_whole_tumor", "_tumor_core", "_enhancing_tumor"))}
    assert sorted(table) == sorted(per_region)
    assert "mutual_information_fg_mean_whole_tumor" in table
    for k, v in table.items():
        assert v == pytest.approx(per_region[k], rel=1e-12, abs=1e-12), k
    # the scores table of a folder of such records
    (tmp_path / "uncertainty").mkdir()
    rec = {"case": "c1", "num_samples": 2, "foreground_voxels": int((seg > 0).sum()), "scores": record}
    (tmp_path / "uncertainty" / "c1.json").write_text(json.dumps(rec))
    header = mun.write_scores_table(tmp_path).read_text().splitlines()[0].split(",")
    assert "mutual_information_patch_mean_enhancing_tumor" in header
    assert not any(" " in h for h in header)


@pytest.mark.parametrize("names, match", [(["whole tumor", "whole-tumor"], "same column names"),
                                          (["T2", "Ｔ２"], "same column names"),
                                          (["whole", "・"], "no letter or digit")])
def test_region_names_without_distinct_columns_are_refused(names, match):
    maps, seg = _case()
    regions = dict(zip(names, ([1, 2, 3], [3])))
    with pytest.raises(ValueError, match=match):
        mun.record_case_scores({"mutual_information": maps["mutual_information"][:2]}, seg, regions=regions)


def test_the_predictor_refuses_them_when_set_up(monkeypatch):
    import tests.nnunet.test_nnunet_regions as regions

    bad = copy.deepcopy(REGIONS_JSON)
    bad["labels"] = {"background": 0, "whole tumor": [1, 2], "whole_tumor": 2}
    monkeypatch.setattr(regions, "REGIONS_JSON", bad)
    with pytest.raises(ValueError, match="same column names"):
        region_predictor(n_folds=1, uncertainty_sources=("mirroring",))
