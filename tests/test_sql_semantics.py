"""SQL on a Hudi table means what it means on a heap table with the same primary key:
INSERT ... ON CONFLICT DO NOTHING skips rows whose key exists (DO UPDATE is refused with a hint),
RETURNING shows the deleted, inserted or updated rows, a table holds one row per declared key,
and an UPDATE that the merge rules will not show says so. The differential test runs hundreds
of seeded random statements on both (as a role that is not a superuser, outside UTC) and
compares every statement's result, RETURNING rows, trigger effects and the final contents."""

import os
import random

import psycopg
import pytest

from conftest import module_cluster, refused

COLUMNS = "id bigint, country text, name text, balance numeric(12, 2), score float8, ok boolean, day date, ts timestamptz"
SELECT = "SELECT id, country, name, balance, score, ok, day, ts FROM {t} ORDER BY id, country"
COUNTRIES = ["nl", "be", "fr"]


@pytest.fixture(scope="module")
def db(request):
    """One cluster for the module, with the server `lake` and a role `app` that may use it and
    is not a superuser: a connection as the superuser, with the role set to `app`, outside UTC."""
    with module_cluster("test_sql_semantics", "app") as (cluster, root):
        yield cluster, root


@pytest.fixture
def app(db):
    cluster, root = db
    with cluster.connect() as conn:
        conn.execute(f"SET hudi.allowed_file_roots = '{root}'")
        conn.execute("SET ROLE app")
        conn.execute("SET TimeZone = 'America/Santiago'")
        yield conn


def create_pair(conn, name, partitioned):
    """A Hudi table `name` and a heap table `name_heap` with the same primary key."""
    key, extra = ("id, country", ", partition_by 'country'") if partitioned else ("id", "")
    conn.execute(f"DROP FOREIGN TABLE IF EXISTS {name}")
    conn.execute(f"DROP TABLE IF EXISTS {name}_heap")
    conn.execute(f"""CREATE FOREIGN TABLE {name} ({COLUMNS}) SERVER lake
                     OPTIONS (path '{name}', primary_key '{key.replace(' ', '')}', ordering_field 'ts', buckets '4'{extra})""")
    conn.execute(f"SELECT hudi.create_table('{name}')")
    conn.execute(f"CREATE TABLE {name}_heap ({COLUMNS}, PRIMARY KEY ({key}))")
    return name, f"{name}_heap"


def rows(conn, table):
    return conn.execute(SELECT.format(t=table)).fetchall()


def test_on_conflict_do_nothing_keeps_existing_rows(app):
    hudi, heap = create_pair(app, "nothing", partitioned=False)
    for t in (hudi, heap):
        app.execute(f"INSERT INTO {t} (id, country, name, ts) VALUES (9, 'es', 'first', '2026-01-01')")
        cur = app.execute(f"INSERT INTO {t} (id, country, name, ts) VALUES (9, 'nl', 'second', '2026-02-01'), (10, 'nl', 'new', '2026-02-01'),"
                          f" (10, 'nl', 'again', '2026-03-01') ON CONFLICT DO NOTHING")
        assert cur.rowcount == 1, t
        # The batch path (no RETURNING): a thousand rows, half of them taken.
        cur = app.execute(f"INSERT INTO {t} (id, country, name, ts) SELECT g, 'be', 'gen', '2026-01-01' FROM generate_series(1, 40) g"
                          f" ON CONFLICT DO NOTHING")
        assert cur.rowcount == 38, t
        returned = app.execute(f"INSERT INTO {t} (id, name, ts) VALUES (9, 'x', '2026-05-01'), (41, 'y', '2026-05-01') ON CONFLICT DO NOTHING RETURNING id, name").fetchall()
        assert returned == [(41, "y")], t
    assert rows(app, hudi) == rows(app, heap)
    assert [r[2] for r in rows(app, hudi) if r[0] in (9, 10)] == ["first", "new"]
    # A conflict target: the primary key, as on the heap table; any other column is 42P10 on
    # both (no unique index matches it), and changes nothing.
    for t in (hudi, heap):
        cur = app.execute(f"INSERT INTO {t} (id, name, ts) VALUES (9, 'x', '2026-05-01'), (42, 'z', '2026-05-01') ON CONFLICT (id) DO NOTHING")
        assert cur.rowcount == 1, t
        for target in ("(name)", "(id, name)"):
            assert refused(app, f"INSERT INTO {t} (id, name) VALUES (43, 'w') ON CONFLICT {target} DO NOTHING") == "42P10", (t, target)
    assert rows(app, hudi) == rows(app, heap)
    # In a transaction, after its own earlier writes (and a delete of one of them).
    with app.transaction():
        for t in (hudi, heap):
            app.execute(f"INSERT INTO {t} (id, name, ts) VALUES (50, 'tx', '2026-05-01')")
            app.execute(f"DELETE FROM {t} WHERE id = 41")
            cur = app.execute(f"INSERT INTO {t} (id, name, ts) VALUES (50, 'no', '2026-05-01'), (41, 'back', '2026-05-01') ON CONFLICT DO NOTHING")
            assert cur.rowcount == 1, t
    assert rows(app, hudi) == rows(app, heap)


