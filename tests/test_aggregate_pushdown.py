"""Aggregates computed by the engine give PostgreSQL's answers.

The planner hands `count`, `sum`, `avg`, `min`, `max`, `bool_and`/`bool_or`/`every` with
`GROUP BY` columns and `WHERE` quals that the engine evaluates exactly to pg_hudi, which computes
them over the merged file slices (or a base file's statistics). Each test is seeded and
differential: random aggregate queries (random aggregates over every column kind, zero to two
group columns, random predicates from test_pruning's generator, sometimes HAVING or an
expression over an aggregate) run on the foreign table and on a heap copy of its rows, and the
results must agree: exactly, except sums and averages of floats, which PostgreSQL adds in scan
order (relative 1e-9 for double precision, 1e-4 for real). Errors must be the same SQLSTATE.
Time travel, read-optimized and incremental reads, which have no heap copy, compare pushdown on
with pushdown off. A role that is not a superuser runs the queries under TimeZone
America/Sao_Paulo. EXPLAIN of every query tells whether it was pushed; enough of them must be,
of every aggregate and with groups and conditions, for agreement not to be vacuous.

PG_HUDI_SEED=<n>[,<n>...] replaces the default seeds; a failure names the seed and query.
"""

import collections
import decimal
import math
import random
import re

import psycopg

import hudi_rows
import test_pruning as tp
from conftest import new_lake

QUERIES_PER_TABLE = 96
FIXTURE_QUERIES = 8
READ_KIND_QUERIES = 25
TIME_ZONE = "America/Sao_Paulo"

AGGREGATES = {
    "int": ("count", "count_d", "sum", "avg", "min", "max", "sum_i", "avg_i", "max_i", "sum_k", "sum_f", "sum_v", "sum_m"),
    "numeric": ("count", "count_d", "sum", "avg", "min", "max", "sum_e", "avg_e", "max_e", "sum_k", "avg_k", "sum_v", "avg_v", "sum_m"),
    "real": ("count", "count_d", "sum", "avg", "min", "max", "sum_f", "avg_f", "max_f"),
    "float8": ("count", "count_d", "sum", "avg", "min", "max", "sum_f", "avg_f", "min_f"),
    "text": ("count", "count_d", "min_c", "max_c"),
    "bool": ("count", "count_d", "bool_and", "bool_or", "every"),
    "date": ("count", "count_d", "min", "max"),
    "timestamp": ("count", "count_d", "min", "max"),
    "timestamptz": ("count", "count_d", "min", "max"),
}


# Every query's first aggregate takes its turn in this cycle (four turns each in a table's
# queries; CASE twice: only numeric columns have it), so each shape is covered however the
# random stream falls; the rest are drawn at random.
CYCLE = ("count(*)", "count", "count_d", "sum", "avg", "min", "max", "min_c", "max_c", "bool_and", "bool_or", "every", "sum_e", "avg_e",
         "sum_i", "sum_k", "avg_k", "sum_f", "avg_f", "sum_k", "avg_k", "sum_v", "avg_v", "sum_m")


