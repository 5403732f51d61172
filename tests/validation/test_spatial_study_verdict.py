"""docs/validation/study1_spatial_metrics.py's verdict column: what the docs page says of each metric's accuracy."""

from tests.validation._studies import load_study


def test_a_tie_in_every_case_is_not_a_failure_to_favour_the_clean_map():
    """Found by review: PAvPU(w=11) tied on all 24 cases and was printed as "both fail to favour the clean map"."""
    verdict = load_study("study1_spatial_metrics").verdict
    assert verdict(0.0, 33.3, ties=24, cases=24) == "a tie in every case here: prefers neither map (paper 33.3 %)"
    assert verdict(0.0, 33.3, ties=23, cases=24).startswith("both fail to favour the clean map")
    assert verdict(95.0, 95.8).startswith("reproduces")
    assert verdict(45.8, 68.8, ties=13, cases=24).startswith("disagrees")
    assert verdict(float("nan"), 50.0) == "undefined here"
    assert verdict(10.0, None) == "not in the paper"
