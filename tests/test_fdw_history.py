"""Time travel and incremental reads through SQL return what the reference reader (`hudi`
0.5.0) returns for the same instants, on every merge-on-read fixture with log files."""

import pathlib

import pytest
from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder
import pyarrow as pa

import hudi_rows
from conftest import new_lake

MOR_FIXTURES = [
    "quickstart_trips_table/mor/avro/v6_trips_8i1u.zip",
    "quickstart_trips_table/mor/avro/v6_trips_8i3d.zip",
    "sample_table/mor/avro/v9_txns_simple_nometa.zip",
    "sample_table/mor/avro/v9_txns_complex_nometa.zip",
    "sample_table/mor/avro/v9_txns_nonpart_nometa.zip",
    "sample_table/mor/parquet/v6_nonpartitioned.zip",
    "sample_table/mor/parquet/v6_nonpartitioned_rollback.zip",
]
WRITES = ("commit", "deltacommit", "replacecommit")


def completed_writes(base):
    """(requested, completion) of each completed write, by completion; layout 1 has no
    completion times, so its requested time stands in."""
    out = []
    layout2 = (base / ".hoodie" / "timeline").is_dir()
    folder = base / ".hoodie" / ("timeline" if layout2 else "")
    for f in folder.iterdir():
        head, _, action = f.name.partition(".")
        if action not in WRITES:
            continue
        requested, _, completion = head.partition("_")
        out.append((requested, completion or requested))
    return sorted(out, key=lambda r: r[1])


def reference(base, options):
    batches = HudiTableBuilder.from_base_uri(str(base)).build().read(options)
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    return hudi_rows.normalize_rows(rows)


