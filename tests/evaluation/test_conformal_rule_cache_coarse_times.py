"""The rule file the evaluation's conformal figures read once per version: a rule written again at the same path with
the same modification time (a file system with coarse timestamps, or a copy that keeps the times) is read again."""

from __future__ import annotations

import os
import types
import warnings

import numpy as np

from monai_unc.evaluation import conformal
from monai_unc.evaluation.conformal import ConformalRuleFile
from monai_unc.io import files
from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule


def _rule(alpha: float) -> ConformalRuleFile:
    rng = np.random.default_rng(0)
    states = []
    for _ in range(30):
        truth = rng.random((6, 6, 6)) < 0.4
        p1 = np.clip(truth * 0.5 + rng.random((6, 6, 6)) * 0.5, 0, 1)
        states.append(conformal_case_state(np.stack([1 - p1, p1]), truth.astype(int), activation="softmax",
                                           side="outer", grid=64))
    return ConformalRuleFile({"outer": fit_conformal_rule(states, alpha)}, {"outer": alpha}, None,
                             {"activation": "softmax"}, [f"c{i:02d}" for i in range(30)])


def test_a_rule_written_again_with_the_same_times_is_read_again(tmp_path):
    path = tmp_path / "conformal_rule.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # unsigned rules
        for alpha in (0.3, 0.4):
            _rule(alpha).save(path)
            os.utime(path, ns=(10**18, 10**18))  # one modification time for both versions
            assert conformal._read_rule_once(path).targets == {"outer": alpha}


def test_a_settled_rule_is_read_once(tmp_path, monkeypatch):
    path = tmp_path / "conformal_rule.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _rule(0.3).save(path)
    ctime = os.stat(path).st_ctime_ns
    clock = types.SimpleNamespace(time_ns=lambda: ctime + 10**10)  # written 10 s ago, as the clock tells
    monkeypatch.setattr(files, "time", clock)  # the clock of io.files.settled, the caches' one settling rule
    loads = []
    load = ConformalRuleFile.load
    monkeypatch.setattr(ConformalRuleFile, "load", classmethod(lambda cls, p, trust=None: loads.append(p) or load(p)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        first = conformal._read_rule_once(path)
        assert conformal._read_rule_once(path) is first and len(loads) == 1
