"""Tests of monai-unc; ``tests/README.md`` says where a test goes."""
