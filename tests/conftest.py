import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["python", "native"])
def python_and_native(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on the pure-Python paths and on the native module's (skipped where it was
    not built): `pytestmark = pytest.mark.usefixtures("python_and_native")`."""
    from uniradix import native

    if request.param == "native" and not native.BUILT:
        pytest.skip("uniradix._native was not built")
    monkeypatch.setattr(native, "HAVE_NATIVE", request.param == "native")
    return str(request.param)
