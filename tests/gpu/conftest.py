"""tests/gpu: pmdb's CUDA path on a real GPU. Every test here is skipped, with the reason, where torch sees no CUDA
device (this CPU machine, CI); `benchmarks/gpu_check.sh` runs them on a lent GPU machine."""
import pytest
import torch

NO_CUDA = "needs a CUDA device: torch.cuda.is_available() is False here (run benchmarks/gpu_check.sh on a GPU machine)"


@pytest.fixture(scope="session", autouse=True)
def cuda_visible() -> torch.device:
    """cuda:0; skips every test of tests/gpu (before any module fixture runs) where no CUDA device is visible."""
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)
    return torch.device("cuda", 0)
