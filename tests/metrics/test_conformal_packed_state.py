"""The conformal case state held and saved in a narrow dtype: exact, the results of the int64 histograms bit for bit.

``evaluate --conformal`` kept two int64 histograms ``(tasks, bins + 2)`` per side and case (262 kB for a two-class
case at ``2**12`` bins, both sides), and every case's state stays in memory until the rules are fitted. The state now
holds them in uint8/16/32 with the few counts that do not fit listed beside it. The references here are the old
computation written out: ``numpy.bincount`` of :func:`entry_index` into int64, and the losses and mask sizes of
those int64 histograms (suffix sums, divisions) as the state computed them.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from monai_unc.metrics.conformal import (
    ConformalCaseState,
    conformal_case_state,
    conformal_grid,
    entry_index,
    fit_conformal_rule,
)
from monai_unc.state import pack_states, unpack_states

#: the bytes of the int64 layout of a two-class case at the default grid: two sides, two histograms of
#: (2 tasks, 4096 bins + 2) each
DENSE = 2 * 2 * 2 * (4096 + 2) * 8


def _old_histograms(probs, target, family, side, grid, activation):
    """The int64 histograms as the state built them (softmax: each class one-vs-rest; sigmoid: each region)."""
    step, size = conformal_grid(family, grid)
    tasks = range(probs.shape[0])
    tc = np.zeros((len(tasks), size + 2), dtype=np.int64)
    fc = np.zeros_like(tc)
    for t in tasks:
        truth = (target == t) if activation == "softmax" else target[t].astype(bool)
        if family == "threshold":
            idx = entry_index(probs[t], family, side, step, size)
        else:
            from monai_unc.metrics.boundary import distance_to_mask

            pred = (probs.argmax(0) == t) if activation == "softmax" else probs[t] > 0.5
            d = distance_to_mask(pred if side == "outer" else ~pred, (1.0,) * (probs.ndim - 1), "auto",
                                 exact_within=(size + 1) * step)
            idx = entry_index(d, family, side, step, size)
        tc[t] = np.bincount(idx[truth], minlength=size + 2)
        fc[t] = np.bincount(idx.reshape(-1), minlength=size + 2) - tc[t]
    return tc, fc


def _old_losses(tc, fc, side):
    """``ConformalCaseState.losses`` of the int64 histograms, as it was written."""
    def suffix(c):
        return np.cumsum(c[..., ::-1], axis=-1)[..., ::-1][..., 1:]

    def ratio(num, den):
        out = np.zeros(np.broadcast_shapes(num.shape, den.shape), dtype=np.float64)
        np.divide(num, den, out=out, where=den > 0)
        return out

    missed = suffix(tc)
    if side == "outer":
        return ratio(missed, tc.sum(axis=1)[:, None])
    kept = suffix(fc)
    return ratio(kept, missed + kept)


def _old_mask_sizes(tc, fc, side):
    beyond = np.cumsum((tc + fc)[..., ::-1], axis=-1)[..., ::-1][..., 1:]
    return beyond if side == "inner" else (tc + fc).sum(axis=1)[:, None] - beyond


def _random_case(rng, activation, channels):
    shape = tuple(int(n) for n in rng.integers(4, 14, size=3))
    logits = rng.normal(size=(channels, *shape)) * rng.uniform(0.5, 6)
    if activation == "softmax":
        e = np.exp(logits - logits.max(0))
        probs = (e / e.sum(0)).astype(rng.choice([np.float32, np.float64]))
        probs[..., 0, 0, 0] = 0.0
        probs[0, 0, 0, 0] = 1.0  # a probability of exactly 0 and 1 (the grid's ends)
        target = rng.integers(0, channels, size=shape)
    else:
        probs = 1.0 / (1.0 + np.exp(-logits))
        target = (rng.random((channels, *shape)) < probs).astype(np.uint8)
    return probs, target


def _through_npz(arrays):
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _old_layout(arrays):
    """A state's arrays in the layout earlier versions saved: int64 ``true_counts`` / ``false_counts``."""
    out = {k: v for k, v in arrays.items() if not k.startswith("counts_")}
    both = arrays["counts_base"].astype(np.int64)
    both.reshape(-1)[arrays["counts_index"].astype(np.int64)] = arrays["counts_value"]
    out["true_counts"], out["false_counts"] = both[0], both[1]
    return out


