"""Tests of ``monai_unc.io``."""
