-- Foundation: the extension, its wrapper, option validation and access rules.
\set SHOW_CONTEXT never
-- Runs a statement and shows its outcome with the SQLSTATE, so errors are pinned exactly.
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE statement;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

CREATE EXTENSION pg_hudi;
SELECT extname, extversion, extnamespace::regnamespace FROM pg_extension WHERE extname = 'pg_hudi';
SELECT fdwname, fdwhandler::regproc, fdwvalidator::regproc FROM pg_foreign_data_wrapper;
SELECT hudi.version() ~ '^pg_hudi [0-9.]+ \(reads Hudi table versions 6, 8, 9; writes 8\)$' AS version_ok;

-- servers: base_uri is required and must be one of the supported schemes
SELECT pg_temp.try($$CREATE SERVER s0 FOREIGN DATA WRAPPER hudi_fdw$$);
SELECT pg_temp.try($$CREATE SERVER s0 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'ftp://h/x')$$);
SELECT pg_temp.try($$CREATE SERVER s0 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri '/srv/lake')$$);
SELECT pg_temp.try($$CREATE SERVER s0 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3:///x')$$);
SELECT pg_temp.try($$CREATE SERVER s0 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'memory:///x', colour 'red')$$);
SELECT pg_temp.try($$CREATE SERVER s0 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://b/x', aws_secret_access_key 'k')$$);
-- retry settings and the credential chain are server options, checked when set
SELECT pg_temp.try($$CREATE SERVER s0 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://b/x', max_retries 'many')$$);
SELECT pg_temp.try($$CREATE SERVER s0 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://b/x', retry_timeout '5 parsecs')$$);
SELECT pg_temp.try($$CREATE SERVER s0 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://b/x', credential_chain 'maybe')$$);
SELECT pg_temp.try($$CREATE SERVER s1 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://b/x', max_retries '3',
  retry_timeout '30s', request_timeout '500ms', connect_timeout '2s', credential_chain 'true')$$);
DROP SERVER s1;
SELECT pg_temp.try($$CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file:///srv/lake')$$);
SELECT pg_temp.try($$CREATE SERVER cloud FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://bucket/lake')$$);
SELECT pg_temp.try($$ALTER SERVER cloud OPTIONS (DROP base_uri)$$);
SELECT srvname, srvoptions FROM pg_foreign_server ORDER BY srvname;

-- the wrapper takes no options of its own
SELECT pg_temp.try($$ALTER FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file:///x')$$);

-- user mappings hold object-store credentials, and nothing else
SELECT pg_temp.try($$CREATE USER MAPPING FOR CURRENT_USER SERVER cloud OPTIONS (aws_access_key_id 'AKIA', aws_secret_access_key 'secret', aws_region 'eu-west-1')$$);
SELECT pg_temp.try($$CREATE USER MAPPING FOR PUBLIC SERVER cloud OPTIONS (password 'x')$$);

-- foreign tables
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path 't', flavour 'x')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path '../etc')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path '%2e%2e/%2E%2e/etc')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path 'x/..%2f..%2fetc')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path 'x\..\..\etc')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path 't', query_type 'streaming')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path 't', as_of_instant 'yesterday')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path 't', buckets '0')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path 't', merge_mode 'newest')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int) SERVER lake OPTIONS (path 't', primary_key 'a,,b')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE t0 (id int OPTIONS (field 'x')) SERVER lake OPTIONS (path 't')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE customers (id bigint, name text, country text, ts timestamptz)
  SERVER lake OPTIONS (path 'customers', primary_key 'id', ordering_field 'ts', partition_by 'country',
                       buckets '16', merge_mode 'event_time', query_type 'snapshot',
                       as_of_instant '20261130120000000')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE elsewhere (id int) SERVER lake OPTIONS (path 'gs://other/t')$$);
SELECT ftrelid::regclass, ftoptions FROM pg_foreign_table ORDER BY 1::text;

-- reading a table that does not exist is a clear error, not a crash
SELECT pg_temp.try($$SELECT * FROM customers$$);
-- an absolute path outside the server's base_uri is refused when the table is opened
SELECT pg_temp.try($$SELECT * FROM elsewhere$$);

-- table_properties reads hoodie.properties; missing tables and bad URIs are clear errors
SELECT pg_temp.try($$SELECT * FROM hudi.table_properties('file:///nonexistent/table')$$);
SELECT pg_temp.try($$SELECT * FROM hudi.table_properties('memory:///nothing/here')$$);
SELECT pg_temp.try($$SELECT * FROM hudi.table_properties('http://example.com/t')$$);

-- file:// locations: superusers anywhere, other roles only under hudi.allowed_file_roots
CREATE ROLE regress_lake_user;
GRANT USAGE ON FOREIGN DATA WRAPPER hudi_fdw TO regress_lake_user;
GRANT CREATE ON SCHEMA public TO regress_lake_user;
SET hudi.allowed_file_roots = '/srv/shared, file:///data/lake';
SET ROLE regress_lake_user;
SELECT pg_temp.try($$SET hudi.allowed_file_roots = '/'$$);
SELECT pg_temp.try($$CREATE SERVER mine FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file:///etc')$$);
SELECT pg_temp.try($$CREATE SERVER mine FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file:///srv/shared2')$$);
SELECT pg_temp.try($$CREATE SERVER mine FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file:///data/lake/../../etc')$$);
SELECT pg_temp.try($$CREATE SERVER mine FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file:///data/lake/team')$$);
SELECT pg_temp.try($$CREATE SERVER mine_s3 FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://bucket/x')$$);
SELECT pg_temp.try($$SELECT * FROM hudi.table_properties('file:///etc/t')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE sneaky (id int) SERVER mine_s3 OPTIONS (path 'file:///etc/t')$$);
RESET ROLE;
SELECT srvname, srvowner::regrole FROM pg_foreign_server WHERE srvname LIKE 'mine%' ORDER BY 1;

-- the launcher of the background workers runs (the library is in shared_preload_libraries); it starts
-- asynchronously, so wait for it
DO $$ BEGIN
  FOR i IN 1..300 LOOP
    EXIT WHEN EXISTS (SELECT FROM pg_stat_activity WHERE backend_type = 'pg_hudi launcher');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*) AS launchers FROM pg_stat_activity WHERE backend_type = 'pg_hudi launcher';

-- the extension drops cleanly with everything that depends on it
DROP SERVER mine, mine_s3 CASCADE;
DROP OWNED BY regress_lake_user;
DROP ROLE regress_lake_user;
DROP EXTENSION pg_hudi CASCADE;
SELECT count(*) AS wrappers_left FROM pg_foreign_data_wrapper;
