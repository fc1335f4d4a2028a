"""Privileges as PostgreSQL users expect them, checked as non-superusers on real tables: a
table's path never leaves its server, whatever its spelling; file:// stays under
hudi.allowed_file_roots; owner-only functions refuse other roles; hudi.consume works with
SELECT and only with it, with positions per role."""

import os

import psycopg
import pytest

from conftest import give_to_postgres, new_lake, refused

COLUMNS = "id bigint, name text, ts timestamptz"
KEYS = "primary_key 'id', ordering_field 'ts', buckets '2'"


def as_role(cluster, role):
    return psycopg.connect(host="127.0.0.1", port=cluster.port, user=role, dbname="postgres", autocommit=True)


def files_below(path):
    return sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*") if p.is_file())


@pytest.fixture
def lakes(cluster):
    """Two servers: `pub` (its directory an allowed root, USAGE granted to alice and bob) and
    `vault` (a table `t` with a secret row, nothing granted), plus a symbolic link from inside
    `pub` to `vault`. Yields (superuser connection, lake root)."""
    with new_lake(cluster) as (conn, root):
        pub, vault = root / "pub", root / "vault"
        pub.mkdir()
        vault.mkdir()
        os.symlink(vault, pub / "link")
        give_to_postgres(root)
        conn.execute(f"CREATE SERVER pub FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{pub}')")
        conn.execute(f"CREATE SERVER vault FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{vault}')")
        conn.execute(f"CREATE FOREIGN TABLE vault_t ({COLUMNS}) SERVER vault OPTIONS (path 't', {KEYS})")
        conn.execute("SELECT hudi.create_table('vault_t')")
        conn.execute("INSERT INTO vault_t VALUES (1, 'secret', now())")
        conn.execute(f"CREATE FOREIGN TABLE shared ({COLUMNS}) SERVER pub OPTIONS (path 'shared', {KEYS})")
        conn.execute("SELECT hudi.create_table('shared')")
        conn.execute("INSERT INTO shared VALUES (1, 'public', now())")
        conn.execute(f"ALTER SYSTEM SET hudi.allowed_file_roots = '{pub}'")
        conn.execute("SELECT pg_reload_conf()")
        for role in ("alice", "bob"):
            conn.execute(f"CREATE ROLE {role} LOGIN")
            conn.execute(f"GRANT USAGE ON FOREIGN SERVER pub TO {role}")
        conn.execute("GRANT CREATE ON SCHEMA public TO alice, bob")
        yield conn, root


SPELLINGS = [
    "../vault/t",
    "%2e%2e/vault/t",
    "%2E%2E/vault/t",
    ".%2e/vault/t",
    "%2e./vault/t",
    "..%2fvault%2ft",
    "x/..%2f..%2fvault/t",
    "..\\vault\\t",
    "%5c..%5cvault%5ct",
    "//..//vault//t",
    "./../vault/t",
    "link/t",
    "link",
    "link/new",
]


def test_no_spelling_of_a_path_reads_or_writes_outside_its_server(lakes, cluster):
    conn, root = lakes
    vault_files = files_below(root / "vault")
    absolute = [f"file://{root}/vault/t", f"file://{root}/pub/../vault/t", f"file://{root}/pub/%2e%2e/vault/t",
                f"file://{root}/pub/link/t", f"file://{root}/pub2/t", "s3://bucket/t", "memory:///t"]
    with as_role(cluster, "alice") as alice:
        for i, path in enumerate(SPELLINGS + absolute):
            literal = "'" + path.replace("'", "''") + "'"
            created = refused(alice, f"CREATE FOREIGN TABLE steal{i} ({COLUMNS}) SERVER pub OPTIONS (path {literal}, {KEYS})")
            if created is not None:
                assert created == "42501", (path, created)
                continue
            # accepted as a name: every use of it is refused, none reaches the vault
            for sql in (f"SELECT * FROM steal{i}", f"INSERT INTO steal{i} VALUES (2, 'x', now())",
                        f"SELECT hudi.create_table('steal{i}')", f"SELECT * FROM hudi.timeline('steal{i}')"):
                assert refused(alice, sql) == "42501", (path, sql)
    # a superuser's table through the link is refused too: the server is the boundary
    conn.execute(f"CREATE FOREIGN TABLE via_link ({COLUMNS}) SERVER pub OPTIONS (path 'link/t')")
    assert refused(conn, "SELECT * FROM via_link") == "42501"
    assert files_below(root / "vault") == vault_files
    assert conn.execute("SELECT name FROM vault_t").fetchall() == [("secret",)]


