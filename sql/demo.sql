-- The pg_hudi demo that `make run` plays on a fresh cluster. It grows with the features.
-- psql variable :warehouse is the embedded file:// warehouse under the build folder.
\set ON_ERROR_STOP on
\echo '-- the extension and what it speaks'
DROP EXTENSION IF EXISTS pg_hudi CASCADE;
CREATE EXTENSION pg_hudi;
SELECT hudi.version();

\echo '-- a server: the warehouse root (file:// here; s3://, gs://, az:// work the same way)'
CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri :'warehouse');
SELECT srvname, srvoptions FROM pg_foreign_server;

\echo '-- a foreign table declaring a bucketed merge-on-read table'
CREATE FOREIGN TABLE customers (id bigint, name text, country text, ts timestamptz)
  SERVER lake OPTIONS (path 'customers', primary_key 'id', ordering_field 'ts',
                       partition_by 'country', buckets '16');
\d customers

\echo '-- options are checked when they are given'
\set ON_ERROR_STOP off
CREATE FOREIGN TABLE broken (id int) SERVER lake OPTIONS (path 'b', query_type 'streaming');
\set ON_ERROR_STOP on

\echo '-- the background worker that will run table services and lookup-cache refreshes'
SELECT pid, backend_type, backend_start FROM pg_stat_activity WHERE backend_type = 'pg_hudi worker';
