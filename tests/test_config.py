"""The nested configuration: groups, flat names routed to them, one default per knob, and
the command line's flags declared against the same knobs."""

import dataclasses

import pytest

from uniradix import build_cache
from uniradix.cli import build_parser, replay_flags
from uniradix.cli_generate import generate_flags
from uniradix.cli_groups import Flag, options_from_args
from uniradix.config import (
    CacheConfig,
    Eviction,
    Host,
    Pools,
    Requests,
    Sessions,
    Storage,
    is_group,
)
from uniradix.engine.engine import EngineConfig
from uniradix.engine.run import GenerateOptions
from uniradix.plan.command import plan_flags
from uniradix.sim.replay import ReplayOptions
from uniradix.sim.scheduler_config import SchedulerConfig
from uniradix.types import CacheSettings

# Knobs no flag sets, and why: the replay derives them (pool tensors, Mamba extra buffer,
# request rows from the trace), or they are the library's only (shared open backends).
REPLAY_FLAGLESS = {
    "progress",  # --no-progress
    "model",  # --full-layers, --swa-layers, --mamba-layers, --hidden-size
    "device",
    "mamba_extra_buffer",
    "mamba_cache_chunk_size",
    "mamba_max_states_per_path",
    "prefetch_lookahead",
    "eviction_policy",
    "load_back_threshold",
    "host_layout",
    "host_engine",
    "storage_backend",
    "prefetch_threshold",
}
GENERATE_FLAGLESS = {
    "mamba_extra_buffer",
    "mamba_cache_chunk_size",
    "mamba_max_states_per_path",
    "decode_reserve_ratio",
    "checkpoint_placement",
    "checkpoint_grid",
    "prefetch_lookahead",
    "hicache_ratio",
    "load_back_threshold",
}


def test_cache_config_has_few_top_level_fields_each_a_group_or_a_switch() -> None:
    fields = dataclasses.fields(CacheConfig)
    assert len(fields) <= 10
    config = CacheConfig()
    groups = [f.name for f in fields if is_group(getattr(config, f.name))]
    assert groups == ["pools", "requests", "tensors", "eviction", "host", "storage", "sessions"]


def test_flat_names_route_to_their_groups() -> None:
    config = CacheConfig.of(full_tokens=4096, host_tokens=8192, swa_eviction_policy="lru")
    assert config.pools == Pools(full_tokens=4096)
    assert config.host == Host(host_tokens=8192)
    assert config.eviction == Eviction(swa_eviction_policy="lru")
    assert config.storage == Storage()


def test_updated_keeps_the_other_knobs_and_the_original() -> None:
    config = CacheConfig.of(full_tokens=4096, page_size=16)
    bigger = config.updated(full_tokens=8192, enable_session_cache=True)
    assert (bigger.pools.full_tokens, bigger.pools.page_size) == (8192, 16)
    assert bigger.sessions.enable_session_cache
    assert config.pools.full_tokens == 4096 and not config.sessions.enable_session_cache


def test_a_whole_group_and_a_knob_of_it_combine() -> None:
    config = CacheConfig.of(pools=Pools(full_tokens=64, page_size=4), page_size=8)
    assert (config.pools.full_tokens, config.pools.page_size) == (64, 8)


@pytest.mark.parametrize("make", [CacheConfig.of, ReplayOptions.of, EngineConfig.of])
def test_an_unknown_name_is_a_value_error_naming_it(make: object) -> None:
    with pytest.raises(ValueError, match="'full_tokenz'"):
        make(full_tokenz=1)  # type: ignore[operator]


def test_knob_names_are_unique_across_groups() -> None:
    for options in (CacheConfig(), ReplayOptions(), EngineConfig(), GenerateOptions()):
        names = [
            f.name
            for g in dataclasses.fields(options)
            if is_group(group := getattr(options, g.name))
            for f in dataclasses.fields(group)
        ]
        assert len(names) == len(set(names)), type(options).__name__


def test_front_ends_override_defaults_only_where_they_differ() -> None:
    replay = ReplayOptions()
    assert replay.pools == Pools(full_tokens=8192, sliding_window=1024)
    assert replay.scheduler == SchedulerConfig(max_running=32, chunk_size=2048)
    assert replay.storage == Storage(prefetch_policy="wait_complete")
    assert (replay.eviction, replay.host) == (Eviction(), Host())
    engine = EngineConfig()
    assert engine.pools == Pools(full_tokens=4096) and engine.eviction == Eviction()


