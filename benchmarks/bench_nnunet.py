"""UncertaintyPredictor vs stock nnUNetPredictor: cost per case of mirroring-only uncertainty, same forward passes.

    python benchmarks/bench_nnunet.py [--repeats 3] [--configs width32 small64] [--threads 1]

Both predictors run the same network (random weights, seed 0, one fold) with nnU-Net's mirroring (8 passes per
window in 3D), Gaussian blending and step 0.5 on the same random preprocessed image, so they do exactly the same
forward passes. Contenders:

- ``stock``: ``nnUNetPredictor.predict_logits_from_preprocessed_data`` + ``export_prediction_from_logits``
  (resample, argmax, write the segmentation).
- ``ours``: ``UncertaintyPredictor(("mirroring",))``: every mirror a softmax sample into SampleStats, float32
  statistics buffers plus stock's fp16 logit buffer (``segmentation_from="logits"``), then
  ``export_uncertainty`` (segmentation + 4 float32 maps + JSON scores).
- ``ours_prob``: the same with ``segmentation_from="probabilities"`` (no logit buffer).

Configurations (CPU; nnU-Net's PlainConvUNet, 3 classes):

- ``width32``: the network nnU-Net plans for a 32^3 task (4 stages, 32-64-128-256 features), patch 32^3,
  image 48^3 (8 windows, 64 forward passes).
- ``small64``: a narrow network (8-16-32-64 features), patch 64^3, image 96^3 (8 windows, 64 passes): the
  per-sample statistics weigh most relative to the network here, and the buffers are larger.

The floor (``benchmarks/_floor.py``): the bare forward passes every contender makes (windows x 8 mirrors of the
network on one patch, no flips, no blending), timed in the same process and rounds; each contender's prediction
CPU time is printed as a ratio to it.

Timing: one subprocess builds all three contenders and runs them interleaved ``--repeats`` times (best wall
time and best process CPU time of each), so that load from other processes on a shared machine affects them
alike; ``--threads`` torch threads (default 1). On a shared machine the CPU-time ratio is the stable figure.
Memory: one subprocess per contender and run, the minimum of ``--mem-repeats`` runs (allocator arenas make
single runs vary by tens of MiB); peak = ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` after the measured work
minus the process RSS (``/proc/self/statm``) just before it, for the prediction alone and for prediction +
export. The script also reports whether our segmentation equals stock's (``segmentation_from="logits"``: it
must) and the voxel agreement of the probability-mean segmentation (random weights: many near-ties, so this is
a lower bound of what a trained model gives).

End to end (``--end-to-end``): the whole command, stock ``nnUNetv2_predict -d 998 -c 3d_fullres -f 0 -device cpu``
against ``monai-unc nnunet-predict`` with the same flags plus ``--sources mirroring`` (the same forward passes; the
default measures, maps and scores written), on ``--e2e-cases`` small NIfTI cases of a trained-model folder that the
script writes (the ``width32`` network, random weights) into a temporary ``nnUNet_results``; stock's default ``-npp
3 -nps 3`` for both (``--e2e-workers N``: ``-npp N -nps N``, e.g. 1 in CI, where the run is a smoke test). Each run
is one fresh process (interleaved, best of ``--repeats``), timed from launch to exit by this script. The process
runs the command's own entry point under a thin timer that splits the wall time into start-up (launch until the
model is loaded: interpreter, imports, checkpoint), prediction (the sum of the per-case prediction calls) and the
rest (preprocessing and export work not hidden behind prediction, waiting for the export workers, the scores
table); the export work of one case is timed in the in-process table above.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from _floor import floor_line, time_best

CONFIGS = {
    "width32": {"features": [32, 64, 128, 256], "patch": 32, "image": [48, 48, 48]},
    "small64": {"features": [8, 16, 32, 64], "patch": 64, "image": [96, 96, 96]},
    # end to end only (--e2e-config tiny): where start-up and export weigh most
    "tiny16": {"features": [8, 16, 32], "patch": 16, "image": [24, 24, 24]},
}
CONTENDERS = ("stock", "ours", "ours_prob")


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() // 1024


def _plans(features: list[int], patch: int) -> dict:
    n = len(features)
    arch = {
        "network_class_name": "dynamic_network_architectures.architectures.unet.PlainConvUNet",
        "arch_kwargs": {
            "n_stages": n, "features_per_stage": features, "conv_op": "torch.nn.modules.conv.Conv3d",
            "kernel_sizes": [[3, 3, 3]] * n, "strides": [[1, 1, 1]] + [[2, 2, 2]] * (n - 1),
            "n_conv_per_stage": [2] * n, "n_conv_per_stage_decoder": [2] * (n - 1), "conv_bias": True,
            "norm_op": "torch.nn.modules.instancenorm.InstanceNorm3d", "norm_op_kwargs": {"eps": 1e-5, "affine": True},
            "dropout_op": None, "dropout_op_kwargs": None, "nonlin": "torch.nn.LeakyReLU",
            "nonlin_kwargs": {"inplace": True},
        },
        "_kw_requires_import": ["conv_op", "norm_op", "dropout_op", "nonlin"],
    }
    res = {"is_seg": False, "order": 1, "order_z": 0, "force_separate_z": None}
    conf = {
        "data_identifier": "bench", "preprocessor_name": "DefaultPreprocessor", "batch_size": 2,
        "patch_size": [patch] * 3, "median_image_size_in_voxels": [patch] * 3, "spacing": [1.0, 1.0, 1.0],
        "normalization_schemes": ["ZScoreNormalization"], "use_mask_for_norm": [False],
        "resampling_fn_data": "resample_data_or_seg_to_shape", "resampling_fn_seg": "resample_data_or_seg_to_shape",
        "resampling_fn_data_kwargs": {**res, "order": 3}, "resampling_fn_seg_kwargs": {**res, "is_seg": True},
        "resampling_fn_probabilities": "resample_data_or_seg_to_shape", "resampling_fn_probabilities_kwargs": res,
        "architecture": arch, "batch_dice": False,
    }
    return {
        "dataset_name": "Dataset998_Bench", "plans_name": "nnUNetPlans",
        "original_median_spacing_after_transp": [1.0, 1.0, 1.0], "original_median_shape_after_transp": [patch] * 3,
        "image_reader_writer": "SimpleITKIO", "transpose_forward": [0, 1, 2], "transpose_backward": [0, 1, 2],
        "configurations": {"3d_fullres": conf}, "experiment_planner_used": "ExperimentPlanner",
        "label_manager": "LabelManager",
        "foreground_intensity_properties_per_channel": {"0": {"max": 1.0, "mean": 0.0, "median": 0.0, "min": -1.0,
                                                              "percentile_00_5": -1.0, "percentile_99_5": 1.0,
                                                              "std": 1.0}},
    }


def setup_case(config: str, threads: int) -> dict:
    """One preprocessed case and the PlainConvUNet of ``CONFIGS[config]`` (random weights, seed 0), as a dict.

    Keys: ``pm`` / ``cm`` (plans and configuration managers), ``net``, ``params`` (one fold), ``data`` ``(1, *image)``,
    ``props``, ``dataset_json``, ``threads`` (the torch threads set). ``benchmarks/bench_cost.py --nnunet`` uses it.
    """
    import torch
    from nnunetv2.utilities.get_network_from_plans import get_network_from_plans
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    torch.set_num_threads(threads)
    cfg = CONFIGS[config]
    pm = PlansManager(_plans(cfg["features"], cfg["patch"]))
    cm = pm.get_configuration("3d_fullres")
    torch.manual_seed(0)
    net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                 cm.network_arch_init_kwargs_req_import, 1, 3, deep_supervision=False)
    with torch.no_grad():
        net.decoder.seg_layers[-1].weight.mul_(4.0)  # less uniform predictions than the default initialisation
    shape = cfg["image"]
    data = torch.randn(1, *shape, generator=torch.Generator().manual_seed(1))
    data[0, : shape[0] // 2] += 1.5  # some structure: half the image brighter
    props = {"spacing": [1.0, 1.0, 1.0], "shape_before_cropping": tuple(shape),
             "bbox_used_for_cropping": [[0, s] for s in shape],
             "shape_after_cropping_and_before_resampling": tuple(shape),
             "sitk_stuff": {"spacing": (1.0, 1.0, 1.0), "origin": (0.0, 0.0, 0.0),
                            "direction": (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)}}
    dataset_json = {"channel_names": {"0": "MRI"}, "labels": {"background": 0, "a": 1, "b": 2}, "numTraining": 1,
                    "file_ending": ".nii.gz"}
    return {"pm": pm, "cm": cm, "net": net, "params": [{k: v.clone() for k, v in net.state_dict().items()}],
            "data": data, "props": props, "dataset_json": dataset_json, "threads": threads}


def _predictor(contender: str, env: dict):
    import torch
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    from monai_unc.nnunet import UncertaintyPredictor

    cpu = torch.device("cpu")
    if contender == "stock":
        pred = nnUNetPredictor(device=cpu, allow_tqdm=False)
    else:
        seg_from = "logits" if contender == "ours" else "probabilities"
        pred = UncertaintyPredictor(("mirroring",), segmentation_from=seg_from, device=cpu, allow_tqdm=False)
    pred.manual_initialization(env["net"], env["pm"], env["cm"], env["params"], env["dataset_json"], "nnUNetTrainer",
                               (0, 1, 2))
    return pred


def _predict(pred, contender: str, env: dict):
    if contender == "stock":
        return pred.predict_logits_from_preprocessed_data(env["data"]).cpu().numpy()
    return pred.predict_uncertainty_from_preprocessed_data(env["data"]).to_numpy()


def _export(result, pred, contender: str, env: dict, ofile: str) -> float | None:
    from nnunetv2.inference.export_prediction import export_prediction_from_logits

    from monai_unc.nnunet import export_uncertainty

    os.makedirs(os.path.dirname(ofile), exist_ok=True)
    args = (result, env["props"], env["cm"], env["pm"], env["dataset_json"], ofile, False)
    if contender == "stock":
        export_prediction_from_logits(*args, num_threads_torch=env["threads"])
        return None
    rec = export_uncertainty(*args, segmentation_from=pred.segmentation_from, num_threads_torch=env["threads"])
    return rec["scores"]["mutual_information"]["mean"]


def time_worker(config: str, out_dir: str, threads: int, repeats: int) -> dict:
    """All contenders in this process, interleaved; best wall and CPU time of ``repeats`` runs each."""
    import SimpleITK as sitk
    import torch

    env = setup_case(config, threads)
    preds = {c: _predictor(c, env) for c in CONTENDERS}
    out: dict[str, dict] = {c: {"predict_wall": [], "predict_cpu": [], "export_wall": [], "export_cpu": []}
                            for c in CONTENDERS}
    windows = len(preds["stock"]._internal_get_sliding_window_slicers(env["data"].shape[1:]))
    # the floor: the bare forward passes every contender makes (windows x 8 mirrors) on one patch, nothing else
    patch = torch.randn(1, 1, *env["cm"].patch_size, generator=torch.Generator().manual_seed(2))
    net = env["net"].eval()

    def bare() -> None:
        with torch.no_grad():
            for _ in range(windows * 8):
                net(patch)

    with torch.no_grad():
        net(patch)  # warm-up
    floor = {"wall": float("inf"), "cpu": float("inf")}
    for _ in range(repeats):
        f_wall, f_cpu = time_best(bare, 1)
        floor = {"wall": min(floor["wall"], f_wall), "cpu": min(floor["cpu"], f_cpu)}
        for c in CONTENDERS:
            ofile = os.path.join(out_dir, f"{c}_{config}", "case")
            w0, c0 = time.perf_counter(), time.process_time()
            result = _predict(preds[c], c, env)
            w1, c1 = time.perf_counter(), time.process_time()
            mi = _export(result, preds[c], c, env, ofile)
            w2, c2 = time.perf_counter(), time.process_time()
            out[c]["predict_wall"].append(w1 - w0)
            out[c]["predict_cpu"].append(c1 - c0)
            out[c]["export_wall"].append(w2 - w1)
            out[c]["export_cpu"].append(c2 - c1)
            out[c]["mi_mean"] = mi
            out[c]["seg"] = sitk.GetArrayFromImage(sitk.ReadImage(ofile + ".nii.gz")).tolist()
    return {"runs": out, "forward_passes": windows * 8, "floor": floor}


def memory_worker(contender: str, config: str, out_dir: str, threads: int) -> dict:
    """One contender, one run: peak RSS above the RSS just before the measured work."""
    env = setup_case(config, threads)
    pred = _predictor(contender, env)
    rss0 = _rss_kib()
    result = _predict(pred, contender, env)
    peak_predict = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    _export(result, pred, contender, env, os.path.join(out_dir, f"mem_{contender}_{config}", "case"))
    peak_total = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    return {"peak_predict_mib": peak_predict / 1024, "peak_total_mib": peak_total / 1024}


#: end-to-end datasets: the network (a CONFIGS entry) and the case shapes (cycled)
E2E_CONFIGS = {
    "small": ("width32", ((40, 44, 36), (48, 40, 44), (36, 48, 40), (44, 36, 48), (40, 40, 40), (48, 44, 40),
                          (36, 40, 44), (44, 48, 36))),
    "tiny": ("tiny16", ((24, 20, 22), (20, 24, 18), (22, 22, 22), (18, 20, 24))),
}


def _e2e_shapes(name: str, n_cases: int) -> list[tuple[int, ...]]:
    shapes = E2E_CONFIGS[name][1]
    return [shapes[i % len(shapes)] for i in range(n_cases)]


def _write_e2e_dataset(root: str, name: str, n_cases: int) -> tuple[dict, str]:
    """A trained-model folder (the network of ``E2E_CONFIGS[name]``, one fold) under ``root/results`` and
    ``n_cases`` images under ``root/imagesTs``; returns the environment for the commands and the input folder."""
    import nibabel as nib
    import numpy as np
    import torch

    net_name = E2E_CONFIGS[name][0]
    env = setup_case(net_name, 1)
    results = os.path.join(root, "results")
    model = os.path.join(results, "Dataset998_Bench", "nnUNetTrainer__nnUNetPlans__3d_fullres")
    os.makedirs(os.path.join(model, "fold_0"))
    cfg = CONFIGS[net_name]
    with open(os.path.join(model, "plans.json"), "w") as f:
        json.dump(_plans(cfg["features"], cfg["patch"]), f)
    with open(os.path.join(model, "dataset.json"), "w") as f:
        json.dump(env["dataset_json"], f)
    torch.save({"network_weights": env["net"].state_dict(), "trainer_name": "nnUNetTrainer",
                "init_args": {"configuration": "3d_fullres"}, "inference_allowed_mirroring_axes": (0, 1, 2)},
               os.path.join(model, "fold_0", "checkpoint_final.pth"))
    images = os.path.join(root, "imagesTs")
    os.makedirs(images)
    rng = np.random.default_rng(0)
    for i, shape in enumerate(_e2e_shapes(name, n_cases)):
        img = rng.normal(size=shape).astype(np.float32)
        img[: shape[0] // 2] += 1.5
        nib.save(nib.Nifti1Image(img, np.eye(4)), os.path.join(images, f"case{i:03d}_0000.nii.gz"))
    for name in ("raw", "preprocessed"):
        os.makedirs(os.path.join(root, name))
    env_vars = {"nnUNet_results": results, "nnUNet_raw": os.path.join(root, "raw"),
                "nnUNet_preprocessed": os.path.join(root, "preprocessed")}
    return env_vars, images


def e2e_worker(contender: str, argv: list[str]) -> dict:
    """Run one command's entry point in this process (``BENCH_LAUNCH``: the launch time) and split its wall time."""
    launch = float(os.environ["BENCH_LAUNCH"])
    marks: dict[str, float] = {"predict": 0.0}
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    if contender == "stock":
        cls, predict_name = nnUNetPredictor, "predict_logits_from_preprocessed_data"
    else:
        from monai_unc.nnunet.predictor import UncertaintyPredictor

        cls, predict_name = UncertaintyPredictor, "predict_uncertainty_from_preprocessed_data"
    init, predict = cls.initialize_from_trained_model_folder, getattr(cls, predict_name)

    def timed_init(self, *a, **k):
        out = init(self, *a, **k)
        marks["loaded"] = time.time()
        return out

    def timed_predict(self, *a, **k):
        t0 = time.perf_counter()
        out = predict(self, *a, **k)
        marks["predict"] += time.perf_counter() - t0
        return out

    cls.initialize_from_trained_model_folder = timed_init
    setattr(cls, predict_name, timed_predict)
    if contender == "stock":
        from nnunetv2.inference.predict_from_raw_data import predict_entry_point

        sys.argv = ["nnUNetv2_predict", *argv]
        predict_entry_point()
    else:
        from monai_unc.cli import main as cli_main

        if cli_main(["nnunet-predict", *argv, "--sources", "mirroring"]) != 0:
            raise RuntimeError("nnunet-predict failed")
    return {"startup": marks["loaded"] - launch, "predict": marks["predict"]}


