"""Lookup caches from SQL (hudi.create_lookup_cache, hudi.refresh_lookup_cache,
hudi.drop_lookup_cache, hudi.lookup_caches) and kept current by the worker. What a cache holds
is checked row by row against the merged snapshot in the engine's tests (engine/tests/lookup.rs);
here: the declarations, the state the view shows against the table (rows, cached instant), new
generations when the indexes change, errors, and the worker's loads, refreshes, restarts and
removals."""

from conftest import create_lake_server, plan_text, refused, serve_databases, wait_for

STATE = "SELECT keys, kind, state, rows, cached_instant, generation FROM hudi.lookup_caches ORDER BY keys"


def _insert(conn, ids, name, ts):
    conn.execute("INSERT INTO customers SELECT g, %s || g, (ARRAY['nl','be','fr'])[g %% 3 + 1], g, %s::timestamptz "
                 "FROM unnest(%s::bigint[]) g", (name, ts, ids))


def _cache_dir(conn, table):
    data = conn.execute("SHOW data_directory").fetchone()[0]
    db, rel = conn.execute("SELECT d.oid, %s::regclass::oid FROM pg_database d WHERE datname = current_database()",
                           (table,)).fetchone()
    import pathlib
    return pathlib.Path(data) / "pg_hudi/lookup" / str(db) / str(rel)


def test_declared_caches_refresh_from_sql_and_follow_the_table(lake, cluster):
    conn, _ = lake
    _insert(conn, list(range(1, 101)), "a", "2026-01-01")
    # The record key's columns, in any order, are the unique index; one of them alone is not.
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{country, id}')")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{name}', '{balance}')")
    # Not loaded yet: the worker does that (these clusters serve no database until asked).
    assert conn.execute(STATE).fetchall() == [(["country", "id"], "unique", "loading", None, None, None),
                                              (["name"], "secondary", "loading", None, None, None)]
    assert conn.execute("SELECT DISTINCT lag_commits, lag_seconds FROM hudi.lookup_caches").fetchall() == [(None, None)]
    latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
    assert conn.execute("SELECT hudi.refresh_lookup_cache('customers')").fetchone() == (latest,)
    assert conn.execute(STATE).fetchall() == [(["country", "id"], "unique", "ready", 100, latest, 1),
                                              (["name"], "secondary", "ready", 100, latest, 1)]
    assert conn.execute("SELECT bool_and(bytes > 0) FROM hudi.lookup_caches").fetchone() == (True,)
    lag = "SELECT DISTINCT lag_commits, lag_seconds FROM hudi.lookup_caches"
    assert conn.execute(lag).fetchall() == [(0, 0.0)]
    # Writes: new keys, updates, deletes; a refresh applies them to the same generation.
    _insert(conn, list(range(90, 131)), "b", "2026-01-02")
    conn.execute("DELETE FROM customers WHERE id % 10 = 7")
    # Until then the view says what the cache misses: two commits, and the time between the
    # cached one's completion and the latest one's.
    (commits, seconds), = conn.execute(lag).fetchall()
    cached_at = conn.execute("SELECT max(cached_instant) FROM hudi.lookup_caches").fetchone()[0]
    newest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
    assert commits == 2
    assert seconds == conn.execute("SELECT extract(epoch FROM to_timestamp(%s, 'YYYYMMDDHH24MISSMS') - "
                                   "to_timestamp(%s, 'YYYYMMDDHH24MISSMS'))::float8", (newest, cached_at)).fetchone()[0]
    count = conn.execute("SELECT count(*) FROM customers").fetchone()[0]
    latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
    assert conn.execute("SELECT hudi.refresh_lookup_cache('customers')").fetchone() == (latest,)
    assert conn.execute(STATE).fetchall()[0] == (["country", "id"], "unique", "ready", count, latest, 1)
    assert conn.execute(lag).fetchall() == [(0, 0.0)]
    # Nothing new: nothing changes.
    loaded = conn.execute("SELECT loaded_at FROM hudi.lookup_caches").fetchall()
    assert conn.execute("SELECT hudi.refresh_lookup_cache('customers')").fetchone() == (latest,)
    assert conn.execute("SELECT loaded_at FROM hudi.lookup_caches").fetchall() == loaded
    # Another set of indexes is another cache: a new generation, loaded from the snapshot.
    conn.execute("SELECT hudi.drop_lookup_cache('customers', '{name}')")
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    assert conn.execute(STATE).fetchall() == [(["country", "id"], "unique", "ready", count, latest, 2)]
    root = _cache_dir(conn, "customers")
    # The old generation is gone; this backend reads the new one (its directory in readers/).
    assert sorted(p.name for p in root.iterdir()) == ["2", "CURRENT", "readers"]


