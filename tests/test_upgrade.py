"""Extension upgrades and dump/restore: 0.1.0's install script (kept in sql/versions/) updated
with ALTER EXTENSION pg_hudi UPDATE has exactly the objects of a fresh install of the current
version, and what users made (consumer positions, lookup-cache declarations, commit intents)
survives; pg_dump keeps lookup-cache declarations, and a restored database rebuilds the caches."""

import re
import subprocess

from conftest import give_to_postgres

PG_BIN = "/usr/lib/postgresql/15/bin"
CURRENT = "0.3.0"


def _objects(cluster, dbname):
    """The extension's objects as pg_dump --binary-upgrade prints them (members included),
    without what names OIDs or the database."""
    out = subprocess.run([f"{PG_BIN}/pg_dump", "--schema-only", "--binary-upgrade", "--no-owner", "-h", "127.0.0.1",
                          "-p", str(cluster.port), "-U", "postgres", dbname], check=True, capture_output=True, text=True).stdout
    varying = re.compile(r"binary_upgrade_set|^--|set_config\('search_path'|relfrozenxid|^WHERE oid = '\d+';$|^\\(un)?restrict ")
    # The OIDs of the extension's configuration tables, and how many there are.
    lines = (re.sub(r"'\{[\d,]+\}'", lambda m: re.sub(r"\d+", "N", m.group(0)), line) for line in out.splitlines())
    return "\n".join(line for line in lines if not varying.search(line))


def _user_objects(conn, root):
    conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{root}')")
    conn.execute("""CREATE FOREIGN TABLE customers (id bigint, name text, country text, balance numeric(12, 2),
                      ts timestamptz) SERVER lake
                    OPTIONS (path 'customers', primary_key 'id,country', ordering_field 'ts', buckets '2')""")
    conn.execute("SELECT hudi.create_table('customers')")
    conn.execute("INSERT INTO customers SELECT g, 'n' || g, 'nl', g, '2026-01-01' FROM generate_series(1, 30) g")
    conn.execute("CREATE FOREIGN TABLE customer_changes (id bigint) SERVER lake OPTIONS (path 'customers', query_type 'incremental')")
    assert len(conn.execute("SELECT * FROM hudi.consume(NULL::customer_changes, 'etl')").fetchall()) == 30
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{country, id}')")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{name}', '{balance}')")


def _state(conn):
    return (conn.execute("SELECT relation::text, role::text, consumer, position FROM hudi.consumer_positions").fetchall(),
            conn.execute("SELECT relation::regclass::text, keys, columns, kind FROM hudi.lookup_cache_keys ORDER BY 2").fetchall(),
            conn.execute("SELECT location, instant, transaction FROM hudi.commit_intents ORDER BY 2").fetchall())


def test_an_upgrade_from_0_1_0_equals_a_fresh_install_and_keeps_what_users_made(cluster):
    root = cluster.directory / "lake"
    root.mkdir()
    give_to_postgres(root)
    with cluster.connect() as conn:
        conn.execute("CREATE DATABASE fresh")
        conn.execute("CREATE DATABASE upgraded")
    with cluster.connect("upgraded") as conn:
        conn.execute("CREATE EXTENSION pg_hudi VERSION '0.1.0'")
        _user_objects(conn, root)
        before = _state(conn)
        assert before[0] and len(before[1]) == 2
        conn.execute("ALTER EXTENSION pg_hudi UPDATE")
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_hudi'").fetchone() == (CURRENT,)
        assert _state(conn) == before
        # The caches work after it.
        conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
        assert conn.execute("SELECT DISTINCT state, rows FROM hudi.lookup_caches").fetchall() == [("ready", 30)]
        conn.execute("DROP FOREIGN TABLE customer_changes, customers")
        conn.execute("DROP SERVER lake")
    with cluster.connect("fresh") as conn:
        conn.execute("CREATE EXTENSION pg_hudi")
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_hudi'").fetchone() == (CURRENT,)
    upgraded, fresh = _objects(cluster, "upgraded"), _objects(cluster, "fresh")
    assert "CREATE VIEW hudi.lookup_caches" in fresh
    if upgraded != fresh:
        import difflib
        diff = "\n".join(difflib.unified_diff(fresh.splitlines(), upgraded.splitlines(), "fresh", "upgraded", lineterm="", n=1))
        raise AssertionError(f"the upgraded extension differs from a fresh install:\n{diff}")


def test_dump_and_restore_keeps_lookup_caches_and_consumers(cluster):
    root = cluster.directory / "lake"
    root.mkdir()
    give_to_postgres(root)
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION pg_hudi")
        _user_objects(conn, root)
        before = _state(conn)
        conn.execute("CREATE DATABASE restored")
    dump = cluster.directory / "dump.sql"
    subprocess.run([f"{PG_BIN}/pg_dump", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", "-f", dump, "postgres"],
                   check=True, capture_output=True)
    declarations = dump.read_text().split("COPY hudi.lookup_cache_keys ")[1].split("\n\\.")[0]
    assert declarations.count("public.customers") == 2, declarations
    subprocess.run([f"{PG_BIN}/psql", "-X", "-v", "ON_ERROR_STOP=1", "-q", "-h", "127.0.0.1", "-p", str(cluster.port),
                    "-U", "postgres", "-d", "restored", "-f", dump], check=True, capture_output=True)
    with cluster.connect("restored") as conn:
        positions, declarations, _ = _state(conn)
        assert (positions, declarations) == before[:2]
        # No state came along: the caches load again from the lake.
        assert conn.execute("SELECT DISTINCT state FROM hudi.lookup_caches").fetchall() == [("loading",)]
        conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
        assert conn.execute("SELECT DISTINCT state, rows FROM hudi.lookup_caches").fetchall() == [("ready", 30)]
        assert conn.execute("SELECT count(*) FROM customers").fetchone() == (30,)
        # The restored consumer goes on from its position: nothing new to consume.
        assert conn.execute("SELECT * FROM hudi.consume(NULL::customer_changes, 'etl')").fetchall() == []
