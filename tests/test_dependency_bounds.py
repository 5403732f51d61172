"""The lower bounds pyproject.toml declares are versions the package works with (found by installing the declared
lower bounds: each bound below was lower, and a user on it met the failure named beside it)."""

from __future__ import annotations

import re

import pytest

from tests._paths import ROOT

#: distribution -> (the lowest version the package works with, what fails below it)
NEEDED = {
    "highdicom": ((0, 28), "a SEG without the source's SpecificCharacterSet ('Ωmega' written '?mega'), "
                           "ParametricMap without window_center / window_width"),
    "pydicom": ((3, 0, 1), "highdicom 0.28 needs it"),
    "nilearn": ((0, 10, 1), "0.10.0 imports pkg_resources (setuptools >= 81 and uv environments have none)"),
}


def _lower_bound(name: str) -> tuple[int, ...]:
    text = (ROOT / "pyproject.toml").read_text()
    found = re.findall(rf'"{name}(?:\[[^\]]*\])?\s*>=\s*([0-9.]+)', text)
    assert found, f"pyproject.toml declares no lower bound for {name}"
    return min(tuple(int(p) for p in v.split(".")) for v in found)


@pytest.mark.parametrize("name", sorted(NEEDED))
def test_declared_lower_bound_is_a_version_that_works(name):
    needed, why = NEEDED[name]
    assert _lower_bound(name) >= needed, f"{name}: below {'.'.join(map(str, needed))}: {why}"
