"""Tests of the ``monai-unc`` command line (``monai_unc.cli``), sub-commands run end to end."""
