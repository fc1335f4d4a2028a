"""Compaction from SQL: hudi.compact, hudi.schedule_compaction and hudi.run_compaction rewrite
file slices into base files while the rows stay the same, for pg_hudi and for the reference
reader `hudi` 0.5.0; writers go on while a plan is pending; errors carry SQLSTATEs."""

import psycopg
import pytest
from hudi import HudiTableBuilder

from conftest import our_rows, reference_rows


def populate(conn):
    conn.execute("INSERT INTO customers SELECT g, 'c' || g, (ARRAY['nl','be','fr'])[g % 3 + 1], g, '2026-01-01' "
                 "FROM generate_series(1, 300) g")
    conn.execute("UPDATE customers SET name = name || '-updated', ts = '2026-02-01' WHERE id % 7 = 0")
    conn.execute("DELETE FROM customers WHERE id % 10 = 0")


def reference_slices(path):
    return sorted((s.partition_path, s.file_id, s.base_file_name or None, sorted(s.log_file_names))
                  for s in HudiTableBuilder.from_base_uri(str(path)).build().get_file_slices())


def our_slices(conn):
    return sorted((p, f, b, sorted(logs)) for p, f, b, logs in conn.execute(
        "SELECT partition_path, file_id, base_file, log_files FROM hudi.file_slices('customers')"))


def test_compact_rewrites_slices_and_every_reader_agrees(lake):
    conn, path = lake
    populate(conn)
    first_write = conn.execute("SELECT min(instant) FROM hudi.timeline('customers')").fetchone()[0]
    before = our_rows(conn)
    assert len(before) == 270

    instant, completion, groups, written = conn.execute("SELECT * FROM hudi.compact('customers')").fetchone()
    assert completion > instant and groups == 12  # 3 countries x 4 buckets
    assert written == len(before)
    assert our_rows(conn) == before
    # No column asked for: base files are read for their row counts alone.
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (len(before),)
    assert [(i, n, c, float(b)) for i, n, c, b in reference_rows(path)] == [(i, n, c, float(b)) for i, n, c, b in before]
    slices = our_slices(conn)
    assert all(base.endswith(f"_{instant}.parquet") and logs == [] for _, _, base, logs in slices)
    assert slices == reference_slices(path)
    action = conn.execute("SELECT action, state FROM hudi.timeline('customers') WHERE instant = %s", (instant,)).fetchone()
    assert action == ("commit", "completed")

    # Time travel to before the compaction still reads the log slices.
    conn.execute("SELECT set_config('hudi.as_of_instant', %s, false)", (first_write,))
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (300,)
    conn.execute("RESET hudi.as_of_instant")

    # Writes after the compaction merge onto the new base files.
    conn.execute("UPDATE customers SET name = 'after', ts = '2026-03-01' WHERE id = 1")
    assert conn.execute("SELECT name FROM customers WHERE id = 1").fetchone() == ("after",)
    assert [r[1] for r in reference_rows(path) if r[0] == 1] == ["after"]
    assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone() == (0,), "nothing left"
    assert conn.execute("SELECT name FROM customers WHERE id = 1").fetchone() == ("after",)


def test_writers_go_on_while_a_plan_is_pending(lake):
    conn, path = lake
    populate(conn)
    instant = conn.execute("SELECT hudi.schedule_compaction('customers')").fetchone()[0]
    assert conn.execute("SELECT state FROM hudi.timeline('customers') WHERE instant = %s", (instant,)).fetchone() == ("requested",)
    conn.execute("UPDATE customers SET name = 'during', ts = '2026-03-01' WHERE id <= 5")
    conn.execute("INSERT INTO customers VALUES (1000, 'new', 'nl', 1, '2026-03-01')")
    during = our_rows(conn)
    assert [r[1] for r in during if r[0] <= 5] == ["during"] * 5
    assert reference_rows(path) == during
    # Like the reference reader, the pending plan adds no empty slice: the logs that arrived
    # after it stay in the slice they are read with until the compaction completes.
    assert our_slices(conn) == reference_slices(path)

    instant2, _, groups, _ = conn.execute("SELECT * FROM hudi.run_compaction('customers', %s)", (instant,)).fetchone()
    assert instant2 == instant and groups == 12
    assert our_rows(conn) == during == reference_rows(path)
    # The logs written while the plan was pending stay on top of the new base files.
    with_logs = [s for s in our_slices(conn) if s[3]]
    assert with_logs and all(s[2].endswith(f"_{instant}.parquet") for s in with_logs)
    assert our_slices(conn) == reference_slices(path)

    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT * FROM hudi.run_compaction('customers', %s)", (instant,))
    assert e.value.sqlstate == "22023" and "already completed" in str(e.value)
    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT * FROM hudi.run_compaction('customers', '20200101000000000')")
    assert "no pending compaction" in str(e.value)


def test_only_the_owner_compacts(lake):
    conn, _ = lake
    populate(conn)
    conn.execute("CREATE ROLE clerk")
    conn.execute("GRANT SELECT, INSERT ON customers TO clerk")
    conn.execute("SET ROLE clerk")
    for call in ("SELECT * FROM hudi.compact('customers')", "SELECT hudi.schedule_compaction('customers')",
                 "SELECT * FROM hudi.rollback_failed_writes('customers')"):
        with pytest.raises(psycopg.Error) as e:
            conn.execute(call)
        assert e.value.sqlstate == "42501", call
    conn.execute("RESET ROLE")
    assert conn.execute("SELECT count(*) FROM hudi.timeline('customers') WHERE action = 'commit'").fetchone() == (0,)