def test_on_conflict_do_update_is_refused_with_a_hint(app):
    hudi, _ = create_pair(app, "doupdate", partitioned=False)
    for sql in (f"INSERT INTO {hudi} (id, name) VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET name = excluded.name",
                f"WITH x AS (INSERT INTO {hudi} (id, name) VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET name = 'b' RETURNING id) SELECT * FROM x"):
        with pytest.raises(psycopg.Error) as e:
            app.execute(sql)
        assert e.value.sqlstate == "0A000", e.value
        assert "already an upsert by key" in e.value.diag.message_hint
    assert rows(app, hudi) == []


def test_delete_returning_gives_the_deleted_rows(app):
    hudi, heap = create_pair(app, "deleted", partitioned=True)
    for t in (hudi, heap):
        app.execute(f"CREATE TABLE {t}_archive (LIKE {heap})")
        app.execute(f"""INSERT INTO {t} VALUES (1, 'nl', 'ann', 10.5, 1.5, true, '2026-01-02', '2026-01-01 10:00+01'),
                                               (2, 'be', 'bob', NULL, '-Infinity', false, NULL, '2026-01-01'),
                                               (3, 'fr', 'cy', -3, NULL, NULL, '1999-12-31', '2026-01-01')""")
    deleted = {t: sorted(app.execute(f"DELETE FROM {t} WHERE id <= 2 RETURNING *").fetchall()) for t in (hudi, heap)}
    assert deleted[hudi] == deleted[heap] and len(deleted[hudi]) == 2
    assert deleted[hudi][0][2] == "ann"
    for t in (hudi, heap):
        app.execute(f"WITH moved AS (DELETE FROM {t} RETURNING *) INSERT INTO {t}_archive SELECT * FROM moved")
    assert rows(app, f"{hudi}_archive") == rows(app, f"{heap}_archive") != []
    assert rows(app, hudi) == rows(app, heap) == []


