"""Tests of ``monai_unc.metrics``."""
