"""``plot_reliability_diagram(class_names=...)`` names the curves of ``kind="classwise"`` only: another kind
refuses it instead of drawing a diagram without the names (hostile review of the API's promises)."""

import numpy as np
import pytest

from monai_unc.report import plot_reliability_diagram

PROBS = np.array([[[0.9, 0.2, 0.6, 0.3]], [[0.1, 0.8, 0.4, 0.7]]])[None, :, 0]
TARGET = np.array([[0, 1, 1, 1]])


@pytest.mark.parametrize("kind", ["top", "all_label", "uncertainty"])
def test_class_names_with_another_kind_is_refused(kind):
    with pytest.raises(ValueError, match=f"class_names names the curves of kind='classwise' only, got kind='{kind}'"):
        plot_reliability_diagram(PROBS, TARGET, kind=kind, n_bins=5, show_counts=False, class_names=["bg", "tumour"])


def test_class_names_label_the_classwise_curves():
    fig = plot_reliability_diagram(PROBS, TARGET, kind="classwise", n_bins=5, show_counts=False,
                                   class_names=["bg", "tumour"])
    texts = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("tumour" in t for t in texts) and any("bg" in t for t in texts)
