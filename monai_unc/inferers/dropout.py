"""Monte-Carlo dropout: switch dropout on at inference, insert dropout post hoc, and the MC inferer.

The layer functions (:func:`enable_mc_dropout`, :func:`add_dropout`, ...) are defined in
:mod:`monai_unc.networks.dropout`, which needs torch only, and are public here.

- :func:`enable_mc_dropout` puts every dropout layer of a model (``torch.nn`` ``_DropoutNd`` subclasses,
  MONAI / timm ``DropPath``, and the post-hoc dropout added by :func:`add_dropout`) into sampling mode while
  the rest of the model (normalisation layers in particular) stays in eval mode; it restores the previous
  modes afterwards and works as a context manager. MONAI's ``SupervisedEvaluator`` calls ``network.eval()``
  before the inferer, so the inferer must do this itself (MONAI's SupervisedEvaluator does so).
- :func:`add_dropout` inserts dropout into a trained network without changing its parameters or its
  ``state_dict`` keys: a forward hook applies dropout to the output of each chosen stage. The default placement
  is "after every encoder and decoder stage but the output" (Zeevi et al., Sec. 4: MC dropout with dropout after
  every stage of the encoder and decoder), detected for MONAI ``UNet``, ``BasicUNet``, ``DynUNet`` and nnU-Net's
  ``PlainConvUNet`` / ``ResidualEncoderUNet``.
- :class:`MCDropoutInferer` draws ``num_samples`` stochastic forward passes into streaming statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .._utils import check_integer
from ..keys import MIMeaning
from ..networks.dropout import (
    PLACEMENTS,
    DropoutHook,
    MCDropoutContext,
    add_dropout,
    align_fused_attention,
    default_channelwise,
    default_dropout_sites,
    enable_mc_dropout,
    fast_path_layers,
    find_dropout_layers,
    remove_dropout,
    resolve_dropout_sites,
    stage_sites,
)
from .sampling import SampleSource, UncertaintyInferer

__all__ = [
    "DropoutHook",
    "MCDropoutContext",
    "enable_mc_dropout",
    "find_dropout_layers",
    "fast_path_layers",
    "default_channelwise",
    "align_fused_attention",
    "add_dropout",
    "remove_dropout",
    "default_dropout_sites",
    "resolve_dropout_sites",
    "stage_sites",
    "PLACEMENTS",
    "MCDropoutSource",
    "MCDropoutInferer",
]


# ---------------------------------------------------------------------------------------- inferer
class MCDropoutSource(SampleSource):
    """``num_samples`` stochastic passes with dropout switched on (MI is epistemic, MI(Y, theta)).

    Args:
        num_samples: passes per window.

    Example:
        >>> from monai_unc.inferers import FlipSource, MCDropoutSource, UncertaintyInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(
        ...     torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.3), torch.nn.Conv3d(4, 3, 1)
        ... ).eval()
        >>> inferer = UncertaintyInferer([MCDropoutSource(4), FlipSource([0])], seed=0)
        >>> inferer(torch.rand(1, 1, 4, 4, 4), net).num_samples
        8
    """

    mi_meaning = MIMeaning.EPISTEMIC
    shareable = True
    _samples_dropout = True

    def __init__(self, num_samples: int) -> None:
        num_samples = check_integer(num_samples, "num_samples")
        self.num_samples = num_samples

    def __len__(self) -> int:
        return self.num_samples

    def variants(self, x: torch.Tensor) -> list[Callable | None]:
        """``num_samples`` plain calls (the dropout masks differ)."""
        return [None] * self.num_samples

    def activate(self, network: nn.Module) -> MCDropoutContext:
        """Switch on the dropout of ``network`` for the call (:func:`enable_mc_dropout`).

        Rate-In layers that a ``RateInSource(keep_layers=True)`` keeps on a compiled network are removed first
        (:func:`~monai_unc.inferers.rate_in.release_kept_layers`): switched on, they sampled Rate-In in place of the
        network's own dropout (in earlier versions).
        """
        from .rate_in import release_kept_layers  # rate_in builds on this module

        if isinstance(network, nn.Module):
            release_kept_layers(network)
        return enable_mc_dropout(network)


class MCDropoutInferer(UncertaintyInferer):
    """Monte-Carlo dropout inferer (Gal & Ghahramani; Zeevi et al. uses ``num_samples=30``).

    Gal, Ghahramani: *Dropout as a Bayesian Approximation: Representing Model Uncertainty in Deep Learning*. Calls
    ``base_inferer`` (default ``SimpleInferer``; ``SlidingWindowInferer`` for large volumes) once; inside each
    window ``num_samples`` passes with dropout switched on stream into :class:`~monai_unc.stats.SampleStats`, so
    memory does not grow with ``num_samples``. Dropout modes are restored afterwards. The network needs dropout
    layers (build it with its dropout argument or call :func:`add_dropout`); otherwise ``ValueError``.

    Args:
        num_samples: dropout passes per window.
        **kwargs: :class:`~monai_unc.inferers.UncertaintyInferer` options but ``sources``
            (``base_inferer``, ``activation``, ``keys``, ``seed``, ...).

    Calling it returns ``dict[str, Tensor]`` keyed by :class:`~monai_unc.keys.UncertaintyKeys`.

    Example:
        >>> from monai.inferers import SlidingWindowInferer
        >>> from monai_unc.inferers import MCDropoutInferer
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(
        ...     torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.3), torch.nn.Conv3d(4, 3, 1)
        ... ).eval()
        >>> inferer = MCDropoutInferer(num_samples=5, seed=0, base_inferer=SlidingWindowInferer((4, 4, 4)))
        >>> out = inferer(torch.rand(1, 1, 6, 6, 6), net)
        >>> out["mutual_information"].shape, out["window_disagreement"].shape
        (torch.Size([1, 1, 6, 6, 6]), torch.Size([1, 1, 6, 6, 6]))
        >>> bool((out["mutual_information"] > 0).all()), out.mi_meaning.value
        (True, 'epistemic')
    """

    def __init__(self, num_samples: int = 30, **kwargs: Any) -> None:
        self._refuse_sources(kwargs, "MCDropoutInferer")
        source = MCDropoutSource(num_samples)
        super().__init__(sources=[source], **kwargs)
        self.num_samples = source.num_samples
