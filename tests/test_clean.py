"""Cleaning from SQL: hudi.clean deletes the file slices no read needs (Hudi's
KEEP_LATEST_COMMITS with the table option clean_retain_commits), writes a plan before it
deletes and a completed clean after; rows stay the same for pg_hudi and the reference reader;
time travel to before what it kept is a clear error; consumers hold it back."""

import psycopg
import pytest

from conftest import our_rows, reference_rows, second_server


def round_of_writes(conn, n):
    conn.execute(f"INSERT INTO customers SELECT g, 'r{n}-' || g, (ARRAY['nl','be'])[g % 2 + 1], g + {n}, "
                 f"'2026-01-01'::timestamptz + interval '{n} day' FROM generate_series(1, 40) g")
    conn.execute(f"UPDATE customers SET balance = balance + 1, ts = ts + interval '1 hour' WHERE id % 3 = {n % 3}")
    assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone()[0] == 1


def data_files(table):
    return {p.relative_to(table) for p in table.rglob("*") if p.is_file() and ".hoodie" not in p.parts
            and (p.suffix == ".parquet" or ".log." in p.name)}



def assert_rebuilds(changes, conn):
    """The consumer's batch `changes` (key, balance, operation) of a table with no deletes
    holds the latest balance of every row of customers."""
    latest = {}
    for key, balance, _ in changes:
        latest[int(key)] = balance
    assert sorted(latest.items()) == sorted((r[0], r[3]) for r in our_rows(conn))

def test_clean_keeps_rows_and_the_retained_commits_and_deletes_the_rest(lake):
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '3', ADD clean_retain '1 microsecond')")
    first = None
    for n in range(4):
        round_of_writes(conn, n)
        first = first or conn.execute("SELECT min(instant) FROM hudi.timeline('customers')").fetchone()[0]
    rows, files = our_rows(conn), data_files(table)
    (instant, completion, deleted, freed, earliest), = conn.execute("SELECT * FROM hudi.clean('customers')").fetchall()
    assert deleted > 0 and freed > 0 and completion > instant and earliest > first
    after = data_files(table)
    assert after < files and len(files) - len(after) == deleted
    assert our_rows(conn) == rows == reference_rows(table)
    timeline = conn.execute("SELECT action, state FROM hudi.timeline('customers') WHERE instant = %s", (instant,)).fetchall()
    assert timeline == [("clean", "completed")]
    assert (table / f".hoodie/timeline/{instant}.clean.requested").stat().st_size > 0, "the plan, written first"
    # Time travel: refused before what the clean kept, exact from there on.
    conn.execute(f"SET hudi.as_of_instant = '{first}'")
    with pytest.raises(psycopg.Error) as e:
        our_rows(conn)
    assert e.value.sqlstate == "HV00R" and "no longer in storage" in str(e.value)
    conn.execute(f"SET hudi.as_of_instant = '{earliest}'")
    assert len(our_rows(conn)) == 40
    conn.execute("RESET hudi.as_of_instant")
    # Nothing left to clean: no row, no instant.
    assert conn.execute("SELECT * FROM hudi.clean('customers')").fetchall() == []
    assert conn.execute("SELECT count(*) FROM hudi.timeline('customers') WHERE action = 'clean'").fetchone()[0] == 1


def test_retention_by_time_keeps_time_travel_across_many_commits(lake):
    """With the default clean_retain (1 hour), a clean keeps every slice a read as of the last
    hour needs, however many commits came since: time travel to the first commit still reads
    (with clean_retain_commits '1' alone it would be gone); once the interval is shorter than
    the commits' age, the count decides again. Under a non-UTC TimeZone (instants are UTC)."""
    conn, table = lake
    conn.execute("SET TimeZone = 'Pacific/Auckland'")
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '1')")
    round_of_writes(conn, 0)
    first = conn.execute("SELECT max(instant) FROM hudi.timeline('customers') WHERE action = 'commit'").fetchone()[0]
    conn.execute(f"SET hudi.as_of_instant = '{first}'")
    at_first = our_rows(conn)
    conn.execute("RESET hudi.as_of_instant")
    for n in range(1, 4):
        round_of_writes(conn, n)
    files = data_files(table)
    assert [r[2] for r in conn.execute("SELECT * FROM hudi.clean('customers')").fetchall()] in ([], [0])
    assert data_files(table) == files
    conn.execute(f"SET hudi.as_of_instant = '{first}'")
    assert our_rows(conn) == at_first
    conn.execute("RESET hudi.as_of_instant")
    conn.execute("SELECT pg_sleep(0.01)")
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain '5 milliseconds')")
    (_, _, deleted, _, _), = conn.execute("SELECT * FROM hudi.clean('customers')").fetchall()
    assert deleted > 0
    assert our_rows(conn) == reference_rows(table)
    assert refused_as_of(conn, first) == "HV00R"


