"""MONAI inferers that return uncertainty: all return ``dict[str, Tensor]`` keyed by ``UncertaintyKeys``."""

from .dropout import (
    DropoutHook,
    MCDropoutInferer,
    MCDropoutSource,
    add_dropout,
    default_dropout_sites,
    enable_mc_dropout,
    find_dropout_layers,
    remove_dropout,
)
from .ensemble import EnsembleInferer, EnsembleSource, load_state_dict
from .sampling import (
    SampleSource,
    SoftmaxInferer,
    StochasticSource,
    UncertaintyInferer,
    UncertaintyOutput,
    apply_activation,
)
from .tta import AugmentationSource, FlipSource, InvertibleTransformSource, NoiseSource, TTAInferer, flip_subsets

__all__ = [
    "AugmentationSource",
    "DropoutHook",
    "EnsembleInferer",
    "EnsembleSource",
    "FlipSource",
    "InvertibleTransformSource",
    "MCDropoutInferer",
    "MCDropoutSource",
    "NoiseSource",
    "SampleSource",
    "SoftmaxInferer",
    "StochasticSource",
    "TTAInferer",
    "UncertaintyInferer",
    "UncertaintyOutput",
    "add_dropout",
    "apply_activation",
    "default_dropout_sites",
    "enable_mc_dropout",
    "find_dropout_layers",
    "flip_subsets",
    "load_state_dict",
    "remove_dropout",
]
