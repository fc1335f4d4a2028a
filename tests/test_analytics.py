"""Analytic queries on Hudi tables: what the scan decodes, filters and estimates.

One cluster for the module with a small star schema (a 16-column fact table keyed by `id`,
compacted and then with a tenth of its rows updated in log files, and two dimension tables),
each table also as a heap copy with a primary key. Queries run as a role that is not a
superuser, under TimeZone America/New_York. The checks:
- the scan decodes only the columns the query uses (EXPLAIN VERBOSE "Hudi Columns Read"), in
  serial, parallel, pushed-aggregate and join plans;
- the quals the engine evaluates exactly are its row filter, applied before rows become datums
  (EXPLAIN ANALYZE counts the rows it removed, in every process of a parallel scan), and the
  rest stay with PostgreSQL; results equal the heap copy's, also where the filter's operands
  are parameters (of a correlated subquery, of a generic plan: their values prune buckets as
  constants do) or a date column is compared with a timestamp;
- a pushed aggregate in a correlated subquery answers every parameter value from one read;
- parallel workers scan dimension tables whole at the leader's read state, and every scan
  runs in a worker under force_parallel_mode with the heap's results;
- after ANALYZE, row estimates are within 2x of the true counts.
"""

import re

import psycopg
import pytest

from conftest import module_cluster

FACT_ROWS = 20_000
FACT = """id bigint, cust integer, part integer, od date, sd date, qty integer, price numeric(12,2),
          disc numeric(4,2), tax numeric(4,2), flag text, status text, mode text, note text,
          ts timestamptz, urgent boolean, score double precision"""
FACT_ROW = """g, 1 + (g * 7919) % 500, 1 + (g * 104729) % 200, date '1993-01-01' + (g * 37) % 2200,
              date '1993-01-01' + (g * 37) % 2200 + (g % 90), 1 + g % 50, (100 + (g * 31) % 90000) / 100.0,
              (g % 11) / 100.0, (g % 9) / 100.0, (ARRAY['A','N','R'])[1 + g % 3], (ARRAY['F','O','P'])[1 + (g / 3) % 3],
              (ARRAY['AIR','MAIL','RAIL','SHIP','TRUCK'])[1 + g % 5], 'note ' || (g % 1000),
              timestamptz '1993-01-01 00:00:00+00' + g * interval '97 minutes', g % 13 = 0, (g % 1000) * 0.25"""


@pytest.fixture(scope="module")
def db():
    """(superuser connection, connection of role `analyst` in America/New_York)."""
    with module_cluster("test_analytics", "analyst") as (cluster, root):
        yield from tables(cluster, root)


def tables(cluster, root):
    """The schema's tables, made by `analyst`: yields (superuser connection, analyst's)."""
    admin = cluster.connect()
    # ANALYZE reads a table as its owner, who may use file:// below this root.
    admin.execute(f"SET hudi.allowed_file_roots = '{root}'")
    conn = cluster.connect()
    conn.execute(f"SET hudi.allowed_file_roots = '{root}'")
    conn.execute("SET ROLE analyst")
    conn.execute("SET TimeZone = 'America/New_York'")
    conn.execute(f"CREATE FOREIGN TABLE fact ({FACT}) SERVER lake OPTIONS (path 'fact', primary_key 'id', "
                 "ordering_field 'ts', buckets '4', services 'off')")
    conn.execute("SELECT hudi.create_table('fact')")
    conn.execute(f"CREATE TABLE fact_heap ({FACT}, PRIMARY KEY (id))")
    conn.execute(f"INSERT INTO fact_heap SELECT {FACT_ROW} FROM generate_series(1, {FACT_ROWS}) g")
    conn.execute("INSERT INTO fact SELECT * FROM fact_heap")
    conn.execute("SELECT hudi.compact('fact')")
    for name, columns, rows in (("customer", "id integer, name text, segment text, nation integer", 500),
                                ("part", "id integer, name text, brand text, size integer", 200)):
        values = ("g, 'customer ' || g, (ARRAY['AUTO','BUILDING','FURNITURE','MACHINERY'])[1 + g % 4], g % 25"
                  if name == "customer" else "g, 'part ' || g, 'Brand#' || (1 + g % 5), 1 + g % 50")
        conn.execute(f"CREATE FOREIGN TABLE {name} ({columns}) SERVER lake OPTIONS (path '{name}', "
                     "primary_key 'id', buckets '2', merge_mode 'commit_time', services 'off')")
        conn.execute(f"SELECT hudi.create_table('{name}')")
        conn.execute(f"CREATE TABLE {name}_heap ({columns}, PRIMARY KEY (id))")
        conn.execute(f"INSERT INTO {name}_heap SELECT {values} FROM generate_series(1, {rows}) g")
        conn.execute(f"INSERT INTO {name} SELECT * FROM {name}_heap")
    yield admin, conn
    conn.close()
    admin.close()