def ours(conn, table):
    cur = conn.execute(f"SELECT * FROM {table}")
    names = [d.name for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    return hudi_rows.normalize_rows([{k: hudi_rows.normalize(v) for k, v in r.items()} for r in rows])


def assert_same_rows(label, mine, theirs):
    assert len(mine) == len(theirs), f"{label}: {len(mine)} rows, reference {len(theirs)}"
    for a, b in zip(mine, theirs):
        keys = b.keys()
        assert hudi_rows.same({k: a.get(k) for k in keys}, dict(b)), f"{label}:\n ours {a}\n theirs {b}"


@pytest.mark.parametrize("fixture", MOR_FIXTURES)
def test_time_travel_and_incremental_match_the_reference_reader(cluster, fixtures_root, fixture):
    relative = pathlib.Path(fixture)
    with new_lake(cluster, fixtures_root, [relative]) as (conn, root):
        base = root / relative.stem
        writes = completed_writes(base)
        assert len(writes) >= 2, writes
        conn.execute("CREATE SCHEMA s")
        conn.execute('IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO s')
        conn.execute("CREATE SCHEMA inc")
        conn.execute('IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO inc')
        conn.execute(f'ALTER FOREIGN TABLE inc."{relative.stem}" OPTIONS (ADD query_type \'incremental\')')
        checked = 0
        for requested, _ in writes:
            conn.execute(f"SET hudi.as_of_instant = '{requested}'")
            theirs = reference(base, HudiReadOptions().with_as_of_timestamp(requested))
            assert_same_rows(f"as of {requested}", ours(conn, f's."{relative.stem}"'), theirs)
            checked += 1
        conn.execute("RESET hudi.as_of_instant")
        bounds = [None] + [c for _, c in writes]
        for start, end in zip(bounds, bounds[1:]):
            options = HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_end_timestamp(end)
            if start:
                options = options.with_start_timestamp(start)
                conn.execute(f"SET hudi.start_instant = '{start}'")
            else:
                conn.execute("RESET hudi.start_instant")
            conn.execute(f"SET hudi.end_instant = '{end}'")
            assert_same_rows(f"changes ({start}, {end}]", ours(conn, f'inc."{relative.stem}"'), reference(base, options))
            checked += 1
        assert checked == 2 * len(writes)


@pytest.mark.parametrize("fixture, ops_per_range", [
    ("quickstart_trips_table/mor/avro/v6_trips_8i1u.zip", [{"I": 8}, {"U": 1}]),
    ("quickstart_trips_table/mor/avro/v6_trips_8i3d.zip", [{"I": 8}, {"D": 3}]),
])
def test_operation_column_tells_inserts_updates_and_deletes(cluster, fixtures_root, fixture, ops_per_range):
    relative = pathlib.Path(fixture)
    with new_lake(cluster, fixtures_root, [relative]) as (conn, root):
        writes = completed_writes(root / relative.stem)
        conn.execute(f"CREATE FOREIGN TABLE changes (_hoodie_commit_time text, _hoodie_record_key text, "
                     f"_hoodie_partition_path text, rider text, _hoodie_operation text) SERVER lake "
                     f"OPTIONS (path '{relative.stem}', query_type 'incremental')")
        bounds = [None] + [c for _, c in writes]
        for (start, end), expected in zip(zip(bounds, bounds[1:]), ops_per_range):
            conn.execute(f"SET hudi.start_instant = '{start or ''}'")
            conn.execute(f"SET hudi.end_instant = '{end}'")
            rows = conn.execute("SELECT _hoodie_operation, count(*), count(rider), "
                                "count(_hoodie_partition_path) FROM changes GROUP BY 1").fetchall()
            assert {op: n for op, n, _, _ in rows} == expected
            for op, n, riders, partitions in rows:
                assert partitions == n  # every change names its partition
                assert riders == (0 if op == "D" else n)  # deletes carry only the key
        # Outside incremental reads the column is NULL.
        conn.execute("CREATE FOREIGN TABLE snap (rider text, _hoodie_operation text) SERVER lake "
                     f"OPTIONS (path '{relative.stem}')")
        assert conn.execute("SELECT count(*) FROM snap WHERE _hoodie_operation IS NOT NULL").fetchone() == (0,)


# Spark-written fixtures with deletes whose rows carry the meta fields a change read needs.
DELETING_FIXTURES = [
    "quickstart_trips_table/mor/avro/v6_trips_8i3d.zip",
    "sample_table/cow/v9_txns_simple_meta.zip",
    "sample_table/cow/v9_txns_nonpart_meta.zip",
    "sample_table/cow/v9_timebasedkeygen_nonhivestyle.zip",
    "sample_table/cow/v9_timebasedkeygen_unixtimestamp.zip",
]


def table_properties(base):
    props = {}
    for line in (base / ".hoodie" / "hoodie.properties").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            props[key] = value.replace("\\:", ":")
    return props


@pytest.mark.parametrize("fixture", DELETING_FIXTURES)
def test_delete_rows_carry_the_deleted_rows_key_and_partition_columns(cluster, fixtures_root, fixture):
    """Every `D` row of a change read has the deleted row's key columns, and its partition
    columns where the key generator writes their values into the path (a time-based one writes
    formatted times, so they stay NULL there)."""
    relative = pathlib.Path(fixture)
    with new_lake(cluster, fixtures_root, [relative]) as (conn, root):
        base = root / relative.stem
        props = table_properties(base)
        keys = props["hoodie.table.recordkey.fields"].split(",")
        partitions = [p.split(":")[0] for p in props.get("hoodie.table.partition.fields", "").split(",") if p]
        timed = "TIMESTAMP" in props.get("hoodie.table.keygenerator.type", props.get("hoodie.table.keygenerator.class", "")).upper()
        columns = keys + [p for p in partitions if p not in keys]
        for schema in ("s", "inc"):
            conn.execute(f"CREATE SCHEMA {schema}")
            conn.execute(f"IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO {schema}")
        changes = f'inc."{relative.stem}"'
        conn.execute(f"ALTER FOREIGN TABLE {changes} ADD COLUMN _hoodie_operation text")
        conn.execute(f"ALTER FOREIGN TABLE {changes} OPTIONS (ADD query_type 'incremental')")
        listed = ", ".join(f'"{c}"' for c in columns)
        writes = completed_writes(base)
        deletes = 0
        for (before, start), (_, end) in zip(writes, writes[1:]):
            conn.execute(f"SET hudi.start_instant = '{start}'")
            conn.execute(f"SET hudi.end_instant = '{end}'")
            deleted = conn.execute(f"SELECT _hoodie_record_key, {listed} FROM {changes} "
                                   "WHERE _hoodie_operation = 'D'").fetchall()
            if not deleted:
                continue
            conn.execute("RESET hudi.start_instant")
            conn.execute("RESET hudi.end_instant")
            conn.execute(f"SET hudi.as_of_instant = '{before}'")
            alive = {r[0]: r[1:] for r in conn.execute(f'SELECT _hoodie_record_key, {listed} FROM s."{relative.stem}"')}
            conn.execute("RESET hudi.as_of_instant")
            for record_key, *values in deleted:
                expected = list(alive[record_key])
                if timed:
                    expected = [v if c in keys else None for c, v in zip(columns, expected)]
                assert values == expected, f"D row of {record_key}: {dict(zip(columns, values))}"
                assert all(v is not None for c, v in zip(columns, values) if c in keys)
                deletes += 1
        assert deletes > 0, "the fixture deletes rows"
