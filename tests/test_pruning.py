"""Pushdown never changes results.

The FDW hands simple quals (`column op constant`, `column IN (constants)`) to the engine, which
skips partitions (by their paths), buckets (`key = constant` on bucket-indexed tables) and
Parquet row groups (by their statistics, in file slices without log files). The quals the
engine evaluates exactly as PostgreSQL does (comparisons, IN lists, IS NULL, AND/OR/NOT of them)
also become the scan's row filter, which drops the rows that fail them after merging, before
they become datums; PostgreSQL checks the others. So pushdown can change a result by skipping
data that had matching rows, or by a row filter that decides a row otherwise than PostgreSQL.

Each test is a seeded differential test. For every table it makes a heap copy of all the rows
(read with no qual pushed: "the unfiltered rows, filtered by PostgreSQL"), then runs random
predicates on the foreign table and on the copy and compares the count and a hash of the
matching rows. The predicates combine `= < <= > >= <>`, IN, NOT IN, BETWEEN, = ANY, IS [NOT]
NULL, AND / OR / NOT over the integer, numeric, float, text, boolean, date and timestamp
columns, with constants taken from the rows (and from the edges of each file's or row group's
values) and their neighbours: +-1, sub-unit offsets (a microsecond, half a millisecond, one
float ulp, 0.0001), typed literals of other types, NULL, text in other case; text also under a
nondeterministic ICU collation and a user-defined operator named `=`. Predicates on dates and
timestamps run under TimeZone UTC and again under America/New_York; the others, which mean the
same in every time zone, under one of the two (alternately), so every table runs under both.
A role that is not a superuser runs them, in two sessions side by side. EXPLAIN ANALYZE of a
sample of the scans shows that the predicates do prune partitions, file slices and row groups,
so that agreement is not vacuous.

The tables: every Spark-written fixture; merge-on-read tables pg_hudi writes, with log files on
compacted base files (winning updates, losing stale upserts, deletes, keys only in logs); one
with odd partition values; a compacted pg_hudi table; a copy-on-write table written here with
millisecond timestamps, real partition values and several row groups per file.

PG_HUDI_SEED=<n>[,<n>...] replaces the default seeds; a failure names the seed, the table, the
time zone, the query, both results and the smallest part of the predicate that still disagrees.
"""

import collections
import concurrent.futures
import contextlib
import dataclasses
import datetime
import decimal
import json
import math
import os
import queue
import random
import re
import struct
import time
import uuid
import zoneinfo

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

import hudi_rows
from conftest import give_to_postgres, new_lake

DEFAULT_SEEDS = (1, 2)
SEEDS = tuple(int(s) for s in os.environ.get("PG_HUDI_SEED", "").split(",") if s.strip()) or DEFAULT_SEEDS
TIME_ZONES = ("UTC", "America/New_York")
DATA_SEED = 20240310  # the rows the tests write; predicates come from SEEDS
BATCH = 40  # predicates per round trip (one UNION ALL of labelled subqueries)
SESSIONS = 2  # sessions running batches side by side: one per core
EXPLAIN_EVERY = 6  # EXPLAIN ANALYZE every n-th batch of the foreign table
MISMATCHES_SHOWN = 10
# Predicates per table and seed, sized for about a minute in all on two cores.
FIXTURE_PREDICATES = 26
LOG_TABLE_PREDICATES = 150
BIG_PREDICATES = 100
MILLIS_PREDICATES = 260
BIG_ROW_COUNT = 6_000
MILLIS_ROW_GROUPS = 6  # per partition (9 partitions)
MILLIS_ROW_GROUP_SIZE = 32

UTC = datetime.timezone.utc
NEW_YORK = zoneinfo.ZoneInfo("America/New_York")

KINDS = {
    "smallint": "int", "integer": "int", "bigint": "int", "numeric": "numeric", "real": "real",
    "double precision": "float8", "text": "text", "character varying": "text", "boolean": "bool",
    "date": "date", "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz",
}
INT_LIMITS = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
ZONED = ("date", "timestamp", "timestamptz")  # kinds whose constants TimeZone may change
OPS = ("=", "<", "<=", ">", ">=", "<>")
FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def q(text):
    return "'" + text.replace("'", "''") + "'"


def ident(name):
    return '"' + name.replace('"', '""') + '"'


# ---------------------------------------------------------------------------------------------
# Constants: a column value (PostgreSQL's text form, read in UTC) and its neighbours, written as
# SQL literals of the column's type and of others.
# ---------------------------------------------------------------------------------------------

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_text(x):
    """The shortest decimal text that reads back as the float4 `x` (what PostgreSQL prints)."""
    for digits in range(1, 10):
        text = f"{x:.{digits}g}"
        if f32(float(text)) == x:
            return text
    return repr(x)


def f32_step(x, up):
    """The float4 next to `x`, upwards or downwards."""
    if x == 0.0:
        bits = 1 if up else 0x80000001
    else:
        (bits,) = struct.unpack("<I", struct.pack("<f", x))
        bits += 1 if (x > 0) == up else -1
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# Each takes a value's text and returns literals near it, repeated by weight; with `near`, only
# the closest neighbours (the value itself, +-1 of the least unit, one ulp, a microsecond, other
# case), for probing the edges of partitions, files and row groups.

def int_literals(value, rng, column, near):
    n = int(value) + rng.choice((0, -1, 1) if near else (0, 0, 0, 0, -1, 1))
    limit = INT_LIMITS[column.base_type]
    forms = [str(n)] * 5 + [f"{n}::numeric", f"{n}.5", f"{n - 1}.5", f"{n}::float8"]
    if -limit <= n < limit:
        forms.append(q(str(n)))
    if -2**63 <= n < 2**63:
        forms.append(f"{n}::bigint")
    if -2**15 <= n < 2**15:
        forms.append(f"{n}::smallint")
    return forms


def numeric_literals(value, rng, column, near):
    v = decimal.Decimal(value)
    if not v.is_finite():
        return [f"{q(value)}::numeric"]
    steps = ("0", "0.0001", "-0.0001", "0.001", "-0.001") if near else \
        ("0",) * 5 + ("0.0001", "-0.0001", "0.001", "-0.001", "0.5", "-0.5", "1", "-1", "0.00001")
    n = v + decimal.Decimal(rng.choice(steps))
    forms = [str(n)] * 4 + [f"{q(str(n))}::numeric", f"{n}::float8", f"{n}0" if "." in str(n) else f"{n}.00"]
    if n == n.to_integral_value():
        forms.append(str(int(n)))
    return forms


def real_literals(value, rng, column, near):
    x = f32(float(value))
    if not math.isfinite(x):
        return [f"{q(value)}::real"]
    steps = (x, f32_step(x, True), f32_step(x, False))
    n = rng.choice(steps if near else steps + (x, x, x, f32(x + 1), f32(x - 1)))
    t = f32_text(n)
    return [f"{q(t)}::real"] * 3 + [t, f"{t}::real", f"{q(t)}::float8", f"{q(repr(n))}::float8"]


