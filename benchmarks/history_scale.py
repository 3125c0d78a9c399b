"""How the history stores scale: a synthetic history of N commits x 100 measurements (samples
included) in SQLite and in PostgreSQL (a throw-away local cluster, as the tests start).

For each store and size it prints: the seed time and size on disk, a baseline lookup (the window
of 10 runs along a 200-commit first-parent chain, as the gate asks for each measurement), the
insert of one 100-measurement run through the store's own ``record_run``, and ``solgate trend``
for one test (the CLI, in-process: query, change points, page).

    python benchmarks/history_scale.py                      # 1,000 and 10,000 commits (100k and 1M rows)
    python benchmarks/history_scale.py --commits 1000       # quick look

Targets (issue 13): a baseline lookup under 20 ms and a run inserted under 1 s, on both stores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _common import machine  # noqa: E402
from pytest_solgate import cli  # noqa: E402
from pytest_solgate.record import history, sqlite, store
from pytest_solgate.results import Measurement, RunInfo  # noqa: E402
from pytest_solgate.results_json import decode, encode_run
from pytest_solgate.support.locations import is_history_url  # noqa: E402

PER_RUN = 100
TESTS = 50  # 50 tests x 2 measurement names = 100 measurements per run
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def a_measurement(test: int, name: str, samples: int, rng: random.Random) -> Measurement:
    seconds = 1e-3 * (1 + test / 100)
    taken = tuple(seconds * rng.uniform(0.98, 1.05) for _ in range(samples))
    return decode(dict(
        test=f"kernels/test_ops.py::test_op_{test:02d}[4096]", name=name, profile="h100-sxm", backend="cuda",
        flops={"bf16_tensor": 1.37e11}, bytes=1.34e8, seconds=seconds, samples=taken, noise=0.004, t_sol=0.8 * seconds,
        sol=0.8 * rng.uniform(0.97, 1.02), mfu=0.1, bound="memory", tflops=100.0, gbps=2500.0, ceilings="datasheet",
        verdict="pass", environment={"host": "runner-a", "torch": "2.13.0"}, ceilings_id="h100-sxm@datasheet",
    ))


def a_run(i: int) -> RunInfo:
    started = START + datetime.timedelta(minutes=10 * i)  # one run per commit, in commit order
    return RunInfo(id=f"run-{i:06d}", started_at=started.isoformat(timespec="seconds"),
                   commit=f"{i:040x}", commit_time=None, branch="main", host="runner-a", device="NVIDIA H100 80GB HBM3",
                   torch="2.13.0", python="3.11.7", profile="h100-sxm", ceilings="datasheet",
                   command="pytest kernels --sol-report")


def rows_for(i: int, samples: int, rng: random.Random) -> tuple[dict, str, list[tuple]]:
    run = a_run(i)
    row = store.run_row(run)
    measurements = [a_measurement(t, name, samples, rng) for t in range(TESTS) for name in ("kernel", "torch")]
    return row, json.dumps(encode_run(run)), [store.measurement_row(m) for m in measurements]


def seed_sqlite(path: Path, commits: int, samples: int) -> None:
    rng = random.Random(1)
    with sqlite.SqliteStore(path) as opened:
        db = opened.db
        db.execute("BEGIN")
        columns = ", ".join(store.RUN_COLUMNS)
        marks = ", ".join("?" for _ in store.RUN_COLUMNS)
        for i in range(commits):
            row, info, measurements = rows_for(i, samples, rng)
            db.execute(f"INSERT INTO runs (id, {columns}, info_json) VALUES (?, {marks}, ?)",
                       [i + 1, *(row[c] for c in store.RUN_COLUMNS), info])
            db.executemany(f"INSERT INTO measurements ({', '.join(store.MEASUREMENT_COLUMNS)}) "
                           f"VALUES ({', '.join('?' for _ in store.MEASUREMENT_COLUMNS)})",
                           [(i + 1, *m) for m in measurements])
        db.execute("COMMIT")
        db.execute("ANALYZE")


def seed_postgres(url: str, commits: int, samples: int) -> None:
    rng = random.Random(1)
    with history.open_store(url) as opened:
        conn = opened.conn
        with conn.transaction(), conn.cursor() as cursor:
            with cursor.copy(f"COPY runs ({', '.join(store.RUN_COLUMNS)}, info_json) FROM STDIN") as copy:
                generated = []
                for i in range(commits):
                    row, info, measurements = rows_for(i, samples, rng)
                    copy.write_row([*(row[c] for c in store.RUN_COLUMNS), info])
                    generated.append((row["run_uid"], measurements))
            ids = dict(conn.execute("SELECT run_uid, id FROM runs").fetchall())
            with cursor.copy(f"COPY measurements ({', '.join(store.MEASUREMENT_COLUMNS)}) FROM STDIN") as copy:
                for uid, measurements in generated:
                    for m in measurements:
                        copy.write_row((ids[uid], *m))
        conn.execute("ANALYZE")


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


LOOKUP_DEPTH = 200  # first-parent ancestors handed to each baseline lookup, as a long-lived branch has


def measure(location: str, commits: int, samples: int, out: Path) -> dict[str, float]:
    rng = random.Random(2)
    figures: dict[str, float] = {}
    with history.open_store(location) as store:
        lookups = []
        for _ in range(40):
            head = rng.randrange(LOOKUP_DEPTH, commits)
            chain = [f"{c:040x}" for c in range(head, head - LOOKUP_DEPTH, -1)]
            test, name = rng.randrange(TESTS), rng.choice(("kernel", "torch"))
            key = (f"kernels/test_ops.py::test_op_{test:02d}[4096]", name, "h100-sxm", "datasheet")
            lookups += timed(lambda key=key, chain=chain: store.baseline_runs(*key, chain, 10), 1)
        figures["lookup_ms_median"] = statistics.median(lookups) * 1e3
        figures["lookup_ms_p95"] = sorted(lookups)[int(0.95 * len(lookups))] * 1e3
        runs = [(a_run(commits + k), [a_measurement(t, n, samples, rng) for t in range(TESTS) for n in ("kernel", "torch")])
                for k in range(5)]
        inserts = [timed(lambda run=run, ms=ms: store.record_run(run, ms), 1)[0] for run, ms in runs]
        figures["insert_s_median"] = statistics.median(inserts)
        figures["insert_s_max"] = max(inserts)
    page = out / "trend.html"
    trend = timed(lambda: cli.main(["trend", "-o", str(page), "--history", location, "test_op_07*"]), 3)
    figures["trend_s_median"] = statistics.median(trend)
    return figures


def database_size(location: str) -> float:
    if is_history_url(location):
        with history.open_store(location) as store:
            return store.conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 1e9
    return Path(location).stat().st_size / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", default="1000,10000", help="comma-separated history sizes, in commits")
    parser.add_argument("--samples", type=int, default=100, help="samples stored with each measurement")
    parser.add_argument("--stores", default="sqlite,postgresql")
    args = parser.parse_args()
    try:
        sizes = [int(c) for c in args.commits.split(",")]
    except ValueError:
        parser.error(f"--commits={args.commits}: give whole numbers separated by commas, e.g. 1000,10000")
    if min(sizes) < LOOKUP_DEPTH + 1:
        parser.error(f"--commits={args.commits}: each history needs more than {LOOKUP_DEPTH} commits (a baseline "
                     f"lookup walks {LOOKUP_DEPTH} ancestors), e.g. 1000")
    stores = args.stores.split(",")
    if not set(stores) <= {"sqlite", "postgresql"}:
        parser.error(f"--stores={args.stores}: give sqlite, postgresql or both, separated by a comma")
    from throwaway_postgres import Cluster

    cluster = Cluster().start() if "postgresql" in stores else None
    print(f"# history_scale: {machine()}, {time.strftime('%Y-%m-%d')}; {args.samples} samples per measurement")
    print(f"{'store':<11} {'commits':>8} {'rows':>9} {'seed s':>7} {'size GB':>8} {'lookup ms (p50/p95)':>20} "
          f"{'insert s (p50/max)':>19} {'trend s':>8}")
    try:
        with tempfile.TemporaryDirectory(prefix="solgate-scale-") as tmp:
            out = Path(tmp)
            for commits in sizes:
                for store_kind in stores:
                    start = time.perf_counter()
                    if store_kind == "sqlite":
                        location = str(out / f"h{commits}.db")
                        seed_sqlite(Path(location), commits, args.samples)
                    else:
                        location = cluster.url(cluster.new_database())
                        seed_postgres(location, commits, args.samples)
                    seeded = time.perf_counter() - start
                    f = measure(location, commits, args.samples, out)
                    print(f"{store_kind:<11} {commits:>8} {commits * PER_RUN:>9} {seeded:>7.0f} {database_size(location):>8.2f} "
                          f"{f['lookup_ms_median']:>10.1f} / {f['lookup_ms_p95']:<7.1f} "
                          f"{f['insert_s_median']:>8.3f} / {f['insert_s_max']:<8.3f} {f['trend_s_median']:>8.2f}", flush=True)
                    if store_kind == "sqlite":
                        Path(location).unlink()
                    else:
                        cluster.sql(f'DROP DATABASE "{location.rsplit("/", 1)[1]}"')
    finally:
        if cluster:
            cluster.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
