"""The package's own cohort products (:mod:`monai_unc.product`): one module each, one capability per module.

Every module of this package is a product module: importing the package imports each of them (in name order), which
registers their classes (:func:`monai_unc.product.register_product`), and binds the product classes they export here
(``from monai_unc.products import RiskControl``). A new capability of the package is one new module here and nothing
else: its options reach ``monai-unc evaluate``, its command (if it has one) the command line, its section the report.
The registry imports this package on its first lookup. The modules are light: the command line reads their options
before torch is imported.

The products today: the masks with a finite-sample guarantee, the risk-controlled referral rule
(:mod:`.risk_control`, ``--target-risk``) and lesion-wise evaluation (:mod:`.lesions`, ``--lesions``); ``monai-unc
evaluate --help`` lists each product's options under its title.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..product import CohortProduct

#: the product modules of this package, in the order they are imported (so registered): every public module in it
MODULES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


def _product_classes() -> dict[str, type[CohortProduct]]:
    """Import every product module; the product classes each exports (its ``__all__``), by class name."""
    found: dict[str, type[CohortProduct]] = {}
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr)
            if isinstance(obj, type) and issubclass(obj, CohortProduct) and obj is not CohortProduct:
                found[attr] = obj
    return found


globals().update(_product_classes())
__all__ = ["MODULES", *sorted(k for k, v in globals().items() if isinstance(v, type) and issubclass(v, CohortProduct)
                              and v is not CohortProduct)]
