"""The text summary of a cluster replay (`uniradix replay --instances N`)."""

from __future__ import annotations

from typing import Any


def cluster_text(summary: dict[str, Any]) -> str:
    lines = [
        f"router {summary['router']}, {len(summary['instances'])} instances, "
        f"{summary['requests']} requests: hit rate {summary['hit_rate']:.4f}, "
        f"load imbalance {summary['load_imbalance']:.3f}, events published "
        f"{summary['events_published']}, dropped {summary['events_dropped']}",
        "  hit tokens by tier: "
        + ", ".join(f"{tier} {n}" for tier, n in summary["hit_tokens_by_tier"].items()),
        f"  hit tokens {summary['hit_tokens']}; from the events: {summary['at_match_hit_tokens']}"
        f" at admission, {summary['full_only_hit_tokens']} full-only; router expected "
        f"{summary['predicted_hit_tokens']}",
    ]
    if (store := summary["storage"]) is not None:
        lines.append(
            f"  L3: {store['pages_written']} pages written, {store['pages_read']} read, "
            f"off {store['off_s']:.1f} s ({store['breaker_trips']} trips)"
        )
    for inst in summary["instances"]:
        lines.append(
            f"  {inst['name']}: {inst['requests']} requests, hit rate {inst['hit_rate']:.4f}, "
            f"{inst['events_published']} events, {inst['invariant_checks']} invariant checks, "
            f"leaked {sum(inst['leaked'].values())} slots"
        )
    return "\n".join(lines)
