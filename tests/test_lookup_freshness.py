"""How fresh lookups are, and that they are never torn: the worker refreshes a cache after each
commit on this server (woken by the commit) and every hudi.lookup_refresh_interval for
commits it cannot see coming (another database writing the same table); a session reads its
own commits at once; lookup_max_lag with lookup_on_stale 'error', 'scan' and 'wait'; eight
sessions joining through the cache while the table changes never see two commits at once."""

import threading
import time

from conftest import create_lake_server, plan_text, refused, run_in_threads, serve_databases, wait_for

COLUMNS = "id bigint, name text, country text, balance numeric(12, 2), ts timestamptz"
OPTIONS = "path 'customers', primary_key 'id,country', ordering_field 'ts', partition_by 'country', buckets '4'"


def _p99(values):
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


def _ready(conn):
    latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
    return conn.execute("SELECT bool_and(state = 'ready' AND cached_instant = %s) FROM hudi.lookup_caches",
                        (latest,)).fetchone() == (True,)


def _cached_and_served(conn, rows_sql):
    """`customers` with the rows of `rows_sql`, its cache on id, and the worker serving the
    database, once the cache is loaded."""
    conn.execute(f"INSERT INTO customers {rows_sql}")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    serve_databases(conn)
    wait_for("the worker's load", lambda: _ready(conn))


def _other_database(cluster, conn, root):
    """A second database with its own foreign table on the same Hudi table: its commits wake
    nothing of this database's, whose worker sees them by polling only."""
    conn.execute("CREATE DATABASE other")
    other = cluster.connect(dbname="other")
    create_lake_server(other, root)
    other.execute(f"CREATE FOREIGN TABLE customers ({COLUMNS}) SERVER lake OPTIONS ({OPTIONS})")
    return other


def _seen_after(reader, commit, expected, timeout=10):
    """Seconds from `commit()` returning until `reader`'s lookup shows `expected`."""
    commit()
    started = time.monotonic()
    while reader.execute("SELECT name FROM customers WHERE id = 1").fetchone() != (expected,):
        assert time.monotonic() - started < timeout, f"{expected} not seen in {timeout} s"
        time.sleep(0.005)
    return time.monotonic() - started


def test_lookups_see_commits_within_a_second(lake, cluster):
    conn, table = lake
    conn.execute("ALTER SYSTEM SET hudi.lookup_refresh_interval = '500ms'")
    _cached_and_served(conn, "SELECT g, 'n' || g, 'nl', g, now() FROM generate_series(1, 20) g")
    reader = cluster.connect()
    assert "Lookup: customers" in plan_text(reader, "SELECT name FROM customers WHERE id = 1")
    # Commits on this server wake the refresh.
    woken = [_seen_after(reader, lambda: conn.execute("UPDATE customers SET name = %s WHERE id = 1", (f"w{i}",)), f"w{i}")
             for i in range(100)]
    # The writing session reads its own commit at once.
    conn.execute("UPDATE customers SET name = 'mine' WHERE id = 1")
    assert conn.execute("SELECT name FROM customers WHERE id = 1").fetchone() == ("mine",)
    # Commits the worker only sees by polling the table.
    other = _other_database(cluster, conn, table.parent)
    polled = [_seen_after(reader, lambda: other.execute("UPDATE customers SET name = %s WHERE id = 1", (f"p{i}",)), f"p{i}")
              for i in range(20)]
    print(f"woken: p50 {sorted(woken)[50]:.3f} s, p99 {_p99(woken):.3f} s; polled: max {max(polled):.3f} s")
    assert _p99(woken) < 1.0, woken
    assert max(polled) < 1.0, polled


