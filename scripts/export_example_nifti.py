"""Export the example cases to NIfTI folders for the bundles (see monai_unc/data/export.py for the layout).

    python scripts/export_example_nifti.py mni152 OUT_DIR [--n-cases 6] [--seed 0]
    python scripts/export_example_nifti.py toy OUT_DIR [--n-cases 16] [--seed 1000]

MNI152: case 0 is the 2 mm template, the others perturbed copies (noise, bias field, contrast, blur, resolution)
with the shift recorded in OUT_DIR/dataset.json; masks/ marks the held-out right hemisphere. Toy: synthetic spheres
with three raters and shifts. The folder must be new or empty (or one this script wrote before).
"""

import argparse

from monai_unc.data.cohorts import export_mni152_cases, export_toy_cases

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", choices=["mni152", "toy"])
    ap.add_argument("out_dir")
    ap.add_argument("--n-cases", type=int, default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--overwrite", action="store_true", help="rewrite a folder this script wrote before")
    args = ap.parse_args()
    kwargs = {"overwrite": args.overwrite}
    if args.n_cases is not None:
        kwargs["n_cases"] = args.n_cases
    if args.seed is not None:
        kwargs["seed"] = args.seed
    fn = export_mni152_cases if args.dataset == "mni152" else export_toy_cases
    print(fn(args.out_dir, **kwargs))
