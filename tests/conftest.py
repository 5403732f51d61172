import os

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

# pytest-xdist runs one worker per core: one intra-op thread each avoids oversubscription (OpenMP spin-waits
# made 2-thread workers on 2 cores ~10x slower in this project's measurements).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture
def one_torch_thread():
    """One torch intra-op thread for the test, restored afterwards: the nnU-Net predictor and trainers change the
    thread count, and tests on a shared machine must not oversubscribe it (``pytestmark = usefixtures(...)``)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