def end_to_end(args: argparse.Namespace) -> None:
    import nibabel as nib
    import numpy as np

    with tempfile.TemporaryDirectory() as root:
        env_vars, images = _write_e2e_dataset(root, args.e2e_config, args.e2e_cases)
        env = {**os.environ, **env_vars, "PYTHONUNBUFFERED": "1"}
        runs: dict[str, list[dict]] = {c: [] for c in ("stock", "ours")}
        for r in range(args.repeats):
            for c in runs:
                out = os.path.join(root, f"out_{c}_{r}")
                argv = ["-i", images, "-o", out, "-d", "998", "-c", "3d_fullres", "-f", "0", "-device", "cpu",
                        "--disable_progress_bar", "-npp", str(args.e2e_workers), "-nps", str(args.e2e_workers)]
                env["BENCH_LAUNCH"] = repr(time.time())
                t0 = time.perf_counter()
                rec = _subprocess(["--worker", f"e2e-{c}", "--e2e-argv", json.dumps(argv)], env=env)
                wall = time.perf_counter() - t0
                rec["total"] = wall
                rec["rest"] = wall - rec["startup"] - rec["predict"]
                runs[c].append(rec)
            seg = {c: [np.asarray(nib.load(os.path.join(root, f"out_{c}_{r}", f"case{i:03d}.nii.gz")).dataobj)
                       for i in range(args.e2e_cases)] for c in runs}
            if not all(np.array_equal(a, b) for a, b in zip(seg["stock"], seg["ours"])):
                raise AssertionError("the segmentations of nnunet-predict differ from stock nnUNetv2_predict's")
        best = {c: min(rs, key=lambda x: x["total"]) for c, rs in runs.items()}
        n_maps = len([f for f in os.listdir(os.path.join(root, "out_ours_0", "uncertainty")) if f.endswith(".nii.gz")])
        shapes = ", ".join("x".join(map(str, s)) for s in _e2e_shapes(args.e2e_config, args.e2e_cases))
        print(f"# bench_nnunet --end-to-end --e2e-config {args.e2e_config}: {args.e2e_cases} cases ({shapes}), "
              f"{E2E_CONFIGS[args.e2e_config][0]} network, one fold, mirroring; -device cpu, "
              f"-npp {args.e2e_workers} -nps {args.e2e_workers}; "
              f"best of {args.repeats} (by total wall time); ours wrote {n_maps} maps; "
              "segmentations identical to stock's")
        print("| contender | total s | ratio | start-up s | prediction s | ratio | rest s | all totals s |")
        print("|---|---|---|---|---|---|---|---|")
        st = best["stock"]
        for c in runs:
            b = best[c]
            all_totals = ", ".join(f"{x['total']:.1f}" for x in runs[c])
            print(f"| {c} | {b['total']:.2f} | {b['total'] / st['total']:.3f} | {b['startup']:.2f} | "
                  f"{b['predict']:.2f} | {b['predict'] / st['predict']:.3f} | {b['rest']:.2f} | {all_totals} |")
        totals = {c: sorted(x["total"] for x in rs) for c, rs in runs.items()}
        print(f"median total ratio: {np.median(totals['ours']) / np.median(totals['stock']):.3f}")