def aggregate_sql(rng, columns, name=None, predicates=None):
    if name is None and rng.random() < 0.15 or name == "count(*)":
        return "count(*)"
    candidates = [c for c in columns if name in AGGREGATES[c.kind]]
    if not candidates:
        name, candidates = None, columns
    column = rng.choice(candidates)
    name = name or rng.choice(AGGREGATES[column.kind])
    if name == "count_d":
        # count(DISTINCT): text by bytes (C collation), floats with -0 = 0 and NaN = NaN.
        collate = ' COLLATE "C"' if column.kind == "text" else ""
        return f"count(DISTINCT {column.sql}{collate})"
    if name.endswith("_c"):
        return f'{name[:3]}({column.sql} COLLATE "C")'
    if name.endswith("_e"):
        # Arithmetic of numeric columns and constants, which the engine evaluates.
        return f"{name[:-2]}(({column.sql} - 1.25) * {column.sql} + 0.5 * {column.sql})"
    if name.endswith("_f"):
        # double precision arithmetic (float8pl, float8mi, float8mul, float8div): reals and
        # integers cast to it, constants folded to it.
        return f"{name[:-2]}(({column.sql}::float8 * 2.5 - 1) / 3 + {column.sql} * 0.5::float8)"
    if name.endswith("_i"):
        # Integer arithmetic: PostgreSQL's range checks (22003) and truncating division.
        return f"{name[:-2]}(({column.sql} * 3 - 7) / 2)"
    if name.endswith("_v"):
        # numeric division: each quotient at the scale numeric_div chooses from its operands'
        # values (a division by zero is PostgreSQL's error on both sides).
        return f"{name[:-2]}(({column.sql} * 2 - 1) / ({column.sql} - 1.25))"
    if name.endswith("_m"):
        # CASE of branches of different scales: each value keeps its branch's.
        condition = tp.render(predicates.tree()) if predicates and rng.random() < 0.5 else f"{column.sql} > 0"
        other = "0" if column.kind == "numeric" else "0.5"
        return f"{name[:-2]}(CASE WHEN {condition} THEN {column.sql} ELSE {other} END)"
    if name.endswith("_k"):
        # CASE with a random condition; the branches' values are of the column's type and scale.
        condition = tp.render(predicates.tree()) if predicates and rng.random() < 0.5 else f"{column.sql} > 0"
        return (f"{name[:-2]}(CASE WHEN {condition} THEN {column.sql} WHEN {column.sql} < 0 THEN {column.sql} * 2 "
                f"ELSE {column.sql} * 0 + 1 END)")
    return f"{name}({column.sql})"


