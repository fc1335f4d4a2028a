"""Every shipped fixture, imported with IMPORT FOREIGN SCHEMA and read with SELECT *, returns
exactly the rows of its expected/ file (the reference reader's snapshot)."""

import re
import shutil

import pytest

import hudi_rows
from conftest import give_to_postgres, new_lake, plan_text, refused
from hudi_rows import same

META = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
        "_hoodie_partition_path", "_hoodie_file_name"]


@pytest.fixture
def lake(cluster, fixtures_root):
    """All fixtures unpacked below one warehouse, each under its kind (sample_table/cow, ...)."""
    zips = hudi_rows.fixture_zips(fixtures_root)
    with new_lake(cluster, fixtures_root, zips, by_kind=True):
        return zips


def schema_of(kind):
    return str(kind).replace("/", "_")


def test_select_star_matches_expected_for_every_fixture(cluster, fixtures_root, lake):
    kinds = sorted({z.parent for z in lake})
    with cluster.connect() as conn:
        conn.execute("SET timezone = 'UTC'")
        for kind in kinds:
            conn.execute(f'CREATE SCHEMA "{schema_of(kind)}"')
            conn.execute(f'IMPORT FOREIGN SCHEMA "{kind}" FROM SERVER lake INTO "{schema_of(kind)}"')
        failures = []
        for z in lake:
            expected = hudi_rows.expected_for(fixtures_root, z)
            cur = conn.execute(f'SELECT * FROM "{schema_of(z.parent)}"."{z.stem}"')
            names = [d.name for d in cur.description]
            rows = [dict(zip(names, r)) for r in cur.fetchall()]
            assert names[:5] == META, z
            if expected["columns"]:  # an empty table's expected file lists no columns
                data_columns = [n for n in names if n not in META]
                if data_columns != [c for c in expected["columns"] if c not in META]:
                    failures.append(f"{z}: columns {data_columns} vs {expected['columns']}")
            keys = expected["rows"][0].keys() if expected["rows"] else names
            ours = [{k: hudi_rows.normalize(r[k]) for k in keys if k != "_hoodie_file_name"} for r in rows]
            theirs = expected["rows"]
            if "_hoodie_record_key" in keys:
                ours.sort(key=hudi_rows.sort_key)
            else:  # no record keys: compare as sets
                ours.sort(key=repr)
                theirs = sorted(theirs, key=repr)
            if len(ours) != len(theirs) or not all(same(a, b) for a, b in zip(ours, theirs)):
                failures.append(f"{z}: {len(ours)} rows vs {len(theirs)} expected; first: {ours[:1]} vs {theirs[:1]}")
        assert not failures, "\n".join(failures)


def damaged_copy(root, lake, name, partition):
    """A copy `name` of the fixture v9_txns_simple_meta beside the others, with the latest log
    file of its metadata table's `partition` cut short by 100 bytes."""
    source = next(root / z.parent / z.stem for z in lake if z.stem == "v9_txns_simple_meta")
    shutil.copytree(source, root / name)
    give_to_postgres(root / name)
    log = max((root / name / ".hoodie" / "metadata" / partition).glob(".*.log.*"))
    log.write_bytes(log.read_bytes()[:-100])


