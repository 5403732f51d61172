"""How this package plugs into an nnU-Net v2 installation: the supported versions and the trainer folder.

Supported versions: :data:`SUPPORTED_VERSIONS` (``>=2.8,<2.9``). The predictor overrides private methods of
``nnUNetPredictor`` (see :mod:`monai_unc.nnunet.predictor`) whose signatures and order of operations nnU-Net
may change in any release, and the trainers rely on the ``nnUNet_extTrainer`` lookup and the
``build_network_architecture(plans_manager, configuration_manager, ...)`` signature, both new in 2.8 (2.7 has no
``nnUNet_extTrainer``, 2.6 the old signature). The test suite runs against 2.8.1; 2.8.0's sources differ from
2.8.1 only in one line of the stock sliding-window method that the predictor replaces. Importing
:mod:`monai_unc.nnunet` with any other version raises an ``ImportError`` naming this range; set the environment
variable ``MONAI_UNC_NNUNET_ANY_VERSION=1`` to turn that into a warning and try another version at your own risk.

This module uses absolute imports only: nnU-Net imports the modules of the ``nnUNet_extTrainer`` folder (this
folder, see :func:`trainer_dir`) as top-level modules.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "SUPPORTED_VERSIONS",
    "ANY_VERSION_ENV",
    "installed_nnunet_version",
    "check_nnunet_version",
    "trainer_dir",
    "ext_trainer_path",
]

#: nnunetv2 versions this package is tested with (pip specifier; kept equal to the pin in pyproject.toml)
SUPPORTED_VERSIONS = ">=2.8,<2.9"
_MIN, _MAX = (2, 8), (2, 9)  # the same range as (major, minor) bounds: min <= version < max
#: environment variable that turns the version check into a warning
ANY_VERSION_ENV = "MONAI_UNC_NNUNET_ANY_VERSION"
#: torch's deprecation of ``torch.jit.interface`` (a FutureWarning of recent torch), which timm's module body calls when
#: nnU-Net's trainer lookup imports its Primus trainers: library noise, ignored inside :func:`ext_trainer_path`
_TIMM_JIT_INTERFACE = r"`torch\.jit\.interface` is deprecated"


def installed_nnunet_version() -> str | None:
    """The installed nnunetv2 version string from the package metadata.

    Returns:
        The version (e.g. ``"2.8.1"``), or ``None`` when there is no metadata (e.g. a source tree on ``sys.path``).

    Example:
        >>> check_nnunet_version(installed_nnunet_version()) == installed_nnunet_version()
        True
    """
    try:
        return importlib.metadata.version("nnunetv2")
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, int] | None:
    m = re.match(r"\s*v?(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_nnunet_version(version: str | None = None) -> str | None:
    """Check that ``version`` (default: the installed nnunetv2) is inside :data:`SUPPORTED_VERSIONS`.

    Pre-releases and patch releases count by their ``major.minor`` (``2.8.2`` and ``2.8.2rc1`` are supported,
    ``2.9.0.dev0`` is not). An unknown version (no package metadata) only warns. With the environment variable
    :data:`ANY_VERSION_ENV` set to ``1`` an unsupported version warns instead of raising.

    Args:
        version: the version string to check; None checks the installed nnunetv2.

    Returns:
        The version checked, or None when it is unknown.

    Raises:
        ImportError: the version is outside :data:`SUPPORTED_VERSIONS` (and :data:`ANY_VERSION_ENV` is not ``1``).
        TypeError: ``version`` is not a string.

    Example:
        >>> check_nnunet_version("2.8.2rc1")
        '2.8.2rc1'
        >>> check_nnunet_version("2.7.0")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
            ...
        ImportError: monai_unc.nnunet supports nnunetv2>=2.8,<2.9, but nnunetv2 2.7.0 is installed: ...
    """
    if version is None:
        version = installed_nnunet_version()
    if version is None:
        warnings.warn(
            f"cannot determine the installed nnunetv2 version (no package metadata); monai_unc.nnunet supports "
            f"nnunetv2{SUPPORTED_VERSIONS}", UserWarning, stacklevel=2,
        )
        return None
    if not isinstance(version, str):
        raise TypeError(f"version must be a version string, got {type(version).__name__}")
    release = _release(version)
    if release is not None and _MIN <= release < _MAX:
        return version
    message = (
        f"monai_unc.nnunet supports nnunetv2{SUPPORTED_VERSIONS}, but nnunetv2 {version} is installed: "
        f"pip install 'nnunetv2{SUPPORTED_VERSIONS}' (the predictor overrides private nnU-Net methods that other "
        f"versions may change; set {ANY_VERSION_ENV}=1 to try anyway)"
    )
    if os.environ.get(ANY_VERSION_ENV, "").strip() == "1":
        warnings.warn(message, UserWarning, stacklevel=2)
        return version
    raise ImportError(message)


def trainer_dir() -> str:
    """The folder to put into ``nnUNet_extTrainer`` so that nnU-Net finds the trainers of this package.

    Returns:
        The absolute path of the folder of this module (``monai_unc/nnunet``).

    Example:
        >>> import os
        >>> os.path.isfile(os.path.join(trainer_dir(), "trainers.py"))
        True
    """
    return str(Path(__file__).resolve().parent)


@contextlib.contextmanager
def ext_trainer_path(path: str | None = None) -> Iterator[None]:
    """Context manager that appends ``path`` to ``nnUNet_extTrainer`` for the duration of the block.

    nnU-Net reads the variable at lookup time; the variable is restored (or removed) afterwards. A path already
    listed is not added twice. Inside the block, torch's ``FutureWarning`` "`torch.jit.interface` is deprecated" is
    ignored (that one message only): nnU-Net's lookup of a trainer outside its own folder imports all of its trainer
    modules, whose Primus trainers import timm, and timm's module body calls ``torch.jit.interface``. It is not
    about the user's model or data, and the user can do nothing about it.

    Args:
        path: the folder to add (default :func:`trainer_dir`).

    Yields:
        None.

    Example:
        >>> with ext_trainer_path("/opt/trainers"):
        ...     "/opt/trainers" in os.environ["nnUNet_extTrainer"].split(os.pathsep)
        True
    """
    path = trainer_dir() if path is None else str(path)
    old = os.environ.get("nnUNet_extTrainer")
    parts = [p for p in (old or "").split(os.pathsep) if p]
    if path not in parts:
        os.environ["nnUNet_extTrainer"] = os.pathsep.join(parts + [path])
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_TIMM_JIT_INTERFACE, category=FutureWarning,
                                    module=r"torch\.jit\.")
            yield
    finally:
        if old is None:
            os.environ.pop("nnUNet_extTrainer", None)
        else:
            os.environ["nnUNet_extTrainer"] = old