@pytest.mark.parametrize("seed", range(12))
def test_the_packed_state_gives_the_int64_histograms_results_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    activation = ("softmax", "sigmoid")[seed % 2]
    family = ("threshold", "margin")[(seed // 2) % 2]
    grid = int(2 ** rng.integers(1, 13)) if family == "threshold" else (float(rng.uniform(1, 6)), 0.5)
    channels = int(rng.integers(2, 5))
    for side in ("outer", "inner"):
        states, old_files = [], []
        for _ in range(20):
            probs, target = _random_case(rng, activation, channels)
            state = conformal_case_state(probs, target, family=family, side=side, activation=activation, grid=grid)
            tc, fc = _old_histograms(probs, target, family, side, grid, activation)
            assert state.true_counts.dtype == np.int64 and state.false_counts.dtype == np.int64
            np.testing.assert_array_equal(state.true_counts, tc)
            np.testing.assert_array_equal(state.false_counts, fc)
            assert state.losses().tobytes() == _old_losses(tc, fc, side).tobytes()
            assert state.mask_sizes().tobytes() == _old_mask_sizes(tc, fc, side).tobytes()
            assert state.n_true.tolist() == tc.sum(axis=1).tolist()
            back = ConformalCaseState.from_arrays(_through_npz(state.to_arrays()))
            assert back == state and back.losses().tobytes() == state.losses().tobytes()
            old = ConformalCaseState.from_arrays(_through_npz(_old_layout(state.to_arrays())))  # an earlier run's
            assert old == state and old.losses().tobytes() == state.losses().tobytes()
            states.append(state)
            old_files.append(old)
        # fitted on the states and on them read from the earlier layout: the same rule
        for tol in (None, 0.3):
            try:
                want = fit_conformal_rule(old_files, 0.2, tol=tol)
            except ValueError as e:  # no grid point reaches the target: the same refusal
                with pytest.raises(ValueError, match=str(e)[:30]):
                    fit_conformal_rule(states, 0.2, tol=tol)
                continue
            assert fit_conformal_rule(states, 0.2, tol=tol) == want


def test_counts_beyond_every_narrow_dtype_round_trip_exactly():
    """Counts at and beyond 255, 65535 and 2**32 - 1 (a state pooled over many cases), and merging them."""
    rng = np.random.default_rng(7)
    size = 64
    for top in (200, 255, 256, 70_000, 2**32 - 1, 2**32, 2**40, np.iinfo(np.int64).max // 4):
        tc = rng.integers(0, 300, size=(3, size + 2), dtype=np.int64)
        fc = rng.integers(0, 300, size=(3, size + 2), dtype=np.int64)
        tc[0, [0, 5, 65]] = [top, top - 1, 0]
        fc[2, [1, 64]] = [top, 65_536]
        state = ConformalCaseState("softmax", "threshold", "outer", 1 / size, size, ["a", "b", "c"], tc, fc)
        np.testing.assert_array_equal(state.true_counts, tc)
        np.testing.assert_array_equal(state.false_counts, fc)
        back = unpack_states(_through_npz(pack_states({"s": state})))["s"]
        np.testing.assert_array_equal(back.true_counts, tc)
        np.testing.assert_array_equal(back.false_counts, fc)
        assert state.losses().tobytes() == _old_losses(tc, fc, "outer").tobytes()
        merged = back + state
        np.testing.assert_array_equal(merged.true_counts, 2 * tc)
        np.testing.assert_array_equal(merged.false_counts, 2 * fc)
        state.true_counts = tc[::-1]  # assigning replaces the histogram (the returned array is a copy)
        np.testing.assert_array_equal(state.true_counts, tc[::-1])
        np.testing.assert_array_equal(state.false_counts, fc)
    with pytest.raises(ValueError, match="true_counts must hold non-negative integer counts"):
        ConformalCaseState("softmax", "threshold", "outer", 0.5, 2, ["a"], np.array([[1, -1, 0, 0]]),
                           np.zeros((1, 4), int))
    with pytest.raises(ValueError, match="false_counts must hold non-negative integer counts"):
        ConformalCaseState("softmax", "threshold", "outer", 0.5, 2, ["a"], np.zeros((1, 4), int),
                           np.full((1, 4), 2**63, dtype=np.uint64))


def test_a_two_class_case_takes_a_fraction_of_the_int64_state():
    """A two-class case at the default 2**12 bins, both sides: 262 kB of int64 histograms; now under a sixth."""
    rng = np.random.default_rng(0)
    shape = (48, 48, 32)
    grid = np.stack(np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij"))
    r = np.sqrt((grid ** 2).sum(0))
    p1 = 1.0 / (1.0 + np.exp(-((0.5 - r) * 20 + rng.normal(size=shape) * 3)))
    probs = np.stack([1 - p1, p1]).astype(np.float32)
    label = (r < 0.5).astype(np.uint8)
    sides = [conformal_case_state(probs, label, side=side) for side in ("outer", "inner")]
    held = sum(sum(np.asarray(a).nbytes for k, a in s.state_dict().items() if "counts" in k) for s in sides)
    assert held < DENSE / 6, held  # was DENSE
    assert held == sum(s.nbytes for s in sides)
    assert sum((s.true_counts > 255).sum() for s in sides) > 0  # counts beyond uint8 are listed beside it


@pytest.mark.parametrize("edit, match", [
    (lambda a: a.update(counts_base=a["counts_base"][:, :1]), "counts_base must have shape"),
    (lambda a: a.update(counts_base=a["counts_base"].astype(np.float64)), "counts_base must hold integers"),
    (lambda a: a.update(counts_base=a["counts_base"].astype(np.int64) - 1), "counts_base must hold non-negative"),
    (lambda a: a.update(counts_value=a["counts_value"][:-1]), "one entry each per count"),
    (lambda a: a.update(counts_index=a["counts_index"][::-1].copy()), "counts_index must hold increasing"),
    (lambda a: a.update(counts_index=a["counts_index"] + np.uint32(10**6)), "counts_index must hold increasing"),
    (lambda a: a.update(counts_value=np.full_like(a["counts_value"], 2**63, dtype=np.uint64)),
     "counts_value must hold non-negative int64"),
    (lambda a: a.update(counts_index=a["counts_index"].reshape(1, -1)), "counts_index must be one-dimensional"),
    (lambda a: a.pop("counts_value"), r"arrays lacks \['counts_value'\]"),
])
def test_an_edited_state_file_is_refused_naming_the_key(edit, match):
    probs = np.array([[0.0, 0.3, 0.9, 1.0] * 300, [1.0, 0.7, 0.1, 0.0] * 300])
    state = conformal_case_state(probs, np.array([0, 1, 1, 0] * 300), grid=64)
    arrays = state.to_arrays()
    assert arrays["counts_index"].size >= 2  # 300 voxels in a bin: counts beyond uint8 listed
    edit(arrays)
    with pytest.raises(ValueError, match=match):
        ConformalCaseState.from_arrays(arrays)
