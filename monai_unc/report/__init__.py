"""Reports built from evaluation outputs: reliability diagrams (:mod:`.reliability`), plots (:mod:`.plots`) and the
HTML quality-control report (:mod:`.html`). The cohort evaluation itself lives in :mod:`monai_unc.evaluation` and
file writing in :mod:`monai_unc.io`; the old ``report.cohort``, ``report.demo`` and ``report.nifti`` paths are
deprecated aliases."""

from .reliability import plot_reliability_diagram

__all__ = ["plot_reliability_diagram"]