def refused_as_of(conn, instant):
    conn.execute(f"SET hudi.as_of_instant = '{instant}'")
    try:
        our_rows(conn)
        return None
    except psycopg.Error as e:
        return e.sqlstate
    finally:
        conn.execute("RESET hudi.as_of_instant")


def test_a_consumer_holds_cleaning_back_until_it_has_read(lake, cluster):
    """A consumer of another role, through its own incremental table, that has not consumed
    yet keeps every slice; once it consumed, the clean goes up to its position, and it has
    received every change exactly once."""
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '1', ADD clean_retain '1 microsecond')")
    conn.execute("CREATE ROLE reader LOGIN")
    conn.execute(f"ALTER ROLE reader SET hudi.allowed_file_roots = '{table.parent}'")
    conn.execute("CREATE FOREIGN TABLE customer_changes (id bigint, balance numeric(12, 2), "
                 "_hoodie_operation text) SERVER lake OPTIONS (path 'customers', query_type 'incremental')")
    conn.execute("GRANT SELECT ON customer_changes TO reader")
    conn.execute("GRANT USAGE ON SCHEMA hudi TO reader")
    consume = "SELECT id, balance, _hoodie_operation FROM hudi.consume(NULL::customer_changes, 'etl')"
    with psycopg.connect(host="127.0.0.1", port=cluster.port, user="reader", dbname="postgres", autocommit=True) as reader:
        assert reader.execute(consume).fetchall() == []  # registered, nothing to read yet
        for n in range(3):
            round_of_writes(conn, n)
        assert conn.execute("SELECT * FROM hudi.clean('customers')").fetchall() == [], "the consumer holds it back"
        assert_rebuilds(reader.execute(consume).fetchall(), conn)
        round_of_writes(conn, 3)
        (_, _, deleted, _, _), = conn.execute("SELECT * FROM hudi.clean('customers')").fetchall()
        assert deleted > 0
        # What the consumer reads next is exactly what happened since.
        since = reader.execute(consume).fetchall()
        assert {int(k) for k, _, _ in since} == set(range(1, 41))
        assert our_rows(conn) == reference_rows(table)


def test_only_the_owner_cleans(lake, cluster):
    conn, _ = lake
    conn.execute("CREATE ROLE someone LOGIN")
    conn.execute("GRANT SELECT, INSERT ON customers TO someone")
    conn.execute("GRANT USAGE ON SCHEMA hudi TO someone")
    with psycopg.connect(host="127.0.0.1", port=cluster.port, user="someone", dbname="postgres", autocommit=True) as other:
        with pytest.raises(psycopg.Error) as e:
            other.execute("SELECT * FROM hudi.clean('customers')")
        assert e.value.sqlstate == "42501"
    with pytest.raises(psycopg.Error) as e:
        conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_max_retain 'soon')")
    assert e.value.sqlstate == "HV024"


def test_a_consumer_on_another_server_holds_cleaning_back(lake, cluster):
    """Consumers' positions are published in the table's storage: a consumer registered on a
    second server keeps the first server's clean from deleting what it still reads, and once
    it has consumed (and its server published that), the clean goes on; it received every
    change."""
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '1', ADD clean_retain '1 microsecond')")
    with second_server(cluster, table.parent) as second:
        with second.connect() as other:
            other.execute("CREATE FOREIGN TABLE customer_changes (id bigint, balance numeric(12, 2), "
                          "_hoodie_operation text) SERVER lake OPTIONS (path 'customers', query_type 'incremental')")
            consume = "SELECT id, balance, _hoodie_operation FROM hudi.consume(NULL::customer_changes, 'etl')"
            assert other.execute(consume).fetchall() == []
            # Its server's clean publishes the position (nothing to clean yet).
            assert other.execute("SELECT * FROM hudi.clean('customer_changes')").fetchall() == []
            published = list((table / ".hoodie/.aux/consumers").glob("*.json"))
            assert len(published) == 1 and '"position": ""' in published[0].read_text()
            for n in range(3):
                round_of_writes(conn, n)
            assert conn.execute("SELECT * FROM hudi.clean('customers')").fetchall() == [], "held back from the other server"
            assert_rebuilds(other.execute(consume).fetchall(), conn)
            # Its server publishes the new position (with its own retention it cleans nothing).
            assert other.execute("SELECT * FROM hudi.clean('customer_changes')").fetchall() == []
            round_of_writes(conn, 3)
            (_, _, deleted, _, _), = conn.execute("SELECT * FROM hudi.clean('customers')").fetchall()
            assert deleted > 0
            since = other.execute(consume).fetchall()
            assert {int(k) for k, _, _ in since} == set(range(1, 41))
        assert our_rows(conn) == reference_rows(table)