def test_tables_with_a_metadata_table_are_listed_through_it(cluster, lake):
    """A table version 8+ whose hoodie.properties lists `files` among its metadata partitions
    is listed through its metadata table (EXPLAIN VERBOSE says as of which instant); every
    other table by listing storage. (That the rows are the reference reader's is the test
    above.)"""
    root = cluster.directory / "lake"
    kinds = sorted({z.parent for z in lake})
    through_metadata = 0
    with cluster.connect() as conn:
        for kind in kinds:
            conn.execute(f'CREATE SCHEMA "listed_{schema_of(kind)}"')
            conn.execute(f'IMPORT FOREIGN SCHEMA "{kind}" FROM SERVER lake INTO "listed_{schema_of(kind)}"')
        for z in lake:
            properties = (root / z.parent / z.stem / ".hoodie" / "hoodie.properties").read_text()
            values = dict(line.split("=", 1) for line in properties.splitlines() if "=" in line and not line.startswith("#"))
            declared = int(values["hoodie.table.version"]) >= 8 and "files" in values.get("hoodie.table.metadata.partitions", "").split(",")
            plan = plan_text(conn, f'(VERBOSE) SELECT * FROM "listed_{schema_of(z.parent)}"."{z.stem}"')
            listed = next(line.split(": ", 1)[1] for line in plan.splitlines() if "Hudi Files Listed From" in line)
            if declared:
                through_metadata += 1
                assert listed.startswith("metadata table as of 20"), (z, listed)
            else:
                assert listed == "storage", (z, listed)
    assert through_metadata >= 5
    # A damaged metadata table (its latest files log cut short) is a clear XX001, no backtrace;
    # on a copy of a fixture, next to the others.
    damaged_copy(root, lake, "damaged_meta", "files")
    with cluster.connect() as conn:
        conn.execute("CREATE FOREIGN TABLE damaged_meta (txn_id text) SERVER lake OPTIONS (path 'damaged_meta')")
        assert refused(conn, "SELECT count(*) FROM damaged_meta") == "XX001"
        shutil.rmtree(root / "damaged_meta" / ".hoodie" / "metadata")
        assert conn.execute("SELECT count(*) FROM damaged_meta").fetchone()[0] > 0


