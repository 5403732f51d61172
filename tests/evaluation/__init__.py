"""Tests of ``monai_unc.evaluation``."""