def updated(conn):
    """A tenth of the fact rows updated in log files (once; on both copies)."""
    if conn.execute("SELECT count(*) FROM fact_heap WHERE status = 'U'").fetchone()[0] == 0:
        for table in ("fact", "fact_heap"):
            conn.execute(f"UPDATE {table} SET status = 'U', qty = qty + 1, sd = sd + 1 WHERE id % 10 = 3")


def plan(conn, sql, analyze=False):
    options = "ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF" if analyze else "VERBOSE, COSTS OFF"
    return "\n".join(r[0] for r in conn.execute(f"EXPLAIN ({options}) {sql}"))


def columns_read(text):
    return [set(m.split(", ")) for m in re.findall(r"Hudi Columns Read: (.*)", text)]


def same(conn, sql):
    """The query's rows on the Hudi tables and on their heap copies, which must be equal."""
    heap = sql
    for name in ("fact", "customer", "part"):
        heap = re.sub(rf"\b(FROM|JOIN)\s+{name}\b", rf"\1 {name}_heap", heap)
    ours, theirs = conn.execute(sql).fetchall(), conn.execute(heap).fetchall()
    assert ours == theirs, f"{sql}\nhudi: {ours[:5]}\nheap: {theirs[:5]}"
    return ours


Q6 = """SELECT sum(price * disc) FROM fact WHERE sd >= DATE '1994-01-01' AND sd < DATE '1994-01-01' + interval '1 year'
        AND disc BETWEEN 0.05 AND 0.07 AND qty < 24"""


def test_scans_decode_only_the_columns_the_query_uses(db):
    _, conn = db
    serial = plan(conn, "SELECT sum(price * disc) FROM fact WHERE qty < 24 AND note LIKE '%7%'")
    assert columns_read(serial) == [{"price", "disc", "qty", "note"}], serial
    # Pushed, the aggregate reads its columns; not pushed, the scan under an aggregate outputs
    # the physical target list, all columns, and decodes what the query uses all the same.
    q6 = plan(conn, Q6)
    assert "Aggregate pushed: sum((price * disc))" in q6 and columns_read(q6) == [{"sd", "qty", "price", "disc"}], q6
    conn.execute("SET hudi.aggregate_pushdown = off")
    try:
        q6 = plan(conn, Q6)
    finally:
        conn.execute("RESET hudi.aggregate_pushdown")
    assert re.search(r"Output: id, cust, part, od", q6) and columns_read(q6) == [{"sd", "qty", "price", "disc"}], q6
    conn.execute("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0")
    try:
        # A quotient as an operand is not pushed: a parallel scan under PostgreSQL's aggregation.
        parallel = plan(conn, "SELECT flag, sum(qty * price / 2 + 1) FROM fact WHERE mode = 'AIR' GROUP BY flag")
        assert "Parallel" in parallel and columns_read(parallel) == [{"flag", "qty", "price", "mode"}], parallel
    finally:
        conn.execute("RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size")
    pushed = plan(conn, "SELECT status, count(*), sum(qty) FROM fact WHERE urgent GROUP BY status")
    assert "Aggregate pushed" in pushed and columns_read(pushed) == [{"status", "qty", "urgent"}], pushed
    join = plan(conn, "SELECT c.segment, sum(f.price) FROM fact f JOIN customer c ON c.id = f.cust "
                      "WHERE c.nation = 3 GROUP BY c.segment")
    assert sorted(map(sorted, columns_read(join))) == [["cust", "price"], ["id", "nation", "segment"]], join


