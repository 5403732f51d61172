"""An evaluation whose conformal states were saved by an earlier version (int64 ``true_counts`` / ``false_counts``)
resumes from them: the per-case records are reused as they are, ``state/products.npz`` reads back, and the rule is
the one fitted before. The states are now saved in a narrow dtype (:class:`~monai_unc.metrics.ConformalCaseState`).
"""

from __future__ import annotations

import hashlib
import json
import warnings

import numpy as np

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.cohort import CohortState
from monai_unc.io import atomic_save_npz
from tests._states import sign_case_state


def _to_old_layout(path):
    """Rewrite an ``.npz`` of states with every conformal state in the layout of earlier versions."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    out = {k: v for k, v in arrays.items() if not k.endswith(("counts_base", "counts_index", "counts_value"))}
    prefixes = [k[: -len("counts_base")] for k in arrays if k.endswith("counts_base")]
    for p in prefixes:
        both = arrays[p + "counts_base"].astype(np.int64)
        both.reshape(-1)[arrays[p + "counts_index"].astype(np.int64)] = arrays[p + "counts_value"]
        out[p + "true_counts"], out[p + "false_counts"] = both[0], both[1]
    atomic_save_npz(path, out, compressed=True)
    if path.parent.name == "cases":  # a case's record: signed as the earlier version's run signed it
        sign_case_state(path)
    return len(prefixes)


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.npz"))}


def test_an_evaluation_resumes_from_conformal_states_of_the_earlier_layout(tmp_path):
    a = write_toy_cohort(tmp_path / "A", n_cases=6, shape=(10, 10, 10), seed=3)
    ev = tmp_path / "ev"
    argv = ["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--no-spatial",
            "--conformal", "outer:fnr=0.3", "--conformal", "inner:fp=0.4", "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(argv) == 0
        states = CohortState.load(ev / "state").product_states
        rule = json.loads((ev / "conformal_rule.json").read_text())
        summary = json.loads((ev / "summary.json").read_text())
        cases = ev / "state" / "cases"
        assert sum(_to_old_layout(p) for p in cases.glob("*.npz")) == 12  # 6 cases, two sides
        assert _to_old_layout(ev / "state" / "products.npz") == 12
        old = _digests(cases)
        back = CohortState.load(ev / "state").product_states  # an earlier version's products.npz
        assert back.keys() == states.keys()
        for c in states:
            assert back[c]["conformal"] == states[c]["conformal"]
        assert cli.main(argv) == 0
    assert _digests(cases) == old  # every case resumed from its record of the earlier layout, none recomputed
    assert json.loads((ev / "conformal_rule.json").read_text())["rules"] == rule["rules"]
    assert json.loads((ev / "summary.json").read_text())["conformal"] == summary["conformal"]
    with np.load(ev / "state" / "products.npz") as z:  # written again in the narrow layout
        assert any(k.endswith("counts_base") for k in z.files) and not any(k.endswith("true_counts") for k in z.files)
