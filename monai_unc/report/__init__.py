"""Reports built from evaluation outputs: reliability diagrams, plots and the HTML pages.

Reliability diagrams are in :mod:`.reliability`, plots in :mod:`.plots`, the HTML quality-control report in
:mod:`.html` and the triage page in :mod:`.triage`. The cohort evaluation itself lives in
:mod:`monai_unc.evaluation` and file writing in :mod:`monai_unc.io`; the old ``report.cohort``, ``report.demo``
and ``report.nifti`` paths are deprecated aliases.
"""

from .reliability import plot_reliability_diagram

__all__ = ["plot_reliability_diagram"]
