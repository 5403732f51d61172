"""The image alarm against the calibration images: valid without a shift (simulated streams), it detects a stream
whose images differ from the calibration images from its first case (which the stream-only fallback cannot), and a
rule without recorded calibration statistics falls back and says so."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from monai_unc.evaluation.triage import ImageReference
from monai_unc.io.provenance import rule_digest
from monai_unc.metrics.monitoring import score_martingale
from monai_unc.monitoring import MonitorStore, monitor_status, read_triage_run, status_table
from monai_unc.monitoring.status import IMAGE_REFERENCE_MIN, image_reference_scores, stream_seed

from ._stream import make_rule, write_triage

ALPHA = 0.05
#: image statistics (mean, std, p01, p50, p99) of one scanner: centre and spread
_MU = np.array([100.0, 20.0, 60.0, 100.0, 140.0])
_SD = np.array([5.0, 2.0, 4.0, 5.0, 6.0])


def _images(rng, n, gain=1.0):
    """Statistics of ``n`` images; ``gain`` scales the intensities (another scanner or protocol)."""
    return (_MU + rng.normal(size=(n, 5)) * _SD) * gain


def _rule(ref: ImageReference | None, keep_statistics: bool = True) -> dict:
    d = {"calibration_scores": [0.1, 0.2], "target_risk": 0.1,
         "image_reference": None if ref is None else ref.to_json()}
    if ref is not None and not keep_statistics:
        del d["image_reference"]["calibration_statistics"]
    return d


def _stream(ref, stats):
    """The store's rows of a stream: ``image_z_max`` as triage records it (no score, so only the image alarm)."""
    z = ref.z_scores(stats).max(axis=1)
    return [{"case_id": f"c{i}", "site": "S", "triaged_at": f"t{i}", "score": math.nan, "image_z_max": float(v),
             "decision": "accept", "rule_digest": "r", "loss": None} for i, v in enumerate(z)]


def _image_alarm(rule, rows):
    (g,) = monitor_status(rows, {"r": rule}, alpha=ALPHA)
    return g


def test_the_stream_is_ranked_against_the_calibration_images():
    rng = np.random.default_rng(0)
    ref = ImageReference.fit(_images(rng, 60))  # enough images for the alarm's level (IMAGE_REFERENCE_MIN): no note
    rows = _stream(ref, _images(rng, 60))
    g = _image_alarm(_rule(ref), rows)
    assert g.image_against_calibration and g.image_note is None
    want = score_martingale([r["image_z_max"] for r in rows], ref.leave_one_out_z_max(), alpha=ALPHA,
                            seed=stream_seed("r", "S", "image"))
    np.testing.assert_array_equal(g.image.pvalues, want.pvalues)
    np.testing.assert_array_equal(g.image.log_martingale, want.log_martingale)
    assert not any(line.startswith("note:") for line in status_table([g]))
    # the same rule certified before the statistics were recorded: the stream alone, and a note says so
    old = _image_alarm(_rule(ref, keep_statistics=False), rows)
    assert not old.image_against_calibration and "earlier cases only" in old.image_note
    alone = score_martingale([r["image_z_max"] for r in rows], (), seed=stream_seed("r", "S", "image"))
    np.testing.assert_array_equal(old.image.log_martingale, alone.log_martingale)
    assert any(line.startswith("note: rule r: the image martingale ranks") for line in status_table([old]))
    assert _image_alarm(_rule(None), rows).image_note is not None  # no image reference at all
    assert image_reference_scores({}) is None


@pytest.mark.slow
def test_no_false_alarm_beyond_alpha_without_a_shift():
    """200 streams of 500 cases, each with its own 50 calibration images, all from one scanner: the share of streams
    whose image alarm is ever raised stays within alpha plus three Monte Carlo standard errors (over 1000 streams,
    docs/validation.md study 8)."""
    rng = np.random.default_rng(7)
    n = 200
    alarms = 0
    for _ in range(n):
        ref = ImageReference.fit(_images(rng, 50))
        g = _image_alarm(_rule(ref), _stream(ref, _images(rng, 500)))
        alarms += g.image.alarm is not None
    assert alarms / n <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / n), alarms


