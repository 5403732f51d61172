"""monai-unc: uncertainty for MONAI and nnU-Net segmentation models."""

from .keys import MIMeaning, UncertaintyKeys

__version__ = "0.1.0"

__all__ = ["UncertaintyKeys", "MIMeaning", "__version__"]
