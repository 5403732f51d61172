"""Output names of every uncertainty inferer."""

from __future__ import annotations

from enum import Enum

__all__ = ["UncertaintyKeys", "MIMeaning"]


class UncertaintyKeys(str, Enum):
    """Keys of the ``dict[str, Tensor]`` that every monai-unc inferer returns.

    - ``pred``: mean probabilities ``(B, C, *spatial)``.
    - ``predictive_entropy``: H(mean p), total uncertainty (PU), ``(B, 1, *spatial)``.
    - ``expected_entropy``: mean over samples of H(p_s), aleatoric part (AU).
    - ``mutual_information``: PE - EE (- WD under overlapping sliding windows), epistemic part (EU) for
      dropout / ensembles / TTA.
    - ``window_disagreement``: WD = H(blend of window means) - blend of H(window means) under overlapping
      sliding windows (>= 0, 0 without overlap), so that PE = EE + MI + WD; see
      :mod:`monai_unc.inferers.sampling`.
    - ``max_softmax``: 1 - max_c mean p (larger = less confident).
    - ``variance``: mean over classes of the per-class population variance over samples.
    - ``samples``: ``(S, B, C, *spatial)``, only with ``keep_samples=True``.

    Multi-label (sigmoid, region-based) models: every map except ``samples`` is ``(B, C, *spatial)``, one per
    region, with binary entropies; ``max_softmax`` is ``1 - max(p_c, 1 - p_c)`` and ``variance`` is per channel.
    """

    PRED = "pred"
    PREDICTIVE_ENTROPY = "predictive_entropy"
    EXPECTED_ENTROPY = "expected_entropy"
    MUTUAL_INFORMATION = "mutual_information"
    WINDOW_DISAGREEMENT = "window_disagreement"
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