def test_bad_declarations_are_refused_and_change_nothing(lake, cluster):
    conn, _ = lake
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    assert refused(conn, "SELECT hudi.create_lookup_cache('customers', '{id}')") == "42710"
    assert refused(conn, "SELECT hudi.create_lookup_cache('customers', '{nope}')") == "42703"
    assert refused(conn, "SELECT hudi.create_lookup_cache('customers', '{country}', '{_hoodie_record_key}')") == "42703"
    assert refused(conn, "SELECT hudi.create_lookup_cache('customers', '{}')") == "22023"
    assert refused(conn, "SELECT hudi.drop_lookup_cache('customers', '{country}')") == "42704"
    conn.execute("CREATE TABLE plain (id int)")
    assert refused(conn, "SELECT hudi.create_lookup_cache('plain', '{id}')") == "42809"
    conn.execute("CREATE ROLE reader")
    conn.execute("GRANT SELECT ON customers TO reader")
    conn.execute("SET ROLE reader")
    assert refused(conn, "SELECT hudi.create_lookup_cache('customers', '{name}')") == "42501"
    assert refused(conn, "SELECT hudi.refresh_lookup_cache('customers')") == "42501"
    assert refused(conn, "SELECT hudi.drop_lookup_cache('customers', '{id}')") == "42501"
    # A role that may read the table sees its caches.
    assert conn.execute("SELECT keys FROM hudi.lookup_caches").fetchall() == [(["id"],)]
    conn.execute("RESET ROLE")
    conn.execute("CREATE FOREIGN TABLE other (id bigint, name text) SERVER lake OPTIONS (path 'customers')")
    assert refused(conn, "SELECT hudi.refresh_lookup_cache('other')") == "42704"
    assert conn.execute("SELECT keys, state FROM hudi.lookup_caches").fetchall() == [(["id"], "loading")]


def test_the_worker_loads_refreshes_keeps_and_removes_caches(lake, cluster):
    conn, _ = lake
    _insert(conn, list(range(1, 201)), "a", "2026-01-01")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{country, name}')")
    serve_databases(conn)

    def caught_up():
        count = conn.execute("SELECT count(*) FROM customers").fetchone()[0]
        latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
        return conn.execute("SELECT bool_and(state = 'ready' AND rows = %s AND cached_instant = %s) FROM hudi.lookup_caches",
                            (count, latest)).fetchone() == (True,)
    wait_for("the worker's load", caught_up)
    _insert(conn, list(range(150, 260)), "b", "2026-01-02")
    conn.execute("DELETE FROM customers WHERE id < 20")
    wait_for("the worker's refresh", caught_up)
    (loaded,) = conn.execute("SELECT DISTINCT (generation, loaded_at)::text FROM hudi.lookup_caches").fetchone()
    # A restart keeps the cache: the worker goes on with the same generation.
    conn.close()
    cluster.stop()
    cluster.start()
    conn = cluster.connect()
    serve_databases(conn)  # a start of a test cluster serves no database again
    # Queries use the kept cache at once.
    plan = plan_text(conn, "SELECT name FROM customers WHERE id = 3")
    assert "Lookup: customers (id) = '3' [secondary]" in plan, plan
    _insert(conn, [500], "c", "2026-01-03")
    wait_for("the refresh after the restart", caught_up)
    assert conn.execute("SELECT DISTINCT (generation, loaded_at)::text FROM hudi.lookup_caches").fetchone() == (loaded,)
    # A dropped table's cache goes with it.
    conn.execute("CREATE FOREIGN TABLE again (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz) "
                 "SERVER lake OPTIONS (path 'customers')")
    conn.execute("SELECT hudi.create_lookup_cache('again', '{name}')")
    again = _cache_dir(conn, "again")
    wait_for("the second table's cache", lambda: again.exists())
    conn.execute("DROP FOREIGN TABLE again")
    wait_for("the dropped table's cache to go", lambda: not again.exists())
    # Without an index left, the worker removes the cache from disk.
    root = _cache_dir(conn, "customers")
    assert root.exists()
    conn.execute("SELECT hudi.drop_lookup_cache('customers', '{id}')")
    conn.execute("SELECT hudi.drop_lookup_cache('customers', '{country, name}')")
    wait_for("the cache's removal", lambda: not root.exists())
    assert conn.execute("SELECT count(*) FROM hudi.lookup_cache_state").fetchone() == (0,)


def test_statements_prepared_before_the_load_use_the_cache_after_it(lake, cluster):
    """A loaded generation invalidates the table's plans: a statement prepared while the cache
    was loading (planned for the lake) is planned again, with the lookup."""
    conn, _ = lake
    _insert(conn, list(range(1, 31)), "a", "2026-01-01")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("PREPARE point AS SELECT name FROM customers WHERE id = 3")
    assert "Lookup" not in plan_text(conn, "EXECUTE point")
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    assert "Lookup: customers (id) = '3'" in plan_text(conn, "EXECUTE point")
    assert conn.execute("EXECUTE point").fetchall() == [("a3",)]


