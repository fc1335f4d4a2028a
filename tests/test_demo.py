"""`make run`'s demo (sql/demo.sql), played on a cluster of its own (a running `make run`
cluster is left alone): it must run through and show the product — two sessions writing at
once, the worker's compaction in hudi.service_history, a lookup join's Lookup line, a
consumer's changes and TRUNCATE."""

import os
import re
import subprocess

from conftest import give_to_postgres, serve_databases
from servers import REPO

PG_BIN = "/usr/lib/postgresql/15/bin"
FIXTURES = ["quickstart_trips_table/mor/avro/v6_trips_8i1u.zip", "sample_table/mor/avro/v9_txns_simple_nometa.zip"]


def test_the_demo_runs_and_shows_the_product(cluster, fixtures_root):
    import pathlib
    import hudi_rows
    warehouse = cluster.directory / "warehouse"
    for fixture in FIXTURES:
        hudi_rows.unpack(fixtures_root, pathlib.Path(fixture), warehouse)
    give_to_postgres(warehouse)
    with cluster.connect() as conn:
        # As on `make run`'s cluster, whose worker serves every database.
        serve_databases(conn)
    env = {**os.environ, "PATH": f"{PG_BIN}:{os.environ['PATH']}", "PGHOST": "127.0.0.1", "PGPORT": str(cluster.port),
           "PGUSER": "postgres", "PGDATABASE": "postgres"}
    run = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-v", f"warehouse=file://{warehouse}", "-f", REPO / "sql/demo.sql"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    errors = [line for line in run.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "rider" in errors[0], "only the broken declaration fails: " + run.stderr
    preloaded = re.search(r"shared_preload_libraries\s*\n-+\n(.*)\n", out)
    assert preloaded and "pg_hudi" in preloaded.group(1), out
    assert re.search(r"101 \| written by session 2", out) and re.search(r"100 \| written by session 1", out), out
    assert re.search(r"compaction \| succeeded \|", out), out
    assert "Lookup: customers" in out, out
    assert re.search(r"\{country,id\} \| unique\s+\| ready", out), out
    assert re.search(r"102 \| new after the first pull", out), out
    assert re.search(r"TRUNCATE TABLE\n count \n-+\n +0\n", out), "TRUNCATE left nothing"
    # The README's Quick start runs as written next to the demo's objects (its base_uri is the
    # one placeholder to fill in).
    readme = (REPO / "README.md").read_text()
    quick_start = readme.split("## Quick start in psql")[1].split("```sql\n")[1].split("```")[0]
    assert "file:///path/to/build/warehouse" in quick_start
    quick_start = quick_start.replace("file:///path/to/build/warehouse", f"file://{warehouse}")
    run = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1"], input=quick_start, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ERROR" not in run.stderr, run.stderr
    assert "chennai" in run.stdout and "compaction" in run.stdout.split("relation")[-1], run.stdout
