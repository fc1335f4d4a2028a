"""Rows of Hudi tables in the fixtures' `expected/*.json` form, so that any reader's output
(the reference reader's, pg_hudi's) compares with plain equality.

The form (fixtures README): rows sorted by (_hoodie_partition_path, _hoodie_record_key),
`_hoodie_file_name` left out, floats as numbers, dates/timestamps/decimals as Python `str()`,
bytes as hex, maps as lists of [key, value] pairs.
"""

import datetime
import decimal
import json
import math
import pathlib
import zipfile

import pyarrow as pa
from hudi import HudiReadOptions, HudiTableBuilder

LEFT_OUT = {"_hoodie_file_name"}


def normalize(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time, decimal.Decimal)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    return value


def sort_key(row):
    return (row.get("_hoodie_partition_path") or "", row.get("_hoodie_record_key") or "")


def normalize_rows(rows):
    out = [{k: normalize(v) for k, v in row.items() if k not in LEFT_OUT} for row in rows]
    return sorted(out, key=sort_key)


def reference_snapshot(base_path):
    """The latest snapshot as read by the reference reader (`hudi` 0.5.0)."""
    table = HudiTableBuilder.from_base_uri(str(base_path)).build()
    batches = table.read(HudiReadOptions())
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    return normalize_rows(rows)


def fixture_zips(root):
    return sorted(p.relative_to(root) for p in pathlib.Path(root).rglob("*.zip"))


def expected_for(root, relative_zip):
    name = str(relative_zip.with_suffix("")).replace("/", "__")
    return json.loads((pathlib.Path(root) / "expected" / f"{name}.json").read_text())


def unpack(root, relative_zip, into):
    """Unzips a fixture under `into`; returns the table's base path."""
    with zipfile.ZipFile(pathlib.Path(root) / relative_zip) as archive:
        archive.extractall(into)
    base = pathlib.Path(into) / relative_zip.stem
    assert (base / ".hoodie").is_dir(), f"{relative_zip} has no {relative_zip.stem}/.hoodie"
    return base


def same(ours, expected):
    """Value equality, with real/double compared to 6 significant digits (PostgreSQL prints
    float4 rounded) and Arrow maps (lists of [key, value]) equal to jsonb objects."""
    if isinstance(expected, float) or isinstance(ours, float):
        return ours is not None and expected is not None and math.isclose(ours, expected, rel_tol=1e-6)
    if isinstance(ours, dict) and isinstance(expected, list):
        if not all(isinstance(p, list) and len(p) == 2 for p in expected):
            return False
        expected = {str(k): v for k, v in expected}
    if isinstance(ours, dict) and isinstance(expected, dict):
        return ours.keys() == expected.keys() and all(same(ours[k], expected[k]) for k in ours)
    if isinstance(ours, list) and isinstance(expected, list):
        return len(ours) == len(expected) and all(same(a, b) for a, b in zip(ours, expected))
    return ours == expected
