"""The calibration images' statistics a rule's image reference records: kept by the fit, checked and refitted on
read, covered by the digest and the signature, and each image's leave-one-out ``image_z_max`` (the reference of the
monitor's image alarm) against a brute-force computation."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from monai_unc.evaluation.triage import RULE_FILE, ImageReference, ReferralRule
from monai_unc.evaluation.triage.rule import IMAGE_STATISTICS_VERSION
from monai_unc.io.provenance import rule_digest
from monai_unc.io.signing import Trust


def _stats(rng, n=8, channels=1):
    base = np.array([100.0, 20.0, 60.0, 100.0, 140.0])
    return np.concatenate([base + rng.normal(size=(n, 5)) * [5, 2, 4, 5, 6] for _ in range(channels)], axis=1)


def _brute_loo(stats):
    """Each row's largest |x - median| / max(1.4826 MAD, 0.02 median(p99 - p01), 1e-12) over the other rows (odd
    count: the middle order statistic), per channel block of five statistics."""
    out = []
    for i in range(len(stats)):
        rest = [r for j, r in enumerate(stats.tolist()) if j != i]
        k = len(rest) // 2
        z = 0.0
        for f in range(stats.shape[1]):
            col = sorted(r[f] for r in rest)
            med = col[k]
            mad = sorted(abs(r[f] - med) for r in rest)[k]
            c = f // 5
            spread = sorted(r[5 * c + 4] - r[5 * c + 2] for r in rest)[k]
            z = max(z, abs(stats[i, f] - med) / max(1.4826 * mad, 0.02 * spread, 1e-12))
        out.append(z)
    return np.array(out)


@pytest.mark.parametrize("channels", [1, 2])
def test_leave_one_out_z_max_against_brute_force(channels):
    stats = _stats(np.random.default_rng(channels), n=8, channels=channels)  # 7 others: one middle value
    ref = ImageReference.fit(stats)
    assert np.asarray(ref.statistics).tolist() == stats.tolist()
    np.testing.assert_allclose(ref.leave_one_out_z_max(), _brute_loo(stats), rtol=1e-12)
    # it is the statistic triage records for a new case: the largest z-score against the others' reference
    i = 3
    other = ImageReference.fit(np.delete(stats, i, axis=0))
    assert ref.leave_one_out_z_max()[i] == pytest.approx(other.z_scores(stats[i]).max(), rel=1e-12)


def test_edge_cases_of_the_leave_one_out_scores():
    one = ImageReference.fit(np.array([[1.0, 0.5, 0.0, 1.0, 2.0]]))
    assert one.leave_one_out_z_max() is None  # one image: no other image to compare it with
    same = ImageReference.fit(np.tile([1.0, 0.5, 0.0, 1.0, 2.0], (4, 1)))  # identical images: the floor, z = 0
    np.testing.assert_array_equal(same.leave_one_out_z_max(), np.zeros(4))
    old = ImageReference(("mean", "std", "p01", "p50", "p99"), (1, 1, 0, 1, 2), (1, 1, 1, 1, 1), 3)
    assert old.statistics is None and old.leave_one_out_z_max() is None
    assert "calibration_statistics" not in old.to_json()


def test_round_trip_and_an_older_reference_without_statistics():
    ref = ImageReference.fit(_stats(np.random.default_rng(0)), z_max=4.0)
    d = ref.to_json()
    assert d["calibration_statistics"]["version"] == IMAGE_STATISTICS_VERSION == 1
    assert len(d["calibration_statistics"]["rows"]) == ref.n_cases == 8
    assert ImageReference.from_json(json.loads(json.dumps(d))) == ref
    del d["calibration_statistics"]  # a rule certified before the statistics were recorded
    old = ImageReference.from_json(d)
    assert old.statistics is None and old.median == ref.median and old.leave_one_out_z_max() is None


def _spread(rows, f):
    """Twice the spread of statistic ``f`` around its median (the median stays, the MAD doubles)."""
    med = float(np.median([r[f] for r in rows]))
    for r in rows:
        r[f] = 2 * r[f] - med


def _bad(d, edit):
    d = copy.deepcopy(d)
    edit(d["calibration_statistics"])
    return d


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.update(version=2), r"version is 2: this monai-unc reads versions 1 to 1 \(a newer"),
    (lambda c: c.update(version="1"), "'version' must be int"),
    (lambda c: c.update(version=True), "'version' must be int"),
    (lambda c: c.pop("rows"), "'rows' is missing"),
    (lambda c: c.update(rows="x"), "'rows' must be list"),
    (lambda c: c["rows"].pop(), r"one row per calibration image \(8\), got 7"),
    (lambda c: c["rows"][2].pop(), r"rows\[2\] must be a list of 5 numbers"),
    (lambda c: c["rows"].__setitem__(1, {"mean": 1}), r"rows\[1\] must be a list of 5 numbers"),
    (lambda c: c["rows"][0].__setitem__(1, math.nan), r"rows\[0\]' must be a finite number"),
    (lambda c: c["rows"][0].__setitem__(1, math.inf), r"rows\[0\]' must be a finite number"),
    (lambda c: c["rows"][0].__setitem__(1, "2.0"), r"rows\[0\]' must be a finite number"),
    (lambda c: c["rows"][0].__setitem__(1, True), r"rows\[0\]' must be a finite number"),
    # a statistic moved: the recorded median or scale is no longer the one the rows give
    (lambda c: [r.__setitem__(0, r[0] + 50) for r in c["rows"]], r"field 'image_reference.median' is .* edited"),
    (lambda c: _spread(c["rows"], 1), r"field 'image_reference.scale' is .* edited"),
    (lambda c: None if c.__setitem__("version", 1) else None, None),  # unchanged: reads
])
def test_every_field_is_checked(edit, message):
    d = ImageReference.fit(_stats(np.random.default_rng(0))).to_json()
    bad = _bad(d, edit)
    if message is None:
        assert ImageReference.from_json(bad).statistics is not None
        return
    with pytest.raises(ValueError, match=message):
        ImageReference.from_json(bad)
    with pytest.raises(ValueError, match="image_reference.calibration_statistics"):
        ImageReference.from_json({**d, "calibration_statistics": []})


def _rule(ref):
    scores = tuple(float(v) for v in np.linspace(0.1, 0.8, 8))
    return ReferralRule(score="predictive_entropy_fg_mean", threshold=0.5, feasible=True, target_risk=0.2, delta=0.1,
                        method="sgr", risk="failure", failure_dice=0.8, calibration_scores=scores,
                        calibration_cases=tuple(f"c{i}" for i in range(8)), n_undefined=0, bound=0.15,
                        coverage=0.5, observed_risk=0.05, n_candidates=20, num_classes=2, image_reference=ref,
                        fingerprint={})


def test_the_digest_and_the_signature_cover_the_statistics(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    ref = ImageReference.fit(_stats(np.random.default_rng(0)))
    path = _rule(ref).save(tmp_path / "r" / RULE_FILE)  # signed with the user's key (created here)
    trust = Trust(allow_unsigned=True)  # a rule without a calibration record; its signature is still checked
    back = ReferralRule.load(path, trust)
    assert back.image_reference == ref and back.signature.startswith("signed by")
    doc = json.loads(path.read_text())
    rows = doc["image_reference"]["calibration_statistics"]["rows"]
    rows[0], rows[1] = rows[1], rows[0]  # the median and scale stay the same: only the digest can tell
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="digest"):
        ReferralRule.load(path, trust)
    doc["digest"] = rule_digest({k: v for k, v in doc.items() if k not in ("digest", "signature")})
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="signature"):
        ReferralRule.load(path, trust)


def test_the_reason_of_an_image_far_in_every_statistic_is_bounded():
    """The reason names the farthest statistics and counts the others: an image from a new scanner, every statistic of
    its twelve channels far from the calibration images, was referred with a reason of 1024 characters, which the
    monitoring store refuses (it keeps at most ``MAX_TEXT`` characters of a text), so ``monitor record`` refused the
    whole run."""
    from monai_unc.evaluation.triage.rule import MAX_REASON, REASON_STATISTICS
    from monai_unc.monitoring.store import MAX_TEXT

    assert MAX_REASON <= MAX_TEXT
    rng = np.random.default_rng(0)
    cal = 100 + rng.normal(size=(30, 60))
    rule = ReferralRule("predictive_entropy_fg_mean", 0.3, True, 0.1, 0.1, "sgr", "failure", 0.8,
                        (0.1, 0.2, 0.3, 0.4), ("a", "b", "c", "d"), image_reference=ImageReference.fit(cal))
    new = cal[:1] * 3.0
    new[0, 7] = 100 * 50.0  # c1_p01: the farthest
    d = rule.apply([0.25], image_stats=new)[0]
    assert d.code == "image_statistics" and len(d.reason) <= MAX_REASON
    z = rule.image_reference.z_scores(new)[0]
    far = [rule.image_reference.features[i] for i in np.argsort(-z, kind="stable")[:REASON_STATISTICS]]
    inner = d.reason[d.reason.index("(") + 1:d.reason.rindex(")")]
    shown = [t.split(" z=")[0] for t in inner.split(", ")[:REASON_STATISTICS]]
    assert shown == sorted(far, key=rule.image_reference.features.index) and "c1_p01" in shown
    assert inner.endswith(f", and {60 - REASON_STATISTICS} more > 5")
    # up to REASON_STATISTICS far statistics are all named, as before
    few = cal[:1].copy()
    few[0, :3] *= 3.0
    assert rule.apply([0.25], image_stats=few)[0].reason == (
        "image far from the calibration images (c0_mean z={}, c0_std z={}, c0_p01 z={} > 5)".format(
            *(rule.image_reference.z_text(v) for v in rule.image_reference.z_scores(few)[0, :3])))


def test_the_longest_reason_triage_can_write_fits_the_bound():
    """Every part of a reason at its longest: a rule that is not certified, a score outside the calibration range
    written in 17 digits, statistic names of 256 characters (a rule file without recorded calibration statistics)
    and z-scores near 1e300 (a scale of 1e-300), written in full by their one decimal."""
    from monai_unc.evaluation.triage.rule import MAX_REASON

    n = 40
    names = tuple(f"{i:03d}" + "x" * 253 for i in range(n))
    ref = ImageReference(names, (0.0,) * n, (1e-300,) * n, 10, 1.2345678901234567e-7)
    lo, hi = 0.10000000000000002, 0.30000000000000004
    for feasible in (False, True):
        rule = ReferralRule("predictive_entropy_fg_mean", 0.2 if feasible else -math.inf, feasible, 0.1, 0.1, "sgr",
                            "failure", 0.8, (lo, 0.2, hi), ("a", "b", "c"), image_reference=ref)
        for score in (np.nextafter(lo, 0), np.nextafter(hi, 1), -1.2345678901234567e-300, 1.2345678901234567e300):
            for value in (1.7976931348623157e-8, 1.2345678901234567e-299):  # z-scores of 309 and 3 digits
                reason = rule.apply([score], image_stats=np.full((1, n), value))[0].reason
                assert len(reason) <= MAX_REASON, (len(reason), reason)
                assert "more > 1.23457e-07)" in reason
