"""Tests of ``monai_unc.nnunet``."""
