"""pg_hudi's `hudi.table_properties` (the engine's hoodie.properties reader, through SQL)
returns, for every fixture, the same properties as the reference reader `hudi` 0.5.0."""

import hudi_rows
from conftest import give_to_postgres
from hudi import HudiTableBuilder


def reference_properties(base):
    options = HudiTableBuilder.from_base_uri(str(base)).build().hudi_options()
    options.pop("hoodie.base.path", None)  # a reader option, not a table property
    # hudi-rs keeps Java's escapes (`\:`) in values; the properties format says to undo them.
    return {k: v.replace("\\:", ":").replace("\\=", "=") for k, v in options.items()}


def test_every_fixture_reads_like_the_reference_reader(cluster, fixtures_root):
    # Unpack below the cluster's folder: the server runs as its own OS user and must read it.
    tables = cluster.directory / "tables"
    tables.mkdir()
    checked = 0
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION pg_hudi")
        for relative in hudi_rows.fixture_zips(fixtures_root):
            base = hudi_rows.unpack(fixtures_root, relative, tables)
            give_to_postgres(tables)
            rows = conn.execute("SELECT key, value FROM hudi.table_properties(%s)",
                                (f"file://{base}",)).fetchall()
            ours = dict(rows)
            assert len(ours) == len(rows), "keys are unique"
            assert ours == reference_properties(base), relative
            checked += 1
    assert checked >= 30


def test_missing_table_is_an_error_with_sqlstate(cluster):
    import psycopg
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION pg_hudi")
        try:
            conn.execute("SELECT * FROM hudi.table_properties('file:///no/such/table')")
            raise AssertionError("expected an error")
        except psycopg.Error as e:
            assert e.sqlstate == "HV00R"
            assert "no Hudi table at file:///no/such/table" in str(e)