def test_the_row_filter_drops_rows_before_postgres_sees_them(db):
    _, conn = db
    # The scan under PostgreSQL's aggregate, not a pushed aggregate.
    conn.execute("SET hudi.aggregate_pushdown = off")
    try:
        row_filter_drops_rows(conn)
    finally:
        conn.execute("RESET hudi.aggregate_pushdown")


def row_filter_drops_rows(conn):
    for state in ("compacted", "updated"):
        if state == "updated":
            updated(conn)
        text = plan(conn, Q6, analyze=True)
        # The whole WHERE clause is the engine's: the date column against a timestamp constant too.
        assert re.search(r"Hudi Row Filter: .*sd >= date .*sd < date .*disc >= 0.05.*disc <= 0.07.*qty < 24", text), text
        assert "Filter:" not in text.replace("Hudi Row Filter:", ""), text
        assert re.search(r"Hudi Filters: .*sd < date '1995-01-01'", text), text
        removed = int(re.search(r"Rows Removed by Hudi Row Filter: (\d+)", text).group(1))
        kept = int(re.search(r"Foreign Scan on public.fact .*rows=(\d+)", text).group(1))
        total = conn.execute("SELECT count(*) FROM fact_heap").fetchone()[0]
        assert kept == conn.execute(Q6.replace("sum(price * disc)", "count(*)").replace("fact", "fact_heap")).fetchone()[0]
        # Row groups the statistics ruled out are not read; of the rest, the filter removed
        # all but the rows returned.
        assert 0 < removed <= total - kept, text
        same(conn, Q6)
        # A qual the engine cannot evaluate stays with PostgreSQL, the others are the engine's.
        sql = "SELECT count(*), sum(qty) FROM fact WHERE mode IN ('AIR', 'RAIL') AND note ILIKE '%12%' AND NOT urgent"
        text = plan(conn, sql, analyze=True)
        row_filter = re.search(r"Hudi Row Filter: (.*)", text).group(1).split(" AND ")
        assert sorted(row_filter) == ["(NOT (urgent))", "(mode IN ('AIR', 'RAIL'))"], text
        assert re.search(r"\n\s+Filter: \(fact.note ~~\* '%12%'::text\)", text), text
        same(conn, sql)


def test_aggregates_of_numeric_expressions_are_pushed(db):
    _, conn = db
    # As text, so that the scales (PostgreSQL's display scales) are compared too.
    sql = """SELECT flag, sum(price * (1 - disc))::text, sum(price * (1 - disc) * (1 + tax))::text,
                    avg(price * disc)::text, min(price - disc)::text, max(disc * 100.50)::text, count(*)
             FROM fact WHERE sd < DATE '1995-01-01' GROUP BY flag ORDER BY flag"""
    text = plan(conn, sql)
    assert re.search(r"Aggregate pushed: sum\(\(price \* \(1 - disc\)\)\), sum\(\(\(price \* \(1 - disc\)\) \* \(1 \+ tax\)\)\)", text), text
    rows = same(conn, sql)
    assert len(rows) == 3 and all(r[1] for r in rows), rows
    # Over groups without rows, and with a condition.
    same(conn, "SELECT sum(price * disc)::text, avg(price - tax)::text FROM fact WHERE qty > 1000")
    # More digits than 128 bits hold: PostgreSQL computes it.
    sql = "SELECT sum(price * price * price * price)::text FROM fact"
    assert "Aggregate pushed" not in plan(conn, sql)
    same(conn, sql)