def test_the_flat_view_lists_every_knob_once() -> None:
    flat = CacheConfig.of(host_tokens=32).flat()
    assert flat["host_tokens"] == 32 and flat["full_tokens"] == Pools().full_tokens
    assert len(flat) == sum(
        len(dataclasses.fields(getattr(CacheConfig(), f.name)))
        if f.name != "disable_radix_cache"
        else 1
        for f in dataclasses.fields(CacheConfig)
    )


def test_a_config_from_flat_names_builds_the_cache_it_names() -> None:
    cache = build_cache(CacheConfig.of(full_tokens=64, sliding_window=8, swa_tokens=32))
    assert cache.pools.kv_allocator.capacity == 64
    assert cache.settings.sliding_window == 8


@pytest.mark.parametrize(
    "defaults, flags, flagless",
    [
        (ReplayOptions(), replay_flags(), REPLAY_FLAGLESS),
        (GenerateOptions(), generate_flags(), GENERATE_FLAGLESS),
    ],
)
def test_every_knob_has_a_flag_or_is_flagless_on_purpose(
    defaults: ReplayOptions | GenerateOptions, flags: list[object], flagless: set[str]
) -> None:
    flagged = {f.knob for f in flags}  # type: ignore[attr-defined]
    assert flagged.isdisjoint(flagless)
    assert flagged | flagless == set(defaults.flat())


@pytest.mark.parametrize(
    "argv, defaults, flags",
    [
        (["replay"], ReplayOptions(), replay_flags()),
        (["generate"], GenerateOptions(), generate_flags()),
        (["plan", "--model", "llama-3-8b", "--gpu-cache", "1GB"], ReplayOptions(), plan_flags()),
    ],
)
def test_flag_defaults_are_the_options_defaults(
    argv: list[str], defaults: ReplayOptions | GenerateOptions, flags: list[Flag]
) -> None:
    args = build_parser().parse_args(argv)
    assert options_from_args(defaults, args, flags) == defaults
    flat = defaults.flat()
    for flag in flags:
        assert getattr(args, flag.knob) == flat[flag.knob], flag.name


def test_flags_round_trip_into_the_options() -> None:
    args = build_parser().parse_args(
        ["replay", "--full-tokens", "4096", "--host-tokens", "8192", "--max-running", "4"]
        + ["--no-checkpoint-placement", "--storage", "file", "--sessions"]
    )
    options = options_from_args(ReplayOptions(), args, replay_flags())
    assert options == ReplayOptions.of(
        full_tokens=4096,
        host_tokens=8192,
        max_running=4,
        checkpoint_placement=False,
        storage_url="file",
        sessions=True,
    )


@pytest.mark.parametrize("command", ["replay", "generate"])
def test_help_shows_the_flags_grouped(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    blocks = capsys.readouterr().out.split("\n\n")
    sections = {b.split("\n", 1)[0]: b for b in blocks}
    expected = {
        "pools:": "--full-tokens",
        "scheduler:": "--max-running",
        "host tier:": "--host-tokens",
    }
    if command == "replay":
        expected |= {
            "eviction:": "--swa-eviction-policy",
            "L3 storage:": "--storage",
            "cluster and KV events:": "--kv-events-wire",
        }
    for title, flag in expected.items():
        assert flag in sections[title], title


def test_every_cache_setting_but_the_internal_ones_is_set_from_a_knob():
    # `build_cache` fills CacheSettings from the knobs of the same names: a setting renamed
    # on one side only would silently keep its default.
    settings = {f.name for f in dataclasses.fields(CacheSettings)}
    assert settings - set(CacheConfig().flat()) == {"extra", "session_closed_memory"}


def test_a_front_end_config_takes_its_embedded_groups_and_the_derived_ones_on_top():
    front = ReplayOptions.of(host_tokens=4096, eviction_policy="lfu")
    config = CacheConfig.embedded_in(front, requests=Requests(max_running_requests=3))
    assert config.host is front.host and config.eviction is front.eviction
    assert config.pools is front.pools and config.requests.max_running_requests == 3
    assert config.sessions == Sessions()  # the replay's `sessions` is a switch, not the group
