"""Tests of ``monai_unc.workflows``."""
