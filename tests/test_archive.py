"""Archival from SQL: hudi.archive moves the oldest completed instants of the active timeline
into the LSM history (Parquet rows of HoodieLSMTimelineInstant, a manifest and _version_, as
Hudi 1.x writes them), keeping archive_min_instants to archive_max_instants commits active;
snapshot, time travel and change reads stay exactly what they were, and the reference reader
(which reads no history) still reads the same rows."""

import json

import psycopg
import pyarrow.parquet as pq
import pytest

from conftest import archived_instants, our_rows, reference_rows, refused


def write_round(conn, n):
    conn.execute(f"INSERT INTO customers SELECT g, 'r{n}-' || g, (ARRAY['nl','be'])[g % 2 + 1], g + {n}, "
                 f"'2026-01-01'::timestamptz + interval '{n} hour' FROM generate_series(1, 30) g")
    conn.execute(f"UPDATE customers SET balance = balance + 1, ts = ts + interval '1 minute' WHERE id % 4 = {n % 4}")


def completed_commits(conn):
    return conn.execute("SELECT instant, completion_time FROM hudi.timeline('customers') "
                        "WHERE state = 'completed' AND action IN ('commit', 'deltacommit') ORDER BY instant").fetchall()


def changes_since(conn, start):
    conn.execute(f"SET hudi.start_instant = '{start}'")
    try:
        return sorted(conn.execute("SELECT _hoodie_record_key, name, balance, _hoodie_operation FROM customer_changes").fetchall())
    finally:
        conn.execute("RESET hudi.start_instant")


def as_of(conn, instant):
    conn.execute(f"SET hudi.as_of_instant = '{instant}'")
    try:
        return our_rows(conn)
    finally:
        conn.execute("RESET hudi.as_of_instant")


def test_archive_moves_old_instants_to_the_history_and_reads_stay_exact(lake):
    conn, table = lake
    conn.execute("SET TimeZone = 'America/Sao_Paulo'")
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD archive_min_instants '4', ADD archive_max_instants '6', "
                 "ADD compaction_delta_commits '1')")
    conn.execute("""CREATE FOREIGN TABLE customer_changes (_hoodie_record_key text, name text, balance numeric(12, 2),
                    _hoodie_operation text) SERVER lake OPTIONS (path 'customers', query_type 'incremental')""")
    for n in range(5):
        write_round(conn, n)
        if n % 2 == 1:
            assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone()[0] == 1
    commits = completed_commits(conn)
    rows = our_rows(conn)
    assert rows == reference_rows(table)
    changes = {c: changes_since(conn, c) for _, c in commits}
    snapshots = {i: as_of(conn, i) for i, _ in commits}
    active_before = conn.execute("SELECT count(*) FROM hudi.timeline('customers')").fetchone()[0]

    (archived, archived_commits, first, last), = conn.execute("SELECT * FROM hudi.archive('customers')").fetchall()
    assert archived_commits >= 2 and first == commits[0][0] and last < commits[-1][0], (archived, first, last)
    assert conn.execute("SELECT count(*) FROM hudi.timeline('customers')").fetchone()[0] == active_before - archived
    assert conn.execute("SELECT min(instant) FROM hudi.timeline('customers')").fetchone()[0] > last

    # The history, as Hudi's LSM timeline writer leaves it.
    history = table / ".hoodie/timeline/history"
    assert (history / "_version_").read_text() == "1"
    manifest = json.loads((history / "manifest_1").read_text())
    (entry,) = manifest["files"]
    assert entry["fileName"] == f"{first}_{last}_0.parquet"
    assert entry["fileLen"] == (history / entry["fileName"]).stat().st_size
    parquet = pq.ParquetFile(history / entry["fileName"])
    schema = parquet.schema_arrow
    assert schema.names == ["instantTime", "completionTime", "action", "metadata", "plan", "version"]
    assert [str(schema.field(n).type) for n in schema.names] == ["string", "string", "string", "binary", "binary", "int32"]
    assert not schema.field("version").nullable
    assert b"HoodieLSMTimelineInstant" in parquet.metadata.metadata[b"parquet.avro.schema"]
    archived_rows = parquet.read().to_pylist()
    assert len(archived_rows) == archived and set(archived_instants(table)) == {r["instantTime"] for r in archived_rows}
    assert [r["instantTime"] for r in archived_rows] == sorted(r["instantTime"] for r in archived_rows)
    by_instant = {r["instantTime"]: r for r in archived_rows}
    for instant, completion in commits:
        if instant <= last:
            row = by_instant[instant]
            assert row["completionTime"] == completion and row["version"] == 1
            assert row["metadata"], "the completed instant's bytes"
            compaction = row["action"] == "commit"
            assert (row["plan"] is not None) == compaction, "a compaction keeps its plan"

    # Reads: the same rows, the reference reader too; time travel and changes from archived
    # instants exactly as before.
    assert our_rows(conn) == rows == reference_rows(table)
    for instant, completion in commits:
        assert as_of(conn, instant) == snapshots[instant], f"as of {instant}"
        assert changes_since(conn, completion) == changes[completion], f"changes after {completion}"
    # Nothing more to archive.
    assert conn.execute("SELECT * FROM hudi.archive('customers')").fetchall() == []