def test_a_new_scanner_from_the_first_case_is_detected_only_against_the_calibration_images():
    rng = np.random.default_rng(3)
    with_ref, without, delays = 0, 0, []
    for _ in range(10):
        ref = ImageReference.fit(_images(rng, 50))
        rows = _stream(ref, _images(rng, 300, gain=1.1))  # every case from the new scanner
        g = _image_alarm(_rule(ref), rows)
        with_ref += g.image.alarm is not None
        delays.append(math.inf if g.image.alarm is None else g.image.alarm)
        without += _image_alarm(_rule(ref, keep_statistics=False), rows).image.alarm is not None
    assert with_ref == 10 and np.median(delays) < 30
    assert without <= 2  # exchangeable within itself: the stream alone cannot tell


def test_a_scanner_change_partway_is_detected_after_it():
    rng = np.random.default_rng(4)
    ref = ImageReference.fit(_images(rng, 60))
    rows = _stream(ref, np.concatenate([_images(rng, 200), _images(rng, 200, gain=1.1)]))
    g = _image_alarm(_rule(ref), rows)
    assert g.image.alarm is not None and 200 <= g.image.alarm < 260
    assert abs(g.image.change_point - 200) <= 15
    assert any("image distribution changed" in a for a in g.alarms())


def test_record_checks_the_reference_and_status_uses_it(tmp_path):
    rng = np.random.default_rng(5)
    ref = ImageReference.fit(_images(rng, 30))
    rule = make_rule([0.1, 0.2, 0.3])
    rule["image_reference"] = json.loads(json.dumps(ref.to_json()))
    rule["digest"] = rule_digest(rule)  # a rule's digest is of its content, the image reference included
    z = ref.z_scores(_images(rng, 20, gain=1.3)).max(axis=1)
    folder = write_triage(tmp_path / "t", rule, [{"case": f"c{i}", "score": 0.2, "image_z_max": float(v)}
                                                 for i, v in enumerate(z)])
    db = str(tmp_path / "m.db")
    run = read_triage_run(folder)
    with MonitorStore(db) as store:
        store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder=str(run.folder),
                         triaged_at=run.triaged_at, model_digest=run.model_digest)
        rules, cases = store.rules(), store.cases()
    (g,) = monitor_status(cases, rules)
    assert rules[rule["digest"]]["image_reference"] == rule["image_reference"]
    assert g.image_against_calibration and g.image.alarm is not None  # 20 cases of another scanner: seen at once
    # a triage.json whose rule's statistics were edited is refused when recorded, naming the field
    bad = copy.deepcopy(rule)
    bad["image_reference"]["calibration_statistics"]["rows"][0][0] = "1e9"
    write_triage(tmp_path / "u", bad, [{"case": "x", "score": 0.2}])
    with pytest.raises(ValueError, match=r"triage.json: field 'rule.image_reference.calibration_statistics.rows"):
        read_triage_run(tmp_path / "u")
    # and a store holding such a rule (edited in the database) is refused by status, naming the rule
    with pytest.raises(ValueError, match=f"rule {rule['digest']}: field 'image_reference.calibration_statistics"):
        monitor_status(cases, {rule["digest"]: {**rules[rule["digest"]], "image_reference": bad["image_reference"]}})


def test_few_calibration_images_give_a_note_on_the_alarms_level():
    """With 10 calibration images the image alarm ranks new cases' ``image_z_max`` (against all 10) among values from
    references of 9: not exchangeable, and without a change it alarmed in 9.2 % of 500-case streams at alpha 0.05
    (400 simulated streams, docs/monitoring.md), so status, the table and the report say the level is approximate."""
    rng = np.random.default_rng(0)
    ref = ImageReference.fit(_images(rng, 10))
    g = _image_alarm(_rule(ref), _stream(ref, _images(rng, 30)))
    assert g.image_against_calibration and g.image_reference_size == 10
    assert "against 10 calibration images" in g.image_note and "only approximately alpha" in g.image_note
    assert any(line.startswith("note: rule r: the image martingale ranks each case against 10 calibration images")
               for line in status_table([g]))
    big = ImageReference.fit(_images(rng, IMAGE_REFERENCE_MIN))
    assert _image_alarm(_rule(big), _stream(big, _images(rng, 30))).image_note is None
