"""Writing from SQL: hudi.create_table, INSERT / INSERT ... SELECT / COPY as upserts, one
deltacommit per transaction, ROLLBACK leaving nothing, and tables the reference reader reads
exactly as pg_hudi does."""

import threading

import psycopg
import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from conftest import (commit_on_a_thread, kill_backend_and_wait, lock_held, new_lake, our_rows, reference_rows, rollback_once_expired,
                      run_in_threads, wait_for)


def test_inserts_upsert_by_key_and_read_back_everywhere(lake):
    conn, path = lake
    conn.execute("""INSERT INTO customers VALUES (1, 'ann', 'nl', 10.50, '2026-01-01'), (2, 'bob', 'be', 20, '2026-01-01'),
                                                 (3, 'cy', 'nl', 30, '2026-01-01')""")
    conn.execute("INSERT INTO customers SELECT g, 'gen' || g, 'fr', g, '2026-01-01' FROM generate_series(10, 60) g")
    # upserts: a newer version wins, an older one loses
    conn.execute("INSERT INTO customers VALUES (1, 'ann2', 'nl', 11, '2026-02-01'), (2, 'stale', 'be', 0, '2025-01-01')")
    with conn.cursor().copy("COPY customers (id, name, country, balance, ts) FROM STDIN") as copy:
        copy.write_row((100, "copied", "de", "1.25", "2026-03-01 00:00:00+00"))
    ours = our_rows(conn)
    assert len(ours) == 3 + 51 + 1
    assert (1, "ann2", "nl", pytest.approx(11)) == ours[0][:3] + (pytest.approx(float(ours[0][3])),)
    assert [r for r in ours if r[0] == 2][0][1] == "bob"
    theirs = reference_rows(path)
    assert [(i, n, c, float(b)) for i, n, c, b in ours] == [(i, n, c, float(b)) for i, n, c, b in theirs]
    timeline = conn.execute("SELECT count(*) FROM hudi.timeline('customers') WHERE state = 'completed'").fetchone()
    assert timeline == (4,)  # one deltacommit per statement (autocommit)


def test_one_deltacommit_per_transaction_and_rollback_leaves_nothing(lake):
    conn, path = lake
    with conn.transaction():
        conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 1, '2026-01-01')")
        conn.execute("INSERT INTO customers VALUES (2, 'b', 'nl', 1, '2026-01-01')")
    assert conn.execute("SELECT count(*) FROM hudi.timeline('customers')").fetchone() == (1,)
    def files():  # the table's, not the lock's bookkeeping
        return sorted(p.name for p in path.rglob("*") if p.is_file() and ".locks" not in p.parts)
    files_before = files()
    with conn.transaction(force_rollback=True):
        conn.execute("INSERT INTO customers VALUES (3, 'c', 'nl', 1, '2026-01-01')")
    files_after = files()
    assert files_after == files_before
    assert our_rows(conn) == [(1, "a", "nl", 1), (2, "b", "nl", 1)]


def test_bad_rows_are_errors_that_write_nothing(lake):
    conn, path = lake
    with pytest.raises(psycopg.Error) as e:
        conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 1, now()), (NULL, 'b', NULL, 1, now())")
    assert "row 2 has no value in any of its key columns (id, country)" in str(e.value)
    with pytest.raises(psycopg.Error) as e:
        conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 12345678901234, now())")
    with pytest.raises(psycopg.Error) as e:
        with conn.transaction():
            conn.execute("SAVEPOINT s")
            conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 1, now())")
    assert e.value.sqlstate == "0A000" and "subtransactions" in str(e.value)
    conn.execute("CREATE FOREIGN TABLE wrong (id bigint, nope text) SERVER lake OPTIONS (path 'customers')")
    with pytest.raises(psycopg.Error) as e:
        conn.execute("INSERT INTO wrong VALUES (1, 'x')")
    assert e.value.sqlstate == "HV005"
    assert our_rows(conn) == []
    assert not [p for p in path.rglob(".0000000*") if p.is_file()], "no log files left behind"


