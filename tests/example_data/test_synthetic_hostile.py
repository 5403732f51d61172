"""Hostile input for the synthetic toy data (data/synthetic.py): reproducibility from the seed, no shared state
between cases, and bad arguments refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.data.synthetic import SHIFTS, make_toy_case, make_toy_dataset


@pytest.mark.parametrize("shift", SHIFTS)
def test_case_is_reproducible_from_the_seed(shift):
    a = make_toy_case((12, 12, 12), shift=shift, rng=4)
    b = make_toy_case((12, 12, 12), shift=shift, rng=np.random.default_rng(4))
    for key in ("image", "label", "raters", "probs"):
        np.testing.assert_array_equal(a[key], b[key])
    assert np.isfinite(a["image"]).all() and a["image"].dtype == np.float32


def test_a_case_does_not_depend_on_the_cohort_size():
    small = make_toy_dataset(2, shape=(10, 10), seed=3)
    large = make_toy_dataset(5, shape=(10, 10), seed=3)
    for a, b in zip(small, large):
        np.testing.assert_array_equal(a["image"], b["image"])
    assert not np.array_equal(large[0]["image"], large[1]["image"])


def test_probabilities_and_majority_label_agree_with_the_raters():
    case = make_toy_case((12, 12, 12), n_raters=4, rng=0)
    fg = case["raters"].mean(axis=0)
    np.testing.assert_allclose(case["probs"][1], fg, atol=1e-7)
    np.testing.assert_allclose(case["probs"].sum(axis=0), 1.0, atol=1e-6)
    np.testing.assert_array_equal(case["label"], (case["raters"].sum(axis=0) > 2).astype(np.int64))  # 2 of 4: no


@pytest.mark.parametrize("noise_std", [float("nan"), float("inf"), -0.1, "0.1", True])
def test_bad_noise_std_is_refused(noise_std):
    """Regression: NaN made every voxel of the image NaN, silently; a negative std was accepted."""
    with pytest.raises(ValueError, match="noise_std must be a finite number >= 0"):
        make_toy_case((10, 10, 10), noise_std=noise_std, rng=0)


def test_noise_std_zero_and_numpy_scalars_are_accepted():
    a = make_toy_case((10, 10), noise_std=0, rng=0)
    b = make_toy_case((10, 10), noise_std=np.float32(0.0), rng=0)
    np.testing.assert_array_equal(a["image"], b["image"])


@pytest.mark.parametrize("kwargs, match", [
    ({"shape": (7, 10, 10)}, "shape must be 2D or 3D"),
    ({"shape": (10,)}, "shape must be 2D or 3D"),
    ({"shift": "rotation"}, "shift must be one of"),
    ({"n_raters": 0}, "n_raters must be a positive integer"),
    ({"n_raters": 2.0}, "n_raters must be a positive integer"),
    ({"radius": 0.5}, "radius must be in"),
    ({"radius": 5.0}, "radius must be in"),
    ({"radius": float("nan")}, "radius must be in"),
])
def test_bad_case_arguments(kwargs, match):
    args = {"shape": (10, 10, 10), "rng": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_toy_case(**args)


def test_bad_dataset_arguments():
    with pytest.raises(ValueError, match="n_cases must be a positive integer"):
        make_toy_dataset(0, shape=(10, 10))
    with pytest.raises(ValueError, match="shift must not be an empty sequence"):
        make_toy_dataset(2, shape=(10, 10), shift=[])


def test_a_cohort_on_numpy_1_24_is_the_same_cohort(monkeypatch):
    """numpy 1.24 (declared: ``numpy>=1.24``) has no ``Generator.spawn`` (numpy 1.25): ``make_toy_dataset`` failed
    there with an ``AttributeError`` (found by testing the declared lower bounds). Emulated by generators without
    ``spawn``; the cohort must be the one numpy >= 1.25 gives."""
    expected = make_toy_dataset(3, shape=(10, 10), shift=["none", "intensity"], seed=7)
    real = np.random.default_rng

    class Numpy124Generator:
        def __init__(self, generator):
            self._g = generator

        def __getattr__(self, name):
            if name == "spawn":
                raise AttributeError("'numpy.random._generator.Generator' object has no attribute 'spawn'")
            return getattr(self._g, name)

    def default_rng(seed=None):  # a generator given is returned as it is, as numpy's default_rng does
        return seed if isinstance(seed, Numpy124Generator) else Numpy124Generator(real(seed))

    monkeypatch.setattr(np.random, "default_rng", default_rng)
    got = make_toy_dataset(3, shape=(10, 10), shift=["none", "intensity"], seed=7)
    for a, b in zip(expected, got):
        for key in ("image", "label", "raters", "probs"):
            np.testing.assert_array_equal(a[key], b[key])
