"""Every deprecated alias warns with a ``DeprecationWarning`` and gives the same object (or result) as its new name.

Module aliases (entries of ``monai_unc._compat.MOVED_MODULES``, no file each) warn when they are loaded, i.e. on the
first import of a process. The in-process tests therefore
re-run each module body (``importlib.reload``, or a first import) inside ``pytest.warns``; one subprocess test
imports every old path in a fresh interpreter with DeprecationWarnings as errors, as a user's script would meet them.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import monai_unc._compat
import monai_unc.data
import monai_unc.data.cohorts
import monai_unc.data.perturbations
import monai_unc.engine
import monai_unc.evaluation
import monai_unc.io
import monai_unc.io.files
import monai_unc.io.provenance
import monai_unc.keys
import monai_unc.metrics
import monai_unc.metrics.qu_brats_score
import monai_unc.metrics.quality
import monai_unc.temperature
import monai_unc.workflows
import monai_unc.workflows.demo
from monai_unc.keys import UncertaintyKeys, canonical_measure


def shown_deprecations(code: str) -> tuple[list[str], str]:
    """The ``DeprecationWarning`` lines that ``code`` prints in a fresh interpreter under Python's default filters,
    and its whole standard error (for a failing test's message).

    The filters show a ``DeprecationWarning`` only when it is attributed to ``__main__`` (the user's script): one
    attributed to a frame of the package is hidden, and the user never learns of the deprecation.
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stderr.splitlines() if "DeprecationWarning" in line], out.stderr

ROOT = Path(__file__).resolve().parents[1]

#: deprecated module -> the modules its names now live in (each name must be the very same object there)
MODULE_ALIASES: dict[str, tuple[object, ...]] = {
    "monai_unc.predict": (monai_unc.workflows, monai_unc.temperature, monai_unc.keys),
    "monai_unc.calibration": (monai_unc.temperature,),
    "monai_unc.quality": (monai_unc.metrics.quality,),
    "monai_unc.report.cohort": (monai_unc.evaluation,),
    "monai_unc.report.demo": (monai_unc.workflows.demo, monai_unc.data.cohorts),
    "monai_unc.report.nifti": (monai_unc.io.files, monai_unc.io),
    "monai_unc.data.export": (monai_unc.data.cohorts,),
    "monai_unc.evaluation.triage.fingerprint": (monai_unc.io.provenance,),
    "monai_unc.distributed": (monai_unc.engine,),
    "monai_unc.distributed.cases": (monai_unc.engine,),
    "monai_unc.distributed.collectives": (monai_unc.engine,),
    "monai_unc.metrics.qu_brats": (monai_unc.metrics.qu_brats_score,),
    "monai_unc.data.perturb": (monai_unc.data.perturbations,),
}


def _import_fresh(name: str):
    """Run the module body of ``name`` again (first import, or reload) and return the module."""
    if name in sys.modules:
        return importlib.reload(sys.modules[name])
    return importlib.import_module(name)


@pytest.mark.parametrize("old", sorted(MODULE_ALIASES))
def test_old_module_paths_warn_and_re_export_the_same_objects(old):
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} is deprecated")):
        module = _import_fresh(old)
    names = list(module.__all__)
    assert names, f"{old} exports nothing"
    for name in names:
        homes = [h for h in MODULE_ALIASES[old] if hasattr(h, name)]
        assert homes, f"{old}.{name} is not in any of its new homes"
        assert getattr(module, name) is getattr(homes[0], name), f"{old}.{name} is not the object of the new home"


#: tests/test_measure_name_upgrade.py's use of the old measure name, the first lines of the fresh interpreter below
#: (under Python's default filters)
MEASURE_NAME_CODE = ("from monai_unc.transforms import UncertaintyMeasures\n"
                     "from monai_unc.evaluation.config import EvaluationConfig\n"
                     "UncertaintyMeasures(measures=['max_softmax'])\n"
                     "EvaluationConfig(measure='max_softmax').validate()\n")
