"""hudi.timeline, hudi.file_slices, hudi.latest_commit and hudi.consume on fixture tables."""

import pathlib

import psycopg
import pytest

from conftest import give_to_postgres, new_lake

TRIPS = pathlib.Path("quickstart_trips_table/mor/avro/v6_trips_8i3d.zip")
TXNS = pathlib.Path("sample_table/mor/avro/v9_txns_simple_nometa.zip")


@pytest.fixture
def conn(cluster, fixtures_root):
    with new_lake(cluster, fixtures_root, (TRIPS, TXNS)) as (conn, _):
        conn.execute("IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO public")
        yield conn


def test_timeline_lists_every_instant_with_completion_times(conn):
    rows = conn.execute("SELECT instant, action, state, completion_time FROM hudi.timeline('v9_txns_simple_nometa')").fetchall()
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    compaction = [r for r in rows if r[0] == "20260307135839895"][0]
    assert compaction == ("20260307135839895", "commit", "completed", "20260307135840408")
    assert {r[2] for r in rows} == {"completed"}
    # v6 has no completion times: the instant stands in.
    v6 = conn.execute("SELECT instant, completion_time FROM hudi.timeline('v6_trips_8i3d')").fetchall()
    assert all(i == c for i, c in v6) and len(v6) == 2


def test_file_slices_match_the_reference_reader(conn, cluster):
    from hudi import HudiTableBuilder
    base = cluster.directory / "lake" / "v9_txns_simple_nometa"
    theirs = sorted((s.partition_path, s.file_id, s.base_file_name, sorted(s.log_file_names))
                    for s in HudiTableBuilder.from_base_uri(str(base)).build().get_file_slices())
    ours = sorted((p, f, b, sorted(logs)) for p, f, b, logs in conn.execute(
        "SELECT partition_path, file_id, base_file, log_files FROM hudi.file_slices('v9_txns_simple_nometa')"))
    assert ours == theirs


def test_functions_refuse_other_relations(conn):
    conn.execute("CREATE TABLE plain (id int)")
    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT * FROM hudi.timeline('plain')")
    assert e.value.sqlstate == "42809"


def test_consume_is_exactly_once_with_the_transaction(conn):
    conn.execute("CREATE FOREIGN TABLE trip_changes (_hoodie_commit_time text, _hoodie_record_key text, "
                 "rider text, _hoodie_operation text) SERVER lake "
                 "OPTIONS (path 'v6_trips_8i3d', query_type 'incremental')")
    latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('trip_changes')").fetchone()[0]
    consume = "SELECT _hoodie_record_key, _hoodie_operation FROM hudi.consume(NULL::trip_changes, 'etl') ORDER BY 1"
    with conn.transaction(force_rollback=True):
        first = conn.execute(consume).fetchall()
    # 8 inserts and 3 deletes in the whole range: 5 keys remain, all new to this consumer.
    assert len(first) == 5 and {op for _, op in first} == {"I"}
    with conn.transaction():
        assert conn.execute(consume).fetchall() == first, "a rolled-back pull is handed out again"
    assert conn.execute(consume).fetchall() == [], "committed: nothing new"
    position = conn.execute("SELECT position FROM hudi.consumer_positions WHERE consumer = 'etl'").fetchone()
    assert position == (latest,)
    # another consumer has its own position
    assert len(conn.execute(consume.replace("'etl'", "'audit'")).fetchall()) == 5
    # the session's own range settings are left alone
    assert conn.execute("SELECT current_setting('hudi.start_instant', true)").fetchone()[0] in ("", None)
    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT * FROM hudi.consume(NULL::v6_trips_8i3d, 'etl')")
    assert e.value.sqlstate == "42809"


def test_analyze_samples_rows_and_counts_them(conn):
    conn.execute("ANALYZE v9_txns_simple_nometa")
    reltuples = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'v9_txns_simple_nometa'::regclass").fetchone()[0]
    count = conn.execute("SELECT count(*) FROM v9_txns_simple_nometa").fetchone()[0]
    assert reltuples == count == 12
    distinct = conn.execute("SELECT n_distinct FROM pg_stats WHERE tablename = 'v9_txns_simple_nometa' "
                            "AND attname = 'region'").fetchone()[0]
    assert (distinct if distinct > 0 else -distinct * reltuples) == 3  # apac, eu, us


