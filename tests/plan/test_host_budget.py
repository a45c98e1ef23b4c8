"""A host budget covers every host pool of the model: full KV, SWA KV and Mamba states."""

import json

import pytest

from uniradix.cli import main
from uniradix.plan import preset
from uniradix.plan.budget import Split, size_host_pools, size_pools
from uniradix.sim.replay import ReplayOptions, run_replay

GB = 10**9


@pytest.mark.parametrize(
    ("model_name", "split"),
    [("gemma-3-27b", "full=0.5,swa=0.5"), ("nemotron-nano-9b-v2", "full=0.6,mamba=0.4")],
)
def test_the_host_pools_a_replay_builds_fit_the_host_budget(model_name: str, split: str) -> None:
    model = preset(model_name)
    device = size_pools(model, 2 * GB, Split.parse(split, model.pools()), page_size=16)
    sizes = device.with_host(8 * GB)
    options = sizes.replay_options(ReplayOptions.of(max_requests=5, max_running=4))
    summary = run_replay(options).summary
    unit_bytes = model.unit_bytes()
    built = {p: summary["components"][f"host_{p}"]["capacity"] for p in model.pools()}
    assert sizes.host is not None
    assert built == sizes.host.units  # what the budget counted is what the tier built
    host_bytes = sum(built[p] * unit_bytes[p] for p in built)
    assert host_bytes <= 8 * GB
    # Every pool is in the budget, and the budget is spent to within a page and a state.
    slack = 16 * unit_bytes["full"] + max(16 * unit_bytes.get("swa", 0), unit_bytes.get("mamba", 0))
    assert 8 * GB - host_bytes < 2 * slack
    aux = next(p for p in model.pools() if p != "full")
    # The auxiliary host pool keeps the device pools' proportion.
    ratio = built["full"] / device.units["full"]
    assert abs(built[aux] / device.units[aux] - ratio) <= 16 / device.units[aux] + 1e-9


def test_replay_reports_host_pool_bytes_within_the_host_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["replay", "--model", "nemotron-nano-9b-v2", "--gpu-cache", "2GB", "--page-size", "16"]
    argv += ["--split", "full=0.6,mamba=0.4", "--host-cache", "8GB", "--max-requests", "5"]
    assert main([*argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    host = {p: summary["components"][f"host_{p}"] for p in ("full", "mamba")}
    assert all(h["bytes"] == h["capacity"] * h["bytes_per_unit"] for h in host.values())
    used = host["full"]["bytes"] + host["mamba"]["bytes"]
    assert used + summary["budget"]["host_unused_bytes"] == 8 * GB
    assert summary["budget"]["host_bytes"] == 8 * GB and used <= 8 * GB


def test_without_a_device_budget_the_host_budget_follows_the_given_device_pools() -> None:
    model = preset("gemma-3-27b")
    sizes = size_host_pools(model, 4 * GB, {"full": 4096, "swa": 1024}, page_size=16)
    # host_full / 4096 == host_swa / 1024 (whole pages): 4096 B_full + 1024 B_swa per share
    share = 4 * GB / (4096 * 81920 + 1024 * 425984)
    assert sizes.units["full"] == int(share * 4096) // 16 * 16
    assert sizes.units["swa"] == int(1024 * sizes.units["full"] / 4096) // 16 * 16
    assert sum(sizes.bytes.values()) <= 4 * GB


def test_a_host_budget_without_room_for_a_state_beside_a_page_is_refused() -> None:
    model = preset("nemotron-nano-9b-v2")  # a state is 143,548,416 bytes
    with pytest.raises(ValueError, match="hold no page"):
        size_host_pools(model, 100_000_000, {"full": 4096, "mamba": 8}, page_size=16)
