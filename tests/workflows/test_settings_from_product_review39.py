"""``infer --settings-from`` with the rule of a product whose ``artifact_fingerprint`` predates ``trust``.

Found by review. The signature check passed ``trust`` to every product's reader: a registered product written for the
previous release (``artifact_fingerprint(cls, path)``) ended in a ``TypeError``. It is read as before, with a warning
that its signature is not checked; a reader that takes ``trust`` gets it.
"""

from __future__ import annotations

import json

import pytest

from monai_unc.io.signing import Trust
from monai_unc.product import CohortProduct, register_product, unregister_product
from monai_unc.workflows.reuse import read_rule_settings

CALLS: list[tuple] = []


def _product(takes_trust: bool) -> type[CohortProduct]:
    class Acme(CohortProduct):
        name = "acme_review39"
        title = "Acme rule"
        artifact_format = "acme rule review39"

        if takes_trust:
            @classmethod
            def artifact_fingerprint(cls, path, trust=None):
                CALLS.append((path, trust))
                return f"acme rule {path}", {}
        else:
            @classmethod
            def artifact_fingerprint(cls, path):  # the previous release's signature
                CALLS.append((path,))
                return f"acme rule {path}", {}

    return Acme


@pytest.fixture
def rule_file(tmp_path):
    path = tmp_path / "acme.json"
    path.write_text(json.dumps({"format": "acme rule review39"}))
    yield path
    unregister_product("acme_review39")
    CALLS.clear()


def test_a_reader_without_trust_is_read_with_a_warning(rule_file):
    register_product(_product(takes_trust=False))
    with pytest.warns(UserWarning, match="artifact_fingerprint takes no 'trust'"), \
            pytest.raises(ValueError, match="records no settings of monai-unc infer"):
        read_rule_settings(rule_file, Trust((), False))
    assert CALLS == [(rule_file,)]


def test_a_reader_with_trust_gets_it(rule_file, recwarn):
    register_product(_product(takes_trust=True))
    trust = Trust((), False)
    with pytest.raises(ValueError, match="records no settings of monai-unc infer"):
        read_rule_settings(rule_file, trust)
    assert CALLS == [(rule_file, trust)]
    assert not [w for w in recwarn if "trust" in str(w.message)]
