"""The sweep behind `uniradix plan`: replays of a trace for a grid of budgets and splits, in
parallel processes, and the search that finds the best split of a budget in few replays.

The search works on the shares of the auxiliary pools ("swa", "mamba"; "full" takes the
rest). Round 0 replays a coarse lattice (every share a positive multiple of `grid_step`,
plus the even split); each of `refine_rounds` later rounds halves the step and replays the
neighbours of the best split so far (one step up and down per auxiliary pool) and, with
several budgets, the best splits found at the other budgets (the hit rate is not always
unimodal in the split: a split that wins at one budget is worth a replay at the next). A
two-pool model with the defaults (`grid_step=0.25`, 3 rounds) costs at most 3 + 2 * 3 = 9
replays for one budget, reaching shares as small as 1/32, plus at most B - 1 per round and
budget for B budgets; a three-pool model at most 4 + 4 * 3 = 16. Every replay of a round,
over all budgets, runs at once on `workers` processes.

The best split of a budget is the point of highest hit rate among those replayed, so it is at
least as good as every point tried. The knee of the curve of best hit rate against budget is
the budget farthest above the chord joining the smallest and the largest budget, both axes
scaled to [0, 1] (the Kneedle rule); it needs three budgets or more.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

from tqdm import tqdm

from uniradix.plan.budget import Split, size_pools
from uniradix.plan.models import ModelSpec
from uniradix.sim.replay import ReplayOptions, load_specs, run_replay
from uniradix.sim.scheduler_config import SchedulerStalled

GRID_STEP = 0.25
REFINE_ROUNDS = 3
# Shares are compared after rounding, so 0.1 + 0.2 and 0.3 name the same split.
SHARE_DIGITS = 9


@dataclass(frozen=True)
class PlanPoint:
    """One replay: a budget, a split, and the hit rate it got (None when the split leaves a
    pool without a page or a slot, or no request fits; `error` says which)."""

    gpu_bytes: int
    split: dict[str, float]
    hit_rate: float | None
    pools: dict[str, Any]
    wall_s: float
    error: str | None = None


@dataclass
class PlanResult:
    model: ModelSpec
    page_size: int
    points: list[PlanPoint]
    best: list[PlanPoint]
    even: list[PlanPoint]
    knee_bytes: int | None
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "unit_bytes": self.model.unit_bytes(),
            "page_size": self.page_size,
            "best": asdict(self.best[-1]),
            "best_per_budget": [asdict(p) for p in self.best],
            "even_per_budget": [asdict(p) for p in self.even],
            "knee_bytes": self.knee_bytes,
            "replays": len(self.points),
            "wall_s": self.wall_s,
            "grid": [asdict(p) for p in self.points],
        }


def replay_point(
    base: ReplayOptions,
    model: ModelSpec,
    gpu_bytes: int,
    split: Split,
    page_size: int,
    host_bytes: int | None = None,
) -> PlanPoint:
    """Replays `base` with the pools of `gpu_bytes` split by `split` (one grid point), and
    with `host_bytes` the host pools that budget buys beside them."""
    t0 = time.perf_counter()
    try:
        sizes = size_pools(model, gpu_bytes, split, page_size)
        if host_bytes is not None:
            sizes = sizes.with_host(host_bytes)
        hit_rate = run_replay(sizes.replay_options(base)).summary["hit_rate"]
    except (ValueError, MemoryError, SchedulerStalled) as exc:  # too small, or too big
        return PlanPoint(gpu_bytes, split.as_dict(), None, {}, time.perf_counter() - t0, str(exc))
    return PlanPoint(
        gpu_bytes, split.as_dict(), hit_rate, sizes.describe(), time.perf_counter() - t0
    )


def _split(pools: tuple[str, ...], shares: tuple[float, ...]) -> Split | None:
    """The split giving `shares` to the auxiliary pools and the rest to "full"; None when a
    share is not positive or nothing is left for "full"."""
    rest = round(1.0 - sum(shares), SHARE_DIGITS)
    if min(shares) <= 0 or rest <= 0:
        return None
    return Split(tuple(zip(pools, (rest, *shares), strict=True)))


def coarse_splits(pools: tuple[str, ...], step: float) -> list[Split]:
    """Round 0: every positive multiple of `step` per auxiliary pool, and the even split."""
    if len(pools) == 1:
        return [Split.even(pools)]
    levels = [round(i * step, SHARE_DIGITS) for i in range(1, round(1 / step))]
    combos: list[tuple[float, ...]] = [()]
    for _ in pools[1:]:
        combos = [(*c, level) for c in combos for level in levels]
    splits = [s for s in (_split(pools, c) for c in combos) if s is not None]
    even = Split.even(pools)
    return splits if any(_key(s) == _key(even) for s in splits) else [*splits, even]


def neighbours(split: Split, step: float) -> list[Split]:
    """The splits one `step` up or down in one auxiliary pool's share."""
    pools = tuple(p for p, _ in split.fractions)
    shares = [f for _, f in split.fractions[1:]]
    out = []
    for i in range(len(shares)):
        for delta in (-step, step):
            moved = tuple(
                round(s + (delta if j == i else 0), SHARE_DIGITS) for j, s in enumerate(shares)
            )
            candidate = _split(pools, moved)
            if candidate is not None:
                out.append(candidate)
    return out


