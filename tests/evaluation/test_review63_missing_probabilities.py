"""A prediction folder where one case lacks the probabilities the others have (review 63).

Rerunning one case of an ``nnunet-predict --save_probabilities`` folder without the flag left 7 cases with
``<case>.npz`` and one without; ``evaluate`` then failed that case with "the number of classes is unknown: give
probabilities or num_classes", naming neither the file missing nor why. It is refused before any case is read,
naming the case, the file it lacks and the likely cause.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from monai_unc.evaluation import EvaluationConfig, check_measure_options
from monai_unc.io import CaseFiles


def _cases(with_probs: int, without: int, ending: str = ".npz") -> list[CaseFiles]:
    def maps(i):  # every case has its uncertainty maps, as nnunet-predict writes them
        return {"predictive_entropy": Path(f"p/uncertainty/c{i}_predictive_entropy.nii.gz")}

    out = [CaseFiles(f"c{i}", Path(f"l/c{i}.nii.gz"), Path(f"p/c{i}.nii.gz"), Path(f"p/c{i}{ending}"), maps(i))
           for i in range(with_probs)]
    out += [CaseFiles(f"c{i}", Path(f"l/c{i}.nii.gz"), Path(f"p/c{i}.nii.gz"), None, maps(i))
            for i in range(with_probs, with_probs + without)]
    return out


def test_a_case_without_the_probabilities_of_the_others_is_named_with_its_file():
    with pytest.raises(ValueError) as err:
        check_measure_options(_cases(7, 1), EvaluationConfig())
    text = str(err.value)
    assert "case 'c7'" in text and "c7.npz" in text and "7 other cases" in text, text
    assert "--save_probabilities" in text and "--num-classes" in text, text
    assert "give probabilities or num_classes" not in text


def test_with_num_classes_or_when_all_or_none_have_them_nothing_is_refused():
    check_measure_options(_cases(7, 1), EvaluationConfig(num_classes=3))  # the segmentation is then enough
    check_measure_options(_cases(8, 0), EvaluationConfig())
    with pytest.raises(ValueError, match="^--num-classes: no case has probabilities"):  # as before
        check_measure_options(_cases(0, 8), EvaluationConfig())