def test_archive_refuses_bad_options_other_roles_and_old_tables(lake, cluster):
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD archive_min_instants '30')")
    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT * FROM hudi.archive('customers')")
    assert e.value.sqlstate == "22023" and "must be less than archive_max_instants (30)" in str(e.value)
    assert refused(conn, "ALTER FOREIGN TABLE customers OPTIONS (SET archive_min_instants 'many')") == "HV024"
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (DROP archive_min_instants)")
    conn.execute("CREATE ROLE stranger LOGIN")
    conn.execute("GRANT USAGE ON SCHEMA hudi TO stranger")
    conn.execute("GRANT SELECT ON customers TO stranger")
    with psycopg.connect(host="127.0.0.1", port=cluster.port, user="stranger", dbname="postgres", autocommit=True) as other:
        with pytest.raises(psycopg.Error) as e:
            other.execute("SELECT * FROM hudi.archive('customers')")
        assert e.value.sqlstate == "42501" and "must be owner" in str(e.value)
    assert not (table / ".hoodie/timeline/history/_version_").exists()


def test_archive_says_what_holds_it_back(lake):
    """A file group that nobody writes keeps its latest slice, and archival never passes the
    commits of a latest slice (readers of the active timeline alone drop files of archived
    commits): hudi.archive archives what it may and says, in a NOTICE, what keeps the active
    timeline above its maximum. Once that group is written and compacted, archival goes on."""
    conn, table = lake
    notices = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary))
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD archive_min_instants '2', ADD archive_max_instants '3', "
                 "ADD compaction_delta_commits '1')")
    conn.execute("INSERT INTO customers VALUES (1, 'quiet', 'be', 1, now())")
    for n in range(4):
        conn.execute(f"INSERT INTO customers VALUES (2, 'n{n}', 'nl', {n}, now())")
        assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone()[0] == 1
    rows = our_rows(conn)
    commits = completed_commits(conn)
    quiet_base = commits[2][0]  # the first compaction: the 'be' group's latest base file
    (_, archived, first, last), = conn.execute("SELECT * FROM hudi.archive('customers')").fetchall()
    assert (archived, first, last) == (2, commits[0][0], commits[1][0])
    (why,) = [n for n in notices if "archival stops before" in n]
    assert why.startswith(f"the active timeline keeps {len(commits) - 2} commits, more than archive_max_instants (3)"), why
    assert f"the latest file slices, which hold files of commits from {quiet_base} on" in why, why
    assert our_rows(conn) == rows == reference_rows(table)

    notices.clear()
    conn.execute("INSERT INTO customers VALUES (1, 'woken', 'be', 2, now())")
    conn.execute("SELECT * FROM hudi.compact('customers')")
    assert conn.execute("SELECT * FROM hudi.archive('customers')").fetchall(), "archival goes on"
    assert not [n for n in notices if "archival stops before" in n], notices
    assert len(completed_commits(conn)) <= 3
    assert our_rows(conn) == reference_rows(table)
