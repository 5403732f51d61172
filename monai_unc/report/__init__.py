"""Reports: NIfTI writing, reliability diagrams, cohort evaluation, plots and the HTML QC report."""

from .reliability import plot_reliability_diagram

__all__ = ["plot_reliability_diagram"]
