"""One check of the derived maps in the resume state of ``evaluate`` and ``triage`` (``map_digest_hooks``).

Both commands write the maps they derive from the probabilities of a case without map files to ``<output>/maps`` and
record the sha256 of each in the case's saved state; a rerun computes a case again when one of its maps is gone,
edited or replaced by another case's. The check was written twice (evaluate's resume hooks and triage's row hooks);
it is one function now, and the state files of both commands keep their format (``maps_sha256``: evaluate keys it by
the map's path, triage by its file name in ``<output>/maps``). The reference here is ``hashlib`` on the files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.engine import CaseCache
from monai_unc.evaluation.resume import map_digest_hooks
from monai_unc.evaluation.triage import RULE_FILE
from tests._states import write_signed_state


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cache(state: Path, folder: Path | None) -> CaseCache:
    dump, restore = map_digest_hooks(lambda f, c, r: {"row": r}, lambda f, doc, item: doc["row"],
                                     lambda doc: doc["row"]["derived"], folder)
    return CaseCache(state, dump=dump, restore=restore)


@pytest.mark.parametrize("relative", [True, False], ids=["names in a folder (triage)", "paths (evaluate)"])
def test_the_hooks_record_each_map_and_refuse_one_gone_edited_or_swapped(tmp_path, relative):
    maps = tmp_path / "maps"
    maps.mkdir()
    for case in ("a", "b"):
        (maps / f"{case}_pe.nii.gz").write_bytes(f"map of {case}".encode())
    name = "a_pe.nii.gz" if relative else str(maps / "a_pe.nii.gz")
    cache = _cache(tmp_path / "state", maps if relative else None)
    row = {"derived": {"predictive_entropy": name}, "score": 0.5}
    cache.save("a", row)
    doc = json.loads((tmp_path / "state" / "a.json").read_text())
    assert doc["maps_sha256"] == {name: _sha(maps / "a_pe.nii.gz")}  # the format both commands wrote before
    assert cache.load("a") == row
    (maps / "a_pe.nii.gz").write_bytes(b"map of a, edited")
    assert cache.load("a") is None
    shutil.copyfile(maps / "b_pe.nii.gz", maps / "a_pe.nii.gz")  # another case's map
    assert cache.load("a") is None
    (maps / "a_pe.nii.gz").unlink()
    assert cache.load("a") is None
    (maps / "a_pe.nii.gz").write_bytes(b"map of a")  # the bytes written with the row: reused again
    assert cache.load("a") == row


def test_a_state_whose_digests_do_not_name_its_maps_is_computed_again(tmp_path):
    maps = tmp_path / "maps"
    maps.mkdir()
    (maps / "a_pe.nii.gz").write_bytes(b"map")
    cache = _cache(tmp_path / "state", maps)
    cache.save("a", {"derived": {"predictive_entropy": "a_pe.nii.gz"}})
    path = tmp_path / "state" / "a.json"
    doc = json.loads(path.read_text())
    for digests in (None, [], {}, {"a_pe.nii.gz": _sha(maps / "a_pe.nii.gz"), "other.nii.gz": "00"}):
        write_signed_state(path, {**doc, "maps_sha256": digests})
        assert cache.load("a") is None, digests
    without = {k: v for k, v in doc.items() if k != "maps_sha256"}  # a state of an earlier version
    write_signed_state(path, without)
    assert cache.load("a") is None
    write_signed_state(path, {**doc, "row": {**doc["row"], "derived": ["a_pe.nii.gz"]}})  # no object of maps
    assert cache.load("a") is None
    write_signed_state(path, doc)  # the state as written: reused
    assert cache.load("a") == {"derived": {"predictive_entropy": "a_pe.nii.gz"}}


def test_a_swapped_derived_map_is_computed_again_by_evaluate_and_by_triage(tmp_path):
    """The same tampering (one case's derived map replaced by another case's) in the outputs of both commands: each
    rerun writes the map of a fresh run again, and the other cases' maps are reused (untouched)."""
    a = write_toy_cohort(tmp_path / "A", n_cases=6, shape=(8, 8, 8), seed=1)
    b = write_toy_cohort(tmp_path / "B", n_cases=3, shape=(8, 8, 8), seed=2)
    for folder in (a["predictions"], b["predictions"]):
        for p in folder.glob("*_predictive_entropy.nii.gz"):
            p.unlink()  # probabilities only: both commands derive the maps
    ev, tr = tmp_path / "ev", tmp_path / "tr"
    commands = {
        ev: ["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--no-spatial",
             "--target-risk", "0.4", "--delta", "0.2", "-q"],
        tr: ["triage", "-p", str(b["predictions"]), "--rule", str(ev / RULE_FILE), "-o", str(tr), "-q"],
    }

    def run(out: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            assert cli.main(commands[out]) == 0

    for out in (ev, tr):
        run(out)
        maps = out / "maps"
        fresh = {p.name: p.read_bytes() for p in maps.iterdir()}
        victim, donor = sorted(n for n in fresh if n.endswith("_predictive_entropy.nii.gz"))[:2]
        assert fresh[victim] != fresh[donor]
        case = victim[: -len("_predictive_entropy.nii.gz")]
        untouched = {p.name: p.stat().st_mtime_ns for p in maps.iterdir() if not p.name.startswith(f"{case}_")}
        assert untouched
        shutil.copyfile(maps / donor, maps / victim)
        run(out)
        assert {p.name: p.read_bytes() for p in maps.iterdir()} == fresh, out.name
        # only the tampered case was computed again: the other cases' maps were not written again
        assert {p.name: p.stat().st_mtime_ns for p in maps.iterdir() if p.name in untouched} == untouched


def test_evaluate_reads_each_derived_map_once_for_its_digests(tmp_path, monkeypatch):
    """The digest of a map evaluate derives is taken once, when it is written (the record's ``derived_sha256``, which
    the report checks): the state's ``maps_sha256`` reuses it instead of reading the file again, and equals
    ``hashlib``'s digest of each file (so a rerun still checks the maps against it)."""
    from monai_unc.evaluation import resume, runner

    a = write_toy_cohort(tmp_path / "A", n_cases=3, shape=(8, 8, 8), seed=1)
    for p in a["predictions"].glob("*_predictive_entropy.nii.gz"):
        p.unlink()  # probabilities only: evaluate derives the maps
    ev = tmp_path / "ev"
    reads: dict[str, int] = {}

    def counting(real):
        def sha(path):
            reads[str(path)] = reads.get(str(path), 0) + 1
            return real(path)
        return sha

    monkeypatch.setattr(runner, "file_sha256", counting(runner.file_sha256))
    monkeypatch.setattr(resume, "file_sha256", counting(resume.file_sha256))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev),
                         "--no-spatial", "-q"]) == 0
    maps = sorted((ev / "maps").glob("*.nii*"))
    assert maps and all(reads.get(str(p)) == 1 for p in maps), reads
    states = [d for d in (json.loads(p.read_text()) for p in (ev / "state").rglob("*.json"))
              if isinstance(d, dict) and "maps_sha256" in d]
    assert len(states) == 3
    for doc in states:
        assert doc["maps_sha256"] and all(v == _sha(Path(k)) for k, v in doc["maps_sha256"].items())
