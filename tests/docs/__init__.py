"""Tests of the runnable examples in ``docs/`` and of the documentation site (``mkdocs.yml``)."""
