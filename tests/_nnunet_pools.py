"""nnU-Net's planning steps without their worker processes, for the tests that plan and preprocess a toy task.

``extract_fingerprints`` and ``preprocess`` hand every case to a ``multiprocessing.get_context("spawn").Pool``, even
with ``num_processes=1``: each call starts a fresh Python that imports torch and nnU-Net (~10 s on the CI's two
cores) to analyse a handful of tiny cases. :func:`plan_in_process` swaps the pool of those two nnU-Net modules for
one that runs each case in the calling process, one after the other, when it is handed over: the same functions on
the same arguments (``DatasetFingerprintExtractor.analyze_case``, ``DefaultPreprocessor.run_case_save``), so the
fingerprint, the plans and the preprocessed files are those of the pool. Nothing of monai_unc runs in those workers.

It also draws fewer foreground voxels for the fingerprint's intensity statistics where no channel is normalised with
them (:data:`FOREGROUND_SAMPLES`): nnU-Net draws 10^8 across the training cases (with replacement, whatever their
size) and takes percentiles of them, ~7 CPU seconds and ~1 GB for a toy task of a few thousand foreground voxels.
Only ``CTNormalization`` reads those statistics (``foreground_intensity_properties_per_channel``, copied into the
plans); every other scheme (z-score, the default for the toy tasks' ``MRI`` channel) normalises each image by its own
values, so the preprocessed data, the trained networks and their predictions are those of the full draw. A dataset
with a CT channel keeps nnU-Net's number.

:func:`list_cases_in_process` does the same for nnU-Net's listing of an input folder's cases
(``create_lists_from_splitted_dataset_folder``, called by every ``predict_from_files`` on a folder): a ``fork`` pool
of 12 workers (its default) to match file names, each fork copying the page tables of the test process.

This module imports nothing of the tests, so that a child process (a test's ``python -c`` script) can use it too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

#: foreground voxels drawn across the training cases for the fingerprint's intensity statistics (nnU-Net: 10^8) where
#: no channel's normalisation reads them (module docstring)
FOREGROUND_SAMPLES = 10**5


class _Done:
    """The ``AsyncResult`` of a call that already ran (or raised: ``get`` re-raises, as the pool's does)."""

    def __init__(self, fn: Callable, args: Iterable[tuple]):
        try:
            self._value, self._error = [fn(*a) for a in args], None
        except Exception as e:  # noqa: BLE001 - re-raised by get(), where nnU-Net collects the results
            self._value, self._error = None, e

    def ready(self) -> bool:
        return True

    def get(self, timeout: float | None = None) -> list:
        if self._error is not None:
            raise self._error
        return self._value


class _Worker:
    def is_alive(self) -> bool:
        return True


class _Pool:
    """What nnU-Net's planning uses of ``multiprocessing.Pool``: the context manager, ``starmap_async`` and the
    ``_pool`` list it polls for dead workers."""

    def __init__(self, processes: int | None = None, *args: Any, **kwargs: Any):
        self._pool = [_Worker()]

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def starmap_async(self, fn: Callable, iterable: Iterable[tuple]) -> _Done:
        return _Done(fn, iterable)

    def starmap(self, fn: Callable, iterable: Iterable[tuple]) -> list:
        return [fn(*a) for a in iterable]


class _Context:
    Pool = _Pool


class InProcessMultiprocessing:
    """Stands in for the ``multiprocessing`` module inside the nnU-Net modules a test hands it to (the planning
    modules here, the validation's in tests/nnunet/_toy_training.py): its pools run each call in the calling process,
    one after the other, when it is handed over."""

    @staticmethod
    def get_context(method: str | None = None) -> _Context:
        return _Context()


def _fewer_foreground_samples(init: Callable[..., None]) -> Callable[..., None]:
    """``DatasetFingerprintExtractor.__init__`` that then draws :data:`FOREGROUND_SAMPLES` foreground voxels instead
    of nnU-Net's 10^8 when no channel of the dataset is normalised with the fingerprint's intensity statistics."""
    from nnunetv2.preprocessing.normalization.default_normalization_schemes import CTNormalization
    from nnunetv2.preprocessing.normalization.map_channel_name_to_normalization import get_normalization_scheme

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        channels = self.dataset_json.get("channel_names", self.dataset_json.get("modality", {}))
        if not any(issubclass(get_normalization_scheme(str(name)), CTNormalization) for name in channels.values()):
            self.num_foreground_voxels_for_intensitystats = min(self.num_foreground_voxels_for_intensitystats,
                                                                FOREGROUND_SAMPLES)

    return __init__


def plan_in_process(monkeypatch) -> None:
    """nnU-Net's fingerprint extraction and preprocessing run their cases in this process, and the fingerprint draws
    fewer foreground voxels where no channel's normalisation reads them (module docstring; undone with
    ``monkeypatch``)."""
    from nnunetv2.experiment_planning.dataset_fingerprint import fingerprint_extractor
    from nnunetv2.preprocessing.preprocessors import default_preprocessor

    for module in (fingerprint_extractor, default_preprocessor):
        monkeypatch.setattr(module, "multiprocessing", InProcessMultiprocessing)
    extractor = fingerprint_extractor.DatasetFingerprintExtractor
    monkeypatch.setattr(extractor, "__init__", _fewer_foreground_samples(extractor.__init__))


class ListingPool:
    """What ``create_lists_from_splitted_dataset_folder`` uses of ``multiprocessing.Pool``: the context manager and
    ``starmap``, run in the calling process."""

    def __init__(self, processes: int | None = None, *args: Any, **kwargs: Any):
        pass

    def __enter__(self) -> ListingPool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def starmap(self, fn: Callable, iterable: Iterable[tuple]) -> list:
        return [fn(*a) for a in iterable]


def list_cases_in_process(monkeypatch) -> None:
    """nnU-Net lists the files of an input folder's cases in this process (the same function on the same arguments,
    ``create_paths_fn``; undone with ``monkeypatch``); nothing is changed where nnU-Net is not installed."""
    try:
        from nnunetv2.utilities import utils
    except ImportError:
        return
    monkeypatch.setattr(utils, "Pool", ListingPool)