def float8_literals(value, rng, column, near):
    x = float(value)
    if not math.isfinite(x):
        return [f"{q(value)}::float8"]
    steps = (x, math.nextafter(x, math.inf), math.nextafter(x, -math.inf))
    n = rng.choice(steps if near else steps + (x, x, x, x + 1, x - 1))
    t = repr(n)
    return [t] * 3 + [f"{q(t)}::float8", f"{q(f32_text(f32(n)))}::real", f"{t}::numeric"]


def text_literals(value, rng, column, near):
    cases = (value, value.upper(), value.lower(), value.swapcase())
    n = rng.choice(cases if near else cases + (value,) * 3 + (value + "x", value[:-1], value + " ", "~" + value))
    return [q(n)] * 4 + [f"{q(n)}::text", f"{q(n)}::varchar", f"{q(n)}::varchar(3)"]


def bool_literals(value, rng, column, near):
    b = rng.choice(("true", "false", value))
    return [b, b, q(b[0]), f"{b}::boolean"]


def date_literals(value, rng, column, near):
    days = rng.choice((0, -1, 1) if near else (0, 0, 0, 0, -1, 1, 31))
    d = datetime.date.fromisoformat(value) + datetime.timedelta(days=days)
    s = d.isoformat()
    return [f"{q(s)}::date"] * 3 + [q(s), f"date {q(s)}", f"{q(s)}::timestamp", f"{q(s + ' 00:00:00.000001')}::timestamp",
                                    f"{q(s + ' 23:59:59.999999')}::timestamp", f"{q(s)}::timestamptz",
                                    f"{q(s + ' 00:00:00+00')}::timestamptz"]


MICRO = datetime.timedelta(microseconds=1)
NEAR_OFFSETS = (datetime.timedelta(0), MICRO, -MICRO, 500 * MICRO, -500 * MICRO, 999 * MICRO, -999 * MICRO)
OFFSETS = NEAR_OFFSETS + (datetime.timedelta(0),) * 4 + (
    1000 * MICRO, -1000 * MICRO, 1500 * MICRO, datetime.timedelta(seconds=1), -datetime.timedelta(seconds=1),
    datetime.timedelta(hours=4), -datetime.timedelta(hours=4), datetime.timedelta(hours=5), -datetime.timedelta(hours=5),
    datetime.timedelta(days=1))


def stamp(dt):
    return dt.isoformat(sep=" ", timespec="microseconds")


def timestamp_literals(value, rng, column, near):
    n = datetime.datetime.fromisoformat(value) + rng.choice(NEAR_OFFSETS if near else OFFSETS)
    t = stamp(n)
    # timestamptz constants (compared in TimeZone) as often as timestamp ones
    return [f"{q(t)}::timestamp"] * 2 + [f"{q(t + '+00')}::timestamptz", f"{q(t)}::timestamptz"] * 2 + [
        q(t), f"timestamp {q(t)}", f"{q(t + ' America/New_York')}::timestamptz", f"{q(n.date().isoformat())}::date"]


def timestamptz_literals(value, rng, column, near):
    n = datetime.datetime.fromisoformat(value).astimezone(UTC) + rng.choice(NEAR_OFFSETS if near else OFFSETS)
    utc = stamp(n.replace(tzinfo=None))
    local = stamp(n.astimezone(NEW_YORK).replace(tzinfo=None))
    # timestamp constants (compared in TimeZone) as often as timestamptz ones
    return [f"{q(utc + '+00')}::timestamptz"] * 2 + [f"{q(utc)}::timestamp", f"{q(local)}::timestamp"] * 2 + [
        q(utc + "+00"), f"timestamptz {q(utc + '+00')}", f"{q(utc)}::timestamptz",
        f"{q(local + ' America/New_York')}::timestamptz", f"{q(n.date().isoformat())}::date"]


LITERALS = {"int": int_literals, "numeric": numeric_literals, "real": real_literals, "float8": float8_literals,
            "text": text_literals, "bool": bool_literals, "date": date_literals, "timestamp": timestamp_literals,
            "timestamptz": timestamptz_literals}


@dataclasses.dataclass
class Column:
    """A column predicates are written on, with the values to draw constants from."""
    name: str
    base_type: str  # atttypid::regtype, e.g. "numeric", "timestamp with time zone"
    kind: str  # a key of LITERALS
    values: list  # distinct non-NULL values, as text (timestamps with time zone in UTC)
    edges: list  # where pruning starts and stops: each file's (or row group's) least and greatest value, extras
    weight: int

    @property
    def sql(self):
        return ident(self.name)

    def value(self, rng):
        pool = self.edges if self.edges and rng.random() < 0.35 else self.values
        return rng.choice(pool)

    def literal(self, rng, near=False):
        """A constant near one of the column's values, as some literal comparable with it;
        with `near`, right next to an edge, in any of the literal forms alike."""
        if not self.values:
            return f"NULL::{self.base_type}"
        at_edge = bool(self.edges) and (near or rng.random() < 0.35)
        forms = LITERALS[self.kind](rng.choice(self.edges if at_edge else self.values), rng, self, at_edge)
        return rng.choice(sorted(set(forms)) if near else forms)

    def typed_literal(self, rng):
        """A constant of the column's own type (for ARRAY[...] elements)."""
        if not self.values:
            return f"NULL::{self.base_type}"
        value = self.value(rng)
        if self.kind == "text" and rng.random() < 0.5:
            value = rng.choice((value.upper(), value.lower(), value.swapcase()))
        return f"{q(value)}::{self.base_type}"


# ---------------------------------------------------------------------------------------------
# Predicates: trees of atoms under AND / OR / NOT, rendered to SQL.
# ---------------------------------------------------------------------------------------------

# A tree is ("atom", sql, zoned), ("and" | "or", [trees]) or ("not", tree); an atom is zoned
# when it is on a date or timestamp column, whose constants TimeZone may change.

def render(tree):
    kind, body = tree[0], tree[1]
    if kind == "atom":
        return body
    if kind == "not":
        return f"NOT ({render(body)})"
    return f" {kind.upper()} ".join(f"({render(child)})" for child in body)


def parts(tree):
    """The sub-predicates of a tree, for shrinking a failure."""
    kind, body = tree[0], tree[1]
    return [] if kind == "atom" else [body] if kind == "not" else list(body)


def zoned(tree):
    """Whether the predicate's meaning may depend on TimeZone."""
    return tree[2] if tree[0] == "atom" else any(zoned(p) for p in parts(tree))


