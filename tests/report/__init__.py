"""Tests of ``monai_unc.report``."""
