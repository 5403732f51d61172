"""Tests of what ships: the wheel and sdist built from this checkout, their file lists and metadata."""
