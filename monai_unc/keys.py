"""Output names of every uncertainty inferer, what their mutual information means, and the measure groups.

This module is the one place where the names of the uncertainty maps are spelled out: inferers, transforms,
file layouts, the command line and the nnU-Net predictor all take their lists from here (``docs/design.md``).
"""

from __future__ import annotations

from enum import Enum

__all__ = ["UncertaintyKeys", "MIMeaning", "MEASURES", "ENTROPY_MEASURES", "DEFAULT_MEASURES"]


class UncertaintyKeys(str, Enum):
    """Keys of the ``dict[str, Tensor]`` that every monai-unc inferer returns.

    - ``pred``: mean probabilities ``(B, C, *spatial)``.
    - ``predictive_entropy``: H(mean p), total uncertainty (PU), ``(B, 1, *spatial)``.
    - ``expected_entropy``: mean over samples of H(p_s), aleatoric part (AU).
    - ``mutual_information``: PE - EE, epistemic part (EU) for dropout / ensembles / TTA.
    - ``max_softmax``: 1 - max_c mean p (larger = less confident).
    - ``variance``: mean over classes of the per-class population variance over samples.
    - ``samples``: ``(S, B, C, *spatial)``, only with ``keep_samples=True``.
    """

    PRED = "pred"
    PREDICTIVE_ENTROPY = "predictive_entropy"
    EXPECTED_ENTROPY = "expected_entropy"
    MUTUAL_INFORMATION = "mutual_information"
    MAX_SOFTMAX = "max_softmax"
    VARIANCE = "variance"
    SAMPLES = "samples"

    def __str__(self) -> str:
        return self.value


class MIMeaning(str, Enum):
    """What the mutual information of a set of samples measures (ValUES Sec. 3 and Appendix D/E).

    Dropout, ensembles and test-time augmentation sample model (or transformation) parameters: MI is
    epistemic. Latent-variable models (SSN, probabilistic U-Net) sample a latent that explains label
    ambiguity: MI is aleatoric. A product of sources of different kinds is ``mixed``.
    """

    EPISTEMIC = "epistemic"
    ALEATORIC = "aleatoric"
    MIXED = "mixed"
    NONE = "none"

    def __str__(self) -> str:
        return self.value


#: every voxel-wise uncertainty map an inferer can return (names of ``<case>_<measure>`` files), in output order
MEASURES: tuple[str, ...] = (
    UncertaintyKeys.PREDICTIVE_ENTROPY.value,
    UncertaintyKeys.EXPECTED_ENTROPY.value,
    UncertaintyKeys.MUTUAL_INFORMATION.value,
    UncertaintyKeys.MAX_SOFTMAX.value,
    UncertaintyKeys.VARIANCE.value,
)

#: the maps measured in nats (natural log), bounded by ``log C``; divided by ``log C`` to bring them to [0, 1]
ENTROPY_MEASURES: tuple[str, ...] = MEASURES[:3]

#: the maps written by default (``variance`` costs C more stitched channels and is opt-in)
DEFAULT_MEASURES: tuple[str, ...] = MEASURES[:4]