def test_create_table_checks_options_and_existing_tables(lake):
    conn, _ = lake
    conn.execute("CREATE FOREIGN TABLE keyless (id int) SERVER lake OPTIONS (path 'keyless')")
    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT hudi.create_table('keyless')")
    assert e.value.sqlstate == "HV002"
    conn.execute("CREATE FOREIGN TABLE other (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz) "
                 "SERVER lake OPTIONS (path 'customers', primary_key 'id,country', ordering_field 'ts', partition_by 'country', buckets '8')")
    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT hudi.create_table('other')")
    assert 'its buckets is "4", not "8"' in str(e.value)
    conn.execute("SELECT hudi.create_table('customers')")  # the same table again: accepted


def test_nbcc_stress_many_writers_no_aborts_whole_transactions(lake, cluster):
    """8 sessions x 50 transactions on overlapping keys with few distinct ordering values (so
    most versions tie), while a reader keeps reading: no transaction fails, every snapshot
    shows whole transactions, and at the end every key holds the version with the greatest
    ordering value, ties going to the later instant (Hudi's log order, whatever the commit
    order): checked against a model, and the reference reader reads the same rows."""
    conn, path = lake
    import random
    writers, commits, pairs = 8, 50, 10
    written, snapshots = [], []
    done = threading.Event()

    def writer(n):
        rng = random.Random(n)
        with cluster.connect() as c:
            for i in range(commits):
                chosen = rng.sample(range(pairs), 3)
                micros = rng.randrange(4)
                name = f"w{n}-{i}"
                ts = "2026-01-01 00:00:00+00"
                with c.transaction():
                    for p in chosen:
                        for key in (2 * p, 2 * p + 1):  # a pair is always written together
                            c.execute("INSERT INTO customers VALUES (%s, %s, 'nl', 0, %s::timestamptz + %s * interval '1 microsecond')",
                                      (key, name, ts, micros))
                    # a key of its own: its commit time names the transaction's instant
                    c.execute("INSERT INTO customers VALUES (%s, %s, 'be', 0, %s)", (1000 + n * commits + i, name, ts))
                written.append((chosen, micros, name))

    def reader():
        with cluster.connect() as c:
            while not done.is_set():
                rows = dict(c.execute("SELECT id, name FROM customers").fetchall())
                snapshots.append(rows)

    watcher = threading.Thread(target=reader)
    watcher.start()
    errors = run_in_threads(writer, writers)
    done.set()
    watcher.join()
    assert not errors, errors[:3]
    assert len(written) == writers * commits
    completed = conn.execute("SELECT count(*) FROM hudi.timeline('customers') WHERE state = 'completed'").fetchone()[0]
    assert completed == writers * commits
    # every snapshot shows whole transactions: both keys of a pair come from the same one
    assert len(snapshots) > 1
    for rows in snapshots:
        for p in range(pairs):
            assert rows.get(2 * p) == rows.get(2 * p + 1), (p, rows.get(2 * p), rows.get(2 * p + 1))
    conn.execute("CREATE FOREIGN TABLE customer_versions (id bigint, name text, _hoodie_commit_time text) "
                 "SERVER lake OPTIONS (path 'customers')")
    instant = dict(conn.execute("SELECT name, _hoodie_commit_time FROM customer_versions WHERE id >= 1000").fetchall())
    assert len(instant) == writers * commits
    model = {}
    for chosen, micros, name in written:
        for p in chosen:
            for key in (2 * p, 2 * p + 1):
                if key not in model or (micros, instant[name]) > model[key][0]:
                    model[key] = ((micros, instant[name]), name)
    # Transactions started and committed in different orders, so ties between them test the
    # rule (the completion order would pick other winners).
    completion = dict(conn.execute("SELECT instant, completion_time FROM hudi.timeline('customers')").fetchall())
    by_instant = sorted(instant.values())
    assert by_instant != sorted(by_instant, key=completion.get)
    final = dict(conn.execute("SELECT id, name FROM customers WHERE id < 1000").fetchall())
    assert final == {k: v[1] for k, v in model.items()}
    theirs = HudiTableBuilder.from_base_uri(str(path)).build().read(HudiReadOptions())
    assert {r["id"]: r["name"] for r in pa.Table.from_batches(theirs).to_pylist() if r["id"] < 1000} == final