class Predicates:
    """Random predicates over a table's columns; counts what it made."""

    def __init__(self, columns, rng):
        self.columns = columns
        self.rng = rng
        self.forms = collections.Counter()
        self.kinds = collections.Counter()

    def tree(self, depth=0):
        r = self.rng.random()
        if depth == 0 and r < 0.25:
            return self.atom(probe=True)  # alone, so that nothing else hides what it misses
        if depth >= 2 or r < 0.45:
            return self.atom()
        if r < 0.85:  # conjunctions: what the FDW pushes down
            return ("and", [self.tree(depth + 1) for _ in range(self.rng.randint(2, 3))])
        if r < 0.95:
            return ("or", [self.tree(depth + 1) for _ in range(2)])
        return ("not", self.tree(depth + 1))

    def atom(self, probe=False):
        rng = self.rng
        column = rng.choices(self.columns, [c.weight for c in self.columns])[0]
        self.kinds[column.kind] += 1
        if column.kind == "text" and rng.random() < 0.35:
            form, sql = self.text_atom(column, probe)
        elif probe or (column.edges and rng.random() < 0.25):
            form, sql = self.edge_atom(column)
        else:
            form, sql = self.plain_atom(column)
        self.forms[form] += 1
        return ("atom", sql, column.kind in ZONED)

    def literals(self, column, n=None):
        return ", ".join(column.literal(self.rng) for _ in range(n or self.rng.randint(1, 5)))

    def edge_atom(self, column):
        """A probe right next to an edge of partitions, files and row groups: one step of the
        least unit (or a microsecond, an ulp, other case) off, in any literal form."""
        op = self.rng.choice(OPS)
        return f"edge {op}", f"{column.sql} {op} {column.literal(self.rng, near=True)}"

    def plain_atom(self, column):
        rng, c = self.rng, column.sql
        r = rng.random()
        if r < 0.45:
            op = rng.choice(OPS)
            if rng.random() < 0.8:
                return f"op {op}", f"{c} {op} {column.literal(rng)}"
            return f"op {op}", f"{column.literal(rng)} {FLIPPED[op]} {c}"
        if r < 0.60:
            return "IN", f"{c} IN ({self.literals(column)})"
        if r < 0.65:
            return "NOT IN", f"{c} NOT IN ({self.literals(column)})"
        if r < 0.75:
            between = rng.choice(("BETWEEN", "BETWEEN", "NOT BETWEEN", "BETWEEN SYMMETRIC"))
            return between, f"{c} {between} {column.literal(rng)} AND {column.literal(rng)}"
        if r < 0.82:
            items = ", ".join(column.typed_literal(rng) for _ in range(rng.randint(1, 4)))
            return "= ANY", f"{c} = ANY (ARRAY[{items}])"
        if r < 0.86:
            return "IS NULL", f"{c} IS NULL"
        if r < 0.90:
            return "IS NOT NULL", f"{c} IS NOT NULL"
        if r < 0.94:
            return "op NULL", f"{c} {rng.choice(OPS)} {rng.choice(('NULL', f'NULL::{column.base_type}'))}"
        return "IN with NULL", f"{c} IN ({self.literals(column)}, NULL)"

    def text_atom(self, column, probe=False):
        """Text under the nondeterministic collation `ci`, a deterministic one, and `ops.=`."""
        rng, c = self.rng, column.sql
        k = column.literal(rng, near=probe or rng.random() < 0.3)
        items = ", ".join(column.typed_literal(rng) for _ in range(rng.randint(1, 3)))
        return rng.choice((
            ("= COLLATE ci", f"{c} = {k} COLLATE ci"),
            ("= COLLATE ci", f"{c} COLLATE ci = {k}"),
            ("= COLLATE ci", f"{k} COLLATE ci = {c}"),
            ("<> COLLATE ci", f"{c} <> {k} COLLATE ci"),
            ("IN COLLATE ci", f"{c} COLLATE ci IN ({self.literals(column)})"),
            ("IN COLLATE ci", f"{c} IN ({k} COLLATE ci, {self.literals(column)})"),
            ("NOT IN COLLATE ci", f"{c} COLLATE ci NOT IN ({self.literals(column)})"),
            ("range COLLATE ci", f"{c} {rng.choice(OPS[1:5])} {k} COLLATE ci"),
            ("ops.=", f"{c} OPERATOR(ops.=) {k}"),
            ("ops.=", f"{k} OPERATOR(ops.=) {c}"),
            ("ops.= ANY", f"{c} OPERATOR(ops.=) ANY (ARRAY[{items}])"),
            ("= COLLATE \"C\"", f"{c} COLLATE \"C\" = {k}"),
            ("LIKE", f"{c} LIKE {self.like_pattern(column)}"),
            ("LIKE", f"{c} LIKE {self.like_pattern(column)}"),
            ("NOT LIKE", f"{c} NOT LIKE {self.like_pattern(column)}"),
            ("LIKE ESCAPE", f"{c} LIKE {self.like_pattern(column).replace(chr(92), '#')} ESCAPE '#'"),
        ))

    # (Not `LIKE ... COLLATE ci`: PostgreSQL refuses it for each row it evaluates, so whether
    # it errs depends on which rows other quals, pruned or not, let through.)
    def like_pattern(self, column):
        """A LIKE pattern from one of the column's values: a prefix, a suffix or a middle part
        with `%` around, characters replaced by `_`, wildcards of the value escaped, in other
        case now and then."""
        rng = self.rng
        value = column.value(rng) if column.values else "x"
        value = "".join("\\" + ch if ch in "%_\\" else ch for ch in value)
        i, j = sorted(rng.randint(0, len(value)) for _ in range(2))
        part = value[i:j]
        if part.endswith("\\") and not part.endswith("\\\\"):
            part = part[:-1]
        if part and rng.random() < 0.3:
            at = rng.randrange(len(part))
            if part[at] != "\\" and (at == 0 or part[at - 1] != "\\"):
                part = part[:at] + "_" + part[at + 1:]
        if rng.random() < 0.1:
            part = part.swapcase()
        pattern = rng.choice((part + "%", "%" + part, "%" + part + "%", part, "%", "_" + part + "%"))
        return q(pattern)


# ---------------------------------------------------------------------------------------------
# Running predicates on a foreign table and on its heap copy.
# ---------------------------------------------------------------------------------------------

def default_weight(name, kind):
    """Meta columns seldom; dates, timestamps and floats (the most ways to be off by a little)
    more often than the rest."""
    return 1 if name.startswith("_hoodie") else 3 if kind in ZONED + ("real", "float8") else 2


def scan_sql(table, alias, where):
    return f"SELECT count(*), coalesce(sum(hashtext({alias}::text)::bigint), 0) FROM {table} {alias} WHERE {where}"


def results(conn, sql):
    """{label: (count, hash)} of a batch."""
    return {i: (count, digest) for i, count, digest in conn.execute(sql)}


def one_result(conn, table, where):
    """(count, hash) of one predicate, or the error it raised."""
    try:
        return conn.execute(scan_sql(table, "t", where)).fetchone()
    except psycopg.Error as e:
        return f"error {e.diag.sqlstate}: {str(e).splitlines()[0]}"


def batch_sql(table, wheres):
    """One statement of labelled subqueries: (label, count, hash) per predicate."""
    return "\nUNION ALL\n".join(
        f"SELECT {i} AS i, * FROM ({scan_sql(table, f't{i}', where)}) s{i}" for i, where in wheres)