def _key(split: Split) -> tuple[float, ...]:
    return tuple(round(f, SHARE_DIGITS) for _, f in split.fractions)


def _best(points: Iterable[PlanPoint]) -> PlanPoint | None:
    feasible = [p for p in points if p.hit_rate is not None]
    # Ties go to the split giving "full" the most: it serves every request's whole prefix.
    return max(feasible, key=lambda p: (p.hit_rate, p.split["full"]), default=None)


def knee(budgets: list[int], hit_rates: list[float]) -> int | None:
    """The budget farthest above the chord of the curve (both axes scaled to [0, 1])."""
    if len(budgets) < 3 or max(hit_rates) == min(hit_rates):
        return None
    x0, x1, y0, y1 = budgets[0], budgets[-1], min(hit_rates), max(hit_rates)
    gaps = [
        ((y - y0) / (y1 - y0) - (x - x0) / (x1 - x0), x)
        for x, y in zip(budgets, hit_rates, strict=True)
    ]
    gap, budget = max(gaps[1:-1])
    return budget if gap > 0 else None


def _refinements(
    done: dict[tuple[int, tuple[float, ...]], PlanPoint],
    budgets: list[int],
    pools: tuple[str, ...],
    step: float,
) -> list[tuple[int, Split]]:
    """A refinement round: per budget, the neighbours of its best split so far at `step`, and
    the best splits of the other budgets (what one budget learnt is tried at the others)."""
    leaders = [_best(p for (bb, _), p in done.items() if bb == b) for b in budgets]
    learnt = [Split.of(pools, p.split) for p in leaders if p is not None]
    todo = []
    for b, leader in zip(budgets, leaders, strict=True):
        if leader is not None:
            todo += [(b, s) for s in neighbours(Split.of(pools, leader.split), step)]
        todo += [(b, s) for s in learnt]
    return todo


def run_plan(
    base: ReplayOptions,
    model: ModelSpec,
    budgets: list[int],
    page_size: int,
    splits: list[Split] | None = None,
    grid_step: float = GRID_STEP,
    refine_rounds: int = REFINE_ROUNDS,
    workers: int | None = None,
    progress: bool = False,
    host_bytes: int | None = None,
) -> PlanResult:
    """Replays `base` for every budget: with `splits`, exactly those; otherwise the search of
    the module docstring. `workers` processes (default: one per core). `host_bytes`: an L2
    host tier of that budget at every point (all its host pools together)."""
    if not budgets:
        raise ValueError("need at least one budget")
    if not 0 < grid_step <= 0.5 or refine_rounds < 0:
        raise ValueError(
            f"need 0 < grid_step <= 0.5, refine_rounds >= 0, got {grid_step}, {refine_rounds}"
        )
    budgets = sorted(set(budgets))
    load_specs(base)  # a bad trace fails here, once, not in every worker
    pools = model.pools()
    workers = workers or os.cpu_count() or 1
    first = splits if splits is not None else coarse_splits(pools, grid_step)
    num_rounds = 1 if splits is not None else refine_rounds + 1
    per_round = 2 * (len(pools) - 1) + len(budgets) - 1
    expected = len(budgets) * (len(first) + (num_rounds - 1) * per_round)  # at most
    done: dict[tuple[int, tuple[float, ...]], PlanPoint] = {}
    t0 = time.perf_counter()
    bar = tqdm(total=expected, unit="replay", disable=not progress, leave=False)
    with ProcessPoolExecutor(max_workers=workers) as executor:
        for level in range(num_rounds):
            todo = (
                [(b, s) for b in budgets for s in first]
                if level == 0
                else _refinements(done, budgets, pools, grid_step / 2**level)
            )
            point = partial(replay_point, base, model, page_size=page_size, host_bytes=host_bytes)
            futures = {
                (b, _key(s)): executor.submit(point, b, s)
                for b, s in todo
                if (b, _key(s)) not in done
            }
            for key, future in futures.items():
                done[key] = future.result()
                bar.update(1)
    bar.close()
    points = list(done.values())
    best, even = [], []
    for b in budgets:
        at_b = [p for p in points if p.gpu_bytes == b]
        top = _best(at_b)
        even_key = _key(Split.even(pools))
        even += [p for p in at_b if _key(Split.of(pools, p.split)) == even_key]
        best.append(top if top is not None else at_b[0])
    curve = [(p.gpu_bytes, p.hit_rate) for p in best if p.hit_rate is not None]
    return PlanResult(
        model,
        page_size,
        points,
        best,
        even,
        knee([b for b, _ in curve], [h for _, h in curve]),
        time.perf_counter() - t0,
    )
