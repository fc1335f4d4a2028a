"""The reference reader (`hudi` 0.5.0) reads every shipped fixture exactly as its expected/
file says: this pins both the oracle the project is compared against and the row
normalisation (hudi_rows) that later tests use on pg_hudi's own output."""

import pytest

import hudi_rows


def test_every_fixture_has_an_expected_file(fixtures_root):
    zips = hudi_rows.fixture_zips(fixtures_root)
    assert len(zips) >= 30
    for z in zips:
        expected = hudi_rows.expected_for(fixtures_root, z)
        assert expected["row_count"] == len(expected["rows"]), z


@pytest.mark.parametrize("fixture", [
    "sample_table/cow/v8_nonpartitioned.zip",                  # nested types, decimals, bytes
    "sample_table/mor/avro/v9_txns_simple_nometa.zip",         # MOR with Avro log blocks
    "sample_table/mor/parquet/v6_nonpartitioned_rollback.zip",  # MOR, v6, rolled-back write
    "quickstart_trips_table/mor/avro/v6_trips_8i3d.zip",       # deletes in logs
])
def test_reference_reader_matches_expected(fixtures_root, tmp_path, fixture):
    import pathlib
    relative = pathlib.Path(fixture)
    base = hudi_rows.unpack(fixtures_root, relative, tmp_path)
    expected = hudi_rows.expected_for(fixtures_root, relative)
    actual = hudi_rows.reference_snapshot(base)
    assert len(actual) == expected["row_count"]
    assert actual == expected["rows"]