#: what the fresh interpreter writes to stderr between its two parts
_PART_TWO = "--- the old module paths ---"
#: the fresh interpreter's second part: the first import of each old module path with its warning made an error
_OLD_PATHS_CODE = (
    "import importlib, json, sys, warnings\n"
    f"sys.stderr.write({_PART_TWO!r} + '\\n')\n"
    "warnings.filterwarnings('error', message=r'monai_unc\\.[\\w.]+ is deprecated', category=DeprecationWarning)\n"
    f"old = {sorted(MODULE_ALIASES)!r}\nout = {{}}\nfor name in old:\n"
    "    if name.rpartition('.')[0] in old:\n"
    "        with warnings.catch_warnings():\n"
    "            warnings.simplefilter('ignore', DeprecationWarning)\n"
    "            importlib.import_module(name.rpartition('.')[0])\n"
    "    if name in sys.modules:\n"
    "        out[name] = 'imported before its first import'\n"
    "        continue\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "        out[name] = 'no warning'\n"
    "    except DeprecationWarning as e:\n"
    "        out[name] = str(e)\n"
    "print(json.dumps(out))\n"
)
_FRESH: dict = {}


def fresh_interpreter_deprecations(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The deprecations a user's script meets in a fresh interpreter, one interpreter for two checks (once per test
    session: :mod:`tests._shared`; an interpreter start with torch and MONAI is ~5 s):

    1. ``MEASURE_NAME_CODE`` under Python's default filters: ``"shown"``, the ``DeprecationWarning`` lines printed
       (:func:`shown_deprecations`' reading), and ``"stderr"``, what was printed before part 2;
    2. then the first import of every old module path (none imported before it: else that name says so), each
       warning made an error: ``"old"``, old path -> the warning's text (or ``"no warning"``).

    Its parts share the interpreter without changing what each checks: part 1 runs first, as a script's first
    lines, and each old path of part 2 is checked to be imported there for the first time.
    """
    if not _FRESH:
        from tests._shared import once_per_session

        def run(_folder):
            done = subprocess.run([sys.executable, "-c", MEASURE_NAME_CODE + _OLD_PATHS_CODE], cwd=ROOT,
                                  capture_output=True, text=True, timeout=600)  # two interpreters of 300 s
            assert done.returncode == 0, done.stderr
            assert _PART_TWO in done.stderr.splitlines(), done.stderr
            part_one = done.stderr.split(_PART_TWO + "\n")[0]
            return {"shown": [line for line in part_one.splitlines() if "DeprecationWarning" in line],
                    "stderr": part_one, "old": json.loads(done.stdout.strip().splitlines()[-1])}

        _FRESH.update(once_per_session(tmp_path_factory, "fresh_interpreter_deprecations", run)[1])
    return json.loads(json.dumps(_FRESH))  # a copy: a test cannot change what the next one reads


@pytest.mark.slow
def test_old_module_paths_warn_in_a_fresh_interpreter(tmp_path_factory):
    """A user's first ``import`` of an old path meets the warning (here turned into an error). A deprecated module
    inside a deprecated package (``monai_unc.distributed.cases``) is imported after its package, whose own warning
    is checked on its own."""
    out = fresh_interpreter_deprecations(tmp_path_factory)["old"]
    assert sorted(out) == sorted(MODULE_ALIASES)
    for name, message in out.items():
        assert f"{name} is deprecated" in message, (name, message)


def test_old_module_paths_have_no_file_and_import_through_the_compat_table():
    """The old paths are entries of ``monai_unc._compat.MOVED_MODULES``, answered by its finder: no file each."""
    assert set(monai_unc._compat.MOVED_MODULES) == set(MODULE_ALIASES)
    for old in MODULE_ALIASES:
        assert importlib.util.find_spec(old).loader is monai_unc._compat.FINDER
        path = ROOT.joinpath(*old.split("."))
        assert not path.with_suffix(".py").exists() and not path.is_dir(), old
    assert sys.meta_path[0] is monai_unc._compat.FINDER
    sys.modules.pop("monai_unc.report.cohort", None)
    with pytest.warns(DeprecationWarning, match=r"monai_unc\.report\.cohort is deprecated .*; import from "
                                                r"monai_unc\.evaluation$") as caught:
        from monai_unc.report.cohort import summarize
    assert summarize is monai_unc.evaluation.summarize
    assert caught[0].filename == __file__  # the warning points at the importing line


def test_one_more_entry_deprecates_one_more_path_and_its_submodules():
    """How the next moved module is added (e.g. a renamed package): one entry per old path; an old path with
    entries below it is a package whose old submodules import too."""
    table = {
        "monai_unc_moved_example": monai_unc._compat.MovedModule({"monai_unc.metrics.quality": None}, "use the new"),
        "monai_unc_moved_example.part": monai_unc._compat.MovedModule(
            {"monai_unc.metrics.quality": ("pairwise_dice",)}, "use the new part"),
    }
    finder = monai_unc._compat.MovedModuleFinder(table)
    sys.meta_path.insert(0, finder)
    try:
        with pytest.warns(DeprecationWarning) as caught:
            import monai_unc_moved_example.part  # noqa: F401
            from monai_unc_moved_example import QualityScores
        messages = [str(w.message) for w in caught]
        assert messages == [
            "monai_unc_moved_example is deprecated and will be removed in the next release; use the new",
            "monai_unc_moved_example.part is deprecated and will be removed in the next release; use the new part",
        ]
        module = sys.modules["monai_unc_moved_example.part"]
        assert module.__all__ == ["pairwise_dice"] and module.pairwise_dice is monai_unc.metrics.quality.pairwise_dice
        assert QualityScores is monai_unc.metrics.quality.QualityScores
        assert sys.modules["monai_unc_moved_example"].__all__ == list(monai_unc.metrics.quality.__all__)
    finally:
        sys.meta_path.remove(finder)
        for name in table:
            sys.modules.pop(name, None)


def test_old_metric_registry_name_warns_and_gives_the_same_registry():
    rng = np.random.default_rng(0)
    target = np.zeros((12, 12), dtype=np.int64)
    target[3:9, 4:10] = 1
    pred = target.copy()
    pred[3, 4:7] = 0
    u = rng.random((12, 12))
    u[2:10, 3:11] += 0.5
    u /= u.max()
    with pytest.warns(DeprecationWarning, match="seed003_metrics is deprecated"):
        old = monai_unc.metrics.seed003_metrics(threshold=0.4, sigma=1.5, n_bands=5)
    new = monai_unc.metrics.uncertainty_map_metrics(threshold=0.4, sigma=1.5, n_bands=5)
    assert list(old) == list(new)
    for name in new:
        assert (old[name].higher_is_better, old[name].spatial) == (new[name].higher_is_better, new[name].spatial)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            a = old[name].fn(u, pred, target, spacing=(1.0, 2.0))
            b = new[name].fn(u, pred, target, spacing=(1.0, 2.0))
        np.testing.assert_equal(a, b, err_msg=name)


def test_old_key_name_max_softmax_warns_and_gives_one_minus_max_prob():
    new = UncertaintyKeys.ONE_MINUS_MAX_PROB
    assert new.value == "one_minus_max_prob" and str(new) == "one_minus_max_prob"
    with pytest.warns(DeprecationWarning, match=r"UncertaintyKeys\.MAX_SOFTMAX is deprecated"):
        assert UncertaintyKeys.MAX_SOFTMAX is new
    with pytest.warns(DeprecationWarning, match=r"UncertaintyKeys\.MAX_SOFTMAX is deprecated"):
        assert UncertaintyKeys["MAX_SOFTMAX"] is new
    with pytest.warns(DeprecationWarning, match="'max_softmax' is deprecated"):
        assert UncertaintyKeys("max_softmax") is new
    with pytest.warns(DeprecationWarning, match="'max_softmax' is deprecated"):
        assert canonical_measure("max_softmax") == "one_minus_max_prob"
    # the alias is not a member of its own: the member list and the measure lists name the map once
    assert "MAX_SOFTMAX" not in UncertaintyKeys.__members__
    assert [k.value for k in UncertaintyKeys].count("one_minus_max_prob") == 1
    assert "max_softmax" not in monai_unc.keys.MEASURES and "one_minus_max_prob" in monai_unc.keys.DEFAULT_MEASURES
    # current names pass without a warning; unknown names still fail
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert canonical_measure("predictive_entropy") == "predictive_entropy"
        assert UncertaintyKeys("one_minus_max_prob") is new
    with pytest.raises(ValueError):
        UncertaintyKeys("max_prob")
    with pytest.raises(AttributeError):
        UncertaintyKeys.MAX_PROB  # noqa: B018
    with pytest.raises(KeyError):
        UncertaintyKeys["MAX_PROB"]


def test_every_deprecated_module_is_covered_here():
    """The deprecated modules the architecture test knows are the ones tested here."""
    tree = ast.parse((ROOT / "tests" / "test_architecture.py").read_text())
    found = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.AnnAssign | ast.Assign)
        and "DEPRECATED_MODULES" in [t.id for t in getattr(node, "targets", [getattr(node, "target", None)])]
    ]
    assert found and set(found[0]) == set(MODULE_ALIASES)


def test_max_softmax_function_warns_and_equals_one_minus_max_prob():
    import monai_unc.measures as M

    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(3), size=(2, 4, 5)).transpose(0, 3, 1, 2)  # (B, C, H, W)
    with pytest.warns(DeprecationWarning, match="max_softmax is deprecated .*use one_minus_max_prob") as caught:
        old = M.max_softmax(probs)
    assert caught[0].filename == __file__
    np.testing.assert_array_equal(old, M.one_minus_max_prob(probs))
    regions = rng.random((2, 3, 4, 5))
    with pytest.warns(DeprecationWarning, match="max_softmax is deprecated"):
        old = M.max_softmax(regions, multilabel=True)
    np.testing.assert_array_equal(old, M.one_minus_max_prob(regions, multilabel=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        M.one_minus_max_prob(probs)  # the new name does not warn


def test_aggregate_method_patch_warns_and_gives_patch_sum_or_patch_mean():
    from monai_unc.aggregation import aggregate, canonical_method

    u = np.random.default_rng(1).random((2, 1, 9, 8, 7))
    with pytest.warns(DeprecationWarning, match="method='patch' is deprecated .*use method='patch_sum'") as caught:
        old = aggregate(u, "patch", patch_size=3)
    assert caught[0].filename == __file__  # the warning points at the caller's line
    np.testing.assert_array_equal(old, aggregate(u, "patch_sum", patch_size=3))
    with pytest.warns(DeprecationWarning, match="patch_reduction='mean' is deprecated .*use method='patch_mean'"):
        old = aggregate(u, "patch", patch_size=3, patch_reduction="mean")
    np.testing.assert_array_equal(old, aggregate(u, "patch_mean", patch_size=3))
    with pytest.warns(DeprecationWarning, match="patch_reduction is deprecated"):
        assert canonical_method("patch_sum", "sum") == "patch_sum"
    with pytest.raises(ValueError, match="patch_reduction='sum' contradicts method='patch_mean'"):
        canonical_method("patch_mean", "sum")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for method in ("mean", "sum", "patch_sum", "patch_mean", "threshold"):
            assert canonical_method(method) == method


def test_aggregate_transform_method_patch_warns_with_the_new_key():
    """``AggregateUncertaintyd(method="patch")`` stored box sums as ``<key>_patch`` (elsewhere the box mean): it
    still computes them, says where they are now, and stores them there."""
    from monai_unc.transforms import AggregateUncertainty, AggregateUncertaintyd

    u = np.random.default_rng(2).random((1, 9, 8, 7)).astype(np.float32)
    with pytest.warns(DeprecationWarning, match="use method='patch_sum'.*now stores the score under 'u_patch_sum' "
                                                "instead of 'u_patch'") as caught:
        transform = AggregateUncertaintyd("u", method="patch", patch_size=3)
    assert caught[0].filename == __file__
    out = transform({"u": u})
    assert transform.method == "patch_sum" and "u_patch" not in out
    new = AggregateUncertaintyd("u", method="patch_sum", patch_size=3)({"u": u})
    assert torch.equal(out["u_patch_sum"], new["u_patch_sum"])
    with pytest.warns(DeprecationWarning, match="now stores the score under 'u_patch_mean'"):
        out = AggregateUncertaintyd("u", method="patch", patch_reduction="mean", patch_size=3)({"u": u})
    assert torch.equal(out["u_patch_mean"], AggregateUncertaintyd("u", method="patch_mean", patch_size=3)({"u": u})[
        "u_patch_mean"])
    with pytest.warns(DeprecationWarning, match="use method='patch_sum'"):
        array = AggregateUncertainty("patch", patch_size=3)
    assert array.method == "patch_sum" and torch.equal(array(u), new["u_patch_sum"])


def test_histogram_save_warns_and_writes_what_save_state_writes(tmp_path):
    """``ConfidenceHistogram.save`` (a formula that wrote a file) is deprecated for ``monai_unc.io.save_state``."""
    import numpy as np

    from monai_unc.io import save_state
    from monai_unc.metrics.calibration import ConfidenceHistogram

    hist = ConfidenceHistogram(3)
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(3), size=(2, 5, 4)).transpose(0, 3, 1, 2)
    hist.update(p, rng.integers(0, 3, size=(2, 5, 4)), case_ids=["a", "b"])
    with pytest.warns(DeprecationWarning, match="save_state"):
        old = hist.save(tmp_path / "old")
    new = save_state(tmp_path / "new", hist)
    assert old.name == "old.npz" and new.name == "new.npz"
    a, b = ConfidenceHistogram.load(old), ConfidenceHistogram.load(new)
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(v, b.state_dict()[k])
    np.testing.assert_array_equal(a.counts.numpy(), hist.counts.numpy())


@pytest.mark.parametrize("old, package, new", [("monai_unc.metrics.qu_brats", monai_unc.metrics, "qu_brats_score"),
                                               ("monai_unc.data.perturb", monai_unc.data, "perturbations")])
def test_a_module_path_named_like_its_packages_function_imports_and_leaves_the_function(old, package, new):
    """The old module paths ``monai_unc.metrics.qu_brats`` and ``monai_unc.data.perturb`` were hidden by the package
    functions of the same names; a first import of the old path (which binds a module on its package in Python's
    import machinery) leaves the package's function in place, and the names come from the new module."""
    name = old.rpartition(".")[2]
    function = getattr(package, name)
    assert callable(function) and not isinstance(function, type(sys))
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} is deprecated")):
        module = importlib.import_module(old)
    assert getattr(package, name) is function  # not replaced by the module
    assert getattr(module, name) is function is getattr(getattr(package, new), name)
    package.some_attribute_set_later = 1  # other attributes are set as usual
    assert package.some_attribute_set_later == 1
    del package.some_attribute_set_later