def test_a_session_reads_its_writes_through_any_foreign_table_on_the_location(lake, cluster):
    """Writes through a second foreign table on the same Hudi table are the session's own for
    the first one's lookups: a point lookup right after them shows them, and so does a join
    through the cache (which waits for the worker's refresh the commit woke). Prints the cost
    of each against reading the lake; bench/lookup measures them at scale."""
    conn, _ = lake
    _cached_and_served(conn, "SELECT g, 'n' || g, 'nl', g, now() FROM generate_series(1, 500) g")
    conn.execute(f"CREATE FOREIGN TABLE customers_too ({COLUMNS}) SERVER lake OPTIONS ({OPTIONS})")
    conn.execute("CREATE TABLE wanted AS SELECT g::bigint AS id FROM generate_series(1, 5) g")
    conn.execute("SET enable_hashjoin = off; SET enable_mergejoin = off")
    point = "SELECT name FROM customers WHERE id = 1"
    join = "SELECT w.id, c.name FROM wanted w JOIN customers c ON c.id = w.id ORDER BY 1"
    assert "Lookup: customers" in plan_text(conn, point) and "Lookup: customers" in plan_text(conn, join)

    def timed(sql):
        started = time.perf_counter()
        rows = conn.execute(sql, prepare=False).fetchall()
        return rows, time.perf_counter() - started
    waits = {"point": [], "join": [], "point, lake": [], "join, lake": []}
    for i in range(20):
        # Every other round reads the lake instead (a hash join), after a write as well.
        lake = i % 2 == 1
        if lake:
            conn.execute("SET hudi.enable_lookup_cache = off; SET enable_hashjoin = on")
        suffix = ", lake" if lake else ""
        conn.execute("UPDATE customers_too SET name = %s WHERE id IN (1, 2)", (f"v{i}",))
        rows, seconds = timed(point)
        assert rows == [(f"v{i}",)], i
        waits["point" + suffix].append(seconds)
        conn.execute("INSERT INTO customers_too VALUES (3, %s, 'nl', 3, now())", (f"w{i}",))
        rows, seconds = timed(join)
        assert rows == [(1, f"v{i}"), (2, f"v{i}"), (3, f"w{i}"), (4, "n4"), (5, "n5")], i
        waits["join" + suffix].append(seconds)
        conn.execute("RESET hudi.enable_lookup_cache; SET enable_hashjoin = off")
    print("right after a write:", ", ".join(f"{k} {sorted(v)[len(v) // 2] * 1000:.1f} ms" for k, v in waits.items()))


def test_lookups_after_the_sessions_commit_read_the_lake_or_catch_the_cache_up(lake, cluster):
    """No worker serves the database. After the session's own commit a point lookup does not
    wait for a refresh that would not come: it reads the lake, and the cache again once it
    holds the commit. A join's lookups apply the commit to the cache themselves."""
    conn, _ = lake
    conn.execute("INSERT INTO customers SELECT g, 'n' || g, 'nl', g, now() FROM generate_series(1, 5) g")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    point = "(ANALYZE, COSTS OFF, TIMING OFF) SELECT name FROM customers WHERE id = 1"
    assert "Lookup Probes: 1 keys, 1 rows" in plan_text(conn, point)
    conn.execute("UPDATE customers SET name = 'mine' WHERE id = 1")
    started = time.monotonic()
    assert conn.execute("SELECT name FROM customers WHERE id = 1").fetchall() == [("mine",)]
    assert time.monotonic() - started < 2.5, "it did not wait out the lookup's bounded wait (5 s)"
    assert "Lookup Probes" not in plan_text(conn, point), "the lake answers"
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    assert "Lookup Probes: 1 keys, 1 rows" in plan_text(conn, point)
    assert conn.execute("SELECT name FROM customers WHERE id = 1").fetchall() == [("mine",)]
    # A join's lookups bring the cache up to the session's commit themselves, and the view
    # shows the commit they hold (before anything records it in hudi.lookup_cache_state).
    conn.execute("CREATE TABLE wanted AS SELECT 1::bigint AS id")
    conn.execute("SET enable_hashjoin = off; SET enable_mergejoin = off")
    join = "SELECT c.name FROM wanted w JOIN customers c ON c.id = w.id"
    conn.execute("UPDATE customers SET name = 'again' WHERE id = 1")
    started = time.monotonic()
    shown = plan_text(conn, "(ANALYZE, COSTS OFF, TIMING OFF) " + join)
    assert time.monotonic() - started < 2.5, "it did not wait out the lookup's bounded wait (5 s)"
    assert "Lookup Probes: 1 keys, 1 rows" in shown, shown
    assert conn.execute(join).fetchall() == [("again",)]
    latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
    assert conn.execute("SELECT cached_instant, lag_commits FROM hudi.lookup_caches").fetchone() == (latest, 0)