def test_column_statistics_of_a_metadata_table_prune_slices(cluster, lake):
    """Where Spark's metadata table holds column statistics, a filter skips the file slices
    whose files' bounds rule it out (EXPLAIN counts the slices kept), and reads the rows the
    same filter over an OFFSET 0 fence (no pushdown) reads."""
    z = next(z for z in lake if z.stem == "v9_txns_simple_meta")
    table = f'stats."{z.stem}"'
    with cluster.connect() as conn:
        conn.execute("CREATE SCHEMA stats")
        conn.execute(f'IMPORT FOREIGN SCHEMA "{z.parent}" LIMIT TO ("{z.stem}") FROM SERVER lake INTO stats')
        ids = [r[0] for r in conn.execute(f"SELECT DISTINCT txn_id FROM {table} ORDER BY 1")]
        assert len(ids) > 3
        pruned = 0
        for value in ids[::max(1, len(ids) // 5)] + ["no such id"]:
            plan = plan_text(conn, f"(VERBOSE) SELECT * FROM {table} WHERE txn_id = '{value}'")
            kept, total = map(int, re.search(r"Hudi File Slices: (\d+) of (\d+)", plan).groups())
            pruned += kept < total
            ours = conn.execute(f"SELECT * FROM {table} WHERE txn_id = %s", (value,)).fetchall()
            fenced = conn.execute(f"SELECT * FROM (SELECT * FROM {table} OFFSET 0) t WHERE txn_id = %s", (value,)).fetchall()
            assert sorted(map(repr, ours)) == sorted(map(repr, fenced)), value
        assert pruned, "no filter skipped a slice"


def test_damaged_column_statistics_are_not_used_and_said_so_once(cluster, lake):
    """A metadata table whose column statistics cannot be read (their latest log cut short) does
    not fail filtered reads, as it did with XX001: as Hudi's readers do by default
    (`hoodie.fileIndex.dataSkippingFailureMode` fallback), the filter reads every file slice —
    the rows of an OFFSET 0 fence — and the first read of the table state warns once why."""
    damaged_copy(cluster.directory / "lake", lake, "damaged_stats", "column_stats")
    with cluster.connect() as conn:
        notices = []
        conn.add_notice_handler(lambda n: notices.append((n.severity_nonlocalized, n.message_primary)))
        conn.execute("CREATE FOREIGN TABLE damaged_stats (txn_id text) SERVER lake OPTIONS (path 'damaged_stats')")
        ids = [r[0] for r in conn.execute("SELECT DISTINCT txn_id FROM damaged_stats ORDER BY 1")]
        assert len(ids) > 3 and not notices, notices
        for value in ids[::max(1, len(ids) // 4)] + ["no such id"]:
            ours = conn.execute("SELECT txn_id FROM damaged_stats WHERE txn_id = %s", (value,)).fetchall()
            fenced = conn.execute("SELECT txn_id FROM (SELECT * FROM damaged_stats OFFSET 0) t WHERE txn_id = %s", (value,)).fetchall()
            assert sorted(ours) == sorted(fenced) and bool(ours) == (value in ids), value
            plan = plan_text(conn, f"(VERBOSE) SELECT * FROM damaged_stats WHERE txn_id = '{value}'")
            kept, total = map(int, re.search(r"Hudi File Slices: (\d+) of (\d+)", plan).groups())
            assert kept == total, plan
        warned = [m for severity, m in notices if severity == "WARNING"]
        assert len(warned) == 1, notices
        assert 'column statistics in the metadata table of Hudi table "' in warned[0] and "cannot be used" in warned[0], warned
        # A parallel scan of the table (its workers take the leader's slices) warns no more.
        for setting in ("parallel_setup_cost = 0", "parallel_tuple_cost = 0", "min_parallel_table_scan_size = 0",
                        "max_parallel_workers_per_gather = 2", "hudi.aggregate_pushdown = off"):
            conn.execute(f"SET {setting}")
        plan = plan_text(conn, f"(ANALYZE, VERBOSE) SELECT * FROM damaged_stats WHERE txn_id <> '{ids[0]}'")
        assert re.search(r"Workers Launched: [1-9]", plan), plan
        assert len([m for severity, m in notices if severity == "WARNING"]) == 1, notices
    log = cluster.log()
    assert "panicked" not in log and "stack backtrace" not in log


def test_import_root_finds_every_table_and_disambiguates_names(cluster, lake):
    with cluster.connect() as conn:
        conn.execute("CREATE SCHEMA everything")
        conn.execute("IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO everything")
        names = [r[0] for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'everything'::regnamespace ORDER BY 1")]
        assert len(names) == len(lake)
        assert "sample_table__cow__v6_empty" in names and "sample_table__mor__parquet__v6_empty" in names
        assert "v6_trips_8i1u" in names  # unique names stay short
        conn.execute("CREATE SCHEMA chosen")
        conn.execute("IMPORT FOREIGN SCHEMA \"sample_table/cow\" LIMIT TO (v8_nonpartitioned, v6_empty) "
                     "FROM SERVER lake INTO chosen")
        names = [r[0] for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'chosen'::regnamespace ORDER BY 1")]
        assert names == ["v6_empty", "v8_nonpartitioned"]


def test_columns_are_checked_at_plan_time(cluster, lake):
    import psycopg
    with cluster.connect() as conn:
        conn.execute("CREATE FOREIGN TABLE t_missing (id int, nope text) SERVER lake "
                     "OPTIONS (path 'sample_table/cow/v8_nonpartitioned')")
        with pytest.raises(psycopg.Error) as e:
            conn.execute("EXPLAIN SELECT * FROM t_missing")
        assert e.value.sqlstate == "HV005"
        assert 'column "nope" of foreign table "t_missing" does not exist' in str(e.value)
        conn.execute("CREATE FOREIGN TABLE t_type (id boolean) SERVER lake "
                     "OPTIONS (path 'sample_table/cow/v8_nonpartitioned')")
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT * FROM t_type")
        assert e.value.sqlstate == "HV004"
        assert 'has type boolean, which cannot hold Hudi field "id" of type Int32' in str(e.value)
        # An ERROR is no panic: the server log has its ERROR line, and no backtrace.
        log = cluster.log()
        assert 'cannot hold Hudi field "id"' in log and "panicked" not in log, log[-3000:]
        # case-insensitive names, a subset of columns, text for anything
        conn.execute("CREATE FOREIGN TABLE t_ok (ID int, isactive boolean, structfield text) SERVER lake "
                     "OPTIONS (path 'sample_table/cow/v8_nonpartitioned')")
        rows = conn.execute("SELECT id, isactive, structfield::jsonb->>'field1' FROM t_ok ORDER BY id").fetchall()
        assert rows[0] == (1, False, "Alice") and len(rows) == 4


def test_time_travel_and_read_optimized(cluster, lake):
    """v8 MOR-free example via the GUC and options; MOR read-optimized ignores logs."""
    with cluster.connect() as conn:
        conn.execute("CREATE FOREIGN TABLE trips (_hoodie_commit_time text, rider text, fare double precision) "
                     "SERVER lake OPTIONS (path 'quickstart_trips_table/mor/avro/v6_trips_8i1u')")
        latest = conn.execute("SELECT rider, fare FROM trips ORDER BY rider").fetchall()
        commits = [r[0] for r in conn.execute(
            "SELECT DISTINCT _hoodie_commit_time FROM trips ORDER BY 1")]
        assert len(commits) == 2
        conn.execute(f"SET hudi.as_of_instant = '{commits[0]}'")
        before = conn.execute("SELECT rider, fare FROM trips ORDER BY rider").fetchall()
        conn.execute("RESET hudi.as_of_instant")
        assert len(before) == len(latest) == 8
        changed = [(a, b) for a, b in zip(before, latest) if a != b]
        assert len(changed) == 1, changed  # the one update of the second commit
        conn.execute("CREATE FOREIGN TABLE trips_ro (rider text, fare double precision) SERVER lake "
                     "OPTIONS (path 'quickstart_trips_table/mor/avro/v6_trips_8i1u', query_type 'read_optimized')")
        assert conn.execute("SELECT rider, fare FROM trips_ro ORDER BY rider").fetchall() == before


def explain(conn, sql):
    return plan_text(conn, f"(VERBOSE) {sql}")


def test_filters_prune_partitions_and_never_change_results(cluster, lake):
    with cluster.connect() as conn:
        conn.execute("CREATE SCHEMA cow")
        conn.execute('IMPORT FOREIGN SCHEMA "sample_table/cow" LIMIT TO (v6_complexkeygen_hivestyle, '
                     'v9_txns_simple_nometa) FROM SERVER lake INTO cow')
        table = "cow.v6_complexkeygen_hivestyle"
        everything = conn.execute(f'SELECT id, "byteField", "shortField" FROM {table} ORDER BY id').fetchall()
        for where, keep in [
            ('"byteField" = 10', lambda r: r[1] == 10),
            ('10 < "byteField"', lambda r: r[1] > 10),
            ('"byteField" IN (20, 30) AND "shortField" <> 100', lambda r: r[1] in (20, 30) and r[2] != 100),
            ('"shortField" >= 300', lambda r: r[2] >= 300),
        ]:
            rows = conn.execute(f'SELECT id, "byteField", "shortField" FROM {table} WHERE {where} ORDER BY id').fetchall()
            assert rows == [r for r in everything if keep(r)], where
        plan = explain(conn, f'SELECT id FROM {table} WHERE "byteField" = 10')
        assert 'Hudi Filters: byteField = 10' in plan, plan
        assert "Hudi Query: snapshot (latest)" in plan
        partitions = [l for l in plan.splitlines() if "Hudi Partitions" in l][0]
        kept, total = [int(x) for x in partitions.split(":")[1].split(" of ")]
        assert kept < total, plan
        # Text ranges depend on collations: never pushed; equality is.
        plan = explain(conn, "SELECT 1 FROM cow.v9_txns_simple_nometa WHERE region > 'a' AND currency = 'USD'")
        assert "Hudi Filters: currency = 'USD'" in plan and "region >" not in plan.split("Hudi Filters")[1], plan
        # EXPLAIN ANALYZE reports the row groups read.
        plan = "\n".join(r[0] for r in conn.execute(
            f'EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF) SELECT id FROM {table} WHERE "byteField" = 10'))
        assert "Hudi Row Groups:" in plan, plan