def test_update_and_delete(lake):
    conn, path = lake
    conn.execute("INSERT INTO customers SELECT g, 'c' || g, CASE WHEN g % 2 = 0 THEN 'nl' ELSE 'be' END, g, "
                 "'2026-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, 20) g")
    # UPDATE writes the whole new row: untouched columns keep their values.
    conn.execute("UPDATE customers SET name = name || '-new', ts = ts + interval '1 day' WHERE id <= 5")
    conn.execute("DELETE FROM customers WHERE id BETWEEN 15 AND 17 OR balance = 20")
    rows = conn.execute("SELECT id, name, country, balance FROM customers ORDER BY id").fetchall()
    assert [r[0] for r in rows] == [i for i in range(1, 20) if i not in (15, 16, 17)]
    assert rows[0] == (1, "c1-new", "be", 1)
    assert rows[5] == (6, "c6", "nl", 6)
    # delete then re-insert in one transaction keeps statement order
    with conn.transaction():
        conn.execute("DELETE FROM customers WHERE id = 3")
        conn.execute("INSERT INTO customers VALUES (3, 'again', 'be', 3, '2026-01-01')")
        conn.execute("DELETE FROM customers WHERE id = 4")
    assert conn.execute("SELECT name FROM customers WHERE id IN (3, 4)").fetchall() == [("again",)]
    with pytest.raises(psycopg.Error) as e:
        conn.execute("UPDATE customers SET country = 'fr' WHERE id = 1")
    assert e.value.sqlstate == "0A000" and 'column "country"' in str(e.value)
    # the reference reader sees the same table
    ours = sorted(conn.execute("SELECT id, name FROM customers").fetchall())
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read(HudiReadOptions())
    theirs = sorted((r["id"], r["name"]) for r in pa.Table.from_batches(batches).to_pylist())
    assert ours == theirs


@pytest.mark.parametrize("rows", [1, 100_001])  # buffered only / with log files written
def test_a_killed_writer_is_rolled_back_and_nothing_is_lost(lake, cluster, rows):
    conn, path = lake
    conn.execute("INSERT INTO customers VALUES (1, 'kept', 'nl', 1, '2026-01-01')")
    victim = cluster.connect()
    pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
    victim.execute("BEGIN")
    victim.execute("INSERT INTO customers SELECT g, 'lost', 'nl', 1, '2026-01-02' FROM generate_series(2, %s + 1) g",
                   (rows,))
    pending = [p.name.split(".")[0] for p in (path / ".hoodie/timeline").glob("*.deltacommit.inflight")]
    completed = {p.name.split("_")[0] for p in (path / ".hoodie/timeline").glob("*_*.deltacommit")}
    instant = [i for i in pending if i not in completed][0]
    logs_before = [p for p in path.rglob(f"*_{instant}.log.*")]
    assert bool(logs_before) == (rows > 1)
    kill_backend_and_wait(cluster, pid)
    with cluster.connect() as c:
        assert c.execute("SELECT id, name FROM customers").fetchall() == [(1, "kept")]
        assert c.execute("SELECT * FROM hudi.rollback_failed_writes('customers')").fetchall() == []  # not yet expired
        rolled = [(r[0], r[2]) for r in rollback_once_expired(c)]
        assert rolled == [(instant, len(logs_before))]
        assert not [p for p in path.rglob(f"*{instant}*")], "no orphan files"
        assert c.execute("SELECT id, name FROM customers").fetchall() == [(1, "kept")]
        actions = dict(c.execute("SELECT action, count(*) FROM hudi.timeline('customers') GROUP BY 1").fetchall())
        assert actions == {"deltacommit": 1, "rollback": 1}
        # writing goes on
        c.execute("INSERT INTO customers VALUES (2, 'after', 'nl', 1, '2026-01-03')")
        assert c.execute("SELECT count(*) FROM customers").fetchone() == (2,)
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read(HudiReadOptions())
    assert sorted(r["name"] for r in pa.Table.from_batches(batches).to_pylist()) == ["after", "kept"]


