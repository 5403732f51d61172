import os
import sys

import matplotlib
import pytest
import torch

from tests._scratch import process_folder

# the signing keys of certified rules live in the user's configuration folder (monai_unc.io.signing.config_dir):
# the tests (and the subprocesses they start) use a fresh folder of their own, never the real home, removed when this
# process exits (each pytest-xdist worker makes and removes its own)
os.environ["XDG_CONFIG_HOME"] = process_folder("monai-unc-test-config-")
for _name in ("MONAI_UNC_CONFIG_DIR", "MONAI_UNC_SIGNING_KEY", "MONAI_UNC_TRUSTED_KEYS"):
    os.environ.pop(_name, None)

matplotlib.use("Agg")

# pytest-xdist runs one worker per core: one intra-op thread each avoids oversubscription (OpenMP spin-waits
# made 2-thread workers on 2 cores ~10x slower in this project's measurements).
# The commands the tests start as subprocesses (CLI runs, bundle runs, torchrun ranks) inherit one OpenMP / MKL
# thread the same way, unless a test sets its own: with torch's default of one thread per core they spin against the
# other worker (review 65: a bundle-run test took 24.3 s wall, 21.3 s CPU with the default, 16.2 / 14.9 s with one).
# A command that sets its own thread count regardless (nnU-Net's predictor and trainers on `-device cpu` take one per
# core) waits passively (OMP_WAIT_POLICY: its idle OpenMP threads sleep instead of spinning against the other worker;
# an nnU-Net prediction used 13.4 s of CPU spinning for 1 s of work, 1.2 s passive). Only the speed changes.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


#: the device of the tests marked ``cuda``; ``MONAI_UNC_TEST_DEVICE=cpu`` rehearses them on the CPU (``make test`` sets
#: it where ``nvidia-smi`` finds no GPU, so CI runs them and the CUDA tests cannot rot on machines without one)
TEST_DEVICE_ENV = "MONAI_UNC_TEST_DEVICE"


@pytest.fixture
def cuda_device() -> torch.device:
    """The device of a ``@pytest.mark.cuda`` test: ``cuda`` (skipped without one) unless ``MONAI_UNC_TEST_DEVICE``
    names another (``cpu`` rehearses the test on the CPU; ``cuda:1`` picks a card)."""
    dev = torch.device(os.environ.get(TEST_DEVICE_ENV, "cuda"))
    if dev.type == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"needs a CUDA device (or {TEST_DEVICE_ENV}=cpu to rehearse on the CPU)")
    return dev


@pytest.fixture
def deterministic_cudnn():
    """Deterministic cuDNN algorithms, benchmark mode off, restored afterwards (device tests that check bitwise
    repeatability or compare with stock nnU-Net, which turns benchmark mode on): a transposed convolution runs
    backward-data kernels, some of which add with atomics in any order."""
    old = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = old


@pytest.fixture
def full_float32():
    """TF32 off for the test (:func:`tests._device.no_tf32`), so that a device run matches the CPU run to float32
    rounding."""
    from tests._device import no_tf32

    with no_tf32():
        yield


