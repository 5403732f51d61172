"""A histogram state whose total weight is above what update and merge allow is refused on loading."""

import pytest
import torch

from monai_unc.metrics.calibration import ConfidenceHistogram


def _state(weight: float, packed: bool = False):
    p = torch.zeros(1, 2, 4, dtype=torch.float64)
    p[:, 0], p[:, 1] = 0.99, 0.01
    h = ConfidenceHistogram(num_classes=2, per_case=packed)
    h.update(p, torch.zeros(1, 1, 4, dtype=torch.long), weights=torch.full((1, 1, 4), weight, dtype=torch.float64))
    return h.packed_state_dict() if packed else h.state_dict()


@pytest.mark.parametrize("packed", [False, True])
def test_state_above_the_weight_limit_is_refused(packed):
    st = _state(1e305, packed)
    keys = ("bin_sums", "scalars", "bin_weighted_counts") if packed else ("sums", "scalars", "weighted_counts")
    for k in keys:  # consistent tables, every weight 100 times larger
        st[k] = st[k] * 100
    h = ConfidenceHistogram(num_classes=2, per_case=packed)
    with pytest.raises(ValueError, match="total weight is above"):
        h.load_state_dict(st)
    # update refuses the same total (review 59), so no histogram could have saved this state
    with pytest.raises(ValueError, match="total voxel weight"):
        ConfidenceHistogram(num_classes=2).update(
            torch.tensor([[[0.99] * 4, [0.01] * 4]], dtype=torch.float64), torch.zeros(1, 1, 4, dtype=torch.long),
            weights=torch.full((1, 1, 4), 1e307, dtype=torch.float64))


def test_state_at_a_large_allowed_weight_loads():
    h = ConfidenceHistogram(num_classes=2).load_state_dict(_state(1e305))
    assert float(h.state_dict()["scalars"][0, 0]) == pytest.approx(4e305)