@dataclasses.dataclass
class Pruning:
    """What EXPLAIN ANALYZE said about the sampled foreign scans."""
    scans: int = 0
    pushed: int = 0
    partitions: int = 0  # scans that kept fewer partitions than the table has
    slices: int = 0
    row_groups: int = 0
    row_groups_max_total: int = 0
    row_filtered: int = 0  # scans whose row filter (the engine's exact filter) removed rows

    def add(self, plan_lines):
        fields = {"Partitions": "partitions", "File Slices": "slices", "Row Groups": "row_groups"}
        for line in plan_lines:
            if re.search(r"Foreign Scan on \S+ t\d+ ", line):
                self.scans += 1
            elif "Hudi Filters:" in line:
                self.pushed += 1
            elif m := re.search(r"Rows Removed by Hudi Row Filter: (\d+)", line):
                self.row_filtered += int(m.group(1)) > 0
            elif m := re.search(r"Hudi (Partitions|File Slices|Row Groups): (\d+) of (\d+)", line):
                kept, total = int(m.group(2)), int(m.group(3))
                if kept < total:
                    setattr(self, fields[m.group(1)], getattr(self, fields[m.group(1)]) + 1)
                if m.group(1) == "Row Groups":
                    self.row_groups_max_total = max(self.row_groups_max_total, total)

    def __str__(self):
        return (f"{self.scans} scans explained: filters pushed in {self.pushed}, fewer partitions in "
                f"{self.partitions}, fewer file slices in {self.slices}, fewer row groups in {self.row_groups} "
                f"(largest table: {self.row_groups_max_total} row groups), rows removed by the row filter in {self.row_filtered}")


@dataclasses.dataclass
class Mismatch:
    """A predicate whose (count, hash) on the foreign table differs from the heap copy's."""
    seed: int
    table: str
    time_zone: str
    tree: tuple
    foreign: object
    heap: object
    smallest: str = ""

    def __str__(self):
        text = (f"seed {self.seed}, table {self.table}, TimeZone {self.time_zone}:\n"
                f"  {scan_sql(self.table, 't', render(self.tree))}\n"
                f"  foreign table: {self.foreign}   heap copy: {self.heap}")
        if self.smallest and self.smallest != render(self.tree):
            text += f"\n  smallest disagreeing part: {self.smallest}"
        return text


