"""A bundle's own code (``scripts/``, a network ``"_target_": "scripts.net.Net"``) defines the model as its config
and checkpoint do: it is in the model's digests, so a rule certified on the bundle does not match predictions of its
edited code (found by hostile review: only ``models/model.pt`` and ``configs/inference.json`` were digested)."""

from __future__ import annotations

import json
import sys

import torch

from monai_unc.workflows.models import load_network

NET = """import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(1, 2, 1)

    def forward(self, x):
        return self.conv(x){extra}
"""


def _bundle(root):
    (root / "configs").mkdir(parents=True)
    (root / "models").mkdir()
    (root / "scripts" / "__pycache__").mkdir(parents=True)
    (root / "scripts" / "__init__.py").write_text("")
    (root / "scripts" / "net.py").write_text(NET.format(extra=""))
    (root / "scripts" / "__pycache__" / "net.cpython.pyc").write_bytes(b"cache")
    (root / "configs" / "inference.json").write_text(json.dumps({"network_def": {"_target_": "scripts.net.Net"}}))
    torch.save({"conv.weight": torch.ones(2, 1, 1, 1, 1), "conv.bias": torch.zeros(2)}, root / "models" / "model.pt")


def _digests(root, monkeypatch):
    for name in [m for m in sys.modules if m == "scripts" or m.startswith("scripts.")]:
        monkeypatch.delitem(sys.modules, name)
    return {e["file"]: e["sha256"] for e in load_network(bundle=root).weights}


def test_the_bundle_scripts_are_digested(tmp_path, monkeypatch):
    root = tmp_path / "bundle"
    _bundle(root)
    monkeypatch.syspath_prepend(str(root))  # as monai.bundle's run() puts the bundle root on sys.path
    first = _digests(root, monkeypatch)
    net = str((root / "scripts" / "net.py").resolve())
    assert net in first and str((root / "scripts" / "__init__.py").resolve()) in first
    assert not any("__pycache__" in f for f in first)
    (root / "scripts" / "net.py").write_text(NET.format(extra=" * 2"))  # the model's code edited
    second = _digests(root, monkeypatch)
    assert second[net] != first[net]
    assert {f: d for f, d in second.items() if f != net} == {f: d for f, d in first.items() if f != net}
