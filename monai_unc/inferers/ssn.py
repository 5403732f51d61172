"""Sample source for Stochastic Segmentation Networks: latent draws per window, MI aleatoric.

An SSN (Monteiro et al., *Stochastic Segmentation Networks: Modelling Spatially Correlated Aleatoric Uncertainty*,
NeurIPS 2020) predicts a distribution over logit maps; each draw is one plausible segmentation. Over the draws,
PE = H(E_z p) is the total uncertainty and the mutual information MI(Y, Z | x) = PE - EE measures the aleatoric
part (Kahl et al., *ValUES*, ICLR 2024, Appendix D: for a model with a variability variable Z trained on
several raters' labels, MI(Y, Z | x) is AU and the expected entropy E_z H(Y | x, z) is taken as EU).

:class:`SSNSource` switches every :class:`~monai_unc.networks.SSNHead` of the network into sampling mode
(:func:`~monai_unc.networks.ssn_sampling`) and asks for ``num_samples`` draws per window. When the head sits in
an :class:`~monai_unc.networks.SSNNetwork`, the backbone runs once per window and the draws reuse its
distribution (the source is placed innermost in the product so that its draws run back to back for each
combination of the other sources); a head elsewhere (e.g. inside nnU-Net's decoder) costs one full pass per draw.

Composing with MC dropout in the backbone, ``UncertaintyInferer([MCDropoutSource(n), SSNSource(m)])``: each dropout mask
gets its own backbone pass and ``m`` latent draws from it (n x m samples; the dropout samples run as full passes, not as
the inferer's shared passes, which would run the latent draws outside the dropout samples). Pooled over all samples, MI
= I(Y; theta, Z | x) = I(Y; theta | x) + I(Y; Z | theta, x) mixes epistemic and aleatoric parts (the output says
``mi_meaning == "mixed"``). ``SSNSource(m, marginalize=True)`` instead returns, per dropout mask, the latent-averaged
prediction E_z p(y | x, theta, z) as a single sample: then the dropout axis alone varies, and MI = I(Y; theta | x) is
the epistemic part (``mi_meaning == "epistemic"``), with EE = E_theta H(E_z p).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from .._utils import check_bool
from ..keys import MIMeaning
from ..networks.dropout import DropoutHook, find_dropout_layers
from ..networks.ssn import SSNNetwork, ssn_sampling
from .sampling import StochasticSource, UncertaintyInferer, network_output_tensor

__all__ = ["SSNSource", "SSNInferer"]

Predictor = Callable[[torch.Tensor], Any]


class SSNSource(StochasticSource):
    """``num_samples`` latent draws per window from every SSN head of the network (module docstring).

    MI over the draws is aleatoric (``mi_meaning = "aleatoric"``).

    Args:
        num_samples: draws per window (ValUES uses 10).
        marginalize: return one sample per call, the mean probability over the ``num_samples`` draws (as
            log-probabilities, which the inferer's ``activation="softmax"`` maps back to exactly that mean). Use it
            in a product with MC dropout or an ensemble to make their MI the epistemic part alone. With dropout
            switched on it needs the draws to reuse one backbone pass (``reuse_features=True``, every head in an
            :class:`~monai_unc.networks.SSNNetwork`): ``ValueError`` otherwise, where each draw would get its own
            dropout mask.
        reuse_features: run the backbone of an :class:`~monai_unc.networks.SSNNetwork` once per window and draw
            all latent samples from its distribution (default). ``False`` runs the full network per draw.

    Raises:
        ValueError: on a network without an :class:`~monai_unc.networks.SSNHead` (when the inferer runs).
        TypeError: ``marginalize`` or ``reuse_features`` not a bool.

    Example:
        >>> from monai_unc.inferers import FlipSource, SSNSource, UncertaintyInferer
        >>> import torch
        >>> from monai_unc.networks import SSNHead, SSNNetwork
        >>> _ = torch.manual_seed(0)
        >>> backbone = torch.nn.Conv3d(1, 8, 3, padding=1)
        >>> net = SSNNetwork(backbone, SSNHead(8, num_classes=2, rank=2, init_variance=1.0)).eval()
        >>> image = torch.rand(1, 1, 4, 4, 4)
        >>> out = UncertaintyInferer([FlipSource([0]), SSNSource(5)], seed=0)(image, net)
        >>> out.num_samples, out.mi_meaning.value
        (10, 'mixed')
    """

    innermost = True

    def __init__(self, num_samples: int = 10, marginalize: bool = False, reuse_features: bool = True) -> None:
        super().__init__(num_samples, mi_meaning=MIMeaning.ALEATORIC)
        # found by hostile testing: bool() took marginalize="no" as True (MI relabelled epistemic without a word)
        self.marginalize = check_bool(marginalize, "marginalize")
        self.reuse_features = check_bool(reuse_features, "reuse_features")
        self._nets: list[SSNNetwork] = []

    def __len__(self) -> int:
        return 1 if self.marginalize else self.num_samples

    def __repr__(self) -> str:
        return (
            f"SSNSource(num_samples={self.num_samples}, marginalize={self.marginalize}, "
            f"reuse_features={self.reuse_features})"
        )

    @contextlib.contextmanager
    def activate(self, network: nn.Module | None) -> Iterator[None]:
        """Put the network's SSN heads into sampling mode for the call (:func:`~monai_unc.networks.ssn_sampling`)."""
        if network is None:
            raise ValueError("SSNSource needs the network (a module with an SSNHead)")
        with ssn_sampling(network, cache=self.reuse_features) as heads:
            self._nets = [m for m in network.modules() if isinstance(m, SSNNetwork)]
            if self.marginalize and self.num_samples > 1 and _dropout_active(network):
                reused = {id(n.head) for n in self._nets} if self.reuse_features else set()
                if any(id(h) not in reused for h in heads):
                    raise ValueError(
                        "SSNSource(marginalize=True) averages the latent draws of one dropout sample, but here every "
                        "draw runs the network again with a new dropout mask (reuse_features=False, or an SSNHead "
                        "outside an SSNNetwork), so the average would mix dropout masks and the MI would not be the "
                        "epistemic part; use reuse_features=True with the head in an SSNNetwork, or marginalize=False"
                    )
            try:
                yield
            finally:
                self._nets = []

    @contextlib.contextmanager
    def _reusing(self, reuse: bool) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if reuse and self.reuse_features:
                for net in self._nets:
                    stack.enter_context(net.reuse_features())
            yield

    def _draw(self, j: int) -> Callable[[Predictor], Predictor]:
        def wrap(predictor: Predictor) -> Predictor:
            def run(t: torch.Tensor) -> Any:
                with self._reusing(j > 0):  # draw 0 runs the backbone, the others reuse its distribution
                    return predictor(t)

            return run

        return wrap

    def _marginal(self, predictor: Predictor) -> Predictor:
        def run(t: torch.Tensor) -> torch.Tensor:
            total: torch.Tensor | None = None
            for j in range(self.num_samples):
                with self._reusing(j > 0):
                    z = network_output_tensor(predictor(t))
                p = torch.softmax(z.to(torch.promote_types(z.dtype, torch.float32)), dim=1)
                total = p if total is None else total + p
            mean = total / self.num_samples
            return torch.log(mean.clamp_min(torch.finfo(mean.dtype).tiny))

        return run

    def variants(self, x: torch.Tensor) -> Sequence[Callable[[Predictor], Predictor] | None]:
        """``num_samples`` draws, or one marginalised sample with ``marginalize``."""
        if self.marginalize:
            return [self._marginal]
        return [self._draw(j) for j in range(self.num_samples)]

    def num_variants(self, x: torch.Tensor) -> int:
        """Samples per window: ``num_samples``, or 1 with ``marginalize``."""
        return len(self)


def _dropout_active(network: nn.Module) -> bool:
    """Whether a dropout layer of ``network`` samples in its forward pass (switched on by an outer source)."""
    modules, hooks = find_dropout_layers(network)
    if any(m.training for m in modules) or any(h.mc_enabled for h in hooks):
        return True
    return any(m.training and isinstance(h, DropoutHook) and h.p > 0
               for m in network.modules() for h in m._forward_hooks.values())


class SSNInferer(UncertaintyInferer):
    """Latent draws of a Stochastic Segmentation Network into streaming statistics.

    ``UncertaintyInferer`` with one :class:`SSNSource` (``num_samples`` draws per window; MI is aleatoric, ValUES
    Appendix D). Monteiro et al.: *Stochastic Segmentation Networks: Modelling Spatially Correlated Aleatoric
    Uncertainty*.

    Args:
        num_samples: latent draws per window.
        reuse_features: run the backbone once per window (see :class:`SSNSource`).
        **kwargs: :class:`~monai_unc.inferers.UncertaintyInferer` options but ``sources``
            (``base_inferer``, ``keys``, ``seed``, ...).

    Example:
        >>> from monai_unc.inferers import SSNInferer
        >>> import torch
        >>> from monai_unc.networks import SSNHead, SSNNetwork
        >>> _ = torch.manual_seed(0)
        >>> backbone = torch.nn.Conv3d(1, 8, 3, padding=1)
        >>> net = SSNNetwork(backbone, SSNHead(8, num_classes=2, rank=2, init_variance=1.0)).eval()
        >>> image = torch.rand(1, 1, 4, 4, 4)
        >>> out = SSNInferer(num_samples=10, seed=0)(image, net)
        >>> out.num_samples, out.mi_meaning.value, out["mutual_information"].shape
        (10, 'aleatoric', torch.Size([1, 1, 4, 4, 4]))
    """

    def __init__(self, num_samples: int = 10, reuse_features: bool = True, **kwargs: Any) -> None:
        self._refuse_sources(kwargs, "SSNInferer")
        super().__init__(sources=[SSNSource(num_samples, reuse_features=reuse_features)], **kwargs)
        self.num_samples = num_samples

    def __call__(self, inputs: torch.Tensor, network: Callable | None = None, *args: Any, **kwargs: Any):
        """Run the inferer (:meth:`UncertaintyInferer.__call__`), refusing an empty batch.

        An empty batch has no latent distribution to draw from: ``ValueError`` naming ``inputs``.

        Args:
            inputs: ``(B, C_in, *spatial)`` with ``B >= 1``.
            network: the SSN.
            *args: passed to the network.
            **kwargs: passed to the network.

        Returns:
            The :class:`~monai_unc.inferers.UncertaintyOutput`.
        """
        if isinstance(inputs, torch.Tensor) and inputs.ndim >= 1 and (inputs.shape[0] == 0 or inputs.numel() == 0):
            raise ValueError(f"SSNInferer: inputs is an empty batch (shape {tuple(inputs.shape)}): an SSN draws from "
                             "the distribution of at least one image")
        return super().__call__(inputs, network, *args, **kwargs)