def test_partition_columns_outside_the_key_are_refused(app):
    app.execute(f"CREATE FOREIGN TABLE split ({COLUMNS}) SERVER lake OPTIONS (path 'split', primary_key 'id', ordering_field 'ts', partition_by 'country')")
    with pytest.raises(psycopg.Error) as e:
        app.execute("SELECT hudi.create_table('split')")
    assert e.value.sqlstate == "0A000" and "country" in e.value.diag.message_detail
    assert "primary_key 'id,country'" in e.value.diag.message_hint
    # With the partition column in the key, one row per declared key: (9, es) and (9, nl).
    app.execute("ALTER FOREIGN TABLE split OPTIONS (SET primary_key 'id,country')")
    app.execute("SELECT hudi.create_table('split')")
    app.execute("INSERT INTO split (id, country, ts) VALUES (9, 'es', '2026-05-01')")
    app.execute("INSERT INTO split (id, country, ts) VALUES (9, 'es', '2026-05-01'), (9, 'nl', '2026-05-01')")
    assert app.execute("SELECT id, country FROM split ORDER BY 2").fetchall() == [(9, "es"), (9, "nl")]
    # The conflict target is the whole key, as a heap table's must match its primary key.
    with pytest.raises(psycopg.Error) as e:
        app.execute("INSERT INTO split (id, country, ts) VALUES (9, 'fr', '2026-05-01') ON CONFLICT (id) DO NOTHING")
    assert e.value.sqlstate == "42P10" and "(id, country)" in e.value.diag.message_hint
    cur = app.execute("INSERT INTO split (id, country, ts) VALUES (9, 'es', '2026-06-01'), (9, 'fr', '2026-05-01') ON CONFLICT (country, id) DO NOTHING")
    assert cur.rowcount == 1
    assert app.execute("SELECT id, country FROM split ORDER BY 2").fetchall() == [(9, "es"), (9, "fr"), (9, "nl")]


def test_a_key_column_may_be_null_while_another_has_a_value(app):
    """As Hudi's complex key generator (which Spark writes with): a NULL part of a composite key
    is `__null__`, and such a key is a key like any other (a heap table's primary key would
    refuse it); a row whose key columns are all NULL has no key and is refused."""
    hudi, _ = create_pair(app, "nullparts", partitioned=True)
    app.execute(f"INSERT INTO {hudi} (id, country, name, ts) VALUES (9, NULL, 'first', '2026-01-01'), (9, 'nl', 'other', '2026-01-01')")
    app.execute(f"INSERT INTO {hudi} (id, country, name, ts) VALUES (9, NULL, 'second', '2026-02-01')")
    assert app.execute(f"SELECT id, country, name FROM {hudi} ORDER BY 2").fetchall() == [(9, "nl", "other"), (9, None, "second")]
    app.execute(f"CREATE FOREIGN TABLE {hudi}_keys (_hoodie_record_key text, _hoodie_partition_path text) SERVER lake OPTIONS (path '{hudi}')")
    assert app.execute(f"SELECT * FROM {hudi}_keys ORDER BY 1").fetchall() == [
        ("id:9,country:__null__", "country=__HIVE_DEFAULT_PARTITION__"), ("id:9,country:nl", "country=nl")]
    with pytest.raises(psycopg.Error) as e:
        app.execute(f"INSERT INTO {hudi} (id, country, name, ts) VALUES (10, 'nl', 'ok', '2026-01-01'), (NULL, NULL, 'none', '2026-01-01')")
    assert e.value.sqlstate == "22023" and "row 2 has no value in any of its key columns (id, country)" in str(e.value)
    assert app.execute(f"SELECT count(*) FROM {hudi}").fetchone() == (2,)
    assert app.execute(f"DELETE FROM {hudi} WHERE country IS NULL RETURNING id, name").fetchall() == [(9, "second")]
    assert app.execute(f"SELECT id, country FROM {hudi}").fetchall() == [(9, "nl")]


