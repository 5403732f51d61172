"""Hostile review 54 of :mod:`monai_unc.report`: what the pages' builder let through, the viewer's and the figures'
inputs (each test failed before its fix).

- ``el("iframe", srcdoc=...)`` escaped the value, which the browser decodes and parses as a document: a payload in it
  ran (set the parent page's title in headless Chromium); ``<animate attributename="href" values="javascript:...">``
  inside an SVG link made the link run script, past :func:`~monai_unc.report.markup.check_url`.
"""

from __future__ import annotations

import pytest

from monai_unc.report.markup import el

PAYLOAD = "<script>parent.document.title='PWNED'</script>"


@pytest.mark.parametrize("make", [
    lambda: el("iframe", srcdoc=PAYLOAD),
    lambda: el("iframe", srcdoc_="x"),
    lambda: el("animate", attributename="href", values="javascript:document.title='PWNED'"),
    lambda: el("set", attributename="href", to="javascript:document.title='PWNED'"),
])
def test_attributes_and_elements_that_turn_escaped_text_into_script_are_refused(make):
    with pytest.raises(ValueError, match="srcdoc|sets another attribute"):
        make()
