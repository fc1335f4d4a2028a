"""Tables written by pg_hudi's engine (several commits: inserts, updates, stale updates that
must lose, deletes; partitioned, composite keys, flat) read the same in the reference reader
`hudi` 0.5.0 as in pg_hudi's own reader."""

import json
import os
import pathlib
import subprocess

import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def writer_binary():
    subprocess.run(["cargo", "build", "--quiet", "-p", "engine", "--example", "interop_writer"],
                   cwd=REPO, check=True)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "examples" / "interop_writer"


@pytest.mark.parametrize("scenario", ["partitioned", "composite", "flat", "partitioned_metadata", "flat_metadata"])
def test_reference_reader_reads_what_the_engine_wrote(tmp_path, writer_binary, scenario):
    table = tmp_path / scenario
    out = subprocess.run([writer_binary, str(table), scenario], check=True, capture_output=True, text=True)
    ours = sorted((json.loads(line) for line in out.stdout.splitlines()), key=lambda r: r["_hoodie_record_key"])
    batches = HudiTableBuilder.from_base_uri(str(table)).build().read(HudiReadOptions())
    rows = pa.Table.from_batches(batches).to_pylist()
    theirs = sorted(rows, key=lambda r: r["_hoodie_record_key"])
    assert len(ours) == len(theirs) == 11  # 13 keys written, 2 deleted
    for a, b in zip(ours, theirs):
        assert (a["_hoodie_record_key"], a["_hoodie_partition_path"], a["id"], a["name"]) == \
               (b["_hoodie_record_key"], b["_hoodie_partition_path"], b["id"], b["name"])
        assert a["ts"] == int(b["ts"].timestamp() * 1_000_000)
    by_id = {r["id"]: r["name"] for r in theirs}
    assert by_id[1] == "v3" and by_id[2] == "v1" and by_id[4] == "v2"  # stale update lost
    assert 5 not in by_id and 6 not in by_id
    # The table is what the design says: MOR, version 8, bucket index, a metadata table (which
    # the reference reader lists the table through) only when asked for.
    props = dict(line.split("=", 1) for line in (table / ".hoodie/hoodie.properties").read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    assert props["hoodie.table.type"] == "MERGE_ON_READ" and props["hoodie.table.version"] == "8"
    assert props["hoodie.index.type"] == "BUCKET"
    metadata = scenario.endswith("_metadata")
    assert props.get("hoodie.table.metadata.partitions") == ("files" if metadata else None)
    assert (table / ".hoodie/metadata/.hoodie/hoodie.properties").exists() == metadata
    logs = [p.name for p in table.rglob(".0000000*-0000-0000-0000-000000000000-0_*.log.1_*")]
    assert logs, "log files of fixed bucket file groups"
