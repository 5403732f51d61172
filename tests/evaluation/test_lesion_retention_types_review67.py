"""Review 67 follow-up: ``lesion_retention`` takes numbers only, as the metric entry points do.

It converted its inputs with ``np.asarray(x, float)``, which reads the text ``"0.5"`` as the number 0.5: a column of
a table read as text passed without a word.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.evaluation.lesions import lesion_retention

_SCORE, _DICE, _FP = [0.9, 0.1, 0.5, 0.2], [0.0, 0.9, 0.4, 0.8], [1, 0, 0, 0]


@pytest.mark.parametrize("name, value", [
    ("score", ["0.9", "0.1", "0.5", "0.2"]),
    ("score", np.array(["0.9", "0.1", "0.5", "0.2"])),
    ("dice", [0.0, 0.9, None, 0.8]),
    ("false_positive", "1000"),
    ("dice", np.array([0.0, 0.9, 0.4, 0.8 + 0j])),
    ("referred", ("0.0", "0.25")),
    ("referred", [False, True]),  # flags, not shares
])
def test_non_numeric_input_is_refused_naming_the_argument(name, value):
    args = {"score": _SCORE, "dice": _DICE, "false_positive": _FP, "referred": (0.0, 0.25), name: value}
    with pytest.raises(TypeError, match=rf"^{name} must"):
        lesion_retention(**args)


def test_numbers_in_any_array_form_give_the_same_curve():
    expected = lesion_retention(_SCORE, _DICE, _FP, referred=(0.0, 0.25))
    assert expected["dice"] == pytest.approx([0.525, 0.7], rel=1e-12)
    curve = lesion_retention(np.array(_SCORE, np.float32), torch.tensor(_DICE, dtype=torch.float64),
                             np.array(_FP, bool), referred=np.array([0.0, 0.25]))
    assert curve == expected
