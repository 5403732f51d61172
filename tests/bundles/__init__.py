"""Tests of the bundles under ``bundles/``."""