def _commit_pausing_in_the_lock(cluster, table, pause, statements):
    """commit_on_a_thread, pausing for `pause` while COMMIT holds the table lock
    (hudi.debug_pause_before_complete); returns once the lock is held."""
    committing = commit_on_a_thread(cluster, f"hudi.debug_pause_before_complete = '{pause}'", statements)
    wait_for("the commit to take the table lock", lambda: lock_held(table))
    return committing


def test_partial_update_lets_writers_fill_different_columns(cluster):
    """merge_mode 'partial_update': each column keeps the non-NULL value with the greatest
    ordering value (ties: the later instant), so several sessions each fill some columns of the
    same keys, whatever order they commit in; compaction keeps the merged rows."""
    with new_lake(cluster) as (conn, root):
        conn.execute("""CREATE FOREIGN TABLE profiles (id bigint, name text, email text, score integer, ts timestamptz)
                        SERVER lake OPTIONS (path 'profiles', primary_key 'id', ordering_field 'ts',
                                             buckets '2', merge_mode 'partial_update')""")
        conn.execute("SELECT hudi.create_table('profiles')")
        props = dict(conn.execute("SELECT key, value FROM hudi.table_properties(%s)", (f"file://{root}/profiles",)).fetchall())
        assert props["hoodie.record.merge.mode"] == "CUSTOM"
        assert props["hoodie.compaction.payload.class"] == "org.apache.hudi.common.model.PartialUpdateAvroPayload"
        sessions = [cluster.connect() for _ in range(3)]
        for s in sessions:
            s.execute("BEGIN")
        sessions[0].execute("INSERT INTO profiles (id, name, ts) VALUES (1, 'ann', '2026-01-01'), (2, 'bob', '2026-01-01')")
        sessions[1].execute("INSERT INTO profiles (id, email, ts) VALUES (1, 'ann@x', '2026-01-02'), (3, 'cy@x', '2026-01-02')")
        # a tie with session 0's name: the later instant wins, though it commits first
        sessions[1].execute("INSERT INTO profiles (id, name, ts) VALUES (2, 'bobby', '2026-01-01')")
        # an older row fills only what is still NULL
        sessions[2].execute("INSERT INTO profiles (id, name, score, ts) VALUES (1, 'stale', 7, '2025-01-01')")
        for s in reversed(sessions):
            s.execute("COMMIT")
            s.close()
        expected = [(1, "ann", "ann@x", 7), (2, "bobby", None, None), (3, None, "cy@x", None)]
        assert conn.execute("SELECT id, name, email, score FROM profiles ORDER BY id").fetchall() == expected
        assert conn.execute("SELECT count(*) FROM hudi.compact('profiles')").fetchone() == (1,)
        assert conn.execute("SELECT id, name, email, score FROM profiles ORDER BY id").fetchall() == expected


def test_numerics_round_trip_exactly(lake):
    """numeric values go into Hudi decimals read straight from PostgreSQL's numeric format:
    signs, zeros, fractions, the column's extremes, integers with trailing zero digits."""
    conn, path = lake
    values = ["-1234.56", "0.01", "-0.01", "0", "1000", "9999999999.99", "-9999999999.99", "12.3", "100000000",
              "0.10", "5", "10000.01", "-70000"]
    conn.execute("CREATE TABLE expected (id bigint, balance numeric(12, 2))")
    for i, v in enumerate(values):
        conn.execute("INSERT INTO expected VALUES (%s, %s::numeric(12, 2))", (i, v))
    conn.execute("INSERT INTO customers SELECT id, 'n', 'nl', balance, '2026-01-01' FROM expected")
    conn.execute("INSERT INTO customers SELECT 100 + id, 'n', 'nl', balance::int, '2026-01-01' FROM expected "
                 "WHERE balance = trunc(balance)")
    ours = conn.execute("SELECT id, balance FROM customers ORDER BY id").fetchall()
    want = conn.execute("SELECT id, balance FROM expected UNION ALL SELECT 100 + id, balance FROM expected "
                        "WHERE balance = trunc(balance) ORDER BY id").fetchall()
    assert ours == want
    theirs = sorted((r[0], r[3]) for r in reference_rows(path))
    assert theirs == want


