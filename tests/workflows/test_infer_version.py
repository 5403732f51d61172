"""Which package version made each case: ``infer.json`` and every case record name it; a resume with another version
keeps the finished cases made with the same settings and says so in one warning line (seeded draws may differ between
versions), and ``--overwrite`` predicts every case again."""

from __future__ import annotations

import json

import pytest

import monai_unc
from monai_unc.workflows.infer import VERSION_KEY, check_run_settings
from tests._cases import run_toy_infer, toy_infer_files

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_infer_files(tmp_path_factory.mktemp("version"), n_cases=2)


_infer = run_toy_infer


def _rewrite(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _mtimes(out):
    return {p.name: p.stat().st_mtime_ns for p in sorted(out.glob("toy00*_seg.nii.gz"))}


def test_a_resume_with_another_version_keeps_the_cases_and_says_so(toy, tmp_path, capsys):
    out = tmp_path / "out"
    assert _infer(toy, out) == 0
    assert json.loads((out / "infer.json").read_text())[VERSION_KEY] == monai_unc.__version__
    for case in ("toy000", "toy001"):
        record = json.loads((out / f"{case}.json").read_text())
        assert record[VERSION_KEY] == monai_unc.__version__
        assert VERSION_KEY not in record["fingerprint"]  # not a setting: a resume compares the settings
    before = _mtimes(out)

    capsys.readouterr()
    assert _infer(toy, out) == 0  # the same version: silent
    assert "monai-unc infer: warning" not in capsys.readouterr().err

    _rewrite(out / "infer.json", lambda d: d.update({VERSION_KEY: "0.0.1"}))
    assert _infer(toy, out) == 0
    err = capsys.readouterr().err
    assert err.count("monai-unc 0.0.1") == 1 and "--overwrite" in err and "kept" in err
    assert _mtimes(out) == before  # kept
    assert json.loads((out / "infer.json").read_text())[VERSION_KEY] == monai_unc.__version__

    _rewrite(out / "infer.json", lambda d: d.pop(VERSION_KEY))  # a run of a version that recorded none
    assert _infer(toy, out) == 0
    assert "no version recorded" in capsys.readouterr().err
    assert _infer(toy, out, "--overwrite") == 0
    assert all(after != before[name] for name, after in _mtimes(out).items())  # every case predicted again


def test_settings_still_decide_before_the_version(tmp_path):
    """Other settings are refused whatever the version; a folder that finished nothing takes any version silently."""
    from monai_unc.workflows.infer import InferSettings

    s = InferSettings(model="m", method="mcdropout", samples=2, roi=None, overlap=0.25, intensity="none",
                      measures=["predictive_entropy"], seed=0, activation="softmax", checkpoints=[])
    (tmp_path / "infer.json").write_text(json.dumps({"settings": s.to_json(), VERSION_KEY: "0.0.1"}))
    check_run_settings(tmp_path, s)  # nothing finished: no warning, no refusal
    (tmp_path / "infer.json").write_text(json.dumps({"settings": s.to_json(), VERSION_KEY: "0.0.1"}))
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(ValueError, match="samples"):
        check_run_settings(tmp_path, InferSettings(**{**s.__dict__, "samples": 3}))
    with pytest.warns(UserWarning, match="0.0.1"):
        check_run_settings(tmp_path, s)


def test_a_seeded_resume_with_other_torch_or_monai_says_the_draws_differ(toy, tmp_path, capsys):
    """torch draws a seed's dropout masks (another torch version draws others): a seeded resume after an upgrade keeps
    the finished cases and says in one warning that the folder no longer holds one seed's draws."""
    from monai_unc.workflows.infer import LIBRARIES_KEY, library_versions

    out = tmp_path / "seeded"
    assert _infer(toy, out, "--seed", "3") == 0
    now = library_versions()
    assert json.loads((out / "infer.json").read_text())[LIBRARIES_KEY] == now
    assert json.loads((out / "toy000.json").read_text())[LIBRARIES_KEY] == now
    before = _mtimes(out)
    capsys.readouterr()
    _rewrite(out / "infer.json", lambda d: d[LIBRARIES_KEY].update(torch="2.4.0"))
    assert _infer(toy, out, "--seed", "3") == 0
    err = capsys.readouterr().err
    assert err.count("torch 2.4.0") == 1 and f"torch {now['torch']}" in err and "--overwrite" in err, err
    assert _mtimes(out) == before  # kept
    assert json.loads((out / "infer.json").read_text())[LIBRARIES_KEY] == now
    assert _infer(toy, out, "--seed", "3") == 0  # recorded again: silent
    assert "warning" not in capsys.readouterr().err

    flips = tmp_path / "flips"  # flips draw nothing: the same samples whatever the versions, nothing to say
    assert _infer(toy, flips, "--method", "tta") == 0
    _rewrite(flips / "infer.json", lambda d: d[LIBRARIES_KEY].update(torch="2.4.0"))
    capsys.readouterr()
    assert _infer(toy, flips, "--method", "tta") == 0
    assert "warning" not in capsys.readouterr().err


def test_a_resume_with_the_regions_in_another_order_is_refused(tmp_path):
    """The ``--regions`` spec names the network's channels in order: the same regions in another order are other
    settings (dict equality took them for the same, so a resume kept sample label maps of the other mapping)."""
    import json

    from monai_unc.workflows.infer import InferSettings

    base = dict(model="m", method="mcdropout", samples=2, roi=None, overlap=0.25, intensity="none",
                measures=["predictive_entropy"], seed=0, activation="sigmoid", checkpoints=[])
    s = InferSettings(**base, regions={"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]})
    (tmp_path / "infer.json").write_text(json.dumps({"settings": s.to_json(), VERSION_KEY: monai_unc.__version__}))
    (tmp_path / "c.json").write_text("{}")
    check_run_settings(tmp_path, s)  # the same order: resumed
    with pytest.raises(ValueError, match="different settings.*regions"):
        check_run_settings(tmp_path, InferSettings(**base, regions={"ET": [4], "WT": [1, 2, 4], "TC": [1, 4]}))
