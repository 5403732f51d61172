"""``--network`` builds only from an allow-list: a spec that names ``os.system``, ``subprocess.run``,
``builtins.eval``, an ``importlib.import_module`` chain, a ``_target_`` hidden in a nested argument or referenced
with ``@``, an expression, a macro or the debug mode is refused with exit 2 before anything runs: a canary file that
each hostile spec would create is never created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.workflows.models import check_network_spec
from tests._cases import TOY_NET


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("netspec")
    paths = write_toy_cohort(root / "data", n_cases=1, shape=(16, 16, 16))
    from monai.networks.nets import UNet

    ckpt = root / "net.pt"
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), ckpt)
    return {**paths, "root": root, "ckpt": ckpt}


def _hostile(canary: Path, module_dir: Path) -> dict[str, dict]:
    touch = f"touch {canary}"
    (module_dir / "canary_module.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    return {
        "os.system": {"_target_": "os.system", "command": touch},
        "subprocess.run": {"_target_": "subprocess.run", "args": ["touch", str(canary)]},
        "builtins.eval": {"_target_": "builtins.eval", "source": f"open({str(canary)!r}, 'w')"},
        "importlib chain": {"network_def": {**TOY_NET, "act": "@loader"},
                            "loader": {"_target_": "importlib.import_module", "name": "canary_module"}},
        "nested argument": {**TOY_NET, "norm": {"_target_": "os.system", "command": touch}},
        "deeply nested": {**TOY_NET, "act": ["prelu", {"init": {"_target_": "subprocess.run", "args": ["touch",
                                                                                                      str(canary)]}}]},
        "referenced target": {"network_def": {**TOY_NET, "act": "@a"}, "a": {"b": {"_target_": "os.system",
                                                                                    "command": touch}}},
        "expression": {**TOY_NET, "channels": f"$__import__('os').system('{touch}') or (4, 8)"},
        "macro": {**TOY_NET, "act": "%other.json#x"},
        "dotted escape": {"_target_": "monai.networks.nets.unet.torch.load", "f": "x"},
        "private attribute": {"_target_": "monai.networks.nets.UNet.__init__.__globals__"},
        "target reference": {"network_def": {"_target_": "@t"}, "t": "os.system"},
        "debug mode": {**TOY_NET, "_mode_": "debug"},
        # found by hostile testing: MONAI's relative references ("@::::a", "@##a": the entry two levels up) were not
        # followed by the check, and MONAI built what they name
        "relative reference": {"network_def": {**TOY_NET, "_requires_": "@::::a"},
                               "a": {"_target_": "os.system", "command": touch}},
        "relative reference (#)": {"network_def": {**TOY_NET, "act": "@##a"},
                                   "a": {"_target_": "subprocess.run", "args": ["touch", str(canary)]}},
        "relative reference in a list": {"network_def": {**TOY_NET, "act": ["@::::::a"]},
                                         "a": {"_target_": "os.system", "command": touch}},
        # ... and an entry whose key holds the separator: MONAI's resolver finds "@x::y" under the key "x::y"
        "separator in a key": {"network_def": {**TOY_NET, "_requires_": "@x::y"},
                               "x::y": {"_target_": "os.system", "command": touch}},
        "separator in a key (#)": {"network_def": {**TOY_NET, "_requires_": "@x#y"},
                                   "x::y": {"_target_": "os.system", "command": touch}},
    }


NAMES = ["os.system", "subprocess.run", "builtins.eval", "importlib chain", "nested argument", "deeply nested",
         "referenced target", "expression", "macro", "dotted escape", "private attribute", "target reference",
         "debug mode", "relative reference", "relative reference (#)", "relative reference in a list",
         "separator in a key", "separator in a key (#)"]


@pytest.mark.parametrize("name", NAMES)
def test_hostile_spec_refused_before_anything_runs(setup, tmp_path, monkeypatch, capsys, name):
    canary = tmp_path / "PWNED"
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = _hostile(canary, tmp_path)[name]
    for given in (json.dumps(spec), "file"):
        if given == "file":
            given = str(tmp_path / "spec.json")
            Path(given).write_text(json.dumps(spec))
        code = cli.main(["infer", "-i", str(setup["images"]), "-o", str(tmp_path / "out"), "--network", given,
                         "--checkpoint", str(setup["ckpt"]), "--samples", "2", "--device", "cpu", "-q"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "--network" in err and len(err.strip().splitlines()) == 1, err
        assert not canary.exists(), f"{name}: the spec ran code"


def test_allowed_specs_still_build():
    for spec in (TOY_NET, {**TOY_NET, "_target_": "UNet"}, {"_target_": "torch.nn.Conv2d", "in_channels": 1,
                                                            "out_channels": 2, "kernel_size": 3},
                 {**TOY_NET, "act": {"_target_": "torch.nn.PReLU"}, "_mode_": "default"},
                 {"_target_": "monai_unc.data.build_ssn_network"}):
        check_network_spec(spec)
    check_network_spec({"network_def": {**TOY_NET, "act": "@act"}, "act": "prelu", "other": "$import os"},
                       "network_def")  # an expression nothing references is never built
    # relative references to allowed entries (resolved as MONAI resolves them) stay allowed
    check_network_spec({"network_def": {**TOY_NET, "act": "@##act"}, "act": "prelu"}, "network_def")
    check_network_spec({**TOY_NET, "act": "@#a", "a": "prelu"})


def test_opt_in_names_run_code(tmp_path):
    spec = {"_target_": "mypackage.nets.MyNet", "x": 1}
    with pytest.raises(ValueError, match="not an allowed network name"):
        check_network_spec(spec)
    check_network_spec(spec, allow_code=["mypackage.nets."])
    check_network_spec(spec, allow_code=["mypackage.nets.MyNet"])
    with pytest.raises(ValueError, match="not an allowed"):
        check_network_spec(spec, allow_code=["mypackage.net"])  # a prefix of a name is not its module
    with pytest.raises(ValueError, match="expression"):
        check_network_spec({**TOY_NET, "channels": "$(4, 8)"}, allow_code=["mypackage."])
    check_network_spec({**TOY_NET, "channels": "$(4, 8)"}, allow_code=["*"])


def test_allow_code_target_option_builds_a_trusted_spec(setup, tmp_path, capsys):
    """The opt-in reaches the loader: an expression spec is refused without it and runs with ``'*'``."""
    spec = json.dumps({**TOY_NET, "channels": "$(4, 8)"})
    argv = ["infer", "-i", str(setup["images"]), "-o", str(tmp_path / "o"), "--network", spec, "--checkpoint",
            str(setup["ckpt"]), "--samples", "2", "--device", "cpu", "-q", "--method", "mcdropout"]
    assert cli.main(argv) == 2
    assert "expression" in capsys.readouterr().err
    assert cli.main([*argv, "--allow-code-target", "*"]) == 0, capsys.readouterr().err


def test_a_macro_is_refused_in_any_entry_of_a_whole_config(tmp_path, monkeypatch):
    """Found by hostile testing: MONAI resolves the macros of the whole config when it parses it, so a macro in an
    entry that ``network_def`` never references still read its file (a file another user's spec names: its parse
    errors printed), though the docs say a spec's macros are refused."""
    import monai.bundle

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"x": 1}))
    read: list[str] = []
    original = monai.bundle.ConfigParser.load_config_file

    def spy(filepath, **kwargs):
        read.append(str(filepath))
        return original(filepath, **kwargs)

    monkeypatch.setattr(monai.bundle.ConfigParser, "load_config_file", staticmethod(spy))
    spec = {"network_def": TOY_NET, "unused": {"deep": [f"%{other}#x"]}}
    with pytest.raises(ValueError, match=r"--network: unused::deep::0 is a macro \(it loads another file\)"):
        check_network_spec(spec, "network_def")
    from monai_unc.workflows.models import load_network

    with pytest.raises(ValueError, match="is a macro"):
        load_network(network=spec, checkpoints=[])
    assert not read, read
    with pytest.raises(ValueError, match=r"--network: act is a macro"):  # a whole spec: named as before
        check_network_spec({**TOY_NET, "act": "%other.json#x"})


