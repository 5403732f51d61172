"""Fixed-rate MC dropout (p = 0.5) vs Rate-In at equal sample count on the MNI152 example (Zeevi et al., Sec. 4).

    python benchmarks/rate_in_experiment.py [--samples 10] [--target 0.1] [--loss mi] [--threads 2] [--json PATH]

Protocol (docs/data.md): the shipped UNet was trained on the left hemisphere of the
MNI152 2009 template (2 mm); everything here is evaluated on the held-out right hemisphere (world x >= 0).
Cases: the clean template and four realistic perturbed copies (Gaussian noise, bias field, contrast change,
blur), fixed seeds; the perturbation is the case name. The network input is the last 64 sagittal slices (the
right hemisphere, 50 slices, plus 14 slices of left context), inferred with MONAI's ``SlidingWindowInferer``
(64^3 windows, overlap 0.25, Gaussian blending: the setting in which the example is validated and demoed; 6
windows, so Rate-In searches its rates once per window). The network's own dropout is off (``dropout=0``) and
post-hoc dropout is placed after every encoder and decoder stage but the output (Zeevi et al., Sec. 4.2), the same six
sites for every method:

- ``mc``: MC dropout, channel-wise, fixed p = 0.5 at every site (Zeevi et al.'s "low quality" map);
- ``ratein``: Rate-In (:class:`monai_unc.inferers.rate_in.RateInInferer`), channel-wise, rates searched per window
  so that each site loses ``--target`` of its information (Gaussian mutual information by default);
- ``matched``: a control: MC dropout at one fixed rate equal to the mean Rate-In rate of that case, to separate
  the effect of adapting the rates from that of their overall level.

All draw ``--samples`` stochastic passes (Zeevi et al. uses 30; 10 keeps the run at a few minutes on 2 CPU cores).
Uncertainty maps: mutual information (epistemic) and predictive entropy, both divided by log 3 (``normalize=True``)
so that they lie in [0, 1] as BA-ECE and SPACE expect. As in Zeevi et al. all maps are scored against the same error
map, that of the deterministic network (no dropout). Reported: Dice of each method's mean prediction, mean
uncertainty in the brain, voxel-wise error AUROC (sklearn), the spatial metrics (SPACE, BUC, BA-ECE) and the
per-case comparison of ``monai_unc.metrics.compare.compare_uncertainty_maps`` (accuracy = share of cases where a
metric prefers the Rate-In map).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch


def perturbed_cases(image: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """The clean image and four perturbed copies ``(1, X, Y, Z)`` in [0, 1] (fixed seeds)."""
    from monai.transforms import GaussianSmooth

    rng = np.random.default_rng(seed)
    img = image.astype(np.float32)
    brain = img > 0.05
    x, y, z = np.meshgrid(*[np.linspace(-1, 1, s) for s in img.shape[1:]], indexing="ij")
    bias = np.exp(0.25 * x - 0.2 * y + 0.15 * z * x)[None].astype(np.float32)
    cases = {
        "clean": img,
        "noise": np.clip(img + rng.normal(0, 0.04, img.shape).astype(np.float32) * brain, 0, 1),
        "bias_field": np.clip(img * bias, 0, 1),
        "contrast": np.clip(img**1.4, 0, 1),
        "blur": np.asarray(GaussianSmooth(sigma=0.8)(img)),
    }
    return {k: v.astype(np.float32) for k, v in cases.items()}


def dice(pred: np.ndarray, label: np.ndarray, cls: int) -> float:
    a, b = pred == cls, label == cls
    d = int(a.sum()) + int(b.sum())
    return float(2 * np.logical_and(a, b).sum() / d) if d else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--target", type=float, default=0.1)
    ap.add_argument("--loss", default="mi")
    ap.add_argument("--fixed-p", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--roi", type=int, default=64, help="sliding-window size (the example's default)")
    ap.add_argument("--cases", nargs="*", default=None, help="subset of: clean noise bias_field contrast blur")
    ap.add_argument("--json", default=None, help="write all numbers to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from monai.inferers import SlidingWindowInferer
    from sklearn.metrics import roc_auc_score

    from monai_unc.data import load_example_model, load_mni152_tissue
    from monai_unc.inferers import MCDropoutInferer, SoftmaxInferer, add_dropout, remove_dropout
    from monai_unc.inferers.rate_in import RateInInferer

    try:
        from monai_unc.metrics.compare import compare_uncertainty_maps
        from monai_unc.metrics.spatial import (
            boundary_aware_ece,
            boundary_uncertainty_concentration,
            spatial_calibration_error,
        )

        have_spatial = True
    except ImportError as e:  # the spatial-metrics module is optional for this script
        print(f"spatial metrics unavailable ({e}); reporting Dice, mean MI and error AUROC only")
        have_spatial = False

    data = load_mni152_tissue(resolution=2)
    net, _ = load_example_model(dropout=0.0)
    xs = np.nonzero(data["right"].any(axis=(1, 2)))[0]
    # network input: the last `roi` x-slices (the right hemisphere plus some left context), so that one window
    # spans x; evaluation: the right hemisphere inside it
    x_stop = int(xs.max()) + 1
    x_start = max(0, x_stop - args.roi)
    inp = (slice(None), slice(x_start, x_stop), slice(None), slice(None))
    ev = (slice(int(xs.min()) - x_start, None), slice(None), slice(None))
    label = data["label"][0][inp[1:]][ev]
    brain = (data["probs"][1:].sum(0) > 0.1)[inp[1:]][ev]
    spacing = data["spacing"]
    cases = perturbed_cases(data["image"])
    if args.cases:
        cases = {k: cases[k] for k in args.cases}

    def sw() -> SlidingWindowInferer:  # as the example model is trained, validated and demoed
        return SlidingWindowInferer((args.roi,) * 3, sw_batch_size=2, overlap=0.25, mode="gaussian")

    def run(inferer, img: np.ndarray, network) -> tuple[dict, float]:
        x = torch.from_numpy(np.ascontiguousarray(img[inp]))[None]
        t0 = time.perf_counter()
        out = inferer(x, network)
        sec = time.perf_counter() - t0
        maps = {k: out[k][0].numpy()[(slice(None), *ev)] for k in ("pred", "mutual_information",
                                                                    "predictive_entropy") if k in out}
        maps["extras"] = out.extras
        return maps, sec

    methods = ("mc", "matched", "ratein")
    results: dict = {"args": vars(args), "cases": {}}
    maps_mi: dict[str, list] = {m: [] for m in methods}
    maps_pe: dict[str, list] = {m: [] for m in methods}
    preds, targets = [], []
    for name, img in cases.items():
        det, t_det = run(SoftmaxInferer(base_inferer=sw()), img, net)
        seg_det = det["pred"].argmax(0)
        ri, t_ri = run(
            RateInInferer(num_samples=args.samples, target_loss=args.target, loss=args.loss, placement="insert",
                          base_inferer=sw(), seed=0, normalize=True),
            img, net,
        )
        rates = ri["extras"]["rate_in_rates"]
        p_matched = float(torch.cat(list(rates.values())).mean())
        out = {"deterministic": det, "ratein": ri}
        seconds = {"deterministic": t_det, "ratein": t_ri}
        for key, p in (("mc", args.fixed_p), ("matched", p_matched)):
            add_dropout(net, p=p)  # the same six stage sites
            out[key], seconds[key] = run(
                MCDropoutInferer(num_samples=args.samples, base_inferer=sw(), seed=0, normalize=True), img, net
            )
            remove_dropout(net)
        err = seg_det != label
        row: dict = {"seconds": seconds, "p_matched": p_matched}
        for key, m in out.items():
            seg = m["pred"].argmax(0)
            row[key] = {"dice_gm": dice(seg, label, 1), "dice_wm": dice(seg, label, 2)}
            if key == "deterministic":
                continue
            mi, pe = m["mutual_information"][0], m["predictive_entropy"][0]
            row[key].update(
                {
                    "mean_mi_brain": float(mi[brain].mean()),
                    "mean_pe_brain": float(pe[brain].mean()),
                    "auroc_mi": float(roc_auc_score(err.ravel(), mi.ravel())),
                    "auroc_pe": float(roc_auc_score(err.ravel(), pe.ravel())),
                }
            )
            if have_spatial:
                for u_name, u in (("mi", mi), ("pe", pe)):
                    row[key].update(
                        {
                            f"space_{u_name}": float(spatial_calibration_error(u, seg_det, label, spacing=spacing)[0]),
                            f"buc_{u_name}": float(
                                boundary_uncertainty_concentration(u, seg_det, label, spacing=spacing)[0]
                            ),
                            f"baece_{u_name}": float(boundary_aware_ece(u, seg_det, label, spacing=spacing)[0]),
                        }
                    )
            maps_mi[key].append(mi)
            maps_pe[key].append(pe)
        row["ratein_rates"] = {k: float(v.mean()) for k, v in rates.items()}
        row["ratein_losses"] = {k: float(v.nanmean()) for k, v in ri["extras"]["rate_in_losses"].items()}
        results["cases"][name] = row
        preds.append(seg_det)
        targets.append(label)
        print(f"[{name}] det {t_det:.1f}s  mc {seconds['mc']:.1f}s  matched {seconds['matched']:.1f}s  "
              f"ratein {t_ri:.1f}s  windows {len(next(iter(rates.values())))}  rates "
              + " ".join(f"{v:.3f}" for v in row["ratein_rates"].values()) + f"  matched p {p_matched:.3f}",
              flush=True)

    # ---------------------------------------------------------------- summary
    names = list(results["cases"])
    print()
    print(f"Right hemisphere, {len(names)} cases ({', '.join(names)}), {args.samples} samples per method, "
          f"Rate-In target {args.target} ({args.loss}), fixed p = {args.fixed_p}, sliding window {args.roi}^3")
    keys = ["dice_gm", "dice_wm", "mean_mi_brain", "mean_pe_brain", "auroc_mi", "auroc_pe"]
    if have_spatial:
        keys += ["space_mi", "buc_mi", "baece_mi", "space_pe", "buc_pe", "baece_pe"]
    cols = ("deterministic", "mc", "matched", "ratein")
    print(f"| quantity (mean over cases) | deterministic | MC p={args.fixed_p:.2g} | MC p=matched | Rate-In |")
    print("|---|---:|---:|---:|---:|")
    for k in keys:
        vals = []
        for m in cols:
            v = [results["cases"][c][m].get(k, np.nan) for c in names]
            vals.append(np.nanmean(v) if not all(np.isnan(v)) else np.nan)
        print(f"| {k} | " + " | ".join("-" if np.isnan(v) else f"{v:.4f}" for v in vals) + " |")
    t = {m: np.mean([results["cases"][c]["seconds"][m] for c in names]) for m in cols}
    print("| seconds per case | " + " | ".join(f"{t[m]:.1f}" for m in cols) + " |")
    pm = [results["cases"][c]["p_matched"] for c in names]
    print(f"\nmatched fixed rate (mean Rate-In rate of the case): {np.mean(pm):.3f} ({min(pm):.3f}-{max(pm):.3f})")
    layer_names = list(results["cases"][names[0]]["ratein_rates"])
    print("Rate-In rates per site (mean over windows and cases; min-max of the case means):")
    for ln in layer_names:
        v = [results["cases"][c]["ratein_rates"][ln] for c in names]
        print(f"  {ln:45s} {np.mean(v):.3f} ({np.min(v):.3f}-{np.max(v):.3f})")
    if have_spatial:
        for ref in ("mc", "matched"):
            for label_map, maps in (("mutual information", maps_mi), ("predictive entropy", maps_pe)):
                comp = compare_uncertainty_maps(
                    ["SPACE", "BUC", "BA-ECE", "AUC-ROC", "AUC-PR"], maps["ratein"], maps[ref],
                    pred=preds, target=targets, spacing=spacing,
                )
                ref_name = f"MC p={args.fixed_p}" if ref == "mc" else "MC at the matched fixed rate"
                print(f"\ncompare_uncertainty_maps (a = Rate-In, b = {ref_name}), {label_map}:")
                print(comp.to_markdown())
                results[f"comparison_vs_{ref}_{label_map.replace(' ', '_')}"] = comp.table()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=float)


if __name__ == "__main__":
    main()
