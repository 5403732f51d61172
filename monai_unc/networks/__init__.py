"""Networks that model uncertainty in their outputs: Stochastic Segmentation Networks (SSN).

``SSNHead`` turns any segmentation backbone's last feature map into a low-rank multivariate normal over the
logits of all voxels and classes; ``SSNNetwork`` attaches it to a backbone; ``SSNLoss`` is the Monte Carlo
log-likelihood it is trained with; :func:`monai_unc.data.train_ssn` trains one on the synthetic toy set with
raters. Sample it at inference with :class:`monai_unc.inferers.SSNSource`. See docs/ssn.md.
"""

from .losses import SSNLoss, ssn_log_likelihood
from .ssn import (
    IntensityMask,
    SSNDistribution,
    SSNHead,
    SSNNetwork,
    SSNParams,
    find_ssn_heads,
    lowrank_distribution,
    mirrored_ssn_noise,
    sample_logits,
    ssn_sampling,
)

__all__ = [
    "IntensityMask",
    "SSNDistribution",
    "SSNHead",
    "SSNLoss",
    "SSNNetwork",
    "SSNParams",
    "find_ssn_heads",
    "lowrank_distribution",
    "mirrored_ssn_noise",
    "sample_logits",
    "ssn_log_likelihood",
    "ssn_sampling",
]
