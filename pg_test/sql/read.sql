-- Reading fixture tables: import, snapshots, time travel, incremental ranges, pushdown,
-- and the errors of bad declarations, missing tables and corrupt files.
\set SHOW_CONTEXT never
SET timezone = 'UTC';
CREATE EXTENSION pg_hudi;
-- Errors and plans mention the lake's location, which differs per run.
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE statement;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || replace(SQLERRM, current_setting('regress.lake'), '<lake>');
END $$;
CREATE FUNCTION pg_temp.explain(query text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (VERBOSE, COSTS OFF) ' || query LOOP
    RETURN NEXT replace(line, current_setting('regress.lake'), '<lake>');
  END LOOP;
END $$;
\set ECHO none
SELECT format('CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri %L)',
              'file://' || current_setting('regress.lake')) \gexec
\set ECHO all

-- import: meta columns first, types from the table's schema
CREATE SCHEMA lake;
IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO lake;
\d lake.v9_txns_simple_nometa
SELECT txn_id, amount, txn_date, region, is_international FROM lake.v9_txns_simple_nometa ORDER BY txn_id;

-- the timeline and the slices a snapshot reads
SELECT action, state, count(*) FROM hudi.timeline('lake.v9_txns_simple_nometa') GROUP BY 1, 2 ORDER BY 1, 2;
SELECT partition_path, count(*) AS slices, sum(cardinality(log_files)) AS logs
  FROM hudi.file_slices('lake.v9_txns_simple_nometa') GROUP BY 1 ORDER BY 1;

-- time travel: the first commit, then the latest again
SELECT instant AS first_commit FROM hudi.timeline('lake.v6_trips_8i1u') ORDER BY 1 LIMIT 1 \gset
SET hudi.as_of_instant = :'first_commit';
SELECT rider, fare FROM lake.v6_trips_8i1u WHERE rider = 'rider-D';
RESET hudi.as_of_instant;
SELECT rider, fare FROM lake.v6_trips_8i1u WHERE rider = 'rider-D';

-- incremental: what the second commit changed, with the operation
CREATE FOREIGN TABLE trip_changes (_hoodie_commit_time text, rider text, fare double precision, _hoodie_operation text)
  SERVER lake OPTIONS (path 'v6_trips_8i1u', query_type 'incremental', start_instant :'first_commit');
SELECT rider, fare, _hoodie_operation FROM trip_changes;

-- pushdown shows in EXPLAIN VERBOSE; results are rechecked by PostgreSQL
SELECT * FROM pg_temp.explain($$SELECT txn_id FROM lake.v9_txns_simple_nometa WHERE region IN ('eu', 'us') AND amount > 100$$);
SELECT count(*) FROM lake.v9_txns_simple_nometa WHERE region IN ('eu', 'us') AND amount > 100;

-- declarations that do not fit the table are errors at plan time, naming both sides
CREATE FOREIGN TABLE bad_type (rider integer) SERVER lake OPTIONS (path 'v6_trips_8i1u');
SELECT pg_temp.try($$SELECT * FROM bad_type$$);
CREATE FOREIGN TABLE bad_column (rider text, tip numeric) SERVER lake OPTIONS (path 'v6_trips_8i1u');
SELECT pg_temp.try($$SELECT rider FROM bad_column$$);
CREATE FOREIGN TABLE bad_kind (rider point) SERVER lake OPTIONS (path 'v6_trips_8i1u');
SELECT pg_temp.try($$SELECT * FROM bad_kind$$);
CREATE FOREIGN TABLE missing (id int) SERVER lake OPTIONS (path 'nowhere');
SELECT pg_temp.try($$SELECT * FROM missing$$);
CREATE TABLE plain (id int);
SELECT pg_temp.try($$SELECT * FROM hudi.timeline('plain')$$);
SELECT pg_temp.try($$SET hudi.as_of_instant = 'yesterday'; SELECT * FROM lake.v6_trips_8i1u$$);
RESET hudi.as_of_instant;

-- a log file of garbage in a slice is skipped block by block: same rows as before
-- (files placed by hand, outside any instant, are seen when the table state is not kept)
SET hudi.cache_table_state = off;
SELECT count(*), round(sum(fare)::numeric, 2) AS fares FROM lake.v6_trips_8i1u;
\set ECHO none
SELECT format($q$COPY (SELECT 'this is not a hudi log block') TO %L$q$,
              current_setting('regress.lake') || '/v6_trips_8i1u/' || partition_path || '/.' || file_id || '_' || base_instant || '.log.9_0-0-0')
  FROM hudi.file_slices('lake.v6_trips_8i1u') WHERE partition_path = 'city=chennai' \gexec
\set ECHO all
SELECT sum(cardinality(log_files)) AS logs FROM hudi.file_slices('lake.v6_trips_8i1u') WHERE partition_path = 'city=chennai';
SELECT count(*), round(sum(fare)::numeric, 2) AS fares FROM lake.v6_trips_8i1u;

-- a corrupt base file of a committed instant is an error that names the file
\set ECHO none
SELECT format($q$COPY (SELECT 'not parquet') TO %L$q$,
              current_setting('regress.lake') || '/v6_trips_8i1u/' || partition_path || '/' || file_id || '_0-0-0_' ||
              (SELECT max(instant) FROM hudi.timeline('lake.v6_trips_8i1u')) || '.parquet')
  FROM hudi.file_slices('lake.v6_trips_8i1u') WHERE partition_path = 'city=chennai' \gexec
\set ECHO all
SELECT pg_temp.try($$SELECT count(*) FROM lake.v6_trips_8i1u$$);
