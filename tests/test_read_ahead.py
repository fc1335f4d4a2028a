"""Scans decode and merge file slices ahead on helper threads (hudi.read_ahead_slices): the
rows are the same at every depth, rescans restart the read-ahead, and a query cancelled while
slices are in flight leaves a working backend."""

import psycopg
import pytest

from conftest import our_rows, reference_rows


def populate(conn):
    """Twelve slices (3 countries x 4 buckets) with base files and logs on top."""
    conn.execute("INSERT INTO customers SELECT g, 'c' || g, (ARRAY['nl','be','fr'])[g % 3 + 1], g, '2026-01-01' "
                 "FROM generate_series(1, 3000) g")
    conn.execute("SELECT hudi.compact('customers')")
    conn.execute("UPDATE customers SET name = name || '-updated', ts = '2026-02-01' WHERE id % 7 = 0")
    conn.execute("DELETE FROM customers WHERE id % 10 = 0")
    conn.execute("INSERT INTO customers SELECT g, 'new' || g, 'de', g, '2026-03-01' FROM generate_series(3001, 3100) g")


@pytest.mark.parametrize("depth", [1, 2, 8])
def test_rows_are_the_same_at_every_read_ahead_depth(lake, depth):
    conn, path = lake
    populate(conn)
    conn.execute("SET hudi.read_ahead_slices = 0")
    expected = our_rows(conn)
    assert len(expected) == 2700 + 100
    assert [r[:3] for r in expected] == [r[:3] for r in reference_rows(path)]
    conn.execute(f"SET hudi.read_ahead_slices = {depth}")
    assert our_rows(conn) == expected
    assert conn.execute("SELECT count(*), sum(balance) FROM customers").fetchone() == (len(expected), sum(r[3] for r in expected))
    # LIMIT stops the scan with slices still in flight; the next scan starts afresh.
    assert len(conn.execute("SELECT id FROM customers LIMIT 5").fetchall()) == 5
    assert our_rows(conn) == expected


def test_rescans_restart_the_read_ahead(lake):
    conn, _ = lake
    populate(conn)
    # A nested loop that scans the foreign table again for every outer row.
    for setting in ("enable_hashjoin", "enable_mergejoin", "enable_material"):
        conn.execute(f"SET {setting} = off")
    query = "SELECT count(*) FROM (SELECT id FROM customers WHERE id <= 40) a JOIN customers b ON a.id = b.id"
    plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {query}"))
    assert "Nested Loop" in plan and plan.count("Foreign Scan") == 2, plan
    # ids 1..40 without the 4 deleted multiples of ten
    assert conn.execute(query).fetchone() == (36,)


def test_a_query_cancelled_with_slices_in_flight_leaves_a_working_backend(lake):
    conn, _ = lake
    populate(conn)
    conn.execute("SET hudi.read_ahead_slices = 4")
    expected = conn.execute("SELECT count(*) FROM customers").fetchone()
    for setting in ("enable_hashjoin", "enable_mergejoin", "enable_material"):
        conn.execute(f"SET {setting} = off")
    conn.execute("SET statement_timeout = '300ms'")
    with pytest.raises(psycopg.errors.QueryCanceled):
        conn.execute("SELECT count(*) FROM customers a JOIN customers b ON a.name = b.name")
    conn.execute("RESET statement_timeout")
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == expected


def test_a_backend_has_a_bounded_pool_of_helpers(lake):
    """However deep the read-ahead and however many scans a query runs, a backend decodes on
    at most one helper thread per core, which it keeps for later scans."""
    import os
    conn, _ = lake
    populate(conn)
    conn.execute("SET hudi.read_ahead_slices = 8")
    for setting in ("enable_hashjoin", "enable_mergejoin", "enable_material"):
        conn.execute(f"SET {setting} = off")
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]

    def helpers():
        names = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        return names.count("hudi-helper")

    query = "SELECT count(*) FROM (SELECT id FROM customers WHERE id <= 40) a JOIN customers b ON a.id = b.id"
    assert conn.execute(query).fetchone() == (36,)
    limit = min(os.cpu_count(), 8)
    assert 1 <= helpers() <= limit
    for _ in range(3):
        assert conn.execute(query).fetchone() == (36,)
        assert 1 <= helpers() <= limit, "kept, and never more"
