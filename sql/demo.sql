-- The pg_hudi demo that `make run` plays on a fresh cluster. It grows with the features.
-- psql variable :warehouse is the embedded file:// warehouse under the build folder, holding
-- two tables that Apache Spark wrote (a merge-on-read trips table and a transactions table).
\set ON_ERROR_STOP on
SET timezone = 'UTC';
\echo '-- the extension and what it speaks'
DROP EXTENSION IF EXISTS pg_hudi CASCADE;
DROP SCHEMA IF EXISTS lake CASCADE;
CREATE EXTENSION pg_hudi;
SELECT hudi.version();

\echo '-- a server: the warehouse root (file:// here; s3://, gs://, az:// work the same way)'
CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri :'warehouse');

\echo '-- every Hudi table under it, as foreign tables'
CREATE SCHEMA lake;
IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO lake;
\dE lake.*

\echo '-- the merged snapshot: base Parquet files plus log blocks'
SELECT rider, driver, fare, city FROM lake.v6_trips_8i1u ORDER BY rider;

\echo '-- partition pruning and the plan'
EXPLAIN (VERBOSE, COSTS OFF)
SELECT txn_id, amount FROM lake.v9_txns_simple_nometa WHERE region = 'eu';
SELECT region, count(*), sum(amount) FROM lake.v9_txns_simple_nometa GROUP BY region ORDER BY region;

\echo '-- the timeline, and time travel to the first commit'
SELECT instant, action, state, completion_time FROM hudi.timeline('lake.v6_trips_8i1u');
SELECT min(instant) AS first_commit FROM hudi.timeline('lake.v6_trips_8i1u') \gset
SET hudi.as_of_instant = :'first_commit';
SELECT rider, fare FROM lake.v6_trips_8i1u WHERE rider = 'rider-D';
RESET hudi.as_of_instant;
SELECT rider, fare FROM lake.v6_trips_8i1u WHERE rider = 'rider-D';

\echo '-- incremental: every change so far, pulled exactly once by a consumer'
CREATE FOREIGN TABLE trip_changes (_hoodie_commit_time text, rider text, fare double precision,
                                   _hoodie_operation text)
  SERVER lake OPTIONS (path 'v6_trips_8i1u', query_type 'incremental');
SELECT _hoodie_operation, count(*) FROM hudi.consume(NULL::trip_changes, 'demo') GROUP BY 1;
SELECT count(*) AS nothing_new FROM hudi.consume(NULL::trip_changes, 'demo');

\echo '-- writing: a new merge-on-read table, upserts from SQL, read back merged'
DROP FOREIGN TABLE IF EXISTS customers;
CREATE FOREIGN TABLE customers (id bigint, name text, country text, ts timestamptz)
  SERVER lake OPTIONS (path 'customers', primary_key 'id,country', ordering_field 'ts',
                       partition_by 'country', buckets '4');
SELECT hudi.create_table('customers');
INSERT INTO customers SELECT g, 'customer ' || g, (ARRAY['nl', 'be', 'fr'])[1 + g % 3], now()
  FROM generate_series(1, 9) g;
UPDATE customers SET name = 'renamed', ts = now() WHERE id = 1;
DELETE FROM customers WHERE id = 2;
SELECT id, name, country FROM customers ORDER BY id;
SELECT action, state, count(*) FROM hudi.timeline('customers') GROUP BY 1, 2;
\echo '-- compaction: the log files of every file group merged into base files, while writers go on'
SELECT file_groups, rows_written FROM hudi.compact('customers');
SELECT partition_path, base_file IS NOT NULL AS has_base_file, cardinality(log_files) AS log_files
  FROM hudi.file_slices('customers') ORDER BY 1 LIMIT 3;
SELECT id, name, country FROM customers ORDER BY id;

\echo '-- declarations are checked against the table'
\set ON_ERROR_STOP off
CREATE FOREIGN TABLE broken (rider integer) SERVER lake OPTIONS (path 'v6_trips_8i1u');
SELECT * FROM broken;
\set ON_ERROR_STOP on
DROP FOREIGN TABLE broken;

\echo '-- the background worker that will run table services and lookup-cache refreshes'
SELECT backend_type, backend_start IS NOT NULL AS running FROM pg_stat_activity WHERE backend_type = 'pg_hudi worker';
