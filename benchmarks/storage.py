"""L3 storage throughput against the plain I/O it is built on, and page-key hashing cost.

- file: `batch_set` / `batch_get` of 2 MB pages against writing / reading the same bytes with
  plain `open().write()` / `open().read()` (one file per page, same directory kind; the
  plain read keeps the batch's pages in memory, as `batch_get` returns them);
- Redis: `batch_set` / `batch_get` against a plain redis-py pipeline of `SET` / `GET` of the
  same sizes on the same server, and `batch_exists` probes per second;
- Redis Cluster against one Redis: wall time and GB/s of `batch_set` / `batch_get` /
  `batch_exists` on the same batches (large pages, and the replay's small ones) on a local
  3-master cluster and on one server, with redis-py's own cluster pipeline for reference;
- hashing: ns per token of the chained page digests and of the full storage keys (best of
  9 runs: CPU-bound, so the least disturbed run is the cost).

Ours and plain alternate, round by round, and each figure is the median round, so a busy
machine slows both alike. A Redis server and a 3-master cluster are started on free
loopback ports (no persistence) unless `--redis-url` / `--cluster-url` are given. Run from
the repository root:
`python -m benchmarks.storage [--quick] [--out benchmarks/results/storage.md]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import redis
import xxhash

from benchmarks import l3_scaleout as scaleout
from benchmarks.redis_servers import RedisProcess, start_cluster
from benchmarks.storage_cluster import KS, bench_cluster, make_pages, median_s, render_cluster
from uniradix.hashing.page import page_digests
from uniradix.key import RadixKey
from uniradix.storage import KeySpace, open_backend
from uniradix.storage.file_backend import FileBackend


def _best_s(fn: Callable[[], object], rounds: int) -> float:
    # CPU-bound micro-benchmark: the least disturbed run (timeit's convention).
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_hashing(num_tokens: int) -> dict[str, float]:
    tokens = np.random.default_rng(1).integers(0, 150_000, num_tokens)
    key = RadixKey(tokens)
    out = {}
    for page_size in (16, 64):
        ks = KeySpace("bench/model@rev", "bfloat16", "layer_first", page_size, "full")
        digest_s = _best_s(lambda ps=page_size: page_digests(key.units, ps), 9)
        keys_s = _best_s(lambda k=ks: k.keys_for(key), 9)
        out[f"digest_ns_per_token_p{page_size}"] = digest_s / num_tokens * 1e9
        out[f"key_ns_per_token_p{page_size}"] = keys_s / num_tokens * 1e9
    return out


def bench_file(directory: Path, num_pages: int, page_bytes: int, rounds: int) -> dict[str, float]:
    data = make_pages(num_pages, page_bytes)
    keys = KS.keys_for(RadixKey(list(range(num_pages * KS.page_size))))
    plain_dir = directory / "plain"
    plain_dir.mkdir(parents=True)
    store = FileBackend(directory / "l3")
    t: dict[str, list[float]] = {"set": [], "plain_write": [], "get": [], "plain_read": []}
    for _ in range(rounds):
        store.clear()
        for p in plain_dir.iterdir():
            p.unlink()
        t["set"].append(median_s(lambda: store.batch_set(keys, data), 1))

        def plain_write() -> None:
            for i, page in enumerate(data):
                with open(plain_dir / f"{i}.bin", "wb") as f:
                    f.write(page)

        t["plain_write"].append(median_s(plain_write, 1))
        t["get"].append(median_s(lambda: store.batch_get(keys, page_bytes), 1))

        def plain_read() -> list[bytes]:
            # Keeps every page, as batch_get does: a caller holds the batch it fetched.
            pages = []
            for i in range(num_pages):
                with open(plain_dir / f"{i}.bin", "rb", buffering=0) as f:
                    pages.append(f.readall())
            return pages

        t["plain_read"].append(median_s(plain_read, 1))
    total = num_pages * page_bytes / 1e9
    out = {name: total / statistics.median(v) for name, v in t.items()}
    assert store.stats().pages_corrupt == 0
    probe_keys = KS.keys_for(RadixKey(list(range(2048 * KS.page_size))))
    store.batch_set(probe_keys, [b"x"] * len(probe_keys))
    probe_s = median_s(lambda: store.batch_exists(probe_keys), rounds)
    out["exists_probes_per_s"] = len(probe_keys) / probe_s
    store.close()
    return out


def bench_redis(url: str, num_pages: int, page_bytes: int, rounds: int) -> dict[str, float]:
    data = make_pages(num_pages, page_bytes)
    keys = KS.keys_for(RadixKey(list(range(num_pages * KS.page_size))))
    store = open_backend(url)
    plain = redis.Redis.from_url(url.split("?")[0])
    plain_names = [f"plain.{i}" for i in range(num_pages)]
    t: dict[str, list[float]] = {"set": [], "plain_set": [], "get": [], "plain_get": []}

    def plain_set() -> None:
        pipe = plain.pipeline(transaction=False)
        for name, page in zip(plain_names, data, strict=True):
            pipe.set(name, page)
        pipe.execute()

    def plain_get() -> None:
        pipe = plain.pipeline(transaction=False)
        for name in plain_names:
            pipe.get(name)
        pipe.execute()

    for _ in range(rounds):
        t["set"].append(median_s(lambda: store.batch_set(keys, data), 1))
        t["plain_set"].append(median_s(plain_set, 1))
        t["get"].append(median_s(lambda: store.batch_get(keys, page_bytes), 1))
        t["plain_get"].append(median_s(plain_get, 1))
    total = num_pages * page_bytes / 1e9
    out = {name: total / statistics.median(v) for name, v in t.items()}
    probe_keys = KS.keys_for(RadixKey(list(range(2048 * KS.page_size))))
    store.batch_set(probe_keys, [b"x"] * len(probe_keys))
    probe_s = median_s(lambda: store.batch_exists(probe_keys), rounds)
    out["exists_probes_per_s"] = len(probe_keys) / probe_s
    checksum_s = median_s(lambda: xxhash.xxh3_64_intdigest(data[0]), 20)
    out["checksum_share_of_get"] = checksum_s / (page_bytes / 1e9 / out["get"])
    assert store.stats().pages_corrupt == 0
    store.clear()
    plain.delete(*plain_names)
    store.close()
    return out


def _start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.025)
    return proc, f"redis://127.0.0.1:{port}/0?timeout_s=10"


def render(results: dict[str, dict[str, float]], setup: str) -> str:
    f, r, h = results["file"], results["redis"], results["hashing"]
    return "\n".join(
        [
            "# L3 storage benchmark",
            "",
            setup,
            "",
            "| store | op | uniradix GB/s | plain GB/s | ratio |",
            "|---|---|---|---|---|",
            f"| file | set | {f['set']:.2f} | {f['plain_write']:.2f} | "
            f"{f['set'] / f['plain_write']:.2f}× |",
            f"| file | get | {f['get']:.2f} | {f['plain_read']:.2f} | "
            f"{f['get'] / f['plain_read']:.2f}× |",
            f"| redis | set | {r['set']:.2f} | {r['plain_set']:.2f} | "
            f"{r['set'] / r['plain_set']:.2f}× |",
            f"| redis | get | {r['get']:.2f} | {r['plain_get']:.2f} | "
            f"{r['get'] / r['plain_get']:.2f}× |",
            "",
            f"`batch_exists` on a stored 2,048-page prefix: file {f['exists_probes_per_s']:,.0f} "
            f"probes/s (index), Redis {r['exists_probes_per_s']:,.0f} probes/s (multi-key "
            f"`EXISTS`). XXH3 checksum of one page: {100 * r['checksum_share_of_get']:.1f} % of "
            f"its Redis GET time.",
            "",
            "| page key hashing (128K tokens, best of 9) | page 16 | page 64 |",
            "|---|---|---|",
            f"| chained SHA-256 digests, ns/token | {h['digest_ns_per_token_p16']:.0f} | "
            f"{h['digest_ns_per_token_p64']:.0f} |",
            f"| full storage keys (digest + key space), ns/token | "
            f"{h['key_ns_per_token_p16']:.0f} | {h['key_ns_per_token_p64']:.0f} |",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--dir", help="directory for the file store (default: a temp dir)")
    parser.add_argument("--redis-url", help="an existing server (default: start one)")
    parser.add_argument("--cluster-url", help="an existing redis+cluster:// (default: start one)")
    parser.add_argument("--out", help="write the Markdown table here")
    args = parser.parse_args()
    num_pages, page_bytes, rounds = (4, 64 * 1024, 2) if args.quick else (64, 2 << 20, 7)
    work = Path(tempfile.mkdtemp(prefix="uniradix-bench-", dir=args.dir))
    shapes = [(4, 64 << 10), (64, 8)] if args.quick else [(64, 2 << 20), (1024, 8)]
    proc, nodes = None, []
    try:
        url = args.redis_url
        if url is None:
            proc, url = _start_redis(work)
        cluster_url = args.cluster_url
        if cluster_url is None:
            nodes = start_cluster(work / "cluster", RedisProcess)
            cluster_url = f"redis+cluster://127.0.0.1:{nodes[0].port}?timeout_s=10"
        results = {
            "hashing": bench_hashing(16_384 if args.quick else 131_072),
            "file": bench_file(work / "file", num_pages, page_bytes, rounds),
            "redis": bench_redis(url, num_pages, page_bytes, rounds),
        }
        cluster_rows = bench_cluster(url, cluster_url, shapes, rounds)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        for node in nodes:
            node.stop()
        shutil.rmtree(work, ignore_errors=True)
    setup = (
        f"{num_pages} pages of {page_bytes / 2**20:g} MiB per batch, median of {rounds} "
        f"alternating rounds; file store under {args.dir or tempfile.gettempdir()} "
        f"(page cache); Redis on loopback, no persistence; {os.cpu_count()} CPUs."
    )
    cluster_setup = (
        f"The same batches on one Redis and on a local 3-master Cluster (no replicas), median "
        f"of {rounds} alternating rounds ({rounds * 6} for the small pages; `batch_exists` "
        f"six times as many, in rounds of its own); 1,024 × 8 B is "
        f"the shape of the replay's simulation pages (a 72-byte header each). Command: "
        f"`python -m benchmarks.storage`."
    )
    text = render(results, setup) + "\n" + render_cluster(cluster_rows, cluster_setup)
    print(text)
    if args.out:
        out = Path(args.out)
        old = out.read_text() if out.exists() else ""
        out.write_text(text)
        if scaleout.HEADING in old:  # `benchmarks.l3_scaleout`'s section stays
            scaleout.replace_section(out, old[old.index(scaleout.HEADING) :])


if __name__ == "__main__":
    main()