def _subprocess(args: list[str], env: dict[str, str] | None = None) -> dict:
    """Run this script with ``args`` in a fresh process; its last stdout line, parsed as JSON."""
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=["width32", "small64"], choices=list(CONFIGS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mem-repeats", type=int, default=3, help="memory runs per contender (the minimum is shown)")
    ap.add_argument("--worker", choices=("time", *CONTENDERS, "e2e-stock", "e2e-ours"))
    ap.add_argument("--out")
    ap.add_argument("--end-to-end", action="store_true",
                    help="time the whole nnUNetv2_predict / monai-unc nnunet-predict commands instead")
    ap.add_argument("--e2e-cases", type=int, default=8, help="cases of the end-to-end run (default 8)")
    ap.add_argument("--e2e-config", choices=list(E2E_CONFIGS), default="small",
                    help="end-to-end dataset: small (width32 network, 36-48 voxels a side; default) or tiny "
                    "(8-32 features, 18-24 voxels a side: start-up and export weigh most)")
    ap.add_argument("--e2e-workers", type=int, default=3,
                    help="-npp and -nps of both end-to-end commands (default 3, stock's default)")
    ap.add_argument("--e2e-argv", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker in ("e2e-stock", "e2e-ours"):
        print(json.dumps(e2e_worker(args.worker[4:], json.loads(args.e2e_argv))))
        return
    if args.end_to_end:
        end_to_end(args)
        return
    if args.worker == "time":
        print(json.dumps(time_worker(args.configs[0], args.out, args.threads, args.repeats)))
        return
    if args.worker:
        print(json.dumps(memory_worker(args.worker, args.configs[0], args.out, args.threads)))
        return
    import numpy as np

    print(f"# bench_nnunet: best of {args.repeats}, torch threads={args.threads}, CPU, one fold, mirroring (8 passes)")
    common = ["--out", None, "--threads", str(args.threads)]
    with tempfile.TemporaryDirectory() as out_dir:
        common[1] = out_dir
        for config in args.configs:
            timing = _subprocess(["--worker", "time", "--configs", config, "--repeats", str(args.repeats), *common])
            mem_runs = {c: [_subprocess(["--worker", c, "--configs", config, *common]) for _ in range(args.mem_repeats)]
                        for c in CONTENDERS}
            mem = {c: {k: min(r[k] for r in rs) for k in rs[0]} for c, rs in mem_runs.items()}
            cfg = CONFIGS[config]
            runs = timing["runs"]
            ref = np.asarray(runs["stock"]["seg"])
            print(f"\n## {config}: features {cfg['features']}, patch {cfg['patch']}^3, image "
                  f"{'x'.join(map(str, cfg['image']))}, {timing['forward_passes']} forward passes per case")
            print("| contender | predict s (wall) | ratio | predict s (CPU) | ratio | export s (wall) | total s (wall) "
                  "| ratio | peak predict MiB | peak total MiB | seg vs stock | MI mean |")
            print("|---|---|---|---|---|---|---|---|---|---|---|---|")
            best = {c: {k: min(v) for k, v in r.items() if isinstance(v, list) and k != "seg"} for c, r in runs.items()}
            for c in best:
                best[c]["total_wall"] = min(p + e for p, e in zip(runs[c]["predict_wall"], runs[c]["export_wall"]))
            st = best["stock"]
            for c in CONTENDERS:
                b = best[c]
                agree = float((np.asarray(runs[c]["seg"]) == ref).mean())
                mi = "-" if runs[c]["mi_mean"] is None else f"{runs[c]['mi_mean']:.4f}"
                print(f"| {c} | {b['predict_wall']:.2f} | {b['predict_wall'] / st['predict_wall']:.3f} | "
                      f"{b['predict_cpu']:.2f} | {b['predict_cpu'] / st['predict_cpu']:.3f} | {b['export_wall']:.2f} | "
                      f"{b['total_wall']:.2f} | {b['total_wall'] / st['total_wall']:.3f} | "
                      f"{mem[c]['peak_predict_mib']:.1f} | {mem[c]['peak_total_mib']:.1f} | "
                      f"{'identical' if agree == 1.0 else f'{agree:.2%} equal'} | {mi} |")
            floor = f"{timing['forward_passes']} bare forward passes"
            for c in CONTENDERS:
                print(floor_line(f"{c} predict, CPU", best[c]["predict_cpu"], timing["floor"]["cpu"], floor))


if __name__ == "__main__":
    main()