def test_updates_the_merge_will_not_show_raise_a_notice(app):
    hudi, _ = create_pair(app, "hidden", partitioned=False)
    notices = []
    # A Diagnostic is only valid during the callback.
    app.add_notice_handler(lambda d: notices.append((d.message_primary, d.message_hint)))
    app.execute(f"INSERT INTO {hudi} (id, name, ts) SELECT g, 'n', '2026-01-01' FROM generate_series(1, 5) g")
    app.execute(f"UPDATE {hudi} SET name = 'later', ts = '2027-01-01' WHERE id = 1")
    assert notices == []
    cur = app.execute(f"UPDATE {hudi} SET name = 'x', ts = '2020-01-01' WHERE id <= 3")
    assert cur.rowcount == 3
    assert len(notices) == 1 and notices[0][0].startswith("3 updated rows"), notices
    assert "Merge rules" in notices[0][1]
    app.execute(f"UPDATE {hudi} SET ts = NULL WHERE id = 4")
    assert len(notices) == 2 and notices[1][0].startswith("1 updated rows")
    assert [r[2] for r in rows(app, hudi)] == ["later", "n", "n", "n", "n"]
    # Partial updates: a NULL written keeps the old value.
    app.execute(f"""CREATE FOREIGN TABLE partial (id bigint, email text, phone text, ts bigint) SERVER lake
                    OPTIONS (path 'partial', primary_key 'id', ordering_field 'ts', merge_mode 'partial_update')""")
    app.execute("SELECT hudi.create_table('partial')")
    app.execute("INSERT INTO partial VALUES (1, 'a@x', '1', 1), (2, 'b@x', '2', 1)")
    app.execute("UPDATE partial SET phone = '3', ts = 2")
    assert len(notices) == 2
    app.execute("UPDATE partial SET email = NULL, ts = 3 WHERE id = 1")
    assert len(notices) == 3 and "set NULL" in notices[2][0], notices
    assert app.execute("SELECT email FROM partial WHERE id = 1").fetchone() == ("a@x",)


# --- the differential test -------------------------------------------------------------------

def random_row(rng, id, country):
    name = rng.choice(["a", "bee", "", None, "ünï", "x" * rng.randrange(1, 40)])
    balance = rng.choice([None, "0", f"{rng.randrange(-10**6, 10**6) / 100:.2f}"])
    score = rng.choice([None, 0.5, -1e300, rng.random()])
    return (id, country, name, balance, score, rng.choice([True, False, None]),
            rng.choice([None, f"20{rng.randrange(10, 30)}-0{rng.randrange(1, 10)}-1{rng.randrange(0, 9)}"]),
            f"2026-01-{rng.randrange(1, 28):02d} {rng.randrange(0, 24):02d}:00:00+00")


def values_sql(conn, rows):
    """A VALUES list of `rows`, quoted as literals."""
    def literal(v):
        return "NULL" if v is None else psycopg.sql.Literal(v).as_string(conn)
    return ", ".join("(" + ", ".join(literal(v) for v in r) + ")" for r in rows)


class Scenario:
    """Random statements for a pair of tables, written once, run on both."""

    def __init__(self, rng, conn, partitioned):
        self.rng, self.conn, self.partitioned = rng, conn, partitioned
        self.next_id = 1

    def country(self):
        return self.rng.choice(COUNTRIES) if self.partitioned else "nl"

    def conflict_target(self, rng):
        """No target, or the primary key's columns in either order."""
        return rng.choice(["", " (country, id)", " (id, country)"] if self.partitioned else ["", " (id)"])

    def known_keys(self, heap):
        return self.conn.execute(f"SELECT id, country FROM {heap}").fetchall()

    def statement(self, heap):
        """One statement (with `{t}` for the table and `{a}` for its archive)."""
        rng = self.rng
        kind = rng.choice(["insert", "insert", "nothing", "nothing_select", "update", "delete", "move"])
        returning = rng.choice(["", "", " RETURNING *", " RETURNING id, name"])
        if kind == "insert":
            new = [random_row(rng, self.next_id + i, self.country()) for i in range(rng.randrange(1, 6))]
            self.next_id += len(new)
            return f"INSERT INTO {{t}} VALUES {values_sql(self.conn, new)}{returning}"
        if kind == "nothing":
            known = self.known_keys(heap)
            keys = [rng.choice(known) if known and rng.random() < 0.5 else (rng.randrange(1, self.next_id + 5), self.country())
                    for _ in range(rng.randrange(1, 8))]
            self.next_id = max([self.next_id] + [k[0] + 1 for k in keys])
            return (f"INSERT INTO {{t}} VALUES {values_sql(self.conn, [random_row(rng, *k) for k in keys])}"
                    f" ON CONFLICT{self.conflict_target(rng)} DO NOTHING{returning}")
        if kind == "nothing_select":
            low = rng.randrange(1, self.next_id + 1)
            high = low + rng.randrange(0, 300)
            self.next_id = max(self.next_id, high + 1)
            country = f"(ARRAY{COUNTRIES!r})[1 + g % 3]" if self.partitioned else "'nl'"
            return (f"INSERT INTO {{t}} (id, country, name, balance, ts) SELECT g, {country}, 'g' || g, g / 7.0,"
                    f" timestamptz '2026-01-01' + g * interval '1 minute' FROM generate_series({low}, {high}) g"
                    f" ON CONFLICT{self.conflict_target(rng)} DO NOTHING{returning}")
        m, r = rng.randrange(2, 9), rng.randrange(0, 2)
        if kind == "update":
            sets = rng.choice(["name = coalesce(name, '') || 'u'", "balance = balance + 1, ok = NOT ok", "score = NULL, day = day + 1"])
            return f"UPDATE {{t}} SET {sets}, ts = ts + interval '1 hour' WHERE id % {m} = {r}{returning}"
        if kind == "delete":
            return f"DELETE FROM {{t}} WHERE id % {m} = {r}{returning}"
        return f"WITH moved AS (DELETE FROM {{t}} WHERE id % {m} = {r} RETURNING *) INSERT INTO {{a}} SELECT * FROM moved"