def test_like_is_evaluated_in_the_engine(db):
    _, conn = db
    patterns = ["note 1%", "%7", "%1_3%", "note __", "note\\ 1%", "%\\%%", "N%", "%", "", "note 12", "_ote%9"]
    for pattern in patterns:
        for negated in ("", "NOT "):
            where = f"note {negated}LIKE %s AND status <> 'x'"
            text = "\n".join(r[0] for r in conn.execute(
                f"EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM fact WHERE {where.replace('%s', conn.execute('SELECT quote_literal(%s)', (pattern,)).fetchone()[0])}"))
            assert f"note {negated}LIKE" in text and "Filter: " not in text.replace("Hudi Row Filter:", ""), text
            ours = conn.execute(f"SELECT id FROM fact WHERE {where} ORDER BY id", (pattern,)).fetchall()
            theirs = conn.execute(f"SELECT id FROM fact_heap WHERE {where} ORDER BY id", (pattern,)).fetchall()
            assert ours == theirs, (negated, pattern)
            # As a pushed aggregate's condition.
            count = f"SELECT count(*), sum(qty) FROM {{}} WHERE {where}"
            assert conn.execute(count.format("fact"), (pattern,)).fetchone() == conn.execute(count.format("fact_heap"), (pattern,)).fetchone()
    # ILIKE depends on the locale's case folding: PostgreSQL keeps it.
    text = plan(conn, "SELECT id FROM fact WHERE note ILIKE 'NOTE 1%'")
    assert re.search(r"\n\s+Filter: \(fact.note ~~\* ", text), text


def test_a_parallel_scan_counts_the_rows_every_process_filtered(db):
    _, conn = db
    conn.execute("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0")
    try:
        sql = "SELECT count(*) FROM fact WHERE mode = 'AIR' AND note ILIKE '%3%'"
        text = plan(conn, sql, analyze=True)
        scan = re.search(r"Parallel Foreign Scan on public.fact .*rows=(\d+) loops=(\d+)", text)
        assert scan and int(scan.group(2)) > 1, text
        removed = int(re.search(r"Rows Removed by Hudi Row Filter: (\d+)", text).group(1))
        by_postgres = int(re.search(r"Rows Removed by Filter: (\d+)", text).group(1))
        loops = int(scan.group(2))
        # Per loop, as PostgreSQL's own counts: every row of the table is counted once.
        total = conn.execute("SELECT count(*) FROM fact_heap").fetchone()[0]
        assert abs((removed + by_postgres + int(scan.group(1))) * loops - total) <= 3 * loops, text
        same(conn, sql)
    finally:
        conn.execute("RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size")


def test_workers_scan_whole_tables_at_the_leaders_read_state(db):
    _, conn = db
    updated(conn)
    settings = ("parallel_setup_cost = 0", "parallel_tuple_cost = 0", "min_parallel_table_scan_size = 0")
    for setting in settings:
        conn.execute(f"SET {setting}")
    try:
        # The dimension's scan is the inner side of a join in each worker.
        sql = """SELECT c.segment, count(*), sum(f.qty) FROM fact f JOIN customer c ON c.id = f.cust
                 WHERE c.nation < 10 GROUP BY c.segment ORDER BY 1"""
        text = plan(conn, sql, analyze=True)
        workers = re.search(r"Workers Launched: (\d+)", text)
        assert workers and int(workers.group(1)) > 0 and re.search(r"Gather(.|\n)*Foreign Scan on public.customer", text), text
        same(conn, sql)
        # Every scan in a worker (serial plans, under one Gather): the leader only gathers.
        for setting in settings:
            conn.execute(f"RESET {setting.split(' ')[0]}")
        conn.execute("SET force_parallel_mode = on")
        for sql in (Q6, "SELECT p.brand, count(*) FROM fact f JOIN part p ON p.id = f.part WHERE f.flag = 'R' GROUP BY 1 ORDER BY 1",
                    "SELECT id, status FROM fact WHERE id IN (3, 13, 17) ORDER BY id"):
            assert "Single Copy: true" in plan(conn, sql), sql
            same(conn, sql)
        published = conn.execute("SHOW hudi.parallel_read_states").fetchone()[0]
        assert "/lake/fact" in published and "/lake/part" in published, published[:300]
        # Which files a worker reads is pg_hudi's to say, not a role's.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SET hudi.parallel_read_states = '{}'")
    finally:
        conn.execute("RESET force_parallel_mode")
        for setting in settings:
            conn.execute(f"RESET {setting.split(' ')[0]}")