@pytest.mark.parametrize("name", ["", ".", "mypkg.*", " mypkg", "mypkg ", "mypkg..", "a..b", "1pkg", "my-pkg"])
def test_malformed_code_target_names_are_refused_in_the_python_api(name):
    # found by hostile testing: a malformed opt-in matched nothing and the spec was refused for the wrong reason
    spec = {"_target_": "tests._cases.no_such_net"}
    with pytest.raises(ValueError, match=r"allow_code: expected '\*', a dotted Python name"):
        check_network_spec(spec, allow_code=[name])


def test_a_plain_string_is_not_read_as_its_characters():
    spec = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 2}
    with pytest.raises(TypeError, match="allow_code must be a sequence of names, got str"):
        check_network_spec(spec, allow_code="mypkg.nets.")
    with pytest.raises(TypeError, match="allow_code: expected a name"):
        check_network_spec(spec, allow_code=[3])
    # well-formed names: a dotted name, a prefix with one trailing dot, a non-ASCII identifier, '*'
    check_network_spec({"_target_": "mypkg.nets.Net"}, allow_code=["mypkg.nets."])
    check_network_spec({"_target_": "mypkg.Net"}, allow_code=("mypkg",))
    check_network_spec({"_target_": "päckage.Net"}, allow_code=["päckage.Net"])
    check_network_spec({"_target_": "os.system"}, allow_code=["*"])
