"""Record positions from SQL: UPDATE and DELETE of rows read from base files write log blocks
that name those rows (RECORD_POSITIONS and BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS headers),
INSERTs do not; pg_hudi and the reference reader `hudi` 0.5.0 read the same rows as a model."""

import re
import struct

from conftest import our_rows, reference_rows

RECORD_POSITIONS, BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 5, 8


def block_headers(path):
    """The header of each block of a log file (hudi-format.md §4.1), as {key: value}."""
    data = path.read_bytes()
    headers, at = [], 0
    while at < len(data):
        assert data[at:at + 6] == b"#HUDI#", f"{path} at {at}"
        (length,) = struct.unpack(">q", data[at + 6:at + 14])
        pos = at + 14 + 8  # version and block type
        (count,) = struct.unpack(">i", data[pos:pos + 4])
        pos += 4
        header = {}
        for _ in range(count):
            key, size = struct.unpack(">ii", data[pos:pos + 8])
            header[key] = data[pos + 8:pos + 8 + size].decode()
            pos += 8 + size
        headers.append(header)
        at += 14 + length
    return headers


def log_files(path):
    return {p for p in path.rglob(".*.log.*")}


def positioned(files):
    """(blocks, blocks with positions) of the log `files`."""
    headers = [h for f in files for h in block_headers(f)]
    return len(headers), sum(RECORD_POSITIONS in h and BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS in h for h in headers)


def test_updates_and_deletes_name_base_rows_and_every_reader_agrees(lake):
    conn, path = lake
    conn.execute("INSERT INTO customers SELECT g, 'c' || g, (ARRAY['nl','be','fr'])[g % 3 + 1], g, '2026-01-01' "
                 "FROM generate_series(1, 300) g")
    compaction = conn.execute("SELECT instant FROM hudi.compact('customers')").fetchone()[0]
    model = {i: ("c%d" % i, ["nl", "be", "fr"][i % 3]) for i in range(1, 301)}

    before = log_files(path)
    conn.execute("UPDATE customers SET name = name || '-u', ts = ts + interval '1 day' WHERE id % 3 = 0")
    conn.execute("DELETE FROM customers WHERE id % 7 = 0")
    written = log_files(path) - before
    blocks, with_positions = positioned(written)
    assert blocks >= 2 and with_positions == blocks, f"{with_positions} of {blocks} blocks carry positions"
    assert all(h[BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS] == compaction
               for f in written for h in block_headers(f))
    for i in list(model):
        if i % 7 == 0:
            del model[i]
        elif i % 3 == 0:
            model[i] = (model[i][0] + "-u", model[i][1])

    def expected():
        return sorted((i, n, c) for i, (n, c) in model.items())

    ours = [(i, n, c) for i, n, c, _ in our_rows(conn)]
    assert ours == expected()
    assert [(i, n, c) for i, n, c, _ in reference_rows(path)] == expected()
    # Without the record key among the columns read: merged by position alone; and by key
    # when positions are switched off.
    assert sorted(conn.execute("SELECT id, name, country FROM customers").fetchall()) == expected()
    conn.execute("SET hudi.use_record_positions = off")
    assert sorted(conn.execute("SELECT id, name, country FROM customers").fetchall()) == expected()
    conn.execute("RESET hudi.use_record_positions")
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (len(model),)

    # Updated rows keep their base rows: updating them again is by position too; an INSERT
    # in the same transaction is not (its file groups then merge by key).
    before = log_files(path)
    with conn.transaction():
        conn.execute("UPDATE customers SET name = name || '2', ts = ts + interval '1 day' WHERE id % 6 = 0")
        conn.execute("INSERT INTO customers VALUES (1000, 'new', 'nl', 1, '2026-01-01')")
    blocks, with_positions = positioned(log_files(path) - before)
    assert 0 < with_positions < blocks
    for i in model:
        if i % 6 == 0:
            model[i] = (model[i][0] + "2", model[i][1])
    model[1000] = ("new", "nl")
    assert [(i, n, c) for i, n, c, _ in our_rows(conn)] == expected()
    assert [(i, n, c) for i, n, c, _ in reference_rows(path)] == expected()

    # A read that is not the target of an UPDATE or DELETE asks for no positions and writes
    # none: INSERT ... SELECT from the table itself.
    before = log_files(path)
    conn.execute("INSERT INTO customers SELECT id, name || '+', country, balance, ts + interval '1 day' "
                 "FROM customers WHERE id = 3")
    assert positioned(log_files(path) - before)[1] == 0
    model[3] = (model[3][0] + "+", model[3][1])
    assert [(i, n, c) for i, n, c, _ in our_rows(conn)] == expected()

    # After compacting again, the rows stay the same.
    conn.execute("SELECT hudi.compact('customers')")
    assert [(i, n, c) for i, n, c, _ in our_rows(conn)] == expected()
    assert [(i, n, c) for i, n, c, _ in reference_rows(path)] == expected()


