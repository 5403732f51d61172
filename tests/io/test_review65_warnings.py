"""Future-proofing (review 65): the package's documented calls run with deprecations turned into errors.

tifffile stores an array whose first axis has 3 or 4 entries (a (z, y, x) volume of 3 or 4 slices) as one RGB(A)
image of separate planes and warns (``DeprecationWarning``) that a future version stores it as grayscale pages
unless ``photometric`` is given; the Example of ``read_nnunet_image`` wrote such a volume without it.
"""

from __future__ import annotations

import doctest
import warnings

import pytest

pytest.importorskip("tifffile")

from monai_unc.io import cases  # noqa: E402


def test_the_read_nnunet_image_example_runs_with_deprecations_as_errors():
    finder = doctest.DocTestFinder(recurse=False)
    (test,) = finder.find(cases.read_nnunet_image, "read_nnunet_image", globs=dict(vars(cases)))
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", FutureWarning)
        result = runner.run(test, out=lambda s: None, clear_globs=False)
    assert result.attempted > 0 and result.failed == 0, "the Example failed (a deprecation raised as an error?)"