def test_a_consumer_sees_updates_and_deletes_that_a_compaction_folded_away(lake):
    conn, _ = lake
    conn.execute("CREATE FOREIGN TABLE customer_changes (id bigint, name text, _hoodie_operation text) "
                 "SERVER lake OPTIONS (path 'customers', query_type 'incremental')")
    consume = ("SELECT id, name, _hoodie_operation "
               "FROM hudi.consume(NULL::customer_changes, 'etl') ORDER BY 1")
    conn.execute("INSERT INTO customers SELECT g, 'c' || g, (ARRAY['nl','be','fr'])[g % 3 + 1], g, '2026-01-01' "
                 "FROM generate_series(1, 30) g")
    assert [op for _, _, op in conn.execute(consume).fetchall()] == ["I"] * 30
    # Changes, then a compaction that folds them into base files, then more changes.
    conn.execute("UPDATE customers SET name = 'before', ts = '2026-02-01' WHERE id IN (1, 2)")
    conn.execute("DELETE FROM customers WHERE id IN (3, 4)")
    conn.execute("INSERT INTO customers VALUES (31, 'new', 'nl', 31, '2026-02-01')")
    assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone()[0] > 0
    conn.execute("UPDATE customers SET name = 'after', ts = '2026-03-01' WHERE id IN (2, 5)")
    conn.execute("DELETE FROM customers WHERE id = 6")
    assert conn.execute(consume).fetchall() == [
        (1, "before", "U"), (2, "after", "U"), (3, None, "D"), (4, None, "D"),
        (5, "after", "U"), (6, None, "D"), (31, "new", "I")]
    assert conn.execute(consume).fetchall() == []


def test_a_cancel_waits_for_the_compactions_locked_section(lake, cluster):
    """A cancel that lands while a compaction holds the table lock (its completion time taken)
    is served after the locked section: the lock is released at once, not left to its lease,
    and the compaction either completed or left nothing visible; the rows stay the same."""
    import threading
    from conftest import lock_held, refused, wait_for
    conn, path = lake
    populate(conn)
    before = our_rows(conn)
    with cluster.connect() as compactor:
        pid = compactor.execute("SELECT pg_backend_pid()").fetchone()[0]
        compactor.execute("SET hudi.debug_pause_before_complete = '2s'")
        outcome = []
        thread = threading.Thread(target=lambda: outcome.append(refused(compactor, "SELECT * FROM hudi.compact('customers')")))
        thread.start()
        # The plan is written before the completion's lock is taken.
        wait_for("the plan", lambda: list((path / ".hoodie/timeline").glob("*.compaction.requested")))
        wait_for("the completion to take the lock", lambda: lock_held(path))
        assert conn.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone() == (True,)
        thread.join(30)
        assert outcome in ([None], ["57014"]), outcome
        assert not lock_held(path), "released, not left to the lease"
    commits = conn.execute("SELECT count(*) FROM hudi.timeline('customers') WHERE action = 'commit'").fetchone()[0]
    assert commits == (1 if outcome == [None] else commits)
    assert our_rows(conn) == before == reference_rows(path)
    conn.execute("INSERT INTO customers VALUES (1000, 'after', 'nl', 1, '2026-03-01')")
    assert our_rows(conn) == sorted(before + [(1000, "after", "nl", 1)])


def test_one_statement_sees_what_it_changed_and_the_next_what_others_did(lake, cluster):
    """The state a backend keeps of a table is not stale: a function that reads, compacts and
    reads again sees its compaction (one statement), and a statement after another session's
    write sees that write, with the state kept or not (`hudi.cache_table_state`)."""
    conn, _ = lake
    conn.execute("INSERT INTO customers SELECT g, 'c' || g, 'nl', g, '2026-01-01' FROM generate_series(1, 50) g")
    conn.execute("""CREATE FUNCTION read_compact_read() RETURNS TABLE (rows_before bigint, commits bigint, logs bigint)
                    LANGUAGE plpgsql AS $$
                    BEGIN
                      rows_before := (SELECT count(*) FROM customers);
                      PERFORM hudi.compact('customers');
                      commits := (SELECT count(*) FROM hudi.timeline('customers') WHERE action = 'commit');
                      logs := (SELECT sum(cardinality(log_files)) FROM hudi.file_slices('customers'));
                      RETURN NEXT;
                    END $$""")
    assert conn.execute("SELECT * FROM read_compact_read()").fetchone() == (50, 1, 0)
    # A write begun after the statement first read the table is seen by its later reads.
    conn.execute("""CREATE FUNCTION read_write_read() RETURNS text LANGUAGE plpgsql AS $$
                    BEGIN
                      PERFORM count(*) FROM customers;
                      INSERT INTO customers VALUES (1000, 'new', 'nl', 1, '2026-01-01');
                      UPDATE customers SET name = name || ' and updated' WHERE id = 1000;
                      RETURN (SELECT name FROM customers WHERE id = 1000);
                    END $$""")
    with conn.transaction(force_rollback=True):
        assert conn.execute("SELECT read_write_read()").fetchone() == ("new and updated",)
    for cache in ("on", "off"):
        conn.execute(f"SET hudi.cache_table_state = {cache}")
        before = our_rows(conn)
        with cluster.connect() as other:
            other.execute("UPDATE customers SET name = name || '+' WHERE id % 2 = 0")
        after = our_rows(conn)
        assert after == [(i, name + "+" if i % 2 == 0 else name, c, b) for i, name, c, b in before]
        assert after == reference_rows(lake[1])
