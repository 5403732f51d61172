"""Freeze the outputs of the authors' public code on fixed inputs into ``reference.json`` (run by hand, not a test).

The losses of :mod:`monai_unc.losses` are written independently; ``tests/losses/test_calibration_losses.py`` compares
them with the numbers this script records from the authors' own implementations, which are not installable
packages (the SVLS code needs CUDA, the others are research repositories). Check out the four repositories and
run::

    python tests/losses/authors_reference/generate.py --svls <SVLS> --mbls <MbLS> --marginloss <MarginLoss> \\
        --ace <Average-Calibration-Losses>

- SVLS: github.com/mobarakol/SVLS, ``svls.py`` (``CELossWithSVLS``; Islam, Glocker, IPMI 2021);
- MbLS: github.com/by-liu/MbLS, ``calibrate/losses/logit_margin_l1.py`` (``LogitMarginL1``; Liu et al., CVPR 2022);
- segmentation MbLS: github.com/Bala93/MarginLoss, ``calibrate/losses/logit_margin_ce_dice.py``
  (``LogitMarginDICEL1``; Murugesan et al., Medical Image Analysis 2023);
- L1-ACE: github.com/cai4cai/Average-Calibration-Losses, ``src/losses/hardl1ace.py`` and ``softl1ace.py``
  (Barfoot et al., MICCAI 2024 and 2025).

The inputs are drawn here with numpy's ``default_rng(0)`` and stored in the file as well, so the test does not
depend on a random generator.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import numpy as np
import torch


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs() -> dict:
    rng = np.random.default_rng(0)
    z3 = rng.normal(scale=4.0, size=(2, 4, 5, 6, 4)).astype(np.float32)
    y3 = rng.integers(0, 4, size=(2, 1, 5, 6, 4))
    y3[1][y3[1] == 3] = 2  # class 3 absent from the second image
    z2 = rng.normal(scale=6.0, size=(2, 3, 7, 5)).astype(np.float32)
    y2 = rng.integers(0, 3, size=(2, 1, 7, 5))
    return {"3d": (z3, y3), "2d": (z2, y2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("svls", "mbls", "marginloss", "ace"):
        parser.add_argument(f"--{name}", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("reference.json"))
    args = parser.parse_args()
    torch.Tensor.cuda = lambda self, *a, **k: self  # the SVLS code moves its buffers to CUDA; run it on the CPU
    svls = _load(args.svls / "svls.py", "authors_svls")
    mbls = _load(args.mbls / "calibrate/losses/logit_margin_l1.py", "authors_mbls")
    seg = _load(args.marginloss / "calibrate/losses/logit_margin_ce_dice.py", "authors_seg_mbls")
    hard = _load(args.ace / "src/losses/hardl1ace.py", "authors_hard_ace")
    soft = _load(args.ace / "src/losses/softl1ace.py", "authors_soft_ace")
    HardL1ACELoss, HardL1ACEandDiceCELoss = hard.HardL1ACELoss, hard.HardL1ACEandDiceCELoss
    SoftL1ACELoss, SoftL1ACEandDiceCELoss = soft.SoftL1ACELoss, soft.SoftL1ACEandDiceCELoss

    out: dict = {"inputs": {}, "svls": [], "mbls": [], "seg_mbls": [], "ace": [], "ace_dice_ce": []}
    dice_params = {"include_background": True, "softmax": True, "reduction": "mean", "squared_pred": True,
                   "smooth_nr": 0, "smooth_dr": 1e-5}
    for key, (z, y) in _inputs().items():
        out["inputs"][key] = {"logits": z.tolist(), "labels": y.tolist()}
        zt, yt = torch.from_numpy(z), torch.from_numpy(y)
        if key == "3d":  # the authors' SVLS code is 3-D with a 3x3x3 kernel
            for sigma in (1.0, 2.0):
                loss = svls.CELossWithSVLS(classes=z.shape[1], sigma=sigma)(zt, yt[:, 0])
                out["svls"].append({"input": key, "sigma": sigma, "loss": float(loss)})
        for margin in (10.0, 3.0):
            loss, _, _ = mbls.LogitMarginL1(margin=margin, alpha=0.1)(zt, yt[:, 0])
            out["mbls"].append({"input": key, "margin": margin, "alpha": 0.1, "loss": float(loss)})
            loss, _, _, _ = seg.LogitMarginDICEL1(margin=margin, alpha=0.1)(zt, yt[:, 0])
            out["seg_mbls"].append({"input": key, "margin": margin, "alpha": 0.1, "loss": float(loss)})
        for binning, cls in (("hard", HardL1ACELoss), ("soft", SoftL1ACELoss)):
            for num_bins in (20, 5):
                for include_background in (True, False):
                    ace = cls(num_bins=num_bins, include_background=include_background, to_onehot_y=True,
                              softmax=True, reduction="none")(zt, yt)
                    out["ace"].append({"input": key, "binning": binning, "num_bins": num_bins,
                                       "include_background": include_background,
                                       "per_image_channel": ace.reshape(ace.shape[:2]).tolist()})
        for binning, cls in (("hard", HardL1ACEandDiceCELoss), ("soft", SoftL1ACEandDiceCELoss)):
            ace_params = {"num_bins": 20, "include_background": True, "softmax": True, "reduction": "mean",
                          "ignore_empty_classes": True}
            if binning == "soft":
                ace_params["empty_weight"] = 0.01
            loss = cls(ace_weight=0.33, dice_weight=0.33, ce_weight=0.33, to_onehot_y=True, ace_params=ace_params,
                       dice_params=dice_params, ce_params={"reduction": "mean"})(zt, yt)
            out["ace_dice_ce"].append({"input": key, "binning": binning, "loss": float(loss)})
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