def santiago_literal(instant):
    """A timestamptz literal of the moment a UTC instant names, in America/Santiago's offset."""
    import datetime
    import zoneinfo
    moment = datetime.datetime.strptime(instant, "%Y%m%d%H%M%S%f").replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(zoneinfo.ZoneInfo("America/Santiago")).isoformat(sep=" ", timespec="milliseconds")


def test_consume_starts_a_new_consumer_where_it_asks(conn):
    conn.execute("SET TimeZone = 'America/Santiago'")
    conn.execute("CREATE FOREIGN TABLE trip_changes (uuid text, city text, rider text, _hoodie_operation text) "
                 "SERVER lake OPTIONS (path 'v6_trips_8i3d', query_type 'incremental')")
    (first,), (second,) = conn.execute("SELECT completion_time FROM hudi.timeline('trip_changes') ORDER BY 1").fetchall()
    assert conn.execute("SELECT * FROM hudi.latest_commit('trip_changes')").fetchall() == [(second, second)]

    def consume(consumer, start=None):
        named = f", start_from => '{start}'" if start else ""
        return sorted(conn.execute(f"SELECT uuid, city, _hoodie_operation FROM "
                                   f"hudi.consume(NULL::trip_changes, '{consumer}'{named})").fetchall())

    everything = consume("a", "earliest")
    assert everything == consume("b") and len(everything) == 5, "earliest is the default"
    assert consume("c", "latest") == [] and consume("c") == [], "latest: only what comes after"
    deleted = consume("d", first)
    assert len(deleted) == 3 and {op for _, _, op in deleted} == {"D"} and all(u and c for u, c, _ in deleted)
    assert consume("e", santiago_literal(first)) == deleted, "a timestamp names the same instant"
    assert consume("d", "earliest") == [], "an existing consumer keeps its position"
    for bad in ("soon", "99991231235959999", ""):
        with pytest.raises(psycopg.Error) as e:
            consume("f", bad) if bad else conn.execute("SELECT * FROM hudi.consume(NULL::trip_changes, 'f', '')")
        assert e.value.sqlstate == "22023", bad
    assert conn.execute("SELECT count(*) FROM hudi.consumer_positions WHERE consumer = 'f'").fetchone() == (0,)


def test_as_of_instant_takes_a_timestamp(conn):
    conn.execute("SET TimeZone = 'America/Santiago'")
    table = "v9_txns_simple_nometa"
    instants = [i for (i,) in conn.execute(f"SELECT instant FROM hudi.timeline('{table}') ORDER BY 1")]
    read = f"SELECT txn_id, amount FROM {table} ORDER BY 1"
    seen = set()
    for instant in instants:
        conn.execute(f"SET hudi.as_of_instant = '{instant}'")
        by_instant = conn.execute(read).fetchall()
        conn.execute(f"SET hudi.as_of_instant = '{santiago_literal(instant)}'")
        assert conn.execute(read).fetchall() == by_instant, instant
        seen.add(tuple(by_instant))
    assert len(seen) > 2, "the instants read different snapshots"
    conn.execute("RESET hudi.as_of_instant")
    conn.execute(f"ALTER FOREIGN TABLE {table} OPTIONS (ADD as_of_instant '{santiago_literal(instants[0])}')")
    conn.execute(f"SET hudi.as_of_instant = '{instants[0]}'")
    first = conn.execute(read).fetchall()
    conn.execute("RESET hudi.as_of_instant")
    assert conn.execute(read).fetchall() == first, "the table option takes a timestamp too"
    # Not a time, or one that moves with the clock (PostgreSQL's 'now', 'yesterday').
    for bad in ("next tuesday", "now", "yesterday"):
        with pytest.raises(psycopg.Error) as e:
            conn.execute(f"SET hudi.as_of_instant = '{bad}'")
            conn.execute(read)
        assert e.value.sqlstate == "22023", bad
        conn.rollback()
    with pytest.raises(psycopg.Error) as e:
        conn.execute(f"ALTER FOREIGN TABLE {table} OPTIONS (SET as_of_instant 'infinity')")
    assert e.value.sqlstate.startswith("HV")


INTERNAL_HELPERS = {"claim_consumer_position", "advance_consumer_position", "lookup_cache_bytes",
                    "lookup_cache_progress", "lookup_cache_position", "lookup_cache_lag", "may_see_services",
                    "mirror_row", "mirror_truncate", "consumer_position", "wait_for_commit"}


