"""Train the shipped example network (MNI152 tissue, left hemisphere) and write its weights + record.

    python scripts/train_example.py [--iterations 1500] [--seed 0] [--out monai_unc/data/weights/mni152_tissue_unet.pt]

CPU, deterministic for a seed and thread count; about 5 minutes on 2 cores. Dice on the held-out right
hemisphere is written to the .json record next to the weights.
"""

import argparse
import json

from monai_unc.data.model import example_weights_path
from monai_unc.data.training import train_tissue_model

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(example_weights_path()))
    args = ap.parse_args()
    _, record = train_tissue_model(args.out, iterations=args.iterations, seed=args.seed)
    print(json.dumps({k: record[k] for k in ("train_seconds", "dice_right_heldout", "dice_left_train")}, indent=2))