def test_locations_are_checked_again_when_servers_and_tables_change(lakes, cluster):
    conn, root = lakes
    conn.execute("GRANT SELECT ON shared TO alice")
    with as_role(cluster, "alice") as alice:
        assert alice.execute("SELECT name FROM shared").fetchall() == [("public",)]
        # the server now points elsewhere: alice may not follow it there
        conn.execute(f"ALTER SERVER pub OPTIONS (SET base_uri 'file://{root}/vault')")
        conn.execute("ALTER FOREIGN TABLE shared OPTIONS (SET path 't')")
        assert refused(alice, "SELECT name FROM shared") == "42501"
        assert conn.execute("SELECT name FROM shared").fetchall() == [("secret",)], "superusers may"
        conn.execute(f"ALTER SERVER pub OPTIONS (SET base_uri 'file://{root}/pub')")
        conn.execute("ALTER FOREIGN TABLE shared OPTIONS (SET path 'shared')")
        assert alice.execute("SELECT name FROM shared").fetchall() == [("public",)]
        # A declaration read in a transaction that rolls its ALTER back is not kept after it.
        with conn.transaction(force_rollback=True):
            conn.execute(f"ALTER SERVER pub OPTIONS (SET base_uri 'file://{root}/vault')")
            conn.execute("ALTER FOREIGN TABLE shared OPTIONS (SET path 't')")
            assert conn.execute("SELECT name FROM shared").fetchall() == [("secret",)]
        assert conn.execute("SELECT name FROM shared").fetchall() == [("public",)]
        # her own table: ALTER is validated like CREATE
        alice.execute(f"CREATE FOREIGN TABLE mine ({COLUMNS}) SERVER pub OPTIONS (path 'mine', {KEYS})")
        for path in ("%2e%2e/vault/t", f"file://{root}/vault/t"):
            assert refused(alice, f"ALTER FOREIGN TABLE mine OPTIONS (SET path '{path}')") == "42501", path
        alice.execute("ALTER FOREIGN TABLE mine OPTIONS (SET path 'link/t')")  # a plain name...
        assert refused(alice, "SELECT * FROM mine") == "42501"  # ...that leads out when opened


def test_owner_only_functions_refuse_other_roles(lakes, cluster):
    conn, _ = lakes
    conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON shared TO alice")
    with as_role(cluster, "alice") as alice:
        alice.execute("INSERT INTO shared VALUES (2, 'from alice', now())")  # writing needs INSERT only
        for sql in ("SELECT hudi.create_table('shared')", "SELECT * FROM hudi.compact('shared')",
                    "SELECT hudi.schedule_compaction('shared')",
                    "SELECT * FROM hudi.run_compaction('shared', '20260101000000000')",
                    "SELECT * FROM hudi.rollback_failed_writes('shared')"):
            assert refused(alice, sql) == "42501", sql
        # on a table of her own, below an allowed root, she may do all of it
        alice.execute(f"CREATE FOREIGN TABLE mine ({COLUMNS}) SERVER pub OPTIONS (path 'mine', {KEYS})")
        alice.execute("SELECT hudi.create_table('mine')")
        alice.execute("INSERT INTO mine VALUES (1, 'a', now()), (2, 'b', now())")
        assert alice.execute("SELECT count(*) FROM hudi.compact('mine')").fetchone() == (1,)
        assert alice.execute("SELECT * FROM hudi.rollback_failed_writes('mine')").fetchall() == []
        assert alice.execute("SELECT id, name FROM mine ORDER BY id").fetchall() == [(1, "a"), (2, "b")]
    # a member of the owning role counts as an owner
    conn.execute("GRANT alice TO bob")
    with as_role(cluster, "bob") as bob:
        assert bob.execute("SELECT count(*) FROM hudi.compact('mine')").fetchone() == (0,)
    assert conn.execute("SELECT id, name FROM shared ORDER BY id").fetchall() == [(1, "public"), (2, "from alice")]


def test_consume_needs_select_and_keeps_positions_per_role(lakes, cluster):
    conn, _ = lakes
    conn.execute("CREATE FOREIGN TABLE shared_changes (id bigint, name text, _hoodie_operation text) "
                 "SERVER pub OPTIONS (path 'shared', query_type 'incremental')")
    consume = "SELECT id, name, _hoodie_operation FROM hudi.consume(NULL::shared_changes, 'etl') ORDER BY id"
    with as_role(cluster, "alice") as alice, as_role(cluster, "bob") as bob:
        assert refused(alice, consume) == "42501"
        assert refused(alice, "INSERT INTO hudi.consumer_positions (relation, consumer, position) "
                              "VALUES ('shared_changes', 'etl', '99999999999999999')") == "42501"
        conn.execute("GRANT SELECT ON shared_changes TO alice, bob")
        assert alice.execute(consume).fetchall() == [(1, "public", "I")]
        assert alice.execute(consume).fetchall() == []
        conn.execute("INSERT INTO shared VALUES (3, 'later', now())")
        assert alice.execute(consume).fetchall() == [(3, "later", "I")]
        # bob's position is his own: he starts from the beginning, and sees only his rows
        assert bob.execute(consume).fetchall() == [(1, "public", "I"), (3, "later", "I")]
        assert bob.execute("SELECT role::text FROM hudi.consumer_positions").fetchall() == [("bob",)]
        # positions change only through hudi.consume: not by SQL on the table, even a role's own
        assert refused(alice, "UPDATE hudi.consumer_positions SET position = '' WHERE role = 'bob'::regrole") == "42501"
        assert refused(bob, "UPDATE hudi.consumer_positions SET position = ''") == "42501"
        assert refused(bob, "DELETE FROM hudi.consumer_positions") == "42501"
        assert bob.execute(consume).fetchall() == []
        # without SELECT again, no more changes
        conn.execute("REVOKE SELECT ON shared_changes FROM bob")
        assert refused(bob, consume) == "42501"
    roles = conn.execute("SELECT role::text, consumer FROM hudi.consumer_positions ORDER BY 1").fetchall()
    assert roles == [("alice", "etl"), ("bob", "etl")]
