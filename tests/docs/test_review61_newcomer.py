"""Review 61, the newcomer's path: README's Python snippet runs as written (it names where its network and image come
from), with fewer samples and smaller windows so that the test is quick."""

from __future__ import annotations

import re

from tests._paths import ROOT


def test_readme_snippet_runs_as_written():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## In a few lines", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    quick = code.replace("num_samples=30", "num_samples=2").replace("(96, 96, 96), overlap=0.5", "(96, 96, 96)")
    assert quick.count("num_samples=2") == 1 and quick != code  # the settings the README shows were found
    namespace: dict = {"__name__": "__readme__"}
    exec(compile(quick, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    out, image = namespace["out"], namespace["image"]
    assert out["pred"].shape == (1, 3, *image.shape[2:])
    assert {"predictive_entropy", "expected_entropy", "mutual_information"} <= set(out)