def test_every_public_module_is_its_packages_attribute():
    """Every public module of the package is the attribute of its package of its name, so that a dotted path
    through it resolves by attribute lookups as MONAI's bundle configs (``"_target_"``, through ``pydoc.locate``)
    and other tools resolve them; the two module paths that failed this (a function of the package had their name)
    moved (``monai_unc.metrics.qu_brats_score``, ``monai_unc.data.perturbations``)."""
    import pkgutil
    import pydoc

    import monai_unc

    hidden = []
    for info in pkgutil.walk_packages(monai_unc.__path__, "monai_unc."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency this environment lacks
            continue
        package, _, leaf = info.name.rpartition(".")
        if getattr(sys.modules[package], leaf, None) is not module:
            hidden.append(info.name)
    assert hidden == []
    assert pydoc.locate("monai_unc.metrics.qu_brats_score.qu_brats_regions") is monai_unc.metrics.qu_brats_regions
    assert pydoc.locate("monai_unc.data.perturbations.perturb") is monai_unc.data.perturb


def test_bundle_target_through_the_moved_modules():
    """A MONAI bundle config names the functions through their modules (``"_target_"``) and gets them."""
    from monai.bundle import ConfigParser

    parser = ConfigParser({"score": {"_target_": "monai_unc.metrics.qu_brats_score.qu_brats_regions",
                                     "_mode_": "callable"},
                           "shift": {"_target_": "monai_unc.data.perturbations.perturb", "_mode_": "callable"}})
    assert parser.get_parsed_content("score") is monai_unc.metrics.qu_brats_regions
    assert parser.get_parsed_content("shift") is monai_unc.data.perturb
