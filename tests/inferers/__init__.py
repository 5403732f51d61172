"""Tests of ``monai_unc.inferers``."""
