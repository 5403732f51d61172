"""Small inputs that several test modules share."""

import numpy as np
import torch


def softmax_case(shape=(2, 3, 12, 10), seed=0, scale=3.0):
    """Logits ``(B, C, *spatial)``, their softmax and a random label map ``(B, *spatial)``."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(*shape, generator=g) * scale
    y = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=g)
    return z, torch.softmax(z, 1), y


def blob_case(shape=(12, 14), seed=0):
    """An unbatched uncertainty map and two overlapping boxes (prediction, target) of one 2D case."""
    rng = np.random.default_rng(seed)
    t = np.zeros(shape, int)
    t[3:9, 4:10] = 1
    p = np.zeros(shape, int)
    p[4:10, 3:9] = 1
    return rng.random(shape), p, t


#: the toy network of the command-line tests: a tiny MONAI 3D UNet with dropout (one input channel, two classes)
TOY_NET = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 2,
           "channels": [4, 8], "strides": [2], "num_res_units": 0, "dropout": 0.2}