def test_lookup_max_lag_waits_fails_or_scans(lake, cluster):
    conn, table = lake
    conn.execute("INSERT INTO customers SELECT g, 'n' || g, 'nl', g, now() FROM generate_series(1, 5) g")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    other = _other_database(cluster, conn, table.parent)
    # No worker serves the database yet: only refresh_lookup_cache moves the cache.
    other.execute("UPDATE customers SET name = 'late' WHERE id = 1")
    query = "SELECT name FROM customers WHERE id = 1"
    assert conn.execute(query).fetchone() == ("n1",), "without lookup_max_lag: what is cached"
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD lookup_max_lag '1 ms', ADD lookup_on_stale 'error')")
    assert refused(conn, query) == "55000"
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (SET lookup_on_stale 'scan')")
    assert conn.execute(query).fetchone() == ("late",)
    assert refused(conn, "ALTER FOREIGN TABLE customers OPTIONS (SET lookup_on_stale 'soon')") == "HV024"
    assert refused(conn, "ALTER FOREIGN TABLE customers OPTIONS (SET lookup_max_lag 'soon')") == "HV024"
    # 'wait': the worker is asked for a refresh, and the lookup waits for it.
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (SET lookup_on_stale 'wait')")
    serve_databases(conn, naptime=3600)
    other.execute("UPDATE customers SET name = 'later' WHERE id = 1")
    assert conn.execute(query).fetchone() == ("later",)
    # The cache is at the update's commit or later (the worker's services may have committed a
    # compaction since, which latest_commit would name).
    written = conn.execute("SELECT max(completion_time) FROM hudi.timeline('customers') "
                           "WHERE action = 'deltacommit' AND state = 'completed'").fetchone()[0]
    cached = conn.execute("SELECT cached_instant FROM hudi.lookup_caches").fetchone()[0]
    assert written is not None and cached >= written, (cached, written)


def test_joining_sessions_never_see_a_torn_commit(lake, cluster):
    """Every commit sets all rows' name and balance to its number; each join of the 30 rows
    sees one number in every row and both columns, while the worker applies commits."""
    conn, _ = lake
    conn.execute("CREATE TABLE wanted AS SELECT g AS id FROM generate_series(1, 30) g")
    _cached_and_served(conn, "SELECT g, 'v0', 'nl', 0, now() FROM generate_series(1, 30) g")
    done = threading.Event()
    seen = [set() for _ in range(8)]

    def join(n):
        session = cluster.connect()
        session.execute("SET enable_hashjoin = off; SET enable_mergejoin = off")
        sql = "SELECT c.name, c.balance FROM wanted w JOIN customers c ON c.id = w.id"
        assert "Lookup: customers" in plan_text(session, sql)
        while not done.is_set():
            rows = session.execute(sql).fetchall()
            assert len(rows) == 30, rows
            versions = {(name, int(balance)) for name, balance in rows}
            assert len(versions) == 1, f"a torn read: {sorted(versions)}"
            ((name, balance),) = versions
            assert name == f"v{balance}", f"a row of two commits: {name}, {balance}"
            seen[n].add(balance)

    writer_errors = []

    def write():
        try:
            for v in range(1, 16):
                conn.execute("UPDATE customers SET name = %s, balance = %s", (f"v{v}", v))
                wait_for(f"commit {v} in the cache", lambda: _ready(conn))
        except Exception as e:  # noqa: BLE001 - reaches the test below
            writer_errors.append(e)
        finally:
            done.set()
    writer = threading.Thread(target=write)
    writer.start()
    errors = run_in_threads(join, 8)
    writer.join()
    assert not errors and not writer_errors, (errors, writer_errors)
    assert all(len(s) > 3 for s in seen), [sorted(s) for s in seen]