class Differential:
    """Compares random predicates on foreign tables with the same predicates on heap copies,
    in sessions of a role that is not a superuser: `conns[0]` sets tables up, all of them run
    batches side by side (the scans are CPU-bound; one session per core)."""

    def __init__(self, conns):
        self.conns = conns
        self.free = queue.SimpleQueue()
        for conn in conns:
            self.free.put(conn)
        self.time_zones = {}  # connection -> the TimeZone it has
        self.mismatches = []
        self.pruning = Pruning()
        self.predicates = 0
        self.runs = 0  # predicates x the time zones each ran in
        self.queries = 0
        self.errors = 0  # predicates both sides refused alike (e.g. a value out of range)
        self.forms = collections.Counter()
        self.kinds = collections.Counter()
        self.copies = {}  # foreign table -> its heap copy
        self.skipped = []
        self.batches = 0

    @property
    def conn(self):
        return self.conns[0]

    def zone(self, conn, time_zone):
        if self.time_zones.get(conn) != time_zone:
            conn.execute(f"SET TimeZone = {q(time_zone)}")
            self.time_zones[conn] = time_zone

    def heap_copy(self, table, required):
        """A heap table with every row of `table` (no quals pushed), or None when the table
        cannot be read or is empty and not `required`."""
        copy = f"heap.copy_{len(self.copies) + len(self.skipped)}"
        try:
            self.conn.execute(f"CREATE TABLE {copy} AS SELECT * FROM {table}")
        except psycopg.Error as e:
            if required:
                raise AssertionError(f"{table} cannot be read in full: {e}") from e
            self.skipped.append(f"{table}: {e.diag.sqlstate} {str(e).splitlines()[0]}")
            return None
        if self.conn.execute(f"SELECT count(*) FROM {copy}").fetchone()[0] == 0:
            assert not required, f"{table} reads as empty"
            self.skipped.append(f"{table}: empty")
            return None
        return copy

    def columns(self, table, copy, weights, extra):
        rows = self.conn.execute(
            "SELECT attname, atttypid::regtype::text FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (table,)).fetchall()
        columns = [Column(name, base, KINDS[base], [], [], weights.get(name, default_weight(name, KINDS[base])))
                   for name, base in rows if base in KINDS]
        if not columns:
            return []
        self.zone(self.conn, "UTC")
        for c in columns:
            c.values = [r[0] for r in self.conn.execute(
                f"SELECT DISTINCT {c.sql}::text FROM {copy} WHERE {c.sql} IS NOT NULL ORDER BY 1")]
            c.edges = list(extra.get(c.name, ())) + c.values[:1] + c.values[-1:]
        ranged = [c for c in columns if c.kind != "bool"]
        if "_hoodie_file_name" in (name for name, _ in rows) and ranged:
            # Each file's smallest and largest values: where statistics start and stop pruning.
            order = lambda c: f'{c.sql} COLLATE "C"' if c.kind == "text" else c.sql  # noqa: E731
            select = ", ".join(f"min({order(c)})::text, max({order(c)})::text" for c in ranged)
            for row in self.conn.execute(f"SELECT {select} FROM {copy} GROUP BY _hoodie_file_name"):
                for i, c in enumerate(ranged):
                    c.edges.extend(v for v in row[2 * i:2 * i + 2] if v is not None)
        return columns

    def check(self, table, predicates_per_seed, weights=None, extra=None, required=True):
        """Runs the seeds' predicates on `table` and on its heap copy: predicates on dates and
        timestamps in every time zone, the others (whose meaning TimeZone cannot change) in one
        of them, alternately. `weights` favour columns; `extra` adds constants per column; a
        table that is not `required` is skipped when it cannot be read or is empty."""
        started = time.monotonic()
        copy = self.heap_copy(table, required)
        if copy is None:
            return
        columns = self.columns(table, copy, weights or {}, extra or {})
        if not columns:
            self.skipped.append(f"{table}: no columns to filter on")
            return
        self.copies[table] = copy
        jobs, made = [], 0
        for seed in SEEDS:
            generator = Predicates(columns, random.Random(f"{seed}/{table}"))
            trees = [generator.tree() for _ in range(predicates_per_seed)]
            self.forms.update(generator.forms)
            self.kinds.update(generator.kinds)
            made += len(trees)
            for z, time_zone in enumerate(TIME_ZONES):
                mine = [(i, t) for i, t in enumerate(trees) if zoned(t) or i % len(TIME_ZONES) == z]
                self.runs += len(mine)
                for first in range(0, len(mine), BATCH):
                    self.batches += 1
                    explain = not jobs or self.batches % EXPLAIN_EVERY == 0  # every table's first
                    jobs.append((table, copy, mine[first:first + BATCH], seed, time_zone, explain))
        with concurrent.futures.ThreadPoolExecutor(len(self.conns)) as pool:
            for mismatches, errors, queries, plan in pool.map(self.compare, jobs):
                self.mismatches += mismatches
                self.errors += errors
                self.queries += queries
                self.pruning.add(plan)
        self.predicates += made
        print(f"  {table}: {made} predicates, {sum(len(j[2]) for j in jobs)} runs, "
              f"{time.monotonic() - started:.1f} s")

    def compare(self, job):
        """One batch of (label, tree) on both sides, in a free session: the mismatches, the
        predicates both refused, the queries run and (when asked for) EXPLAIN ANALYZE lines."""
        table, copy, labelled, seed, time_zone, explain = job
        conn = self.free.get()
        try:
            self.zone(conn, time_zone)
            wheres = [(i, render(t)) for i, t in labelled]
            plan, errors, queries = [], 0, 2
            try:
                foreign = results(conn, batch_sql(table, wheres))
                heap = results(conn, batch_sql(copy, wheres))
            except psycopg.Error:
                foreign = {i: one_result(conn, table, where) for i, where in wheres}
                heap = {i: one_result(conn, copy, where) for i, where in wheres}
                errors = sum(isinstance(foreign[i], str) and foreign[i] == heap[i] for i, _ in wheres)
                queries += 2 * len(wheres)
            else:
                if explain:
                    plan = [r[0] for r in conn.execute(
                        "EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + batch_sql(table, wheres))]
                    queries += 1
        finally:
            self.free.put(conn)
        mismatches = [Mismatch(seed, table, time_zone, tree, foreign.get(i), heap.get(i))
                      for i, tree in labelled if foreign.get(i) != heap.get(i)]
        return mismatches, errors, queries, plan

    def disagrees(self, mismatch, tree):
        where = render(tree)
        return one_result(self.conn, mismatch.table, where) != one_result(self.conn, self.copies[mismatch.table], where)

    def shrink(self, mismatch):
        """The smallest sub-predicate that still disagrees (a child of AND / OR / NOT)."""
        self.zone(self.conn, mismatch.time_zone)
        tree = mismatch.tree
        while True:
            smaller = next((p for p in parts(tree) if self.disagrees(mismatch, p)), None)
            if smaller is None:
                break
            tree = smaller
        mismatch.smallest = render(tree)

    def finish(self, title, expect_pruned=("partitions", "slices", "row_groups")):
        """Prints what ran and what was pruned; fails with the first mismatches (shrunk) and
        when the sampled scans did not prune what this test's tables should prune."""
        print(f"{title}: {self.predicates} predicates ({self.runs} runs in time zones {TIME_ZONES}) on "
              f"{len(self.copies)} tables, seeds {SEEDS}, {self.queries} queries; "
              f"{self.errors} refused alike by both sides")
        print(f"  atoms by form: {dict(sorted(self.forms.items()))}")
        print(f"  atoms by column kind: {dict(sorted(self.kinds.items()))}")
        print(f"  {self.pruning}")
        for s in self.skipped:
            print(f"  skipped {s}")
        problems = []
        p = self.pruning
        if p.pushed < p.scans / 3:
            problems.append(f"filters were pushed in only {p.pushed} of {p.scans} sampled scans")
        if p.row_filtered < p.scans / 5:
            problems.append(f"the row filter removed rows in only {p.row_filtered} of {p.scans} sampled scans")
        for what in expect_pruned:
            if getattr(p, what) < max(1, p.scans // 50):
                problems.append(f"too few sampled scans pruned {what}: {getattr(p, what)} of {p.scans}")
        if self.mismatches:
            for m in self.mismatches[:MISMATCHES_SHOWN]:
                self.shrink(m)
            by_table = collections.Counter(m.table for m in self.mismatches)
            problems.append(
                f"{len(self.mismatches)} of {self.runs} predicate runs disagree "
                f"(seeds {SEEDS}; per table {dict(by_table)}); the first {MISMATCHES_SHOWN}:\n"
                + "\n".join(str(m) for m in self.mismatches[:MISMATCHES_SHOWN]))
        assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Setup: the role that reads, the collation and operator predicates use, table metadata.
# ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def reader_sessions(cluster, conn, root, schemas):
    """Creates the collation `ci`, the operator `ops.=` and a role `reader` that may read the
    foreign tables in `schemas` and write heap copies in schema `heap`; yields SESSIONS
    sessions of that role (the first one is `conn`) and closes the others afterwards."""
    conn.execute("CREATE COLLATION public.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
    conn.execute("CREATE SCHEMA ops")
    # PL/pgSQL, so that the planner cannot inline it: the qual stays an operator named "=".
    conn.execute("CREATE FUNCTION ops.ci_eq(text, text) RETURNS boolean IMMUTABLE LANGUAGE plpgsql "
                 "AS 'BEGIN RETURN lower($1) = lower($2); END'")
    conn.execute("CREATE OPERATOR ops.= (LEFTARG = text, RIGHTARG = text, FUNCTION = ops.ci_eq)")
    conn.execute("CREATE ROLE reader LOGIN")
    conn.execute("CREATE SCHEMA heap AUTHORIZATION reader")
    conn.execute("GRANT USAGE ON FOREIGN SERVER lake TO reader")
    conn.execute("GRANT USAGE ON SCHEMA ops TO reader")
    for schema in schemas:
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO reader")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO reader")
    sessions = [conn] + [cluster.connect() for _ in range(SESSIONS - 1)]
    for session in sessions:
        # Other roles than superusers read file:// tables only below hudi.allowed_file_roots.
        session.execute(f"SET hudi.allowed_file_roots = {q(str(root))}")
        session.execute("SET ROLE reader")
        assert session.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
    try:
        yield sessions
    finally:
        for session in sessions[1:]:
            session.close()


def key_weights(conn, root, table):
    """Column weights: partition fields and record keys (what pruning uses most) more often."""
    path = conn.execute("SELECT option_value FROM pg_options_to_table((SELECT ftoptions FROM pg_foreign_table "
                        "WHERE ftrelid = %s::regclass)) WHERE option_name = 'path'", (table,)).fetchone()[0]
    properties = dict(conn.execute("SELECT key, value FROM hudi.table_properties(%s)", (f"file://{root}/{path}",)))
    weights = {}
    for field in properties.get("hoodie.table.recordkey.fields", "").split(","):
        weights[field.strip()] = 3
    for field in properties.get("hoodie.table.partition.fields", "").split(","):
        weights[field.split(":")[0].strip()] = 4
    return weights


def pg_text(value):
    """A Python value as PostgreSQL prints it (what Column.values holds)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        return stamp(value.astimezone(UTC).replace(tzinfo=None)) + "+00" if value.tzinfo else stamp(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def copy_rows(conn, table, columns, rows):
    """One transaction (one deltacommit) of upserts."""
    with conn.transaction(), conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def slice_kinds(conn, table):
    """How many file slices have a base file only, a base file and logs, logs only."""
    rows = conn.execute(f"SELECT base_file IS NOT NULL, cardinality(log_files) > 0, count(*) "
                        f"FROM hudi.file_slices('{table}') GROUP BY 1, 2").fetchall()
    kinds = {(True, False): "base only", (True, True): "base and logs", (False, True): "logs only"}
    return {kinds[(b, l)]: n for b, l, n in rows}


# ---------------------------------------------------------------------------------------------
# Spark's tables.
# ---------------------------------------------------------------------------------------------

def test_pushdown_never_changes_results_on_spark_fixtures(cluster, fixtures_root):
    """Every Spark-written fixture (copy-on-write and merge-on-read, table versions 6, 8 and 9,
    partitioned by integers and strings, hive-style or not, with and without meta fields):
    pruning by partition paths and by base files' statistics never drops a row."""
    zips = hudi_rows.fixture_zips(fixtures_root)
    with new_lake(cluster, fixtures_root, zips, by_kind=True) as (conn, root):
        schemas, tables, refused = [], [], []
        for kind in sorted({z.parent for z in zips}):
            schema = ident(str(kind).replace("/", "_"))
            conn.execute(f"CREATE SCHEMA {schema}")
            try:
                conn.execute(f"IMPORT FOREIGN SCHEMA {ident(str(kind))} FROM SERVER lake INTO {schema}")
            except psycopg.Error as e:
                refused.append(f"{kind}: {str(e).splitlines()[0]}")
                continue
            schemas.append(schema)
            tables += [f"{schema}.{ident(z.stem)}" for z in zips if z.parent == kind]
        weights = {t: key_weights(conn, root, t) for t in tables}
        with reader_sessions(cluster, conn, root, schemas) as sessions:
            run = Differential(sessions)
            run.skipped += refused
            for table in tables:
                run.check(table, FIXTURE_PREDICATES, weights[table], required=False)
            run.finish("Spark fixtures")


# ---------------------------------------------------------------------------------------------
# Tables written by pg_hudi: histories that leave every kind of file slice.
# ---------------------------------------------------------------------------------------------

NAMES = ("alice", "Alice", "ALICE", "bob", "Bob", "\u00e9mile", "\u00c9MILE", "zo\u00eb", "o'brien", "", None)
# ASCII only here: test_pushdown_never_changes_results_on_odd_partition_values has the others.
CITIES = ("Paris", "paris", "PARIS", "Rome", "Sao Paulo", None)
REALS = (0.1, 1.1, 2.5, -3.3, 100.25, 0.001)
# New York moves to summer time at 2024-03-10 07:00 UTC, inside the range of the rows' times.
T0 = datetime.datetime(2024, 3, 9, 12, tzinfo=UTC)
STALE = datetime.datetime(2001, 1, 1, tzinfo=UTC)
NEWER = T0 + datetime.timedelta(days=30)


def moment(rng, start, days=3):
    return start + datetime.timedelta(microseconds=rng.randrange(days * 86_400_000_000))


PEOPLE_COLUMNS = ("id", "name", "city", "amount", "d", "ts", "lts", "small", "qty", "r", "dbl", "flag")
# _hoodie_file_name (which create_table leaves out) tells the files apart: Differential.columns
# takes the edges of each file's values from it.
PEOPLE = """CREATE FOREIGN TABLE {name} (_hoodie_file_name text, id bigint, name text, city text,
              amount numeric(12, 2), d date, ts timestamptz, lts timestamp, small {small}, qty integer, r real,
              dbl double precision, flag boolean)
            SERVER lake OPTIONS (path 'people', primary_key 'id,city', ordering_field 'ts', partition_by 'city',
                                 buckets '2')"""


def person_city(key):
    return "Lima" if key > 270 else CITIES[key % len(CITIES)]  # Lima: a partition only in logs


def person(rng, key, when):
    """A row of `people`; the city (partition) is the key's, `when` its ordering time."""
    ts = moment(rng, when)
    maybe = lambda v: None if rng.random() < 0.05 else v  # noqa: E731
    return (key, rng.choice(NAMES), person_city(key),
            maybe(decimal.Decimal(rng.randrange(-10**6, 10**6)) / 100),
            maybe(ts.date() + datetime.timedelta(days=rng.randrange(-3, 3))),
            ts, maybe(moment(rng, T0).replace(tzinfo=None)), maybe(rng.randrange(-5, 6)), maybe(rng.randrange(1000)),
            maybe(rng.choice(REALS)), maybe(rng.choice((0.1, 1 / 3, 2.5, 1e-7, -2.0, rng.uniform(-100, 100)))),
            maybe(rng.random() < 0.5))


CODES_COLUMNS = ("code", "grp", "r", "amount", "d", "ts", "lts", "note")
CODES = """CREATE FOREIGN TABLE codes (_hoodie_file_name text, code text, grp integer, r real, amount numeric(10, 3),
              d date, ts timestamptz, lts timestamp, note text)
            SERVER lake OPTIONS (path 'codes', primary_key 'code,grp,r', ordering_field 'ts', partition_by 'grp,r',
                                 buckets '2')"""


def code_partition(key):
    """(grp, r) of a key of `codes`: grp 3 only for keys written after the compaction."""
    n = int(key[1:])
    return (3 if n >= 90 else n % 2, REALS[(n // 2) % 2])


def code_row(rng, key, when):
    """A row of `codes` (text keys that differ only in case, e.g. k7 and K7)."""
    ts = moment(rng, when)
    return (key, *code_partition(key), decimal.Decimal(rng.randrange(-10**5, 10**5)) / 1000, ts.date(), ts,
            ts.astimezone(NEW_YORK).replace(tzinfo=None), rng.choice(NAMES))


def write_history(conn, table, key, columns, make_row, partition_of, keys, rng):
    """Commits that leave every kind of file slice: inserts and updates, a compaction, then
    three commits on top, in half of the partitions (the other half keep base files alone):
    one transaction of updates with a newer ordering value (they win), stale upserts with an
    older one (they lose to the base row, so a reader that skipped the base row would return
    them) and new keys (only in logs, some in a new partition); an UPDATE; a DELETE. Returns
    the values of the stale rows, which no snapshot holds, as constants worth asking for."""
    split = len(keys) * 3 // 4
    partitions = sorted({partition_of(k) for k in keys[:split]}, key=repr)
    busy = set(partitions[::2])
    old, new = keys[:split], keys[split:]
    copy_rows(conn, table, columns, [make_row(rng, k, T0) for k in old])
    copy_rows(conn, table, columns, [make_row(rng, k, T0 + datetime.timedelta(days=3)) for k in rng.sample(old, split // 8)])
    # new keys: the busy partitions' and (for tables that have one) a partition of their own
    new = [k for k in new if partition_of(k) in busy or partition_of(k) not in partitions]
    assert conn.execute(f"SELECT count(*) FROM hudi.compact('{table}')").fetchone()[0] == 1
    old = [k for k in old if partition_of(k) in busy]
    touched = rng.sample(old, len(old) // 3)
    newer, stale = touched[:len(touched) // 2], touched[len(touched) // 2:]
    stale_rows = [make_row(rng, k, STALE) for k in stale]
    copy_rows(conn, table, columns, [make_row(rng, k, NEWER) for k in newer] + stale_rows
              + [make_row(rng, k, NEWER) for k in new])
    conn.execute(f"UPDATE {table} SET ts = ts + interval '40 days', amount = amount + 1 WHERE {key} = ANY(%s)",
                 (rng.sample(old, len(old) // 5),))
    conn.execute(f"DELETE FROM {table} WHERE {key} = ANY(%s)",
                 (rng.sample(old, len(old) // 6) + rng.sample(new, len(new) // 6),))
    return {name: [pg_text(row[i]) for row in stale_rows if row[i] is not None] for i, name in enumerate(columns)}


def test_pushdown_never_changes_results_on_merge_on_read_tables_with_logs(cluster):
    """pg_hudi-written merge-on-read tables whose slices have logs on top of base files: keys
    only in logs, deletes, winning updates and losing stale upserts. Pruning by partition
    (text; integer and real, two levels), by bucket (bigint and text keys) and by statistics of
    the slices that have no logs never drops a row."""
    rng = random.Random(DATA_SEED)
    with new_lake(cluster) as (conn, root):
        # `small` is stored as an Avro int; people_int2 reads it as smallint (where the build allows it).
        conn.execute(PEOPLE.format(name="people", small="integer"))
        conn.execute(PEOPLE.format(name="people_int2", small="smallint"))
        conn.execute("SELECT hudi.create_table('people')")
        conn.execute(CODES)
        conn.execute("SELECT hudi.create_table('codes')")
        stale_people = write_history(conn, "people", "id", PEOPLE_COLUMNS, person, person_city, list(range(1, 301)), rng)
        keys = [f"{p}{n}" for n in range(100) for p in ("k", "K")]
        stale_codes = write_history(conn, "codes", "code", CODES_COLUMNS, code_row, code_partition, keys, rng)
        for table in ("people", "codes"):
            kinds = slice_kinds(conn, table)
            print(f"  {table}: file slices {kinds}")
            assert kinds.get("base only") and kinds.get("base and logs") and kinds.get("logs only"), kinds
        weights = {t: key_weights(conn, root, t) for t in ("people", "codes")}
        with reader_sessions(cluster, conn, root, ["public"]) as sessions:
            run = Differential(sessions)
            run.check("people", LOG_TABLE_PREDICATES, weights["people"], stale_people)
            run.check("people_int2", LOG_TABLE_PREDICATES // 3, weights["people"], stale_people, required=False)
            run.check("codes", LOG_TABLE_PREDICATES, weights["codes"], stale_codes)
            run.finish("merge-on-read tables with logs")


PLACES = """CREATE FOREIGN TABLE places (id bigint, city text, n integer, ts timestamptz)
            SERVER lake OPTIONS (path 'places', primary_key 'id,city', ordering_field 'ts', partition_by 'city',
                                 buckets '1')"""
ODD_CITIES = ("S\u00e3o Paulo", "s\u00e3o paulo", "Z\u00fcrich", "50%", "100%25", "a b", "x=y", "a/b", "", "Paris")


def test_pushdown_never_changes_results_on_odd_partition_values(cluster):
    """Partition values that are not plain ASCII words (non-ASCII letters, `%`, spaces, `=`,
    `/`, the empty string; NULL cannot be one, as a key column), written by pg_hudi and compacted, then written again: reading
    the partition values back from the paths never drops a row."""
    rng = random.Random(DATA_SEED)
    with new_lake(cluster) as (conn, root):
        conn.execute(PLACES)
        conn.execute("SELECT hudi.create_table('places')")
        rows = lambda first, when: [(i, ODD_CITIES[i % len(ODD_CITIES)], rng.randrange(100), moment(rng, when))  # noqa: E731
                                    for i in range(first, first + 66)]
        copy_rows(conn, "places", ("id", "city", "n", "ts"), rows(0, T0))
        conn.execute("SELECT * FROM hudi.compact('places')")
        copy_rows(conn, "places", ("id", "city", "n", "ts"), rows(33, NEWER))
        weights = key_weights(conn, root, "places")
        with reader_sessions(cluster, conn, root, ["public"]) as sessions:
            run = Differential(sessions)
            run.check("places", LOG_TABLE_PREDICATES // 3, weights)
            run.finish("odd partition values", expect_pruned=("partitions",))


MOMENTS = """CREATE FOREIGN TABLE moments (id bigint, at timestamptz, lts timestamp, n integer, ts timestamptz)
             SERVER lake OPTIONS (path 'moments', primary_key 'id,at,lts', ordering_field 'ts', partition_by 'at,lts',
                                  buckets '1')"""


def test_timestamp_partitions_are_hudis_integers_and_prune(cluster):
    """Tables partitioned (and keyed) by timestamp and timestamptz columns: pg_hudi writes the
    partition paths and record keys as Hudi's key generators do (the stored microseconds), in
    any session time zone (a zoned timestamp's text made the write fail before), and reads them
    back to prune partitions without dropping a row."""
    rng = random.Random(DATA_SEED)
    instants = [moment(rng, T0) for _ in range(5)]
    locals_ = [moment(rng, T0).replace(tzinfo=None) for _ in range(3)]
    with new_lake(cluster) as (conn, root):
        conn.execute(MOMENTS)
        conn.execute("SELECT hudi.create_table('moments')")
        conn.execute("SET TimeZone = 'Asia/Kathmandu'")
        rows = lambda first, when: [(i, instants[i % 5], locals_[i % 3], rng.randrange(100), moment(rng, when))  # noqa: E731
                                    for i in range(first, first + 60)]
        copy_rows(conn, "moments", ("id", "at", "lts", "n", "ts"), rows(0, T0))
        conn.execute("SELECT * FROM hudi.compact('moments')")
        copy_rows(conn, "moments", ("id", "at", "lts", "n", "ts"), rows(30, NEWER))
        micros = lambda t: (t - datetime.datetime(1970, 1, 1, tzinfo=t.tzinfo)) // datetime.timedelta(microseconds=1)  # noqa: E731
        paths = {p for p, in conn.execute("SELECT DISTINCT partition_path FROM hudi.file_slices('moments')")}
        assert paths == {f"at={micros(a)}/lts={micros(l)}" for a in instants for l in locals_}, paths
        weights = key_weights(conn, root, "moments")
        with reader_sessions(cluster, conn, root, ["public"]) as sessions:
            run = Differential(sessions)
            run.check("moments", LOG_TABLE_PREDICATES // 3, weights)
            run.finish("timestamp partitions", expect_pruned=("partitions",))


# ---------------------------------------------------------------------------------------------
# Compacted tables: statistics prune base files and row groups.
# ---------------------------------------------------------------------------------------------

BIG = """CREATE FOREIGN TABLE big (_hoodie_file_name text, id bigint, name text, city text, amount numeric(12, 2), d date,
           ts timestamptz, lts timestamp, small integer, r real, dbl double precision)
         SERVER lake OPTIONS (path 'big', primary_key 'id,city', ordering_field 'ts', partition_by 'city', buckets '4')"""

# Rows whose values depend on their city, so that statistics (not partitions) tell the files
# of one city from another's: a filter on d, ts, amount, small, r or dbl skips the other cities'.
BIG_ROWS = """INSERT INTO big (id, name, city, amount, d, ts, lts, small, r, dbl)
    SELECT g, (ARRAY['alice', 'Alice', 'BOB', 'bob', '\u00c9mile'])[1 + g %% 5] || (g %% 7)::text, city,
           c * 1000 + (g * 7919 %% 100000) / 100.0,
           date '2024-01-01' + c * 40 + g %% 30,
           timestamptz '2024-03-09 12:00:00+00' + c * interval '3 days' + (g * 7919 %% 86400000) * interval '1 ms'
             + (g %% 1000) * interval '1 microsecond',
           timestamp '2024-03-09 12:00:00' + c * interval '3 days' + (g * 104729 %% 86400000) * interval '1 ms',
           c * 10 + g %% 7, (c + 0.1 * (g %% 3))::real, c * 1000 + g / 7.0::float8
    FROM generate_series(1, %s) g,
         LATERAL (SELECT g %% 4 AS c) i,
         LATERAL (SELECT (ARRAY['Paris', 'paris', 'Rome', 'Oslo'])[1 + c] AS city) n"""


def write_copy_on_write_table(base, name, fields, rows, partition_fields, sort_key, row_group_size,
                              instant="20240101000000000"):
    """A copy-on-write table (version 6, timeline layout 1, no meta fields) of one commit, in
    Spark's layout: `fields` are (name, Avro type, Arrow type); each partition's rows sorted by
    `sort_key` go into one Parquet file of `row_group_size`-row row groups. Returns each row
    group's smallest and largest value of every field, as text."""
    hoodie = base / ".hoodie"
    hoodie.mkdir(parents=True)
    avro = json.dumps({"type": "record", "name": f"{name}_record", "namespace": f"hoodie.{name}",
                       "fields": [{"name": n, "type": ["null", t], "default": None} for n, t, _ in fields]},
                      separators=(",", ":"))
    properties = {
        "hoodie.table.name": name, "hoodie.table.type": "COPY_ON_WRITE", "hoodie.table.version": "6",
        "hoodie.timeline.layout.version": "1", "hoodie.table.base.file.format": "PARQUET",
        "hoodie.table.recordkey.fields": "id", "hoodie.table.partition.fields": ",".join(partition_fields),
        "hoodie.datasource.write.hive_style_partitioning": "true", "hoodie.populate.meta.fields": "false",
        "hoodie.datasource.write.partitionpath.urlencode": "false",
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.ComplexKeyGenerator",
        "hoodie.table.create.schema": avro.replace(":", "\\:"),
    }
    (hoodie / "hoodie.properties").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    schema = pa.schema([(n, t) for n, _, t in fields])
    text = {n: (lambda v: f32_text(v)) if t == pa.float32() else str for n, _, t in fields}
    partitions = collections.defaultdict(list)
    for row in rows:  # paths as Spark writes them: a float as Java's Float.toString, e.g. r=1.1
        partitions["/".join(f"{f}={text[f](row[f])}" for f in partition_fields)].append(row)
    stats, edges = {}, collections.defaultdict(list)
    for i, (path, part) in enumerate(sorted(partitions.items())):
        part.sort(key=lambda r: r[sort_key])
        file_id = f"{uuid.UUID(int=i + 1)}-0"
        file_name = f"{file_id}_{i}-0-0_{instant}.parquet"
        (base / path).mkdir(parents=True)
        (base / path / ".hoodie_partition_metadata").write_text(
            f"commitTime={instant}\npartitionDepth={len(partition_fields)}\n")
        pq.write_table(pa.Table.from_pylist(part, schema=schema), base / path / file_name, row_group_size=row_group_size)
        size = (base / path / file_name).stat().st_size
        stats[path] = [{"fileId": file_id, "path": f"{path}/{file_name}", "prevCommit": "null", "numWrites": len(part),
                        "numInserts": len(part), "numDeletes": 0, "numUpdateWrites": 0, "totalWriteErrors": 0,
                        "partitionPath": path, "totalWriteBytes": size, "fileSizeInBytes": size}]
        for start in range(0, len(part), row_group_size):
            group = part[start:start + row_group_size]
            for n, _, _ in fields:
                values = sorted(r[n] for r in group if r[n] is not None)
                edges[n] += [pg_text(values[0]), pg_text(values[-1])] if values else []
    commit = {"partitionToWriteStats": stats, "compacted": False, "extraMetadata": {"schema": avro},
              "operationType": "INSERT"}
    (hoodie / f"{instant}.commit.requested").write_text("")
    (hoodie / f"{instant}.inflight").write_text("")
    (hoodie / f"{instant}.commit").write_text(json.dumps(commit))
    return edges


MILLIS_FIELDS = [
    ("id", "long", pa.int64()),
    ("grp", "int", pa.int32()),
    ("r", "float", pa.float32()),
    ("name", "string", pa.string()),
    ("amount", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3}, pa.decimal128(10, 3)),
    ("d", {"type": "int", "logicalType": "date"}, pa.date32()),
    ("ts", {"type": "long", "logicalType": "timestamp-millis"}, pa.timestamp("ms", tz="UTC")),
    ("lts", {"type": "long", "logicalType": "local-timestamp-millis"}, pa.timestamp("ms")),
    ("dbl", "double", pa.float64()),
]


def millis_rows(rng, groups, size):
    """Rows with millisecond timestamps, in partitions grp x r (real) of `groups` row groups of
    `size` rows each (the writer sorts by ts): in grp 1 and 2 all rows of a row group share one
    time (its minimum is its maximum), in grp 3 they spread over a second. Row groups follow each
    other by a few seconds, so that their ranges of ts, lts and d differ."""
    rows = []
    for grp in (1, 2, 3):
        for r in REALS[:3]:
            start = T0 + datetime.timedelta(milliseconds=rng.randrange(86_400_000))
            for g in range(groups):
                first = start + datetime.timedelta(seconds=5 * g, milliseconds=rng.randrange(1000))
                for k in range(size):
                    ts = first if grp < 3 else first + datetime.timedelta(milliseconds=rng.randrange(1000))
                    rows.append({"id": len(rows), "grp": grp, "r": f32(r), "name": rng.choice(NAMES),
                                 "amount": decimal.Decimal(rng.randrange(-10**6, 10**6)) / 1000, "d": ts.date(),
                                 "ts": ts, "lts": ts.astimezone(NEW_YORK).replace(tzinfo=None),
                                 "dbl": rng.uniform(-1000, 1000)})
    return rows


def test_pushdown_never_changes_results_on_compacted_tables(cluster):
    """Tables whose file slices have no logs, where statistics prune: a pg_hudi table after
    compaction, and a copy-on-write table with millisecond timestamps (constants finer than
    the column's unit), several row groups per file and real partitions. Skipping base files
    and row groups never drops a row."""
    with new_lake(cluster) as (conn, root):
        conn.execute(BIG)
        conn.execute("SELECT hudi.create_table('big')")
        conn.execute(BIG_ROWS, (BIG_ROW_COUNT,))
        conn.execute("SELECT * FROM hudi.compact('big')")
        assert slice_kinds(conn, "big") == {"base only": 16}, slice_kinds(conn, "big")
        rows = millis_rows(random.Random(DATA_SEED), MILLIS_ROW_GROUPS, MILLIS_ROW_GROUP_SIZE)
        edges = write_copy_on_write_table(root / "events_ms", "events_ms", MILLIS_FIELDS, rows, ["grp", "r"], "ts",
                                          MILLIS_ROW_GROUP_SIZE)
        give_to_postgres(root)
        conn.execute("IMPORT FOREIGN SCHEMA root LIMIT TO (events_ms) FROM SERVER lake INTO public")
        assert conn.execute("SELECT count(*), sum(id) FROM events_ms").fetchone() == (len(rows), sum(r["id"] for r in rows))
        weights = {t: key_weights(conn, root, t) for t in ("big", "events_ms")}
        weights["events_ms"].update(ts=8, lts=8)  # what the table is for: millisecond columns
        with reader_sessions(cluster, conn, root, ["public"]) as sessions:
            run = Differential(sessions)
            run.check("big", BIG_PREDICATES, weights["big"])
            run.check("events_ms", MILLIS_PREDICATES, weights["events_ms"], edges)
            run.finish("compacted tables")
