"""hudi.timeline, hudi.file_slices, hudi.latest_commit and hudi.consume on fixture tables."""

import pathlib

import psycopg
import pytest

from conftest import new_lake

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
    latest = conn.execute("SELECT hudi.latest_commit('trip_changes')").fetchone()[0]
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