@pytest.fixture
def one_torch_thread():
    """One torch intra-op thread for the test, restored afterwards: the nnU-Net predictor and trainers change the
    thread count, and tests on a shared machine must not oversubscribe it (``pytestmark = usefixtures(...)``)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session", autouse=True)
def nnunet_lists_cases_in_process():
    """nnU-Net lists an input folder's cases (every ``predict_from_files`` on a folder) with a pool of 12 forked
    workers; in the tests it lists them in the test process (:func:`tests._nnunet_pools.list_cases_in_process`: the
    same function on the same arguments, the same lists). Each fork copied the test process's page tables: the
    nnU-Net tests of three files took 24.1 s of CPU with the pools, 9.5 s without. Only where a test module has
    imported nnU-Net already (collection imports them all): the conftest itself imports no nnU-Net."""
    from tests._nnunet_pools import list_cases_in_process

    with pytest.MonkeyPatch.context() as mp:
        if "nnunetv2.utilities.utils" in sys.modules:
            list_cases_in_process(mp)
        yield


@pytest.fixture(scope="session")
def quick_softmax_demo(tmp_path_factory):
    """``monai-unc demo --quick --method softmax --samples 1 --quiet`` on four of its cases (three in distribution,
    one with noise), run once per session (once for all pytest-xdist workers: :mod:`tests._shared`) and shared by the
    tests that read its outputs (they must not modify the folder): ``(output folder, what it printed)``. Its rule is
    signed with the key of ``<output folder>/../config`` (trust ``signing_key.pub`` there)."""
    import contextlib
    import io

    from tests._shared import once_per_session

    pytest.importorskip("nilearn")
    import monai_unc.workflows.demo as demo
    from monai_unc import cli

    def run(folder):
        printed = io.StringIO()
        with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
            # the demo signs its rule with the key of a configuration folder beside its outputs, not with the key of
            # the worker that happens to run it (each pytest-xdist worker has its own configuration folder): a test
            # on another worker trusts it with --trusted-keys <folder>/config/signing_key.pub
            mp.setenv("MONAI_UNC_CONFIG_DIR", str(folder / "config"))
            mp.setattr(demo, "DEMO_SHIFTS", demo.DEMO_SHIFTS[:4])
            code = cli.main(["demo", "--quick", "--output", str(folder / "demo"), "--method", "softmax",
                             "--samples", "1", "--quiet"])
        assert code == 0, printed.getvalue()[-3000:]
        return printed.getvalue()

    folder, printed = once_per_session(tmp_path_factory, "quick_softmax_demo", run)
    return folder / "demo", printed


@pytest.fixture(scope="session")
def toy_bundle_trainings(tmp_path_factory):
    """The toy bundle's train configs for 2 iterations on 2 cases, in one process (one start-up instead of three):
    ``train.json`` as shipped (``"default"``), with ``--loss#_target_ monai_unc.losses.DiceSVLSLoss`` (``"svls"``),
    and ``train_ssn.json`` (``"ssn"``); each key maps to the run's ``--ckpt_dir`` (tests only read them). Once for all
    pytest-xdist workers (:mod:`tests._shared`)."""
    from tests._bundle_runs import bundle_argv, run_bundles
    from tests._paths import ROOT
    from tests._shared import once_per_session

    configs = ROOT / "bundles" / "toy_uncertainty" / "configs"
    runs = {"default": (configs / "train.json", ()),
            "svls": (configs / "train.json", ("--loss#_target_", "monai_unc.losses.DiceSVLSLoss")),
            "ssn": (configs / "train_ssn.json", ())}

    def train(root):
        run_bundles(*[bundle_argv(str(cfg), "--ckpt_dir", str(root / name), "--iterations", "2", "--n_train_cases",
                                  "2", *extra) for name, (cfg, extra) in runs.items()])
        return sorted(runs)

    root, names = once_per_session(tmp_path_factory, "toy_bundle_trainings", train)
    return {name: root / name for name in names}


#: the longest tests (about 1-3 minutes each on a 2-core machine), run first: pytest-xdist hands tests out in collection
#: order, and the full demo (tests/workflows/, collected last) started about 23 minutes into a 26-minute run, leaving
#: the other worker idle for its last 2.5 minutes. ``make test`` runs ``--dist worksteal``: each worker starts on half
#: of the collection and an idle worker takes half of the other's remaining queue from its end, so with these at the
#: front no long test is left for the end. A test that shares a module-scoped fixture with another must come with it
#: (else the fixture is set up once more). Only the order changes; a name missing here (renamed, deselected) is
#: ignored.
RUN_FIRST = (
    "tests/workflows/test_demo.py::test_full_demo_certifies_a_rule_and_accepts_and_refers_new_cases",
    "tests/test_plain_install.py::test_plain_install_runs_the_demo",
    "tests/bundles/test_bundles.py::test_brain_bundle_inference_on_the_mni152_volume",
    # the other users of the brain bundle's module fixture, beside it: apart, the fixture would run twice (70 s)
    "tests/bundles/test_bundles.py::test_brain_bundle_evaluation_writes_metrics_csv",
    "tests/bundles/test_bundles.py::test_brain_bundle_evaluation_reproduces_the_readme_table",
    "tests/nnunet/test_nnunet.py::test_end_to_end_cpu_docs_example_and_stock_agreement",
    "tests/nnunet/test_calibration_trainers.py::test_each_trainer_trains_two_epochs_and_predicts",
    # 35-60 s each; the memory-model test (one fresh-process measurement) was the last test of a CI run, 35 s after
    # the other worker had finished
    "tests/benchmarks/test_bench_nnunet.py::test_end_to_end_mode_runs_and_finds_the_segmentations_identical",
    "tests/benchmarks/test_gpu_check.py::test_quick_cpu_mode_runs_every_part",
    "tests/inferers/test_memory.py::test_estimate_memory_within_15_percent_of_measured_peak",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {nodeid: i for i, nodeid in enumerate(RUN_FIRST)}
    first = sorted((item for item in items if item.nodeid in rank), key=lambda item: rank[item.nodeid])
    if first:
        chosen = {id(item) for item in first}
        items[:] = first + [item for item in items if id(item) not in chosen]
