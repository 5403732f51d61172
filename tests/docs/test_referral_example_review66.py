"""docs/referral_threshold.md's worked example shows Learn-then-Test with the exact binomial p-value (review 66).

Review 66 added ``p_value="binomial"`` (``--risk-p-value binomial``); the worked example showed SGR and
Hoeffding-Bentkus only. The example's printed output is compared with the page by
``tests/docs/test_review61_docsaudit.py``; this test checks what the page shows of the binomial p-value.
"""

from __future__ import annotations

import re

from tests._paths import ROOT


def _worked_example() -> tuple[str, str]:
    text = (ROOT / "docs" / "referral_threshold.md").read_text(encoding="utf-8")
    section = text.split("## Worked example", 1)[1].split("\n## ", 1)[0]
    code, output = re.findall(r"```(?:python)?\n(.*?)```", section, flags=re.S)[:2]
    return code, output


def test_the_worked_example_certifies_the_0_1_risk_with_the_binomial_p_value():
    code, output = _worked_example()
    assert re.search(r'method="ltt", p_value=p_value\)', code) and '"binomial"' in code
    lines = dict(re.findall(r"^(SGR|LTT, binomial|LTT, hoeffding_bentkus): (.*)$", output, flags=re.M))
    cov = {k: float(re.search(r"coverage (\d\.\d+)", v).group(1)) for k, v in lines.items()}
    # the exact p-value certifies at least SGR's coverage on the same 0/1 risk, Hoeffding-Bentkus less
    assert cov["LTT, binomial"] >= cov["SGR"] > cov["LTT, hoeffding_bentkus"]
    assert "feasible=True" in lines["LTT, binomial"]
