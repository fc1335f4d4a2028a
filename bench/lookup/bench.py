"""bench/lookup: see run.sh. Prints a Markdown table of the measurements, one row per goal of
issue 14:

(a) 10,000 outer rows joined through the cache, against the dimension as a heap table with a
    primary key (index nested loop), and against the lake without a cache (scan + hash join);
(b) the cache's bulk load against CREATE TABLE AS SELECT from the foreign table + ADD PRIMARY KEY;
(c) probes per second, all hits against all misses;
(d) the refresh after a commit that changes 1% of the rows, against REFRESH MATERIALIZED VIEW
    CONCURRENTLY of a copy;
(e) the private memory of 100 backends that have probed, for this dimension and one a tenth
    of its size;
(f) probe latency p99 while a refresh applies a large commit, against idle;
(g) a session's lookups right after its own write, against the lake right after a write."""

import pathlib
import statistics
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchlib import COLUMNS, ROW, _status_kb, arguments, connect  # noqa: E402

OUTER = 10_000


def report(out, row):
    out.append(row)
    print(" | ".join(row), file=sys.stderr)


def best(conn, sql, runs=3):
    """The best time of `runs` runs of `sql`."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        conn.execute(sql).fetchall()
        times.append(time.perf_counter() - started)
    return min(times)


def plan(conn, sql):
    return "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql).fetchall())


def make_dimension(conn, name, rows, buckets=None, batches=None):
    """A dimension of `rows` rows in `buckets` file groups, written by one INSERT in `batches`
    write batches (the default batch size when None)."""
    buckets = buckets or max(4, rows // 250_000)
    if batches:
        conn.execute(f"SET hudi.write_batch_rows = {max(rows // batches, 1)}")
    conn.execute(f"CREATE FOREIGN TABLE {name} ({COLUMNS}) SERVER lake OPTIONS (path '{name}', primary_key 'id', "
                 f"ordering_field 'ts', buckets '{buckets}', services 'off')")
    conn.execute(f"SELECT hudi.create_table('{name}')")
    conn.execute(f"INSERT INTO {name} SELECT {ROW} FROM generate_series(1, {rows}) g")
    # At rest, as a dimension is when a cache is made for it; and no compaction of the worker's
    # competes with what is measured for the two cores.
    conn.execute(f"SELECT hudi.compact('{name}')")
    conn.execute("RESET hudi.write_batch_rows")


def load_cache(conn, name):
    started = time.perf_counter()
    conn.execute(f"SELECT hudi.create_lookup_cache('{name}', '{{id}}')")
    conn.execute(f"SELECT hudi.refresh_lookup_cache('{name}')")
    return time.perf_counter() - started


def main():
    args = arguments(5_000_000)
    n = args.rows
    out = []
    with connect(args.port) as conn:
        conn.execute("CREATE EXTENSION pg_hudi")
        conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{args.lake}')")
        started = time.perf_counter()
        make_dimension(conn, "dim", n)
        print(f"dimension of {n:,} rows written in {time.perf_counter() - started:.1f} s", file=sys.stderr)

        # (b) bulk load against what a user does today.
        cache_load = load_cache(conn, "dim")
        started = time.perf_counter()
        conn.execute("SET hudi.enable_lookup_cache = off")
        conn.execute("CREATE TABLE heap AS SELECT * FROM dim")
        conn.execute("ALTER TABLE heap ADD PRIMARY KEY (id)")
        conn.execute("RESET hudi.enable_lookup_cache")
        heap_copy = time.perf_counter() - started
        conn.execute("VACUUM ANALYZE heap")
        # As for the heap table: without statistics the planner takes a join on the record key
        # for one that multiplies rows (and then JIT-compiles it).
        conn.execute("ANALYZE dim")
        report(out, ("(b) bulk load", f"cache {cache_load:.1f} s ({n / cache_load / 1e6:.2f}M rows/s)",
                    f"CTAS + primary key {heap_copy:.1f} s", f"{cache_load / heap_copy:.2f}x", "≤ 1.0x and ≥ 1M rows/s"))

        # (a) 10,000 outer rows.
        conn.execute(f"CREATE TABLE outer_rows AS SELECT (g * 7919) % {n} + 1 AS id FROM generate_series(1, {OUTER}) g")
        conn.execute("ANALYZE outer_rows")
        join = "SELECT sum(length(c.name)), sum(c.qty) FROM outer_rows o JOIN {} c ON c.id = o.id"
        shown = plan(conn, join.format("dim"))
        assert "Lookup: dim" in shown, shown
        cached = best(conn, join.format("dim"))
        conn.execute("SET enable_hashjoin = off; SET enable_mergejoin = off")
        heap = best(conn, join.format("heap"))
        conn.execute("RESET enable_hashjoin; RESET enable_mergejoin")
        conn.execute("SET hudi.enable_lookup_cache = off")
        lake = best(conn, join.format("dim"), runs=1)
        conn.execute("RESET hudi.enable_lookup_cache")
        assert conn.execute(join.format("dim")).fetchall() == conn.execute(join.format("heap")).fetchall()
        report(out, ("(a) 10,000-row join", f"cache {cached * 1000:.0f} ms", f"heap index {heap * 1000:.0f} ms, lake {lake * 1000:.0f} ms",
                    f"{cached / heap:.2f}x heap, {cached / lake:.3f}x lake", "≤ 1.25x heap"))

        # (c) hits against misses, 100,000 probes each.
        probes = 100_000
        conn.execute(f"CREATE TABLE hits AS SELECT (g * 7919) % {n} + 1 AS id FROM generate_series(1, {probes}) g")
        conn.execute(f"CREATE TABLE misses AS SELECT {n} + g AS id FROM generate_series(1, {probes}) g")
        conn.execute("ANALYZE hits; ANALYZE misses")
        count = "SELECT count(c.name) FROM {} k JOIN dim c ON c.id = k.id"
        # The probe rate, whatever the planner would choose for this many outer rows.
        conn.execute("SET enable_hashjoin = off; SET enable_mergejoin = off")
        assert "Lookup: dim" in plan(conn, count.format("misses"))
        hit = best(conn, count.format("hits"))
        miss = best(conn, count.format("misses"))
        conn.execute("RESET enable_hashjoin; RESET enable_mergejoin")
        report(out, ("(c) probes/s", f"hits {probes / hit:,.0f}/s", f"misses {probes / miss:,.0f}/s",
                    f"misses {hit / miss:.1f}x hits", "≥ 3x"))

        # (e) 100 backends that have probed, before any update, for this dimension and one a
        # tenth of its size with the same history: as many file groups and write batches (a
        # backend keeps the table's timeline and file listing, which grow with those).
        batch_rows = conn.execute("SHOW hudi.write_batch_rows").fetchone()[0]
        make_dimension(conn, "small", max(n // 10, 1000), buckets=max(4, n // 250_000),
                       batches=max(n // int(batch_rows), 1))
        load_cache(conn, "small")
        conn.execute("ANALYZE small")
        sizes = {"dim": n, "small": max(n // 10, 1000)}
        memory, first, second = {}, [], []
        for name in ("dim", "small"):
            sessions = [connect(args.port) for _ in range(100)]
            for s in sessions:
                # A backend's first lookup opens the cache; its second only checks for news.
                for times in (first, second):
                    started = time.perf_counter()
                    s.execute(f"SELECT name FROM {name} WHERE id = 7").fetchall()
                    times.append(time.perf_counter() - started)
                # 1,000 keys that all hit, in either dimension.
                s.execute(f"SELECT count(c.name) FROM (SELECT (id - 1) % {sizes[name]} + 1 AS id FROM hits LIMIT 1000) k "
                          f"JOIN {name} c ON c.id = k.id").fetchall()
            pids = [s.execute("SELECT pg_backend_pid()").fetchone()[0] for s in sessions]
            memory[name] = statistics.mean(_status_kb(pid, "RssAnon") for pid in pids) / 1024
            for s in sessions:
                s.close()
        report(out, ("(e) private memory per backend, 100 backends", f"{n:,} rows: {memory['dim']:.1f} MiB",
                    f"{max(n // 10, 1000):,} rows: {memory['small']:.1f} MiB",
                    f"{memory['dim'] / memory['small']:.2f}x", "independent of the size"))
        report(out, ("(e') a backend's first lookup statement, median", f"{statistics.median(first) * 1000:.2f} ms",
                     f"its second {statistics.median(second) * 1000:.2f} ms", f"{statistics.median(first) / statistics.median(second):.1f}x", ""))

        # (d) a commit that changes 1% of the rows.
        conn.execute("SET hudi.enable_lookup_cache = off")
        conn.execute("CREATE MATERIALIZED VIEW copy AS SELECT * FROM dim")
        conn.execute("CREATE UNIQUE INDEX ON copy (id)")
        conn.execute("RESET hudi.enable_lookup_cache")
        conn.execute("UPDATE dim SET qty = qty + 1 WHERE id % 100 = 0")
        started = time.perf_counter()
        conn.execute("SELECT hudi.refresh_lookup_cache('dim')")
        refresh = time.perf_counter() - started
        conn.execute("SET hudi.enable_lookup_cache = off")
        started = time.perf_counter()
        conn.execute("REFRESH MATERIALIZED VIEW CONCURRENTLY copy")
        full = time.perf_counter() - started
        conn.execute("RESET hudi.enable_lookup_cache")
        report(out, ("(d) refresh of a 1% commit", f"cache {refresh:.2f} s", f"REFRESH CONCURRENTLY {full:.1f} s",
                    f"{refresh / full:.3f}x", "≤ 0.1x"))

        # (f) probe latency while a refresh applies a large commit (10% of the rows).
        def latencies(seconds, stop=None):
            found = []
            with connect(args.port) as probe:
                point = "SELECT name FROM dim WHERE id = %s"
                assert "Lookup: dim" in plan(probe, "SELECT name FROM dim WHERE id = 1")
                i, deadline = 0, time.perf_counter() + (seconds or 0)
                while (stop is None and time.perf_counter() < deadline) or (stop is not None and not stop.is_set()):
                    i += 1
                    started = time.perf_counter()
                    probe.execute(point, ((i * 7919) % n + 1,), prepare=True).fetchall()
                    found.append(time.perf_counter() - started)
            return found

        idle = latencies(3)
        conn.execute("UPDATE dim SET qty = qty + 1 WHERE id % 10 = 0")
        stop, during = threading.Event(), []
        prober = threading.Thread(target=lambda: during.extend(latencies(None, stop)))
        prober.start()
        started = time.perf_counter()
        conn.execute("SELECT hudi.refresh_lookup_cache('dim')")
        applied = time.perf_counter() - started
        stop.set()
        prober.join()

        def p99(values):
            return sorted(values)[int(len(values) * 0.99)] * 1000
        report(out, ("(f) probe p99 during a refresh", f"idle {p99(idle):.2f} ms ({len(idle)} probes)",
                    f"during a {applied:.1f} s refresh of {n // 10:,} rows {p99(during):.2f} ms ({len(during)} probes)",
                    f"{p99(during) / p99(idle):.2f}x", "≤ 2x"))

        # (g) a session's lookups right after its own write (a one-row upsert, newer than the
        # row it replaces): a point query, which reads the lake until the cache holds the
        # commit, and a 1,000-row join, which waits for the worker's refresh; against the same
        # right after a write with the cache off (the lake; the join by hash).
        newer = ROW.replace("g * 0.5", "g * 0.5 + 1").replace("g * interval '1 second'", "g * interval '1 second' + interval '1 day'")
        written = iter(range(1, 1000))

        def after_own_write(sql, cached, rounds=7):
            times = []
            conn.execute("SET enable_hashjoin = off; SET enable_mergejoin = off" if cached
                         else "SET hudi.enable_lookup_cache = off")
            for _ in range(rounds):
                key = (next(written) * 104729) % n + 1  # each key written once: its new row wins
                conn.execute(f"INSERT INTO dim SELECT {newer} FROM generate_series({key}, {key}) g")
                started = time.perf_counter()
                conn.execute(sql.format(key=key), prepare=False).fetchall()
                times.append(time.perf_counter() - started)
            conn.execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET hudi.enable_lookup_cache")
            return statistics.median(times)
        point = "SELECT score FROM dim WHERE id = {key}"
        join = "SELECT sum(c.score) FROM ((SELECT id FROM outer_rows LIMIT 999) UNION ALL SELECT {key}) o JOIN dim c ON c.id = o.id"
        cached_point, lake_point = after_own_write(point, True), after_own_write(point, False)
        cached_join, lake_join = after_own_write(join, True), after_own_write(join, False)
        report(out, ("(g) right after the session's own write, median", f"point query {cached_point * 1000:.1f} ms, "
                     f"1,000-row join {cached_join * 1000:.0f} ms", f"lake {lake_point * 1000:.1f} ms, {lake_join * 1000:.0f} ms",
                     f"{cached_point / lake_point:.2f}x, {cached_join / lake_join:.2f}x", "≤ 1x the lake"))

    print(f"| {n:,}-row dimension | pg_hudi | baseline | ratio | goal |")
    print("|---|---|---|---|---|")
    for row in out:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