def test_row_filters_with_parameters_are_bound_at_each_rescan(db):
    _, conn = db
    updated(conn)
    # A correlated subquery: its scan is filtered by the outer row's values.
    sql = """SELECT p.id, (SELECT count(*) FROM fact f WHERE f.part = p.id AND f.qty > p.size AND f.note <> 'x')
             FROM part p WHERE p.id <= 12 ORDER BY p.id"""
    conn.execute("SET hudi.aggregate_pushdown = off")
    try:
        text = plan(conn, sql, analyze=True)
        assert re.search(r"Hudi Row Filter: .*\(qty > \$\d\).*\(part = \$\d\)", text), text
        rows = same(conn, sql)
    finally:
        conn.execute("RESET hudi.aggregate_pushdown")
    assert len(rows) == 12 and len({count for _, count in rows}) > 1, rows
    # A pushed aggregate in a correlated subquery: from its second run, one read grouped by
    # the parameter's column answers every value (NULL and values no row has among them).
    sql = """SELECT p.id, (SELECT avg(f.qty) FROM fact f WHERE f.part = NULLIF(p.id, 5) AND f.mode <> 'AIR'),
                     (SELECT count(*) FROM fact f WHERE f.part = p.id + 190)
              FROM part p WHERE p.id <= 14 ORDER BY p.id"""
    text = plan(conn, sql, analyze=True)
    assert text.count("every parameter value answered by one read") == 2, text
    rows = same(conn, sql)
    assert rows[4][1] is None and any(r[1] is not None for r in rows) and rows[-1][2] == 0 and rows[0][2] > 0, rows
    # On the record key, each run's value prunes the read to the key's bucket instead.
    sql = "SELECT p.id, (SELECT sum(f.qty) FROM fact f WHERE f.id = p.id * 97) FROM part p WHERE p.id <= 14 ORDER BY p.id"
    text = plan(conn, sql, analyze=True)
    assert "every parameter value" not in text and "of 1 file slices" in text, text
    assert all(r[1] is not None for r in same(conn, sql))
    # A parameter compared with the record key prunes as a constant does: the bucket's slice
    # alone, and the point read of its key.
    sql = """SELECT p.id, (SELECT f.status || f.qty FROM fact f WHERE f.id = p.id * 97 AND f.note <> 'x')
             FROM part p WHERE p.id <= 20 ORDER BY p.id"""
    text = plan(conn, sql, analyze=True)
    assert re.search(r"Hudi Row Filter: .*\(id = \$\d\)", text) and "Hudi File Slices: 1 of 4" in text, text
    same(conn, sql)
    conn.pgconn.exec_(b"PREPARE point(bigint) AS SELECT * FROM fact WHERE id = $1")
    try:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        text = plan(conn, "EXECUTE point(4242)", analyze=True)
        assert "$1" in text and "Hudi File Slices: 1 of 4" in text, text
        assert conn.execute("EXECUTE point(4242)").fetchall() == conn.execute("SELECT * FROM fact_heap WHERE id = 4242").fetchall()
    finally:
        conn.execute("DEALLOCATE point; RESET plan_cache_mode")
    # A prepared statement's parameters, in its generic plan.
    conn.execute("SET plan_cache_mode = force_generic_plan")
    sql = "SELECT count(*) FROM fact WHERE mode = %s AND qty < %s AND note <> ''"
    for args in (("AIR", 10), ("SHIP", 40), ("none", 50)):
        got = conn.execute(sql, args, prepare=True).fetchone()
        assert got == conn.execute(sql.replace("fact", "fact_heap"), args).fetchone(), args
    conn.execute("RESET plan_cache_mode")


