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
