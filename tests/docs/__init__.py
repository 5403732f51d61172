"""Tests of the runnable examples in ``docs/``."""
