"""Tests of ``monai_unc.data`` (the example data; ``tests/data`` holds files that tests read)."""
