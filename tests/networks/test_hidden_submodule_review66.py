"""No docstring example or documentation page calls a TorchScript API the installed torch deprecates (review 66).

``hidden_submodule``'s example scripted a layer with ``torch.jit.script``, which recent torch deprecates (a
``FutureWarning``: "switch to ``torch.compile`` or ``torch.export``"); it now hides the layer from the trace with
``torch.compile``, the other kind of submodule the function names (the doctests run it). The TorchScript answer stays
pinned here, for the networks users still script.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import torch
from torch import nn

from monai_unc.networks import shared
from tests._paths import ROOT

#: the TorchScript entry points an example might call, each with a call that shows whether torch deprecates it
_CANDIDATES: dict[str, Callable[[], object]] = {
    "torch.jit.script": lambda: torch.jit.script(nn.Linear(1, 1)),
    "torch.jit.trace": lambda: torch.jit.trace(nn.Linear(1, 1), torch.zeros(1, 1)),
}


def _deprecated(call: Callable[[], object]) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return any(issubclass(w.category, (DeprecationWarning, FutureWarning)) and "deprecated" in str(w.message)
               for w in caught)


def _code_lines(path) -> list[tuple[int, str]]:
    """The lines of code a reader runs: doctest lines of a module, the fenced Python blocks of a page."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".py":
        return [(i, s.strip()) for i, s in enumerate(lines, 1) if s.strip().startswith((">>> ", "... "))]
    out, fenced = [], False
    for i, s in enumerate(lines, 1):
        if s.lstrip().startswith("```"):
            fenced = not fenced and bool(re.match(r"\s*```\s*(python|py|pycon)\b", s))
        elif fenced:
            out.append((i, s))
    return out


def test_no_example_calls_a_torchscript_api_the_installed_torch_deprecates():
    deprecated = [name for name, call in _CANDIDATES.items() if _deprecated(call)]
    hits = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in [*sorted((ROOT / "monai_unc").rglob("*.py")), *sorted((ROOT / "docs").rglob("*.md"))]
        for i, line in _code_lines(path)
        if any(f"{name}(" in line for name in deprecated)
    ]
    assert not hits, f"examples call {deprecated}, deprecated by torch {torch.__version__}:\n" + "\n".join(hits)


def test_a_scripted_submodule_is_named_as_torchscript():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's deprecation of torch.jit.script
        scripted = torch.jit.script(nn.Conv2d(1, 2, 1))
    net = nn.Sequential(nn.Identity(), scripted, nn.Dropout(0.5))
    assert shared.hidden_submodule(net) == (
        "submodule '1' is a TorchScript module: the trace cannot see its operations (random draws included)"
    )
    assert shared.hidden_submodule(nn.Sequential(nn.Conv2d(1, 2, 1), nn.Dropout(0.5))) is None