def test_the_sql_surface_is_named_and_commented(conn):
    uncommented = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'hudi'::regnamespace "
        "AND obj_description(p.oid, 'pg_proc') IS NULL UNION ALL "
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'hudi'::regnamespace "
        "AND c.relkind = 'v' AND obj_description(c.oid, 'pg_class') IS NULL").fetchall()
    assert uncommented == []
    internal = {n for (n,) in conn.execute("SELECT proname FROM pg_proc WHERE pronamespace = 'hudi_internal'::regnamespace")}
    assert internal == INTERNAL_HELPERS
    public = {n for (n,) in conn.execute("SELECT proname FROM pg_proc WHERE pronamespace = 'hudi'::regnamespace")}
    assert not public & INTERNAL_HELPERS
    # The relation a row is about is a regclass named relation, in every view and function.
    columns = conn.execute(
        "SELECT c.relname, a.attname, a.atttypid::regtype::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "WHERE c.relnamespace = 'hudi'::regnamespace AND c.relkind = 'v' AND a.attnum > 0 "
        "AND (a.attname IN ('table', 'relation') OR a.atttypid IN ('oid'::regtype, 'regclass'::regtype))").fetchall()
    assert sorted(columns) == [(v, "relation", "regclass") for v in
                               ("buffered_writes", "lookup_caches", "mirrors", "pending_commits", "service_history", "subscriptions",
                                "table_services")]
    assert "relation regclass" in conn.execute(
        "SELECT pg_get_function_result('hudi.finish_pending_commits'::regproc)").fetchone()[0]


def test_import_says_when_it_finds_no_table(cluster, fixtures_root):
    """IMPORT FOREIGN SCHEMA under a remote schema that holds no Hudi table imports nothing and
    says so, naming `root` (everything under the server's base_uri) in its hint."""
    with new_lake(cluster, fixtures_root, (TRIPS,)) as (conn, _):
        notices = []
        conn.add_notice_handler(lambda n: notices.append((n.message_primary, n.message_hint)))
        imported = ("SELECT count(*) FROM pg_foreign_table ft JOIN pg_class c ON c.oid = ft.ftrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s")
        conn.execute("CREATE SCHEMA nothing")
        conn.execute("IMPORT FOREIGN SCHEMA no_such_directory FROM SERVER lake INTO nothing")
        assert conn.execute(imported, ("nothing",)).fetchone() == (0,)
        found = [hint for message, hint in notices if message.startswith("no Hudi table found under")]
        assert found and "IMPORT FOREIGN SCHEMA root FROM SERVER lake" in found[0], notices
        notices.clear()
        conn.execute("CREATE SCHEMA everything")
        conn.execute("IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO everything")
        assert conn.execute(imported, ("everything",)).fetchone() == (1,) and not notices, notices


def test_import_brings_the_options_of_tables_pg_hudi_created(lake, cluster, fixtures_root):
    """A table pg_hudi created imports with the options it was declared with (key, ordering,
    partitioning, buckets, merge mode) and `services 'auto'`, so the imported foreign table
    writes and is maintained like the original; a table of another engine imports with its
    path only (its writers maintain it)."""
    import hudi_rows
    conn, root = lake
    hudi_rows.unpack(fixtures_root, TRIPS, root.parent)
    give_to_postgres(root.parent)
    conn.execute("CREATE SCHEMA imported")
    conn.execute("IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO imported")
    options = dict(conn.execute("SELECT c.relname, ft.ftoptions FROM pg_foreign_table ft JOIN pg_class c ON c.oid = ft.ftrelid "
                                "WHERE c.relnamespace = 'imported'::regnamespace").fetchall())
    assert sorted(options["customers"]) == sorted(["path=customers", "primary_key=id,country", "ordering_field=ts",
                                                   "partition_by=country", "buckets=4", "merge_mode=event_time",
                                                   "services=auto"]), options
    others = [o for name, o in options.items() if name != "customers"]
    assert others and all(len(o) == 1 and o[0].startswith("path=") for o in others), options
    conn.execute("INSERT INTO imported.customers (id, name, country, balance, ts) VALUES (1, 'imported', 'nl', 1, '2026-01-01')")
    assert conn.execute("SELECT name FROM customers").fetchall() == [("imported",)]
