"""Tests of the validation studies of ``docs/validation/``."""
