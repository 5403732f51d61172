"""Tests of ``monai_unc.networks``."""
