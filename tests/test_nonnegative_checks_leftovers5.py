"""One check of a non-negative amount (:func:`monai_unc._utils.check_nonnegative`) behind the near-twin validators.

Found by review: ``inferers.memory._check_bytes``, ``inferers.tta._check_noise_std``, the noise checks of the toy data
and SSN training, and the losses' ``nonnegative_option`` each wrote the same test of a finite number ``>= 0``; each
caller keeps its messages (and exception types), and an integer too large for a float, which escaped from every copy
as Python's unnamed ``OverflowError: int too large to convert to float``, is now a ``ValueError`` naming the argument.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from monai_unc._utils import check_nonnegative
from monai_unc.data import make_toy_case
from monai_unc.inferers import NoiseSource, TTAInferer, estimate_memory
from monai_unc.losses.functional import margin_penalty

HUGE = 10**400  # no float holds it

#: caller -> (a call with the value, the name in its messages, its exception for a non-number, its note)
CALLERS = {
    "memory": (lambda v: estimate_memory((8, 8, 8), 2, shared_bytes_per_voxel=v), "shared_bytes_per_voxel",
               TypeError, ""),
    "noise_source": (lambda v: NoiseSource(v), "std", ValueError, " (0 disables noise)"),
    "tta": (lambda v: TTAInferer(noise_std=v), "noise_std", ValueError, " (0 disables noise)"),
    "toy_case": (lambda v: make_toy_case(shape=(16, 16, 16), noise_std=v, rng=0), "noise_std", ValueError, ""),
    "loss": (lambda v: margin_penalty(torch.zeros(1, 2, 3), margin=v), "margin", TypeError, ""),
}


@pytest.mark.parametrize("caller", sorted(CALLERS))
@pytest.mark.parametrize("value", [HUGE, -HUGE, float("nan"), math.inf, -1e-9])
def test_out_of_range_values_are_refused_naming_the_argument(caller, value):
    call, name, _, note = CALLERS[caller]
    with pytest.raises(ValueError) as e:
        call(value)
    assert str(e.value) == f"{name} must be a finite number >= 0{note}, got {value!r}"


@pytest.mark.parametrize("caller", sorted(CALLERS))
@pytest.mark.parametrize("value", ["0.1", True, np.bool_(False), None, [0.1]])
def test_values_that_are_no_number_keep_each_callers_message(caller, value):
    call, name, error, note = CALLERS[caller]
    with pytest.raises(error) as e:
        call(value)
    message = str(e.value)
    assert message.startswith(f"{name} must be ") and message.endswith(f" {value!r}")
    if caller == "memory":  # the messages these checks gave before they were one
        assert message == f"{name} must be a number >= 0, got {value!r}"
    elif caller == "loss":
        assert message == f"{name} must be a finite number >= 0, got {type(value).__name__} {value!r}"
    else:
        assert message == f"{name} must be a finite number >= 0{note}, got {value!r}"


@pytest.mark.parametrize("caller", sorted(CALLERS))
@pytest.mark.parametrize("value", [0, 0.0, 2, 0.25, np.float32(0.5), np.int64(3)])
def test_numbers_in_range_are_taken(caller, value):
    CALLERS[caller][0](value)  # no error


@pytest.mark.parametrize("value, expected", [(0, 0.0), (3, 3.0), (np.float16(0.5), 0.5), (Fraction(1, 4), 0.25),
                                             (2**1023, float(2**1023))])
def test_the_shared_check_returns_the_float(value, expected):
    got = check_nonnegative(value, "x")
    assert type(got) is float and got == expected


def test_the_shared_check_takes_the_callers_exception_type_and_note():
    with pytest.raises(KeyError, match="x must be an amount!, got 'a'"):
        check_nonnegative("a", "x", wrong_type=KeyError, type_text="an amount", note="!")
    with pytest.raises(ValueError, match=r"^x must be a finite number >= 0!, got -1$"):
        check_nonnegative(-1, "x", wrong_type=KeyError, note="!")
