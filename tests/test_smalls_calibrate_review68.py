"""Review 68: the commands' not-converged line is worded by the reason (a stalled fit was advised more steps)."""

import warnings

import pytest
import torch

import monai_unc.temperature as temperature
from monai_unc.temperature import TemperatureScaler, convergence_said_by_caller, non_convergence_warning


class _LooseScaler(TemperatureScaler):
    """A per-class fit whose steps fall below ``tol`` at once (RMSprop alone: Newton's method fails, below)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tol = 0.5


@pytest.fixture
def stalling(monkeypatch):
    """A vector NLL fit that stalls: Newton's method fails and the NLL still falls against the gradient."""
    monkeypatch.setattr(TemperatureScaler, "_newton_vector_nll", lambda self, *a, **k: None)
    monkeypatch.setattr(TemperatureScaler, "_falls_against_gradient", lambda self, *a, **k: True)
    monkeypatch.setattr(temperature, "TemperatureScaler", _LooseScaler)
    torch.manual_seed(0)
    return [torch.randn(1, 3, 6, 6) * 2], [torch.randint(0, 3, (1, 6, 6))]


def test_a_stalled_vector_fit_is_not_advised_more_steps(stalling):
    logits, target = stalling
    with warnings.catch_warnings(record=True) as caught, convergence_said_by_caller():
        warnings.simplefilter("always")
        _, record = temperature.calibrate_network(logits, target, torch.nn.Identity(), mode="vector", max_steps=20)
    assert not [w for w in caught if "did not converge" in str(w.message)]  # the command says it (its own line)
    assert record["converged"] is False and record["not_converged"] == "stalled"
    line = non_convergence_warning(record, what="the temperature fit of fold 0", option="--max_steps")
    assert line.startswith("warning: the temperature fit of fold 0 stalled after ")
    assert "does not help" in line and "rerun with a larger" not in line and "--mode scalar" in line


def test_the_line_of_each_reason():
    moving = non_convergence_warning({"converged": False, "steps": 9, "not_converged": "still_moving"})
    assert moving == non_convergence_warning({"converged": False, "steps": 9})  # records written before the field
    assert moving.endswith("rerun with a larger --max-steps") and "still moving" in moving
    line = non_convergence_warning({"converged": False, "steps": 9, "not_converged": "no_minimum"})
    assert "found no minimum" in line and "does not help" in line
    # a minimum below the bound exists: said so, with the way to reach it (not "found no minimum")
    line = non_convergence_warning({"converged": False, "steps": 9, "not_converged": "at_bound"})
    assert "lower bound min_temperature" in line and "smaller min_temperature" in line and "no minimum" not in line
    assert non_convergence_warning({"converged": True, "steps": 9, "not_converged": None}) is None
    scaler = TemperatureScaler()
    assert scaler.not_converged is None
