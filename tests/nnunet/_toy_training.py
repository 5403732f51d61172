"""nnU-Net's training of a toy task at a toy's cost, for the tests that train one: the end-of-training validation
without its worker processes (:func:`validate_in_process`), and the progress plot of every epoch drawn at a tenth of
its resolution (:func:`small_progress_plots`).

``nnUNetTrainer.perform_actual_validation`` hands each validation case's export to a
``multiprocessing.get_context("spawn").Pool`` and ``compute_metrics_on_folder`` the Dice of each case to a second one:
each pool starts fresh Pythons that import torch and nnU-Net (~5 s each on the CI's two cores) for a case or two of a
toy task. :func:`validate_in_process` swaps the ``multiprocessing`` of those two nnU-Net modules for the stand-in of
the planning steps (:class:`tests._nnunet_pools.InProcessMultiprocessing`), whose pools run each call in the calling
process, one after the other, when it is handed over: the same nnU-Net functions on the
same arguments (``export_prediction_from_logits``, ``resample_and_save``, ``compute_metrics``), so the validation's
files and ``summary.json`` are those of the pools. Nothing of monai_unc runs in those workers (the trainer hands them
nnU-Net's plans and configuration managers, the logits and the case's properties), and the trainer itself still
predicts every validation case.

This module imports nothing of the tests but :mod:`tests._nnunet_pools` (which imports none), so that a child process
(a test's ``python -c`` script, the repository's root on its path) can use it too.
"""

from __future__ import annotations

from collections.abc import Callable

from tests._nnunet_pools import InProcessMultiprocessing


def validate_in_process(setattr_: Callable[[object, str, object], None] = setattr) -> None:
    """nnU-Net's validation exports and scores its cases in this process (module docstring).

    Args:
        setattr_: how to set the modules' attribute: ``monkeypatch.setattr`` in a test (undone afterwards), the
            builtin ``setattr`` in a child process that ends after its commands.
    """
    from nnunetv2.evaluation import evaluate_predictions
    from nnunetv2.training.nnUNetTrainer import nnUNetTrainer as trainer_module

    for module in (trainer_module, evaluate_predictions):
        setattr_(module, "multiprocessing", InProcessMultiprocessing)


#: the resolution of nnU-Net's progress plot in these tests (dots per inch; matplotlib's default 100): nnU-Net draws a
#: 30 x 54 inch figure after every epoch, and writing its 3000 x 5400 pixels took ~1 of the ~1.4 CPU seconds of each
#: plot; the plot is drawn by the same code (curves, legends, layout) and saved as progress.png, 300 x 540 pixels
PROGRESS_PLOT_DPI = 10


def small_progress_plots(setitem: Callable[[object, str, object], None] | None = None) -> None:
    """nnU-Net's ``progress.png`` after every epoch is saved at :data:`PROGRESS_PLOT_DPI` (matplotlib's
    ``savefig.dpi``); nothing that the training computes reads it.

    Args:
        setitem: how to set the item: ``monkeypatch.setitem`` in a test (undone afterwards); by default the plain
            assignment, for a child process that ends after its commands.
    """
    import matplotlib

    if setitem is None:
        matplotlib.rcParams["savefig.dpi"] = PROGRESS_PLOT_DPI
    else:
        setitem(matplotlib.rcParams, "savefig.dpi", PROGRESS_PLOT_DPI)