def test_repeated_reads_reuse_merges_and_agree_with_a_heap_copy(lake):
    """A read of slices with logs keeps what their merges decided; the next statements over the
    same versions (a scan of other columns, a pushed aggregate, the scan under an UPDATE)
    assemble their rows by it (EXPLAIN ANALYZE: Hudi Merges Reused) and agree with a heap copy
    and with reads that keep nothing (hudi.merge_cache_size = 0). A write makes new versions:
    those slices merge again, and the transaction reads its own rows."""
    conn, _ = lake
    conn.execute("CREATE TABLE heap (id bigint PRIMARY KEY, name text, country text, balance numeric(12, 2), ts timestamptz)")
    for table in ("customers", "heap"):
        conn.execute(f"INSERT INTO {table} SELECT g, 'c' || g, (ARRAY['nl','be','fr'])[g % 3 + 1], g / 7.0, "
                     "'2026-01-01'::timestamptz + g * interval '1 minute' FROM generate_series(1, 2000) g")
    conn.execute("SELECT hudi.compact('customers')")
    for table in ("customers", "heap"):
        # Some versions lose to their base rows (an earlier ts); some rows are deleted.
        conn.execute(f"UPDATE {table} SET name = name || '-u', balance = balance + 1, "
                     "ts = ts + CASE WHEN id % 5 = 0 THEN interval '-1 day' ELSE interval '1 day' END WHERE id % 3 = 0")
        conn.execute(f"DELETE FROM {table} WHERE id % 11 = 0")
    conn.execute("UPDATE heap SET name = substr(name, 1, length(name) - 2), balance = balance - 1, "
                 "ts = ts + interval '1 day' WHERE id % 3 = 0 AND id % 5 = 0")

    queries = ["SELECT id, name, country, balance FROM {} ORDER BY id",
               "SELECT name FROM {} WHERE id % 2 = 0 ORDER BY 1",
               "SELECT count(*), sum(balance), min(name), max(id) FROM {}",
               "SELECT country, count(*), sum(id) FROM {} GROUP BY country ORDER BY 1"]

    def reused(sql):
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, VERBOSE) " + sql).fetchall())
        found = re.search(r"Hudi Merges Reused: (\d+)|merges reused: (\d+)", plan)
        return int(next(g for g in found.groups() if g)) if found else 0

    def agree(expect_reuse):
        for query in queries:
            ours, heap = conn.execute(query.format("customers")).fetchall(), conn.execute(query.format("heap")).fetchall()
            assert ours == heap, query
            assert (reused(query.format("customers")) > 0) == expect_reuse, query

    agree(expect_reuse=True)
    conn.execute("SET hudi.merge_cache_size = 0")
    agree(expect_reuse=False)
    conn.execute("RESET hudi.merge_cache_size")

    # An UPDATE targets rows found through a reused merge; then the touched slices merge
    # again, inside the transaction and after it.
    first = "SELECT id, name, country, balance FROM {} ORDER BY id"
    conn.execute(first.format("customers"))
    assert reused(first.format("customers")) > 0
    with conn.transaction():
        for table in ("customers", "heap"):
            conn.execute(f"UPDATE {table} SET name = name || '+', ts = ts + interval '2 days' WHERE id % 4 = 0")
        assert conn.execute(first.format("customers")).fetchall() == conn.execute(first.format("heap")).fetchall()
    agree(expect_reuse=True)
