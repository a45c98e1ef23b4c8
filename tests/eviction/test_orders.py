"""The eviction orders by name: one per auxiliary pool besides LRU, retired names rejected
with their replacement, the default's former names still selecting it."""

import pytest

from uniradix import CacheConfig, build_cache
from uniradix.cli import main
from uniradix.components.mamba import MambaComponent
from uniradix.components.swa import SWAComponent
from uniradix.eviction.mamba_probation import ProbationEviction
from uniradix.eviction.orders import (
    DEFAULT_ORDER,
    ORDER_NAMES,
    RETIRED,
    check_aux_eviction_policy,
    check_swa_eviction_policy,
    register_swa_order,
)
from uniradix.eviction.swa_output import SWAOutputCreditEviction
from uniradix.types import DEFAULT_AUX_EVICTION_POLICY, DEFAULT_SWA_EVICTION_POLICY, ComponentType


def hybrid(aux: str, swa: str) -> tuple[MambaComponent, SWAComponent]:
    cache = build_cache(
        CacheConfig.of(
            full_tokens=128,
            swa_tokens=64,
            sliding_window=4,
            mamba_slots=8,
            max_context_len=64,
            aux_eviction_policy=aux,
            swa_eviction_policy=swa,
        )
    )
    mamba, swa_component = cache.component(ComponentType.MAMBA), cache.component(ComponentType.SWA)
    assert isinstance(mamba, MambaComponent) and isinstance(swa_component, SWAComponent)
    return mamba, swa_component


def test_each_pool_has_lru_and_the_default_only() -> None:
    assert ORDER_NAMES == ("lru", "reuse_credit")
    assert DEFAULT_AUX_EVICTION_POLICY == DEFAULT_SWA_EVICTION_POLICY == DEFAULT_ORDER
    mamba, swa = hybrid("reuse_credit", "reuse_credit")
    assert isinstance(mamba._credits, ProbationEviction)
    assert isinstance(swa._reuse, SWAOutputCreditEviction)
    mamba, swa = hybrid("lru", "lru")
    assert mamba._credits is None and swa._reuse is None


def test_the_defaults_former_names_select_it() -> None:
    assert check_aux_eviction_policy("reuse_aware") == "reuse_credit"
    assert check_swa_eviction_policy("greedy_dual_output") == "reuse_credit"
    mamba, swa = hybrid("reuse_aware", "greedy_dual_output")
    assert isinstance(mamba._credits, ProbationEviction)
    assert isinstance(swa._reuse, SWAOutputCreditEviction)


@pytest.mark.parametrize(("field", "name"), [(f, n) for f, names in RETIRED.items() for n in names])
def test_a_retired_name_is_rejected_naming_its_replacement(field: str, name: str) -> None:
    with pytest.raises(ValueError, match=f"{field} '{name}' is retired.*use 'reuse_credit'"):
        build_cache(
            CacheConfig.of(
                full_tokens=128,
                swa_tokens=64,
                sliding_window=4,
                mamba_slots=8,
                max_context_len=64,
                **{field: name},
            )
        )


def test_the_cli_rejects_a_retired_name_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["replay", "--swa-eviction-policy", "greedy_dual"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "swa_eviction_policy 'greedy_dual' is retired" in err and "'reuse_credit'" in err


def test_a_registered_order_needs_a_study_name() -> None:
    with pytest.raises(ValueError, match="'greedy_dual' must be named 'study:"):
        register_swa_order("greedy_dual", SWAOutputCreditEviction)


def test_a_bad_name_is_rejected_where_its_pool_is_absent() -> None:
    """A full+SWA cache has no Mamba pool, a full-only cache neither pool: the names are
    still checked, as a typo would otherwise go unnoticed until the pool is added."""
    with pytest.raises(ValueError, match="aux_eviction_policy 'nope'"):
        build_cache(
            CacheConfig.of(
                full_tokens=64, swa_tokens=32, sliding_window=4, aux_eviction_policy="nope"
            )
        )
    with pytest.raises(ValueError, match="swa_eviction_policy 'branch_aware'"):
        build_cache(CacheConfig.of(full_tokens=64, swa_eviction_policy="branch_aware"))