def random_query(rng, table, columns, predicates, first):
    """(sql, number of group columns): the group columns come first in the output; the first
    aggregate is `first` (a name in CYCLE) where a column allows it."""
    groupable = [c for c in columns if not c.name.startswith("_hoodie_file")]
    keys = rng.sample(groupable, min(len(groupable), rng.choices((0, 1, 2), (4, 5, 2))[0]))
    aggregates = [aggregate_sql(rng, columns, first, predicates)] + [aggregate_sql(rng, columns, None, predicates) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.1:
        aggregates.append(f"({aggregates[0]}) IS NULL")
    sql = f"SELECT {', '.join([k.sql for k in keys] + aggregates)} FROM {table} t"
    if rng.random() < 0.6:
        sql += f" WHERE {tp.render(predicates.tree())}"
    if keys:
        sql += f" GROUP BY {', '.join(k.sql for k in keys)}"
        if rng.random() < 0.1:
            sql += " HAVING count(*) > 1"
    return sql, len(keys)


FLOAT4, FLOAT8 = 700, 701


def seeded_queries(table, columns, count, salt):
    """(seed, sql, group columns) of `count` random queries per seed."""
    for seed in tp.SEEDS:
        rng = random.Random(f"aggregates {seed}/{table}/{salt}")
        predicates = tp.Predicates(columns, rng)
        for i in range(count):
            yield (seed, *random_query(rng, table, columns, predicates, CYCLE[i % len(CYCLE)]))


def close(a, b, type_code):
    """Whether two result values agree: sums and averages of floats up to the order of
    addition, numerics to the digit (scale included), the rest exactly."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        single = type_code == FLOAT4
        return math.isclose(a, b, rel_tol=1e-4 if single else 1e-9, abs_tol=1e-2 if single else 1e-6)
    if isinstance(a, decimal.Decimal) and isinstance(b, decimal.Decimal):
        return str(a) == str(b)
    return a == b


def outcome(conn, sql, keys=None, params=None):
    """(rows sorted by their `keys` group columns (all columns if None), the columns' type
    codes), or the error."""
    try:
        cursor = conn.execute(sql, params)
        rows = cursor.fetchall()
    except psycopg.Error as e:
        return Failure(e.diag.sqlstate, str(e).splitlines()[0])
    types = [c.type_code for c in cursor.description]
    return sorted(rows, key=lambda r: tuple((v is None, str(v)) for v in r[:keys])), types


class Failure(collections.namedtuple("Failure", "sqlstate message")):
    """An error; two agree when their SQLSTATEs do."""

    def __eq__(self, other):
        return isinstance(other, Failure) and self.sqlstate == other.sqlstate


def agree(a, b):
    if isinstance(a, Failure) or isinstance(b, Failure):
        return a == b
    (rows, types), (other, _) = a, b
    return len(rows) == len(other) and all(
        len(x) == len(y) and all(close(u, v, t) for u, v, t in zip(x, y, types)) for x, y in zip(rows, other))


def pushed(conn, sql):
    try:
        plan = [r[0] for r in conn.execute("EXPLAIN (VERBOSE, COSTS OFF) " + sql)]
    except psycopg.Error:
        return None
    return "\n".join(plan) if any("Aggregate pushed: " in line for line in plan) else None


class Checker:
    """Runs random aggregate queries on foreign tables and compares them."""

    def __init__(self, sessions):
        self.run = tp.Differential(sessions)
        self.conn = sessions[0]
        self.conn.execute(f"SET TimeZone = {tp.q(TIME_ZONE)}")
        self.run.time_zones[self.conn] = TIME_ZONE
        self.queries = 0
        self.pushed = 0
        self.errors = 0
        self.shapes = collections.Counter()
        self.mismatches = []

    def count(self, sql, shape):
        self.queries += 1
        if shape is not None:
            self.pushed += 1
            line = next(line for line in shape.splitlines() if "Aggregate pushed: " in line)
            for name, star in re.findall(r"\b(count|sum|avg|min|max|bool_and|bool_or)\((\*|\(\(|CASE|DISTINCT)?", line.split("Aggregate pushed: ", 1)[1]):
                self.shapes[name + {"*": "(*)", "((": " of an expression", "CASE": " of a CASE", "DISTINCT": "(DISTINCT)", "": ""}[star]] += 1
            self.shapes["GROUP BY"] += " GROUP BY " in shape
            self.shapes["WHERE"] += " WHERE " in sql and "Hudi Condition" in shape

    def check(self, table, queries, weights=None, required=True):
        """Against a heap copy of the table."""
        copy = self.run.heap_copy(table, required)
        if copy is None:
            return
        self.run.copies[table] = copy
        columns = self.run.columns(table, copy, weights or {}, {})
        self.run.zone(self.conn, TIME_ZONE)
        for seed, sql, keys in seeded_queries(table, columns, queries, ""):
            foreign = outcome(self.conn, sql, keys)
            heap = outcome(self.conn, sql.replace(f" FROM {table} t", f" FROM {copy} t", 1), keys)
            self.count(sql, pushed(self.conn, sql))
            self.errors += isinstance(foreign, Failure) and foreign == heap
            if not agree(foreign, heap):
                self.mismatches.append(f"seed {seed}: {sql}\n  pushed: {foreign}\n  heap:   {heap}")

    def check_without_pushdown(self, table, queries, settings=()):
        """Pushdown on against pushdown off on the same foreign table (reads with no heap copy)."""
        copy = self.run.heap_copy(table, True)
        self.run.copies[f"{table} {settings}"] = copy
        columns = self.run.columns(table, copy, {}, {})
        for setting in settings:
            self.conn.execute(setting)
        for seed, sql, keys in seeded_queries(table, columns, queries, settings):
            foreign = outcome(self.conn, sql, keys)
            shape = pushed(self.conn, sql)
            self.conn.execute("SET hudi.aggregate_pushdown = off")
            try:
                plain = outcome(self.conn, sql, keys)
            finally:
                self.conn.execute("RESET hudi.aggregate_pushdown")
            self.count(sql, shape)
            if not agree(foreign, plain):
                self.mismatches.append(f"seed {seed}, {settings}: {sql}\n  pushed: {foreign}\n  not pushed: {plain}")

    def finish(self, title, least_pushed=0.5):
        print(f"{title}: {self.queries} queries (seeds {tp.SEEDS}), {self.pushed} pushed, "
              f"{self.errors} refused alike; pushed shapes {dict(sorted(self.shapes.items()))}")
        for s in self.run.skipped:
            print(f"  skipped {s}")
        assert not self.mismatches, f"{len(self.mismatches)} queries disagree; the first ones:\n" + "\n".join(self.mismatches[:8])
        assert self.pushed >= self.queries * least_pushed, f"only {self.pushed} of {self.queries} queries were pushed"


def test_pushed_aggregates_agree_with_postgres_on_merge_on_read_tables(cluster):
    """Tables with every kind of file slice (base files only, base files and logs, logs only;
    winning updates, stale upserts, deletes), and the same tables' time travel, read-optimized
    and incremental reads."""
    rng = random.Random(tp.DATA_SEED)
    with new_lake(cluster) as (conn, root):
        conn.execute(tp.PEOPLE.format(name="people", small="integer"))
        conn.execute("SELECT hudi.create_table('people')")
        conn.execute(tp.CODES)
        conn.execute("SELECT hudi.create_table('codes')")
        tp.write_history(conn, "people", "id", tp.PEOPLE_COLUMNS, tp.person, tp.person_city, list(range(1, 301)), rng)
        keys = [f"{p}{n}" for n in range(100) for p in ("k", "K")]
        tp.write_history(conn, "codes", "code", tp.CODES_COLUMNS, tp.code_row, tp.code_partition, keys, rng)
        instants = [r[0] for r in conn.execute("SELECT instant FROM hudi.timeline('people') WHERE state = 'completed' AND action IN ('commit', 'deltacommit') ORDER BY 1")]
        options = "SERVER lake OPTIONS (path 'people', query_type '{}')"
        columns = "(_hoodie_commit_time text, id bigint, name text, city text, amount numeric(12, 2), d date, ts timestamptz, qty integer, r real, dbl double precision, flag boolean)"
        conn.execute(f"CREATE FOREIGN TABLE people_ro {columns} " + options.format("read_optimized"))
        conn.execute(f"CREATE FOREIGN TABLE people_changes {columns} " + options.format("incremental"))
        weights = {t: tp.key_weights(conn, root, t) for t in ("people", "codes")}
        with tp.reader_sessions(cluster, conn, root, ["public"]) as sessions:
            checker = Checker(sessions)
            checker.check("people", QUERIES_PER_TABLE, weights["people"])
            checker.check("codes", QUERIES_PER_TABLE, weights["codes"])
            checker.check_without_pushdown("people", READ_KIND_QUERIES, (f"SET hudi.as_of_instant = '{instants[1]}'",))
            checker.conn.execute("RESET hudi.as_of_instant")
            checker.check_without_pushdown("people_ro", READ_KIND_QUERIES)
            checker.check_without_pushdown("people_changes", READ_KIND_QUERIES, (f"SET hudi.start_instant = '{instants[0]}'",))
            checker.finish("merge-on-read tables")
            for name in ("count(*)", "count", "count(DISTINCT)", "sum", "avg", "min", "max", "bool_and", "bool_or", "sum of an expression", "avg of an expression", "sum of a CASE", "avg of a CASE", "GROUP BY", "WHERE"):
                assert checker.shapes[name] >= 5, f"too few pushed queries with {name}: {dict(checker.shapes)}"


def test_pushed_aggregates_agree_with_postgres_on_spark_fixtures(cluster, fixtures_root):
    """Every Spark-written fixture; statistics of Spark's base files answer what they can."""
    zips = hudi_rows.fixture_zips(fixtures_root)
    with new_lake(cluster, fixtures_root, zips, by_kind=True) as (conn, root):
        schemas, tables = [], []
        for kind in sorted({z.parent for z in zips}):
            schema = tp.ident(str(kind).replace("/", "_"))
            conn.execute(f"CREATE SCHEMA {schema}")
            try:
                conn.execute(f"IMPORT FOREIGN SCHEMA {tp.ident(str(kind))} FROM SERVER lake INTO {schema}")
            except psycopg.Error:
                continue
            schemas.append(schema)
            tables += [f"{schema}.{tp.ident(z.stem)}" for z in zips if z.parent == kind]
        with tp.reader_sessions(cluster, conn, root, schemas) as sessions:
            checker = Checker(sessions)
            for table in tables:
                checker.check(table, FIXTURE_QUERIES, required=False)
            answered = sum(statistics_answered(checker.conn, table) for table in checker.run.copies)
            checker.finish("Spark fixtures", least_pushed=0.4)
            assert answered > 0, "no Spark base file answered an aggregate from its statistics"


def statistics_answered(conn, table):
    """How many file slices answered `count(*)` from statistics."""
    plan = [r[0] for r in conn.execute(f"EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF) SELECT count(*) FROM {table}")]
    line = next((l for l in plan if "answered from statistics" in l), "")
    m = re.search(r"answered from statistics: (\d+) of (\d+)", line)
    return int(m.group(1)) if m else 0


EDGES = """CREATE FOREIGN TABLE edges (id bigint, g text, i integer, big bigint, f double precision, r real,
             n numeric(38, 2), ts timestamptz, flag boolean)
           SERVER lake OPTIONS (path 'edges', primary_key 'id', ordering_field 'ts', buckets '4')"""


def test_pushed_aggregates_keep_postgres_edge_cases(cluster):
    """Overflow, empty input, NULL-only groups, numerics at full precision, parameters of a
    generic plan, stable expressions, HAVING, and what EXPLAIN says: each against a heap copy,
    and statistics answering a compacted table's slices but not those with logs."""
    with new_lake(cluster) as (conn, root):
        conn.execute(EDGES)
        conn.execute("SELECT hudi.create_table('edges')")
        big, huge = 2**63 - 1, 1.5e308
        rows = [(k, f"g{k % 3}", k % 7 - 3, big - k, k / 3, k / 4, decimal.Decimal(10**35) + decimal.Decimal(k) / 100,
                 f"2024-03-09 12:00:00+00", k % 2 == 0) for k in range(1, 401)]
        rows.append((1000, None, None, None, None, None, None, None, None))
        with conn.transaction(), conn.cursor().copy("COPY edges FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.execute("CREATE TABLE heap_edges AS SELECT * FROM edges")
        conn.execute(f"SET TimeZone = {tp.q(TIME_ZONE)}")

        def both(sql, params=None, expect_pushed=True):
            foreign = outcome(conn, sql, params=params)
            heap = outcome(conn, sql.replace(" FROM edges", " FROM heap_edges"), params=params)
            assert agree(foreign, heap), f"{sql}\n  pushed: {foreign}\n  heap: {heap}"
            assert (pushed(conn, sql if params is None else sql.replace("%s", "1")) is not None) == expect_pushed, sql
            return foreign

        def refused_alike(sql, sqlstate):
            failure = both(sql)
            assert isinstance(failure, Failure) and failure.sqlstate == sqlstate, (sql, failure)

        # sum(bigint) is numeric: exact far beyond bigint; avg of numerics divides as numeric_avg.
        both("SELECT sum(big), avg(big), sum(n), avg(n), avg(i), sum(i) FROM edges")
        both("SELECT g, sum(big), avg(n), min(n), max(ts), count(ts), bool_and(flag), every(flag), bool_or(flag) FROM edges GROUP BY g")
        # Empty input: one row without GROUP BY, none with it.
        assert both("SELECT count(*), sum(i), avg(f), min(g COLLATE \"C\"), bool_or(flag) FROM edges WHERE id < 0")[0] == [(0, None, None, None, None)]
        assert both("SELECT g, count(*) FROM edges WHERE id < 0 GROUP BY g")[0] == []
        both("SELECT count(*), sum(r), avg(r), sum(f) FROM edges WHERE g IS NULL")
        both("SELECT g, count(*) FROM edges GROUP BY g HAVING sum(i) > 0 OR g IS NULL")
        both("SELECT count(*) FROM edges WHERE ts > now() - interval '100 years' AND flag")
        both("SELECT count(*), max(id) FROM edges WHERE NOT (i = 1 OR i IS NULL) AND id IN (1, 2, 3, 1000)")
        # A text range is pushed only where strings compare by bytes.
        both("SELECT count(*) FROM edges WHERE g COLLATE \"C\" > 'g1'")
        both("SELECT count(*) FROM edges WHERE g > 'g1'", expect_pushed=False)
        # Overflow: the same error (22003) as PostgreSQL's float8pl and float8_accum.
        conn.execute(f"UPDATE edges SET f = {huge} WHERE id <= 2")
        conn.execute(f"UPDATE heap_edges SET f = {huge} WHERE id <= 2")
        refused_alike("SELECT sum(f) FROM edges", "22003")
        refused_alike("SELECT avg(f) FROM edges WHERE id <= 3", "22003")
        # A generic plan's parameter is bound at execution.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("PREPARE by_i(integer) AS SELECT g, count(*), sum(big) FROM edges WHERE i > $1 GROUP BY g")
        conn.execute("PREPARE heap_by_i(integer) AS SELECT g, count(*), sum(big) FROM heap_edges WHERE i > $1 GROUP BY g")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (VERBOSE, COSTS OFF) EXECUTE by_i(0)"))
        assert "Aggregate pushed: count(*), sum(big) GROUP BY g" in plan and "Hudi Condition: i > $1" in plan, plan
        for value in (-4, 0, 2):
            assert agree(outcome(conn, f"EXECUTE by_i({value})", 1), outcome(conn, f"EXECUTE heap_by_i({value})", 1))
        conn.execute("RESET plan_cache_mode")
        # Statistics: every slice of the compacted table, none of those with logs.
        conn.execute("SELECT count(*) FROM hudi.compact('edges')")
        conn.execute("UPDATE heap_edges SET f = 1 WHERE id <= 2")
        conn.execute("UPDATE edges SET f = 1 WHERE id <= 2")
        conn.execute("SELECT count(*) FROM hudi.compact('edges')")
        slices = conn.execute("SELECT count(*) FROM hudi.file_slices('edges')").fetchone()[0]
        sql = "SELECT count(*), count(n), min(big), max(ts), bool_and(flag) FROM edges"
        both(sql)
        plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF) {sql}"))
        assert f"answered from statistics: {slices} of {slices} file slices" in plan, plan
        conn.execute("UPDATE edges SET i = i + 1 WHERE id = 5")
        conn.execute("UPDATE heap_edges SET i = i + 1 WHERE id = 5")
        both(sql)
        plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF) {sql}"))
        assert f"answered from statistics: {slices - 1} of {slices} file slices" in plan, plan
        # Integer expressions and CASE: PostgreSQL's errors (int4mul's and int8pl's 22003, int4div's
        # 22012), truncating division, and a branch evaluated only on the rows that take it.
        both("SELECT sum(i * 3 - 1), avg(i / 2), sum(-i / 2), sum(CASE WHEN i <> 0 THEN 100 / i ELSE 0 END) FROM edges")
        both("SELECT g, sum(CASE WHEN flag THEN n WHEN i > 0 THEN i * 1.00 ELSE 0.00 END), avg(CASE WHEN i IS NULL THEN 1 END) FROM edges GROUP BY g")
        # Branches of different scales: a numeric sum takes the largest scale of the values it
        # added (0 where only the ELSE branch's were).
        both("SELECT g, sum(CASE WHEN flag THEN n ELSE 0 END), sum(CASE WHEN i > 0 THEN 1.000 END) FROM edges GROUP BY g")
        both("SELECT g, sum(CASE WHEN flag THEN i ELSE 0.5 END), avg(CASE WHEN flag THEN big / 7.0 ELSE 0 END) FROM edges GROUP BY g")
        # numeric division: each quotient at the scale numeric_div chooses from its operands'
        # values, rounded half away from zero; sums and averages at the largest of those.
        both("SELECT sum(i / 7.0), avg(big / 3.5), sum(i::numeric / big), avg(big / (i + 0.5)), sum(1 / (i + 0.25)) FROM edges")
        both("SELECT g, sum(big / (i * 1.00 + 3.5)), avg(-7 / (i + 0.25)) FROM edges WHERE id > 100 GROUP BY g")
        both("SELECT sum(big / i) FROM edges WHERE i <> 0")
        refused_alike("SELECT sum(big / i) FROM edges", "22012")
        # Not pushed: a quotient as an operand or an extreme, a quotient that may need more than
        # 57 digits (n has 38).
        for sql in ("SELECT sum(i / 7.0 * 2) FROM edges", "SELECT max(i / 7.0) FROM edges", "SELECT sum(n / 3) FROM edges"):
            both(sql, expect_pushed=False)
        # Rows the condition drops are never computed (PostgreSQL filters first).
        both("SELECT sum(100 / i), sum(i * 2147483647) FROM edges WHERE i IN (-1, 1)")
        both("SELECT g, sum(100 / i) FROM edges WHERE i <> 0 GROUP BY g")
        for sql, sqlstate in (("SELECT sum(i * 2147483647) FROM edges", "22003"), ("SELECT sum(big + 2) FROM edges", "22003"),
                              ("SELECT sum(i / (i - i)) FROM edges", "22012")):
            refused_alike(sql, sqlstate)
        # count(DISTINCT): -0 and 0, and NaNs, are one value each; NULLs are not counted; per
        # group and with a condition too.
        conn.execute("INSERT INTO edges VALUES (1001, 'g0', 1, 1, '-0', '-0', 1, now(), true), (1002, 'g0', 1, 1, 'NaN', 'NaN', 1, now(), true), "
                     "(1003, 'g1', 1, 1, '0', '0', 1, now(), true), (1004, 'g1', 1, 1, 'NaN', 'NaN', 1, now(), false)")
        conn.execute("INSERT INTO heap_edges SELECT * FROM edges WHERE id > 1000")
        both("SELECT count(DISTINCT f), count(DISTINCT r), count(DISTINCT g COLLATE \"C\"), count(DISTINCT n), count(DISTINCT flag), "
             "count(DISTINCT ts), count(DISTINCT i) FROM edges")
        both("SELECT g, count(DISTINCT f), count(DISTINCT i), count(*) FROM edges WHERE id > 100 GROUP BY g")
        both("SELECT flag, count(DISTINCT f), count(DISTINCT r) FROM edges WHERE i = 1 GROUP BY flag")
        # double precision arithmetic: float8pl's, float8mul's and float8div's errors (22003,
        # 22012), NaN and -0 as they come, integers and reals cast to double precision.
        both("SELECT sum(f * 2 - 1.5), avg(f / 4), sum(f * i), avg(r * 0.5 + big), sum(f / 0.5::float8) FROM edges")
        both("SELECT g, sum(f + r), avg((f - 1) * (f + 1)) FROM edges WHERE id > 10 GROUP BY g")
        for sql, sqlstate in (("SELECT sum(f * 1e308 * 10) FROM edges", "22003"), ("SELECT sum(f / (i - i)) FROM edges WHERE f > 0", "22012"),
                              ("SELECT sum((f + 1) * 1e-308 * 1e-308) FROM edges WHERE f > 0", "22003")):
            refused_alike(sql, sqlstate)
        # min and max of integer and double expressions, of PostgreSQL's types (int4, int8,
        # float8); NaN above every number.
        both("SELECT min(i * 3 - 1), max(big / 2), max(-i), min(f * 2 - 1.5), max(f / 4), max(CASE WHEN flag THEN i ELSE -i END) FROM edges")
        both("SELECT g, max(i * i), min(big - i), max(f + r) FROM edges WHERE id > 10 GROUP BY g")
        # Not pushed: DISTINCT under a collation whose equality is not the bytes', DISTINCT of
        # other aggregates, FILTER, ORDER BY inside, a double's unary minus and arithmetic of
        # reals only, other aggregates.
        for sql in ("SELECT count(DISTINCT g) FROM edges", "SELECT sum(DISTINCT i) FROM edges", "SELECT count(*) FILTER (WHERE flag) FROM edges",
                    "SELECT string_agg(g, ',' ORDER BY g) FROM edges", "SELECT sum(-f) FROM edges", "SELECT sum(r + r) FROM edges",
                    "SELECT stddev(f) FROM edges", "SELECT min(g) FROM edges"):
            both(sql, expect_pushed=False)

