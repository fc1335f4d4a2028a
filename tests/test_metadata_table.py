"""Tables pg_hudi creates with a metadata table (`metadata_table 'on'`): two servers write,
compact, clean and archive them, and after every round pg_hudi and a heap copy of the same rows
read the same rows, and so does the reference reader, which lists such a table through its
metadata table (once every file group has a base file); a stray base file that only a storage
listing would see changes nothing."""

import contextlib
import os
import random
import shutil

from conftest import (CUSTOMERS, give_to_postgres, new_lake, plan_text, reference_rows, second_server)

METADATA = CUSTOMERS.replace("buckets '4')", "buckets '4', metadata_table 'on', services 'off')")


def rows_of(conn, table):
    return sorted(conn.execute(f"SELECT id, name, country, balance FROM {table}").fetchall())


def random_writes(hudi, heap, rng, round_):
    """One transaction of random inserts, updates and deletes of `customers` through the
    connection `hudi`, and the same on the heap copy through `heap`."""
    with hudi.transaction(), contextlib.nullcontext() if heap is hudi else heap.transaction():
        for _ in range(rng.randint(1, 4)):
            ids = rng.sample(range(1, 60), rng.randint(1, 5))
            choice = rng.random()
            for conn, table in ((hudi, "customers"), (heap, "heap_copy")):
                if choice < 0.6:
                    # An INSERT into a Hudi table is an upsert by key.
                    values = ", ".join(f"({i}, 'n{round_}-{i}', '{('nl', 'be', 'fr')[i % 3]}', {i + round_}, clock_timestamp())" for i in ids)
                    upsert = " ON CONFLICT (id, country) DO UPDATE SET name = excluded.name, balance = excluded.balance"
                    conn.execute(f"INSERT INTO {table} VALUES {values}{upsert if table == 'heap_copy' else ''}")
                elif choice < 0.8:
                    conn.execute(f"UPDATE {table} SET balance = balance + 1, ts = clock_timestamp() WHERE id = ANY(%s)", (ids,))
                else:
                    conn.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", (ids,))


def log_only_file_groups(table):
    """The file groups of the table at `table` that have no base file yet. The reference reader
    lists, through a metadata table, only file groups with a base file (hudi-rs 0.5: log-only
    groups are a to-do), so it is compared once every group has one."""
    groups, based = set(), set()
    for f in table.glob("country=*/*"):
        if f.name.endswith(".parquet"):
            based.add((f.parent.name, f.name.split("_")[0]))
        elif ".log." in f.name:
            groups.add((f.parent.name, f.name[1:].split("_")[0]))
    return groups - based


def test_two_servers_keep_the_metadata_table_and_every_reader_agrees(cluster):
    seed = int(os.environ.get("PG_HUDI_SEED") or random.randrange(1 << 30))
    print(f"seed {seed}")
    rng = random.Random(seed)
    with new_lake(cluster) as (conn, root):
        conn.execute(METADATA)
        conn.execute("SELECT hudi.create_table('customers')")
        table = root / "customers"
        properties = (table / ".hoodie/hoodie.properties").read_text()
        assert "hoodie.table.metadata.partitions=files" in properties
        conn.execute("CREATE TABLE heap_copy (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz, "
                     "PRIMARY KEY (id, country))")
        conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '2', ADD clean_retain '1 microsecond', "
                     "ADD archive_min_instants '4', ADD archive_max_instants '6')")
        with second_server(cluster, root, customers=True) as second, second.connect() as other:
            compared = 0
            for round_ in range(16):
                random_writes(conn if rng.random() < 0.5 else other, conn, rng, round_)
                services = conn if rng.random() < 0.5 else other
                if round_ % 4 == 3:
                    services.execute("SELECT count(*) FROM hudi.compact('customers')")
                if round_ % 5 == 4:
                    services.execute("SELECT count(*) FROM hudi.clean('customers')")
                expected = rows_of(conn, "heap_copy")
                assert rows_of(conn, "customers") == expected, f"seed {seed}, round {round_}"
                assert rows_of(other, "customers") == expected, f"seed {seed}, round {round_}"
                if not log_only_file_groups(table):
                    compared += 1
                    assert reference_rows(table) == [tuple(r) for r in expected], f"seed {seed}, round {round_}"
            assert compared >= 4, f"seed {seed}: the reference reader compared in {compared} rounds"
            archived = conn.execute("SELECT * FROM hudi.archive('customers')").fetchall()
            assert archived and archived[0][0] > 0, archived
            expected = rows_of(conn, "heap_copy")
            assert rows_of(other, "customers") == expected
            assert reference_rows(table) == [tuple(r) for r in expected], f"seed {seed}, after archival"
        plan = plan_text(conn, "(VERBOSE) SELECT * FROM customers")
        assert "Hudi Files Listed From: metadata table as of 20" in plan, plan
        # The metadata table compacted itself (every ten deltacommits).
        assert list((table / ".hoodie/metadata/.hoodie/timeline").glob("*.commit"))
        # A base file no action wrote, in a partition: only a storage listing would read it.
        base = next(table.glob("country=*/*.parquet"))
        stray = base.with_name("00000099-0000-0000-0000-000000000000-0_" + base.name.split("_", 1)[1])
        shutil.copy(base, stray)
        give_to_postgres(stray)
        assert rows_of(conn, "customers") == expected
        assert reference_rows(table) == [tuple(r) for r in expected]