def test_a_cache_holds_cleaning_back_as_a_consumer_does(lake, cluster):
    """The cached instant is a consumer position: a clean keeps the files the next refresh
    reads, so it applies the changes to the same generation instead of loading a new one."""
    conn, _ = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '1', ADD clean_retain '1 microsecond')")
    _insert(conn, list(range(1, 31)), "a", "2026-01-01")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    for day in range(2, 5):
        _insert(conn, list(range(1, 31)), f"d{day}-", f"2026-01-0{day}")
        conn.execute("SELECT * FROM hudi.compact('customers')")
    notices = []
    conn.add_notice_handler(lambda n: notices.append(n.message_primary))
    conn.execute("SELECT * FROM hudi.clean('customers')")
    latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
    assert conn.execute("SELECT hudi.refresh_lookup_cache('customers')").fetchone() == (latest,)
    assert conn.execute(STATE).fetchall() == [(["id"], "secondary", "ready", 30, latest, 1)]
    # Without the cache, the same clean removes what it kept.
    conn.execute("SELECT hudi.drop_lookup_cache('customers', '{id}')")
    (cleaned,) = conn.execute("SELECT count(*) FROM hudi.clean('customers')").fetchone()
    assert cleaned == 1, notices


def test_caches_go_with_the_extension_and_the_database(lake, cluster):
    conn, root = lake
    _insert(conn, [1, 2, 3], "a", "2026-01-01")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    database = _cache_dir(conn, "customers").parent
    assert database.exists()
    # A second database with a cache of its own, then dropped.
    conn.execute("CREATE DATABASE doomed")
    doomed = cluster.connect(dbname="doomed")
    create_lake_server(doomed, root.parent)
    doomed.execute("CREATE FOREIGN TABLE customers (id bigint, name text, country text, balance numeric(12, 2), "
                   "ts timestamptz) SERVER lake OPTIONS (path 'customers')")
    doomed.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    doomed.execute("SELECT hudi.refresh_lookup_cache('customers')")
    doomed_dir = _cache_dir(doomed, "customers").parent
    assert doomed_dir.exists()
    doomed.close()
    conn.execute("DROP DATABASE doomed")
    serve_databases(conn)
    wait_for("the dropped database's caches to go", lambda: not doomed_dir.exists())
    # DROP EXTENSION: the next round finds no extension and removes the database's caches.
    conn.execute("DROP EXTENSION pg_hudi CASCADE")
    wait_for("the caches of the dropped extension to go", lambda: not database.exists())


def test_the_view_shows_a_load_and_a_rebuild_while_they_run(lake, cluster):
    """A load of 300,000 rows in progress, caught by its progress file and held there (its
    backend stopped with SIGSTOP): the view says loading, then rebuilding for the next
    generation, with how far each got; the readers' generation stays usable meanwhile."""
    import os
    import signal
    import threading
    conn, _ = lake
    conn.execute("INSERT INTO customers SELECT g, 'n' || g, (ARRAY['nl','be','fr'])[g % 3 + 1], g, "
                 "timestamptz '2026-01-01' FROM generate_series(1, 300000) g")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    root = _cache_dir(conn, "customers")

    def held_load(generation):
        """What the view shows while generation `generation` loads (in another session)."""
        progress = root / str(generation) / "load" / "progress.json"
        with cluster.connect() as loader:
            pid = loader.info.backend_pid
            errors = []

            def load():
                try:
                    loader.execute("SELECT hudi.refresh_lookup_cache('customers')")
                except Exception as e:  # noqa: BLE001 - reaches the test below
                    errors.append(e)
            thread = threading.Thread(target=load)
            thread.start()
            try:
                wait_for("the load's progress file", progress.exists)
                os.kill(pid, signal.SIGSTOP)
                try:
                    # Held: the load cannot end while the view is read.
                    assert progress.exists()
                    shown = conn.execute("SELECT state, progress, generation FROM hudi.lookup_caches").fetchall()
                finally:
                    os.kill(pid, signal.SIGCONT)
            finally:
                thread.join()
            assert not errors, errors
            return shown

    (state, progress, generation), = held_load(1)
    assert (state, generation) == ("loading", None)
    assert progress.startswith("merging ") or " of " in progress, progress
    assert conn.execute("SELECT state, progress, rows, generation FROM hudi.lookup_caches").fetchall() == \
        [("ready", None, 300000, 1)]
    # Another index: generation 2 loads while generation 1 still serves.
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{name}')")
    shown = held_load(2)
    assert [(s, g) for s, _, g in shown] == [("rebuilding", 1), ("rebuilding", 1)], shown
    assert conn.execute("SELECT DISTINCT state, progress, generation FROM hudi.lookup_caches").fetchall() == \
        [("ready", None, 2)]
    assert "Lookup: customers" in plan_text(conn, "SELECT name FROM customers WHERE name = 'n7'")
    assert conn.execute("SELECT id FROM customers WHERE name = 'n7'").fetchall() == [(7,)]
