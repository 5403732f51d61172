"""The refusal of an ``--uncertainty`` folder without maps speaks to every command that reads one."""

from __future__ import annotations

import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import CaseError, match_cases


def test_an_uncertainty_folder_without_maps_names_the_derived_maps_not_evaluate(tmp_path):
    """Found by review: ``triage --uncertainty EMPTY`` was told to "leave --uncertainty out to evaluate without
    them" (triage, conformal and evaluate read the same folder; without it they score the probabilities' maps)."""
    paths = write_toy_cohort(tmp_path / "data", n_cases=1, shape=(8, 8, 8))
    empty = tmp_path / "maps"
    empty.mkdir()
    with pytest.raises(CaseError, match=r"--uncertainty .*no uncertainty map") as e:
        match_cases(paths["labels"], paths["predictions"], uncertainty=empty)
    assert "evaluate" not in str(e.value) and "derived from the probabilities" in str(e.value)
