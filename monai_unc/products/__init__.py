"""The package's own cohort products (:mod:`monai_unc.product`): one module each.

- :class:`~monai_unc.products.conformal.ConformalMasks` (:mod:`.conformal`): inner and outer masks with a
  finite-sample guarantee (``monai-unc evaluate --conformal``).
- :class:`~monai_unc.products.risk_control.RiskControl` (:mod:`.risk_control`): the risk-controlled referral threshold
  and its rule file for ``monai-unc triage`` (``monai-unc evaluate --target-risk``).
- :class:`~monai_unc.products.lesions.LesionMetrics` (:mod:`.lesions`): lesion-wise metrics and per-lesion
  uncertainty (``monai-unc evaluate --lesions``).

Importing this package registers them (:func:`monai_unc.product.register_product`); the registry imports it on its
first lookup, so ``monai-unc evaluate`` offers their options and the report finds their sections. The modules are
light: the command line reads their options before torch is imported.
"""

from __future__ import annotations

from .conformal import ConformalMasks
from .lesions import LesionMetrics
from .risk_control import RiskControl

__all__ = ["ConformalMasks", "LesionMetrics", "RiskControl"]