def test_commit_time_lets_the_later_instant_win(cluster):
    """merge_mode 'commit_time': the later write in Hudi's log order wins whatever the ordering
    values say, also when it commits first (the instant, not the completion, orders writes), as
    the reference reader reads it; compaction keeps it."""
    with new_lake(cluster) as (conn, root):
        conn.execute("""CREATE FOREIGN TABLE latest (id bigint, name text, ts timestamptz)
                        SERVER lake OPTIONS (path 'latest', primary_key 'id', ordering_field 'ts',
                                             buckets '1', merge_mode 'commit_time')""")
        conn.execute("SELECT hudi.create_table('latest')")
        a, b = cluster.connect(), cluster.connect()
        a.execute("BEGIN")
        a.execute("INSERT INTO latest VALUES (1, 'A', '2026-01-09'), (2, 'A', '2026-01-01')")
        b.execute("BEGIN")
        b.execute("INSERT INTO latest VALUES (1, 'B', '2026-01-01'), (2, 'B', '2026-01-09')")
        b.execute("COMMIT")
        a.execute("COMMIT")
        expected = [(1, "B"), (2, "B")]
        assert conn.execute("SELECT id, name FROM latest ORDER BY id").fetchall() == expected
        batches = HudiTableBuilder.from_base_uri(str(root / "latest")).build().read(HudiReadOptions())
        assert sorted((r["id"], r["name"]) for r in pa.Table.from_batches(batches).to_pylist()) == expected
        assert conn.execute("SELECT count(*) FROM hudi.compact('latest')").fetchone() == (1,)
        assert conn.execute("SELECT id, name FROM latest ORDER BY id").fetchall() == expected


def test_smallint_columns_are_written_as_ints_and_read_back(cluster):
    """Avro has no 16-bit integer: a smallint column is written as an int, reads back as
    smallint, and a stored int outside smallint's range is an error, not a wrapped value."""
    with new_lake(cluster) as (conn, root):
        conn.execute("""CREATE FOREIGN TABLE small (id bigint, s smallint, i integer, ts timestamptz) SERVER lake
                        OPTIONS (path 'small', primary_key 'id', ordering_field 'ts', buckets '1')""")
        conn.execute("SELECT hudi.create_table('small')")
        conn.execute("INSERT INTO small VALUES (1, 32767, 40000, now()), (2, -32768, 1, now())")
        assert conn.execute("SELECT id, s FROM small ORDER BY id").fetchall() == [(1, 32767), (2, -32768)]
        batches = HudiTableBuilder.from_base_uri(str(root / "small")).build().read(HudiReadOptions())
        assert sorted((r["id"], r["s"]) for r in pa.Table.from_batches(batches).to_pylist()) == [(1, 32767), (2, -32768)]
        conn.execute("CREATE FOREIGN TABLE narrow (id bigint, i smallint) SERVER lake OPTIONS (path 'small')")
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT i FROM narrow ORDER BY id").fetchall()
        assert e.value.sqlstate == "HV004" and "value out of range for type smallint" in str(e.value), e.value


