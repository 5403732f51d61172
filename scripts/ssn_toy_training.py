"""SSN training on the 3D toy set with raters: what the covariance's initialisation and region of interest do.

    python scripts/ssn_toy_training.py [--iterations 400] [--out ssn_toy_training.json]
    python scripts/ssn_toy_training.py --bundle-model MODEL.pt   # evaluate weights from configs/train_ssn.json

Three variants of :func:`monai_unc.data.train_ssn` (16 cases of 32^3 with 3 raters, seed 0; UNet 8-16-32 with
8 feature channels, rank 5, M = 20, batch 4, Adam 3e-3 with cosine decay, the first 10 % of the iterations
training the mean alone):

- ``torch init, no mask``: the head's three convolutions with PyTorch's default initialisation (the authors'
  code), the covariance active everywhere;
- ``small init, no mask``: the covariance starts near zero (``init_variance=1e-3``, the default);
- ``small init + mask`` (the default of ``train_ssn``): the covariance limited by ``IntensityMask()``.

Each is evaluated on 8 held-out in-distribution cases (seed 1000) with ``SSNInferer(num_samples=20, seed=0)``: the
mean of the aleatoric map (MI) and of EE where the raters disagree and far from that band (2+ voxels away),
NCC(map, rater variance) averaged over cases (ValUES eq. 12), and the Dice of the argmax of the mean probabilities
against the majority vote. One thread; the JSON record goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
from scipy.ndimage import binary_dilation

from monai_unc.data import make_toy_dataset, train_ssn
from monai_unc.inferers import SSNInferer
from monai_unc.metrics.ambiguity import ncc, rater_variance

VARIANTS = {
    "torch init, no mask": {"init_variance": None, "mask": None},
    "small init, no mask": {"mask": None},
    "small init + mask": {},
}
NETWORK = {"channels": [8, 16, 32], "feature_channels": 8, "rank": 5}


def evaluate(net: torch.nn.Module, n_cases: int = 8) -> dict:
    cases = make_toy_dataset(n_cases, shape=(32, 32, 32), seed=1000)
    x = torch.from_numpy(np.stack([c["image"] for c in cases]))
    out = SSNInferer(num_samples=20, seed=0)(x, net)
    fg = np.stack([c["probs"][1] for c in cases])
    band = (fg > 0) & (fg < 1)
    far = ~binary_dilation(band, np.ones((1, 5, 5, 5), bool))
    res = {}
    for key, name in (("mutual_information", "mi"), ("expected_entropy", "ee")):
        m = out[key][:, 0].numpy()
        res[f"{name}_band"] = float(m[band].mean())
        res[f"{name}_far"] = float(m[far].mean())
        res[f"ncc_{name}"] = float(np.mean([ncc(m[i], rater_variance(c["raters"])) for i, c in enumerate(cases)]))
    seg = out["pred"].argmax(1).numpy() == 1
    lab = np.stack([c["label"] for c in cases]) == 1
    res["dice"] = float(2 * (seg & lab).sum() / (seg.sum() + lab.sum()))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--out", default="ssn_toy_training.json")
    ap.add_argument("--bundle-model", help="evaluate this state dict of the toy bundle's train_ssn.json network")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.bundle_model:
        from monai.bundle import ConfigParser

        parser = ConfigParser()
        parser.read_config(os.path.join(os.path.dirname(__file__), "..", "bundles", "toy_uncertainty", "configs",
                                        "train_ssn.json"))
        net = parser.get_parsed_content("network_def")
        net.load_state_dict(torch.load(args.bundle_model, map_location="cpu", weights_only=True))
        print(json.dumps(evaluate(net.eval()), indent=2))
        return
    rows = {}
    for name, arch in VARIANTS.items():
        t0 = time.time()
        net, rec = train_ssn(n_cases=16, shape=(32, 32, 32), iterations=args.iterations, batch_size=4, lr=3e-3,
                             num_mc_samples=20, network={**NETWORK, **arch}, seed=0)
        rows[name] = {"loss_first": rec["loss_first"], "loss_last": rec["loss_last"], **evaluate(net),
                      "seconds": round(time.time() - t0, 1)}
        r = rows[name]
        print(f"{name:22s} loss {r['loss_first']:.4f} -> {r['loss_last']:.4f} | MI band {r['mi_band']:.3f} far "
              f"{r['mi_far']:.4f} NCC {r['ncc_mi']:.3f} | EE band {r['ee_band']:.3f} far {r['ee_far']:.4f} NCC "
              f"{r['ncc_ee']:.3f} | Dice {r['dice']:.3f} | {r['seconds']} s", flush=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"iterations": args.iterations, "network": NETWORK, "variants": rows}, f, indent=2)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