def test_date_columns_against_timestamps_known_at_execution_are_the_engines(db):
    """`date_column < timestamptz ...` (and stable timestamp expressions) are row filters whose
    operand, a date, is computed at execution in the session's time zone: every operator and
    side, at and beside local midnight, infinities, stable expressions, a generic plan's
    parameter run under two time zones; results equal the heap's."""
    _, conn = db
    conn.execute("SET hudi.aggregate_pushdown = off")
    try:
        for zone in ("America/New_York", "Asia/Kathmandu"):
            conn.execute(f"SET TimeZone = '{zone}'")
            for t in ("timestamptz '1995-06-01 00:00:00'", "timestamptz '1995-06-01 00:00:00.000001'",
                      "timestamptz '1995-05-31 23:59:59.999999'", "timestamptz '1995-06-01 02:30:00+00'",
                      "'infinity'::timestamptz", "'-infinity'::timestamptz"):
                for sql in (f"SELECT count(*), sum(qty) FROM fact WHERE sd {op} {t} AND note <> 'x'" for op in ("<", "<=", ">", ">=")):
                    text = plan(conn, sql, analyze=True)
                    assert re.search(r"Hudi Row Filter: .*\(sd [<>=]+ \$\d\)", text), text
                    assert "Filter:" not in text.replace("Hudi Row Filter:", ""), text
                    same(conn, sql)
                same(conn, f"SELECT count(*) FROM fact WHERE {t} > od AND {t} <= sd + 30")
            same(conn, "SELECT count(*) FROM fact WHERE sd < NULL::timestamptz OR qty = 7")
            # Stable expressions: timestamptz and timestamp, one transaction for both copies
            # (now() is the transaction's start).
            with conn.transaction():
                for sql in ("SELECT count(*), min(od) FROM fact WHERE od >= now() - interval '33 years 7 hours'",
                            "SELECT count(*), max(sd) FROM fact WHERE sd < localtimestamp - interval '30 years 5 hours'",
                            "SELECT count(*) FROM fact WHERE od > date_trunc('day', now() - interval '32 years') + interval '1 us'"):
                    text = plan(conn, sql)
                    assert "Filter:" not in text.replace("Hudi Row Filter:", ""), text
                    same(conn, sql)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            try:
                sql = "SELECT count(*) FROM fact WHERE sd >= %s::timestamptz AND od < %s::timestamptz"
                for args in (("1994-03-01 00:00:00", "1996-01-01 12:00:00+14"), ("1994-02-28 23:00:00-03", "infinity")):
                    got = conn.execute(sql, args, prepare=True).fetchone()
                    assert got == conn.execute(sql.replace("fact", "fact_heap"), args).fetchone(), (zone, args)
                # An infinite date parameter (it raised "cannot represent" before) compares as
                # PostgreSQL compares it: beyond every date.
                sql = "SELECT count(*) FROM fact WHERE od < %s::date AND sd > %s::date"
                for args in (("infinity", "-infinity"), ("-infinity", "1994-01-01"), ("1995-01-01", "infinity")):
                    got = conn.execute(sql, args, prepare=True).fetchone()
                    assert got == conn.execute(sql.replace("fact", "fact_heap"), args).fetchone(), (zone, args)
            finally:
                conn.execute("RESET plan_cache_mode")
    finally:
        conn.execute("RESET hudi.aggregate_pushdown; SET TimeZone = 'America/New_York'")


def test_estimates_follow_analyze(db):
    admin, conn = db
    for table in ("fact", "customer", "part"):
        admin.execute(f"ANALYZE {table}")
    cases = {
        "SELECT * FROM fact WHERE id = 42": 1,
        "SELECT * FROM fact WHERE qty < 10": None,
        "SELECT * FROM fact WHERE mode = 'AIR' AND flag = 'N'": None,
        "SELECT * FROM fact WHERE sd BETWEEN DATE '1995-01-01' AND DATE '1995-03-31'": None,
        "SELECT * FROM customer WHERE nation = 3": None,
        "SELECT * FROM fact": None,
    }
    for sql, truth in cases.items():
        truth = truth or conn.execute(sql.replace("SELECT *", "SELECT count(*)")).fetchone()[0]
        text = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {sql}"))
        estimate = float(re.search(r"Foreign Scan on \S+ .*rows=(\d+)", text).group(1))
        assert truth / 2 <= estimate <= max(truth * 2, 2), f"{sql}: estimated {estimate}, true {truth}\n{text}"
    # A join's estimate, from both tables' statistics.
    sql = "SELECT * FROM fact f JOIN customer c ON c.id = f.cust WHERE c.segment = 'AUTO'"
    truth = conn.execute(sql.replace("SELECT *", "SELECT count(*)")).fetchone()[0]
    text = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {sql}"))
    estimate = float(re.search(r"rows=(\d+)", text.splitlines()[0]).group(1))
    assert truth / 2 <= estimate <= truth * 2, f"{sql}: estimated {estimate}, true {truth}\n{text}"
