"""monai-unc: uncertainty for MONAI and nnU-Net segmentation models."""

from ._compat import install as _install_moved_modules
from .keys import MIMeaning, UncertaintyKeys

__version__ = "0.2.0.dev0"

__all__ = ["UncertaintyKeys", "MIMeaning", "__version__"]

# the deprecated module paths of monai_unc._compat import until their removal (no file of their own)
_install_moved_modules()
