"""Hostile input to ``monai_unc.scores.case_scores``: predicted label maps that hold no labels (NaN, negative,
fractional, text), against the scores of a brute force over the foreground."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from monai_unc.scores import case_scores, resolve_score_column, upgrade_row


def _case():
    u = np.random.default_rng(0).uniform(size=(6, 5, 4))
    seg = np.zeros((6, 5, 4), np.int64)
    seg[1:3, 1:3, 1:3] = 2
    return u, seg


@pytest.mark.parametrize("value, match", [(np.nan, "non-finite"), (np.inf, "non-finite"), (-1.0, "non-negative"),
                                          (0.5, "non-integral")])
def test_a_label_map_with_no_labels_is_refused(value, match):
    """A NaN, -1 or 0.5 in seg was read as background or foreground (``seg > 0``) and fg_mean moved silently."""
    u, seg = _case()
    bad = seg.astype(np.float32)
    bad[5, 4, 3] = value
    with pytest.raises(ValueError, match=f"seg .*{match}|{match}.*seg|seg contains"):
        case_scores(u, bad)
    with pytest.raises(ValueError, match="seg"):
        case_scores(torch.from_numpy(u), torch.from_numpy(bad))


def test_negative_integer_labels_are_refused():
    u, seg = _case()
    seg[0, 0, 0] = -3
    with pytest.raises(ValueError, match="seg must hold non-negative labels, got minimum -3"):
        case_scores(u, seg)


def test_a_label_map_of_text_is_refused():
    u, seg = _case()
    with pytest.raises(TypeError, match="seg must hold real numbers"):  # the shared dtype check (review 63)
        case_scores(u, seg.astype(str))


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.float32, bool])
def test_valid_label_maps_give_the_brute_force_scores(dtype):
    u, seg = _case()
    got = case_scores(u, seg.astype(dtype))
    assert got["mean"] == pytest.approx(u.mean(), rel=1e-12)
    assert got["fg_mean"] == pytest.approx(u[seg > 0].mean(), rel=1e-12)


def test_a_column_with_both_former_names_resolves_in_rows_of_that_version():
    """Found by hostile testing: rows of a version that wrote ``max_softmax_patch`` (the former measure name and the
    former box-mean name) are upgraded to ``max_softmax_patch_mean``; ``--score max_softmax_patch`` (or that version's
    summary) resolved to ``one_minus_max_prob_patch``, a column none of the rows has."""
    row = upgrade_row({"case": "a", "max_softmax_mean": 0.1, "max_softmax_fg_mean": 0.2, "max_softmax_patch": 0.3})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_score_column("max_softmax_patch", row) == "max_softmax_patch_mean"
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        current = ["one_minus_max_prob_mean", "one_minus_max_prob_fg_mean", "one_minus_max_prob_patch_mean"]
        assert resolve_score_column("max_softmax_patch", current) == "one_minus_max_prob_patch_mean"
        assert resolve_score_column("max_softmax_fg_mean", current) == "one_minus_max_prob_fg_mean"
