import os

import matplotlib
import torch

matplotlib.use("Agg")

# pytest-xdist runs one worker per core: one intra-op thread each avoids oversubscription (OpenMP spin-waits
# made 2-thread workers on 2 cores ~10x slower in this project's measurements).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
