"""``DERIVED_MEASURES`` (the maps computed from a case's probabilities) is public: in ``__all__`` and docs/api
(hostile review 33: the name was added without either)."""

from pathlib import Path

import monai_unc.evaluation as evaluation
import monai_unc.evaluation.rows as rows


def test_derived_measures_is_exported_and_documented():
    assert "DERIVED_MEASURES" in rows.__all__ and "DERIVED_MEASURES" in evaluation.__all__
    assert evaluation.DERIVED_MEASURES == ("predictive_entropy", "one_minus_max_prob")
    page = (Path(__file__).resolve().parents[2] / "docs" / "api" / "evaluation.md").read_text()
    assert "::: monai_unc.evaluation.DERIVED_MEASURES" in page
