"""Hostile input to ``monai_unc.state``: damaged or edited state groups (a name given twice, members without a name,
names without a member, no names), as arrays and through a cohort's saved ``products.npz``."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.evaluation.cohort import CohortState
from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.state import StateGroup, UnknownStateTypeError, pack_states, state_type, unpack_states


def _hist(p: float) -> ConfidenceHistogram:
    h = ConfidenceHistogram(2)
    h.update(np.array([[[1 - p], [p]]], np.float16), np.array([[1]]))  # float16: the torch path, no compiling
    return h


def _same(a: ConfidenceHistogram, b: ConfidenceHistogram) -> bool:
    x, y = a.state_dict(), b.state_dict()
    return sorted(x) == sorted(y) and all(np.array_equal(x[k], y[k]) for k in x)


def _group_arrays() -> dict[str, np.ndarray]:
    return StateGroup({"WT": _hist(0.9), "TC": _hist(0.6)}).state_dict()


def test_a_name_given_twice_is_refused_not_replaced():
    """``__names__`` ['WT', 'WT'] gave one WT holding the second member's counts (TC's), silently."""
    arrays = _group_arrays()
    arrays["__names__"] = np.array(["WT", "WT"])
    with pytest.raises(ValueError, match=r"names \['WT'\] more than once"):
        StateGroup.from_state_dict(arrays)


def test_members_that_no_name_has_are_refused_not_dropped():
    """``__names__`` ['WT'] with two members dropped the second one silently."""
    arrays = _group_arrays()
    arrays["__names__"] = np.array(["WT"])
    with pytest.raises(ValueError, match=r"member\(s\) \[1\] but names only 1"):
        StateGroup.from_state_dict(arrays)


def test_a_name_without_its_member_or_no_names_is_a_value_error():
    """They raised a bare ``KeyError: '__type__'`` / ``KeyError: '__names__'``."""
    arrays = _group_arrays()
    arrays["__names__"] = np.array(["WT", "TC", "ET"])
    with pytest.raises(ValueError, match=r"member 2 \('ET'\) of a state group has no '__type__'"):
        StateGroup.from_state_dict(arrays)
    arrays = _group_arrays()
    del arrays["__names__"]
    with pytest.raises(ValueError, match="needs its '__names__' entry"):
        StateGroup.from_state_dict(arrays)


def test_an_unknown_type_is_its_own_value_error():
    with pytest.raises(UnknownStateTypeError, match="unknown state type 'os.system'"):
        state_type("os.system")
    packed = pack_states({"g": StateGroup({"WT": _hist(0.9)})})
    packed["g/0.__type__"] = np.array("builtins.eval")
    with pytest.raises(UnknownStateTypeError):
        unpack_states(packed)
    assert issubclass(UnknownStateTypeError, ValueError)


def test_the_members_of_an_intact_group_keep_their_own_numbers():
    back = StateGroup.from_state_dict(_group_arrays())
    assert list(back) == ["WT", "TC"]
    assert _same(back["WT"], _hist(0.9)) and _same(back["TC"], _hist(0.6))


def _saved_cohort(tmp_path):
    state = CohortState(2, 240, rows=[{"case": "a"}, {"case": "b"}])
    state.product_states = {"fg": {"a": _hist(0.9), "b": _hist(0.7)}}
    state.save(tmp_path)
    return tmp_path / "products.npz"


def _edit(path, change):
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    np.savez(path, **arrays)


def test_a_cohort_state_with_an_edited_products_file_is_refused(tmp_path):
    """A damaged ``products.npz`` of known types is refused when the cohort state is read back (a case given twice
    replaced the other one's state); only an unknown type (a product not imported) leaves the product states out."""
    path = _saved_cohort(tmp_path)
    loaded = CohortState.load(tmp_path)
    assert _same(loaded.product_states["fg"]["a"], _hist(0.9)) and _same(loaded.product_states["fg"]["b"], _hist(0.7))

    _edit(path, lambda a: a.__setitem__("0.__names__", np.array(["a", "a"])))
    with pytest.raises(ValueError, match="more than once"):
        CohortState.load(tmp_path)

    path = _saved_cohort(tmp_path)
    _edit(path, lambda a: a.pop("0.1.__type__"))
    with pytest.raises(ValueError, match="has no '__type__'"):
        CohortState.load(tmp_path)

    path = _saved_cohort(tmp_path)
    _edit(path, lambda a: a.__setitem__("0.1.__type__", np.array("no.such.product")))
    assert CohortState.load(tmp_path).product_states == {}
