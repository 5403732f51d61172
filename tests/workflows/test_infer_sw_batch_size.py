"""``monai-unc infer --sw-batch-size`` with a seed: the seeded draws depend on the batches of windows, so the value is
recorded (where it changes the draws) and a resume with another value is refused, as for ``--seed``.

Found by hostile testing: a seeded MC dropout run resumed with another ``--sw-batch-size`` finished the folder with
cases drawn with other masks (mutual information up to 0.56 nats apart), without a word.
"""

from __future__ import annotations

import json

import pytest

from monai_unc.io.provenance import prediction_fingerprint
from monai_unc.workflows.infer import InferSettings
from tests._cases import run_toy_infer, toy_infer_files

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WINDOW = ("--roi", "8", "--overlap", "0.5", "--seed", "0")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_infer_files(tmp_path_factory.mktemp("swb"), n_cases=1)


def _settings(out):
    return json.loads((out / "infer.json").read_text())["settings"]


def test_a_seeded_resume_with_another_sw_batch_size_is_refused(toy, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_toy_infer(toy, out, *WINDOW, "--sw-batch-size", "1") == 0
    assert "sw_batch_size" not in _settings(out)  # the default: recorded as before the field existed
    capsys.readouterr()
    assert run_toy_infer(toy, out, *WINDOW, "--sw-batch-size", "4") == 2  # other draws: not mixed into this folder
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different settings" in err and "sw_batch_size" in err
    assert run_toy_infer(toy, out, *WINDOW, "--sw-batch-size", "4", "--overwrite") == 0
    assert _settings(out)["sw_batch_size"] == 4
    assert json.loads((out / "toy000.json").read_text())["fingerprint"]["sw_batch_size"] == 4
    assert "sw_batch_size" not in prediction_fingerprint(out)  # a rule's fingerprint leaves it out, as the seed
    assert run_toy_infer(toy, out, *WINDOW, "--sw-batch-size", "4") == 0  # the same settings resume


def test_sw_batch_size_is_recorded_only_where_it_changes_seeded_draws():
    base = dict(model="m", samples=2, overlap=0.25, intensity="none", measures=["predictive_entropy"],
                activation="softmax", checkpoints=[], sw_batch_size=4)
    for method in ("mcdropout", "ratein", "ssn", "tta+mcdropout", "ensemble+ratein"):
        assert InferSettings(method=method, roi=[8], seed=0, **base).to_json()["sw_batch_size"] == 4
    assert InferSettings(method="tta", roi=[8], seed=0, tta_noise=0.1, **base).to_json()["sw_batch_size"] == 4
    deterministic = [InferSettings(method=m, roi=[8], seed=0, **base) for m in ("tta", "ensemble", "softmax")]
    unseeded = [InferSettings(method="mcdropout", roi=[8], seed=None, **base)]
    whole = [InferSettings(method="mcdropout", roi=None, seed=0, **base)]
    for settings in deterministic + unseeded + whole:
        assert "sw_batch_size" not in settings.to_json(), settings.method