def test_an_idle_transaction_keeps_its_heartbeat_and_commits(lake, cluster):
    """A transaction that sits idle between statements for three times the heartbeat expiry
    is alive: its backend beats for it meanwhile, so hudi.rollback_failed_writes (with the
    same expiry) leaves it alone, and it commits."""
    import time
    conn, path = lake
    conn.execute("ALTER SYSTEM SET hudi.heartbeat_expiry = 1")
    conn.execute("SELECT pg_reload_conf()")
    with cluster.connect() as writer, cluster.connect() as cleaner:
        writer.execute("BEGIN")
        writer.execute("INSERT INTO customers VALUES (1, 'idle', 'nl', 1, '2026-01-01')")
        (instant,) = [p.name.split(".")[0] for p in (path / ".hoodie/timeline").glob("*.deltacommit.inflight")]
        heartbeat = path / ".hoodie/.heartbeat" / instant
        beats = set()
        idle_until = time.monotonic() + 3.5  # three expiries and a half, without a statement
        while time.monotonic() < idle_until:
            beats.add(int(heartbeat.read_text() or 0))
            assert cleaner.execute("SELECT * FROM hudi.rollback_failed_writes('customers')").fetchall() == []
            time.sleep(0.1)
        assert len(beats) >= 8, sorted(beats)  # a beat every quarter of the expiry
        writer.execute("COMMIT")
    assert our_rows(conn) == [(1, "idle", "nl", 1)]
    assert not heartbeat.exists(), "a committed write's heartbeat is gone"


def test_a_cancel_during_commit_waits_for_the_commit(lake, cluster):
    """A cancel that lands while COMMIT completes the deltacommit (here: holding the table
    lock, the completion time taken) is served after it: PostgreSQL and the table agree (a heap
    row of the same transaction and the Hudi row are both there), and the lock is released at
    once, not left to its lease."""
    conn, path = lake
    conn.execute("CREATE TABLE audit (id bigint)")
    victim, pid, committing, outcome = _commit_pausing_in_the_lock(
        cluster, path, "1s", ["INSERT INTO customers VALUES (1, 'committed', 'nl', 1, '2026-01-01')", "INSERT INTO audit VALUES (1)"])
    assert conn.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone() == (True,)
    committing.join(30)
    assert outcome == [None], outcome
    assert not lock_held(path), "released by the commit"
    assert conn.execute("SELECT count(*) FROM audit").fetchone() == (1,)
    assert our_rows(conn) == [(1, "committed", "nl", 1)]
    victim.close()



def test_file_mode_decides_who_may_read_new_files(cluster):
    """New files and directories of file:// tables are the server's OS user's only by default
    (PostgreSQL's umask); hudi.file_mode, a server setting, opens them to a group or to every
    user of the host (a Spark job reading the lake). Existing files keep their mode."""
    from conftest import create_lake_server, give_to_postgres
    root = cluster.directory / "lake"
    root.mkdir()
    give_to_postgres(root)
    conn = cluster.connect()
    create_lake_server(conn, root)

    def written(session, name):
        session.execute(f"CREATE FOREIGN TABLE {name} (id bigint, v text) SERVER lake OPTIONS (path '{name}', primary_key 'id', merge_mode 'commit_time')")
        session.execute(f"SELECT hudi.create_table('{name}')")
        session.execute(f"INSERT INTO {name} VALUES (1, 'a')")
        return modes(name)

    def modes(name):
        found = {}
        for path in [root / name, *(root / name).rglob("*")]:
            found.setdefault("directories" if path.is_dir() else "files", set()).add(path.stat().st_mode & 0o777)
        return found

    assert written(conn, "private") == {"directories": {0o700}, "files": {0o600}}
    # A server setting of listed modes only: not a session's, nothing setuid or world-writable.
    with pytest.raises(psycopg.errors.CantChangeRuntimeParam):
        conn.execute("SET hudi.file_mode = '0644'")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("ALTER SYSTEM SET hudi.file_mode = '0777'")
    conn.execute("ALTER SYSTEM SET hudi.file_mode = '0644'")
    conn.execute("SELECT pg_reload_conf()")
    wait_for("the new file mode", lambda: cluster.connect().execute("SHOW hudi.file_mode").fetchone() == ("0644",))
    shared = cluster.connect()
    assert written(shared, "shared") == {"directories": {0o755}, "files": {0o644}}
    shared.execute("INSERT INTO private VALUES (2, 'b')")
    assert 0o700 in modes("private")["directories"] and modes("private")["files"] == {0o600, 0o644}
