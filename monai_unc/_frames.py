"""The first frame outside this package: where a warning points and where a command line was entered.

One predicate for :func:`monai_unc._utils.user_stacklevel` (a warning names the user's call, not a line of the
package) and :func:`monai_unc.cli.main` (the first line outside the package that called it, to which a warning the
package holds for one call is attributed). The standard library only: the command line imports it before parsing.

A frame is the package's when its file lies in this package's folder, spelled as it was imported
(``os.path.abspath``: ``tests/../monai_unc/x.py`` through a ``sys.path`` entry ``tests/..`` is normalised) or with
its symbolic links followed (``os.path.realpath``: the package reached through a symlinked folder or virtual
environment); a pseudo-file (``<stdin>``, ``<string>``, ``<doctest ...>``, ``<frozen runpy>``) never is, whatever the
working folder. In earlier versions the command line followed symbolic links but read ``<stdin>`` as a file of the
working folder (the package's, when run from there), and the warnings did the reverse.
"""

from __future__ import annotations

import os
from types import FrameType

__all__ = ["first_frame_outside_package", "in_package"]

#: this package's folder as imported, and with its symbolic links followed (each ending with a separator)
_PACKAGE_DIRS = tuple(dict.fromkeys(os.path.join(d, "") for d in (os.path.dirname(os.path.abspath(__file__)),
                                                                   os.path.dirname(os.path.realpath(__file__)))))


def in_package(filename: str) -> bool:
    """Whether a frame's file name is a file of this package.

    The name as imported is compared first (no system call: every frame of the package matches so); only a name
    that does not match has its symbolic links followed.

    Args:
        filename: a code object's ``co_filename``.

    Returns:
        True for a file in this package's folder; False for any other, and for a pseudo-file (``<stdin>``).

    Example:
        >>> import monai_unc
        >>> in_package(monai_unc.__file__), in_package("<stdin>"), in_package(os.__file__)
        (True, False, False)
    """
    if not isinstance(filename, str):
        raise TypeError(f"filename must be a str, got {type(filename).__name__}")
    if not filename or filename.startswith("<"):
        return False
    if os.path.abspath(filename).startswith(_PACKAGE_DIRS):
        return True
    try:
        return os.path.realpath(filename).startswith(_PACKAGE_DIRS)
    except (OSError, ValueError):  # a name the system cannot resolve (an embedded NUL byte): not a file of ours
        return False


def first_frame_outside_package(frame: FrameType) -> tuple[FrameType, int]:
    """The first frame from ``frame`` outward whose file is not this package's (:func:`in_package`), and its level.

    Args:
        frame: where to start (e.g. ``sys._getframe(1)``, the caller of the function asking).

    Returns:
        ``(caller, level)``: that frame and its level counted from ``frame`` (1: ``frame`` itself), as the
        ``stacklevel`` of :func:`warnings.warn` counts from its caller; when every frame is the package's, the
        outermost frame and the level past it.

    Example:
        >>> import sys
        >>> here = sys._getframe(); first_frame_outside_package(here) == (here, 1)  # a doctest's line: the user's
        True
    """
    if not isinstance(frame, FrameType):
        raise TypeError(f"frame must be a frame object, got {type(frame).__name__}")
    level = 1
    while in_package(frame.f_code.co_filename):
        level += 1
        if frame.f_back is None:
            break
        frame = frame.f_back
    return frame, level
