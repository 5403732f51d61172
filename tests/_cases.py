"""Small inputs that several test modules share."""

import contextlib

import numpy as np
import torch

from tests._argv import with_options


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


#: the BraTS region spec of :func:`write_brats_like_cohort` (key order = channel order)
BRATS_REGIONS = {"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]}


def write_brats_like_cohort(root, n_cases=3, affine=None, seed=0):
    """``n_cases`` BraTS-like cases (label maps 0/1/2/4; the last case without label 4) with 4D region masks
    ``<case>_seg`` (``BRATS_REGIONS`` with 8 % of the voxels flipped) and sigmoid probabilities ``<case>_probs``,
    anisotropic voxels (``affine``, default 1 x 1.2 x 2 mm). Returns ``{"labels": folder, "predictions": folder}``."""
    import nibabel as nib

    affine = np.diag([1.0, 1.2, 2.0, 1.0]) if affine is None else affine
    dirs = {k: root / k for k in ("labels", "predictions")}
    for d in dirs.values():
        d.mkdir()
    rng = np.random.default_rng(seed)
    for i in range(n_cases):
        lab = np.zeros((8, 7, 6), np.uint8)
        lab[2:6, 2:6, 1:5] = 2
        lab[3:5, 3:5, 2:4] = 1
        if i != n_cases - 1:
            lab[3, 3, 2 + i % 2] = 4
        masks = np.stack([np.isin(lab, labels) for labels in BRATS_REGIONS.values()])
        pred = masks ^ (rng.random(masks.shape) < 0.08)
        conf = rng.uniform(0.55, 0.99, masks.shape)
        probs = np.where(pred, conf, 1 - conf).astype(np.float32)
        nib.save(nib.Nifti1Image(lab, affine), dirs["labels"] / f"case{i}.nii.gz")
        nib.save(nib.Nifti1Image(np.moveaxis(pred.astype(np.uint8), 0, -1), affine),
                 dirs["predictions"] / f"case{i}_seg.nii.gz")
        nib.save(nib.Nifti1Image(np.moveaxis(probs, 0, -1), affine), dirs["predictions"] / f"case{i}_probs.nii.gz")
    return dirs


@contextlib.contextmanager
def volume_state_type(name):
    """A toy mergeable state (voxel counts) registered under ``name`` for the duration only (the registry of
    :mod:`monai_unc.state` is restored after)."""
    import monai_unc.state as state_mod

    saved = dict(state_mod._REGISTRY)

    @state_mod.register_state_type(name)
    class Volume:
        def __init__(self, voxels):
            self.voxels = np.asarray(voxels, dtype=np.int64)

        def merge(self, other):
            self.voxels = self.voxels + other.voxels
            return self

        def state_dict(self):
            return {"voxels": self.voxels}

        @classmethod
        def from_state_dict(cls, state):
            return cls(state["voxels"])

    try:
        yield Volume
    finally:
        state_mod._REGISTRY.clear()
        state_mod._REGISTRY.update(saved)


def toy_infer_files(root, n_cases=1):
    """A toy cohort (12^3 images) and :data:`TOY_NET` as a network spec with a seeded checkpoint, under ``root``.

    Returns ``{"images", "ckpt", "spec"}`` for :func:`run_toy_infer`.
    """
    import json

    from monai.networks.nets import UNet

    from monai_unc.data.cohorts import write_toy_cohort

    paths = write_toy_cohort(root / "data", n_cases=n_cases, shape=(12, 12, 12))
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), root / "ckpt.pt")
    (root / "net.json").write_text(json.dumps(TOY_NET))
    return {"images": paths["images"], "ckpt": root / "ckpt.pt", "spec": root / "net.json"}


def run_toy_infer(toy, out, *flags):
    """``monai-unc infer`` of :func:`toy_infer_files`' cohort into ``out`` (3 samples, CPU, quiet); its exit status.

    ``--samples 3`` is given only to a ``--method`` that draws samples (tta / ensemble / softmax warn about it).
    """
    from monai_unc import cli
    from monai_unc.keys import SAMPLES_TOKENS, method_tokens

    method = flags[flags.index("--method") + 1] if "--method" in flags else "mcdropout"
    samples = ["--samples", "3"] if SAMPLES_TOKENS & set(method_tokens(method)) else []
    return cli.main(with_options(["infer", "-i", str(toy["images"]), "-o", str(out), "--network", str(toy["spec"]),
                                  "--checkpoint", str(toy["ckpt"]), *samples, "--device", "cpu", "--quiet"], *flags))


def write_infer_case_records(pred, method=None, num_samples=None):
    """Give a folder of stand-in predictions holding an ``infer.json`` the case records ``monai-unc infer`` writes.

    One ``<case>.json`` per ``<case>_seg.nii.gz`` (written last by infer: the case is finished), whose ``fingerprint``
    is the ``settings`` of ``infer.json`` (the case was made by that run), so that ``evaluate`` reads the folder as
    one finished infer run (:func:`monai_unc.io.provenance.check_finished_predictions`). ``method`` and
    ``num_samples`` default to the settings' ``method`` and ``samples`` (the fingerprint of a rule then stays what
    ``infer.json`` alone gave).
    """
    import json

    doc = json.loads((pred / "infer.json").read_text())
    settings = doc["settings"]
    for seg in sorted(pred.glob("*_seg.nii.gz")):
        cid = seg.name[: -len("_seg.nii.gz")]
        files = sorted(p.name for p in pred.glob("*.nii.gz") if p.name.startswith(cid + "_"))
        record = {"case": cid, "files": files, "method": method or settings.get("method"),
                  "num_samples": num_samples or settings.get("samples", 1), "mi_meaning": "epistemic",
                  "multilabel": bool(doc.get("multilabel", False)), "fingerprint": settings}
        (pred / f"{cid}.json").write_text(json.dumps(record))


#: objects whose referents are code and globals, not what an object holds
_NOT_HELD = ("module", "function", "method", "builtin_function_or_method", "cell")


def held_bytes(obj) -> int:
    """The bytes of every tensor and array reachable from ``obj`` (each storage once): what it keeps in memory."""
    import gc

    seen, storages, total = set(), set(), 0
    todo = [obj]
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, type) or type(o).__name__ in _NOT_HELD:
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            key = o.untyped_storage().data_ptr()
            if key not in storages:
                storages.add(key)
                total += o.untyped_storage().nbytes()
            continue
        if isinstance(o, np.ndarray):
            total += o.nbytes
            continue
        todo.extend(gc.get_referents(o))
    return total


def bias_toward_background(net, bias=(-1.0, -4.0)):
    """Shift a toy network's output channels by ``bias`` (through its last convolution's bias), in place.

    An untrained network's logits are noise that carries nothing about a cohort's labels, and no temperature fits
    them (``monai-unc calibrate`` refuses them). Shifted toward the background, which most voxels of the toy cohorts
    are, the network is right on most voxels (softmax: class 0; sigmoid: every region absent), so calibrate fits.
    """
    import torch

    convs = [m for m in net.modules() if isinstance(m, (torch.nn.Conv3d, torch.nn.ConvTranspose3d))
             and m.bias is not None and m.bias.numel() == len(bias)]
    with torch.no_grad():
        convs[-1].bias += torch.tensor(bias, dtype=convs[-1].bias.dtype)
    return net