def run(conn, sql):
    cur = conn.execute(sql)
    returned = sorted(cur.fetchall(), key=repr) if cur.description else None
    return cur.rowcount, returned


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_random_statements_match_a_heap_table(app, partitioned):
    seed = int(os.environ.get("PG_HUDI_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (PG_HUDI_SEED reproduces it)")
    rng = random.Random(seed)
    name = "diff_p" if partitioned else "diff_u"
    hudi, heap = create_pair(app, name, partitioned)
    app.execute("""CREATE OR REPLACE FUNCTION log_change() RETURNS trigger LANGUAGE plpgsql AS $$
                   BEGIN
                     EXECUTE format('INSERT INTO %I VALUES ($1, $2, $3)', TG_TABLE_NAME || '_log')
                       USING TG_OP, CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END,
                             CASE WHEN TG_OP = 'DELETE' THEN OLD.name ELSE NEW.name END;
                     RETURN NULL;
                   END $$""")
    for t in (hudi, heap):
        app.execute(f"CREATE TABLE {t}_archive (LIKE {heap})")
        app.execute(f"CREATE TABLE {t}_log (op text, id bigint, name text)")
    scenario = Scenario(rng, app, partitioned)
    statements = int(os.environ.get("PG_HUDI_STATEMENTS", 120))
    done = 0
    while done < statements:
        if done == statements // 2:
            # Row triggers from here on: they take rows one at a time.
            for t in (hudi, heap):
                app.execute(f"CREATE TRIGGER logged AFTER INSERT OR UPDATE OR DELETE ON {t} FOR EACH ROW EXECUTE FUNCTION log_change()")
        in_transaction = rng.random() < 0.2
        batch = [scenario.statement(heap) for _ in range(rng.randrange(2, 5) if in_transaction else 1)]
        commit = not in_transaction or rng.random() < 0.7
        results = {}
        for t in (hudi, heap):
            if in_transaction:
                app.execute("BEGIN")
            results[t] = [run(app, sql.format(t=t, a=f"{t}_archive")) for sql in batch]
            if in_transaction:
                app.execute("COMMIT" if commit else "ROLLBACK")
        assert results[hudi] == results[heap], (seed, batch)
        done += len(batch)
        if done % 20 < len(batch) or done >= statements:
            for suffix in ("", "_archive", "_log"):
                theirs = sorted(app.execute(f"SELECT * FROM {heap}{suffix}").fetchall(), key=repr)
                ours = sorted(app.execute(f"SELECT * FROM {hudi}{suffix}").fetchall(), key=repr)
                assert ours == theirs, (seed, suffix, done)
    assert rows(app, hudi) == rows(app, heap)
    assert len(rows(app, heap)) > 0
