-- The pg_hudi demo that `make run` plays on a fresh cluster (and `make test` checks). psql
-- variable :warehouse is the embedded file:// warehouse under the build folder, holding two
-- tables that Apache Spark wrote (a merge-on-read trips table and a transactions table);
-- PGHOST, PGPORT, PGUSER and PGDATABASE name the cluster, for the second session's psql.
\set ON_ERROR_STOP on
SET timezone = 'UTC';
\echo '-- the extension: its library is preloaded (shared_preload_libraries), for the background worker'
DROP EXTENSION IF EXISTS pg_hudi CASCADE;
DROP SCHEMA IF EXISTS lake CASCADE;
DROP TABLE IF EXISTS orders;
SHOW shared_preload_libraries;
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
                       partition_by 'country', buckets '4', compaction_delta_commits '2');
-- Writes the table's hoodie.properties, and sets services 'auto': the worker maintains it.
SELECT hudi.create_table('customers');
INSERT INTO customers SELECT g, 'customer ' || g, (ARRAY['nl', 'be', 'fr'])[1 + g % 3], now()
  FROM generate_series(1, 9) g;
UPDATE customers SET name = 'renamed', ts = now() WHERE id = 1;
DELETE FROM customers WHERE id = 2;
SELECT id, name, country FROM customers ORDER BY id;

\echo '-- two sessions write the table at once: no lock waits, no aborts (non-blocking concurrency control)'
BEGIN;
INSERT INTO customers VALUES (100, 'written by session 1', 'nl', now());
\! psql -X -q -c "INSERT INTO customers VALUES (101, 'written by session 2', 'be', now())"
SELECT id, name FROM customers WHERE id >= 100 ORDER BY id;   -- session 1 sees its own row and the committed one
COMMIT;
SELECT id, name, country FROM customers WHERE id >= 100 ORDER BY id;
SELECT action, state, count(*) FROM hudi.timeline('customers') GROUP BY 1, 2 ORDER BY 1, 2;

\echo '-- the background worker compacts the log files it finds due (compaction_delta_commits 2)'
DO $$
BEGIN
  FOR attempt IN 1..600 LOOP
    EXIT WHEN EXISTS (SELECT FROM hudi.service_history
                      WHERE relation = 'customers'::regclass AND service = 'compaction' AND outcome = 'succeeded');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT service, outcome, detail FROM hudi.service_history
  WHERE relation = 'customers'::regclass AND service = 'compaction' ORDER BY started LIMIT 1;
SELECT service, state, last_success IS NOT NULL AS has_run FROM hudi.table_services
  WHERE relation = 'customers'::regclass ORDER BY service;
SELECT partition_path, base_file IS NOT NULL AS has_base_file
  FROM hudi.file_slices('customers') WHERE base_file IS NOT NULL ORDER BY 1 LIMIT 3;

\echo '-- a lookup cache: joins probe a RocksDB index of the table, which the worker keeps fresh'
SELECT hudi.create_lookup_cache('customers', '{country, id}');
SELECT hudi.refresh_lookup_cache('customers') IS NOT NULL AS loaded;
CREATE TABLE orders (id bigint, customer_id bigint, country text, amount numeric(10, 2));
INSERT INTO orders VALUES (1, 3, 'nl', 10.50), (2, 100, 'nl', 99.00), (3, 101, 'be', 5.25), (4, 42, 'fr', 1.00);
ANALYZE orders;
EXPLAIN (COSTS OFF)
SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.country = o.country AND c.id = o.customer_id;
SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.country = o.country AND c.id = o.customer_id ORDER BY o.id;
SELECT keys, kind, state, rows FROM hudi.lookup_caches;

\echo '-- a consumer of the new table: its changes, exactly once'
CREATE FOREIGN TABLE customer_changes (id bigint, name text, _hoodie_operation text)
  SERVER lake OPTIONS (path 'customers', query_type 'incremental');
SELECT count(*) AS changed_rows FROM hudi.consume(NULL::customer_changes, 'demo');
INSERT INTO customers VALUES (102, 'new after the first pull', 'fr', now());
SELECT id, name, _hoodie_operation FROM hudi.consume(NULL::customer_changes, 'demo');

\echo '-- declarations are checked against the table'
\set ON_ERROR_STOP off
CREATE FOREIGN TABLE broken (rider integer) SERVER lake OPTIONS (path 'v6_trips_8i1u');
SELECT * FROM broken;
\set ON_ERROR_STOP on
DROP FOREIGN TABLE broken;

\echo '-- TRUNCATE: one replacecommit, whatever the table holds'
TRUNCATE customers;
SELECT count(*) FROM customers;
