-- pg_hudi 0.2.0 → 0.3.0. Install the 0.3.0 library first (it serves every version's SQL), then
-- run ALTER EXTENSION pg_hudi UPDATE in each database that has the extension.

-- Buffered writes (the table option write_mode 'buffered'): sql/buffer.sql.
CREATE SEQUENCE hudi.write_buffer_position;
CREATE TABLE hudi.write_buffer (
    location text NOT NULL,          -- the Hudi table's URI
    relation oid NOT NULL,           -- the foreign table written (whose owner flushes)
    transaction xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
    position bigint NOT NULL DEFAULT pg_catalog.nextval('hudi.write_buffer_position'),
    change "char" NOT NULL CHECK (change IN ('u', 'd')),   -- upserts or deletes
    row_count integer NOT NULL,
    rows bytea NOT NULL,             -- Avro records naming a schema of hudi.buffer_schemas
    commits boolean NOT NULL DEFAULT false,
    written_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
CREATE INDEX write_buffer_location ON hudi.write_buffer (location, position);
REVOKE ALL ON hudi.write_buffer, hudi.write_buffer_position FROM PUBLIC;
-- The schemas of the chunks' rows, by the id each chunk names (a chunk holds Avro records
-- without their schema: about 100 bytes for a one-row transaction, not 1.4 KB).
CREATE TABLE hudi.buffer_schemas (
    id bigint PRIMARY KEY,
    schema bytea NOT NULL            -- an Arrow IPC stream of no rows
);
REVOKE ALL ON hudi.buffer_schemas FROM PUBLIC;

-- What the buffer holds per table, for the roles that may read it.
CREATE VIEW hudi.buffered_writes AS
SELECT b.relation::regclass AS relation, b.location,
       pg_catalog.count(DISTINCT b.transaction) FILTER (WHERE b.commits) AS transactions,
       pg_catalog.sum(b.row_count) AS rows, pg_catalog.sum(pg_catalog.octet_length(b.rows)) AS bytes,
       pg_catalog.min(b.written_at) FILTER (WHERE b.commits) AS oldest_commit
  FROM hudi.write_buffer b
 WHERE pg_catalog.has_table_privilege(b.relation, 'SELECT')
 GROUP BY b.relation, b.location;
COMMENT ON VIEW hudi.buffered_writes IS
  'Rows of tables with write_mode ''buffered'' that committed and are not yet flushed into Hudi';
GRANT SELECT ON hudi.buffered_writes TO PUBLIC;

-- How many flushes of each table committed: a reader on this server reads it before it lists
-- the table and again with the buffer, and reads again if a flush committed in between (its
-- rows left the buffer, and its commit may not be in the listing).
CREATE TABLE hudi.buffer_flushes (
    location text PRIMARY KEY,
    flushes bigint NOT NULL
);
REVOKE ALL ON hudi.buffer_flushes FROM PUBLIC;

-- Heap tables mirrored into Hudi tables (hudi.mirror), captured from the WAL (the worker
-- decodes the mirror's replication slot `slot`; `captured_lsn` is the end of the last
-- transaction whose changes are in the write buffer, `captured_at` when the worker last caught
-- up) or by the heap table's triggers hudi_mirror and hudi_mirror_truncate. Dumped with the
-- database (the triggers are the heap table's, and dumped with it; a slot is not).
CREATE TABLE hudi.mirror_targets (
    heap regclass PRIMARY KEY,
    target regclass NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    capture text NOT NULL DEFAULT 'trigger' CHECK (capture IN ('wal', 'trigger')),
    slot name UNIQUE,
    captured_lsn pg_lsn,
    captured_at timestamptz,
    identity_was text,
    last_error text
);
REVOKE ALL ON hudi.mirror_targets FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('hudi.mirror_targets', '');

-- The mirrors a role may see: how many rows and how many seconds the Hudi table is behind
-- (for a WAL capture, also how long ago the worker last decoded all the WAL there was).
CREATE VIEW hudi.mirrors AS
SELECT m.heap AS relation, m.target::text AS hudi_table, m.capture, m.created_at,
       COALESCE(b.rows, 0) AS lag_rows,
       GREATEST(COALESCE(EXTRACT(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) b.oldest_commit), 0),
                CASE WHEN m.capture OPERATOR(pg_catalog.=) 'wal'
                     THEN COALESCE(EXTRACT(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) m.captured_at), 0) ELSE 0 END)::float8 AS lag_seconds,
       m.last_error
  FROM hudi.mirror_targets m
  LEFT JOIN (SELECT w.relation, pg_catalog.sum(w.row_count) AS rows,
                    pg_catalog.min(w.written_at) FILTER (WHERE w.commits) AS oldest_commit
               FROM hudi.write_buffer w GROUP BY w.relation) b ON b.relation OPERATOR(pg_catalog.=) m.target::oid
 WHERE pg_catalog.has_table_privilege(m.heap, 'SELECT');
COMMENT ON VIEW hudi.mirrors IS
  'Heap tables mirrored into Hudi tables (hudi.mirror), and how far each Hudi table is behind';
GRANT SELECT ON hudi.mirrors TO PUBLIC;

CREATE FUNCTION hudi.mirror("heap" regclass, "target" regclass, "capture" text DEFAULT NULL) RETURNS bigint
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'mirror_wrapper';
CREATE FUNCTION hudi.unmirror("heap" regclass) RETURNS void
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'unmirror_wrapper';
CREATE FUNCTION hudi_internal.mirror_row() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'mirror_row_wrapper';
CREATE FUNCTION hudi_internal.mirror_truncate() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'mirror_truncate_wrapper';
COMMENT ON FUNCTION hudi.mirror IS
  'Mirrors a heap table into a Hudi foreign table with write_mode ''buffered'': copies its rows, then captures every committed change (capture ''wal'', from the WAL, the default with wal_level logical, or ''trigger''); returns the rows copied';
COMMENT ON FUNCTION hudi.unmirror IS
  'Stops mirroring a heap table (hudi.mirror); what was captured stays in the Hudi table';

-- hudi.consume(..., wait => interval): waiting consumers (src/stream.rs).
CREATE FUNCTION hudi_internal.consumer_position("changes" regclass, "consumer" TEXT, "start_from" TEXT DEFAULT 'earliest') RETURNS TEXT
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'consumer_position_wrapper';
CREATE FUNCTION hudi_internal.wait_for_commit("changes" regclass, "after" TEXT, "until" timestamp with time zone) RETURNS bool
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'wait_for_commit_wrapper';
CREATE FUNCTION hudi.stream_watches() RETURNS TABLE ("location" TEXT, "waiting" INT, "listings" bigint, "checked_at" timestamp with time zone)
STRICT
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'stream_watches_wrapper';
COMMENT ON FUNCTION hudi.stream_watches IS
  'The tables sessions of this server wait on for their next commit (hudi.consume with wait): sessions waiting, timeline listings made, last check';
-- Server-wide, so it names tables of every database: for monitoring roles only.
REVOKE EXECUTE ON FUNCTION hudi.stream_watches() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hudi.stream_watches() TO pg_monitor;
DROP FUNCTION hudi.consume(anyelement, text, text);
CREATE FUNCTION hudi.consume(changes anyelement, consumer text, start_from text DEFAULT 'earliest', wait interval DEFAULT NULL)
RETURNS SETOF anyelement
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel regclass := pg_typeof(changes)::text::regclass;
    query_type text;
    last_position text;
    seen text;
    stop text;
    returned bigint;
    deadline timestamptz;
    saved_start text := current_setting('hudi.start_instant', true);
    saved_end text := current_setting('hudi.end_instant', true);
BEGIN
    SELECT option_value INTO query_type
      FROM pg_options_to_table((SELECT ftoptions FROM pg_foreign_table WHERE ftrelid = rel))
     WHERE option_name = 'query_type';
    IF query_type IS DISTINCT FROM 'incremental' THEN
        RAISE EXCEPTION 'hudi.consume needs a hudi_fdw foreign table with query_type ''incremental'', and % is not one', rel
            USING ERRCODE = 'wrong_object_type';
    END IF;
    IF NOT has_table_privilege(rel, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied for foreign table %', rel
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF wait IS NOT NULL THEN
        IF wait < interval '0' THEN
            RAISE EXCEPTION 'wait must not be negative' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        deadline := clock_timestamp() + wait;
    END IF;
    LOOP
        IF deadline IS NOT NULL THEN
            -- Waited for before the position is claimed (no transaction id, no row lock while
            -- waiting); a new consumer then starts where it was when the wait began.
            seen := hudi_internal.consumer_position(rel, consumer, start_from);
            PERFORM hudi_internal.wait_for_commit(rel, seen, deadline);
            start_from := CASE WHEN seen = '' THEN 'earliest' ELSE seen END;
        END IF;
        last_position := hudi_internal.claim_consumer_position(rel, consumer, start_from);
        SELECT l.completion_time INTO stop FROM hudi.latest_commit(rel) l;
        IF stop IS NOT NULL AND stop > last_position THEN
            PERFORM set_config('hudi.start_instant', last_position, true);
            PERFORM set_config('hudi.end_instant', stop, true);
            RETURN QUERY EXECUTE format('SELECT * FROM %s', rel);
            GET DIAGNOSTICS returned = ROW_COUNT;
            PERFORM set_config('hudi.start_instant', coalesce(saved_start, ''), true);
            PERFORM set_config('hudi.end_instant', coalesce(saved_end, ''), true);
            PERFORM hudi_internal.advance_consumer_position(rel, consumer, stop);
            -- Commits without changes (a compaction) move the position and do not end a wait.
            EXIT WHEN returned > 0;
        END IF;
        EXIT WHEN deadline IS NULL OR clock_timestamp() >= deadline;
    END LOOP;
END
$$;
COMMENT ON FUNCTION hudi.consume(anyelement, text, text, interval) IS
  'Changes of an incremental hudi_fdw table since the consumer''s position (a new one starts from start_from: earliest, latest, an instant or a timestamp); the position moves in the same transaction; with wait, waits up to that long for changes';

CREATE PROCEDURE hudi.wait_for_changes(changes anyelement, consumer text, wait interval, start_from text DEFAULT 'earliest')
LANGUAGE c AS 'MODULE_PATHNAME', 'hudi_wait_for_changes';
COMMENT ON PROCEDURE hudi.wait_for_changes(anyelement, text, interval, text) IS
  'Waits up to wait until an incremental hudi_fdw table has changes after the consumer''s position (a new one: after start_from), holding no snapshot meanwhile; CALL it on its own, then hudi.consume';

-- Heap tables kept equal to Hudi tables (hudi.subscribe(hudi_table, heap_table)): the heap
-- table got a copy of the Hudi table's snapshot when it was subscribed, and the worker applies
-- every later commit to it, in one transaction with `position` (the completion time, on table
-- version 6 the instant, of the last commit applied; '' before the first). The position holds
-- the Hudi table's cleaning back as a consumer's does; changes cleaned away before they were
-- applied, or a truncate of the Hudi table, make the worker copy the table anew (`copies`,
-- `last_copy_reason`). Dumped with the database.
CREATE TABLE hudi.subscription_targets (
    target regclass PRIMARY KEY,
    source regclass NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    position text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    applied_commits bigint NOT NULL DEFAULT 0,
    copies integer NOT NULL DEFAULT 1,
    last_copy_reason text,
    last_error text
);
REVOKE ALL ON hudi.subscription_targets FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('hudi.subscription_targets', '');

-- The subscriptions of heap tables a role may read: how far each is behind its Hudi table
-- (commits not applied yet, and the seconds between the last applied commit's completion and
-- the latest's; NULL where the role may not read the Hudi table), and its last error.
CREATE VIEW hudi.subscriptions AS
SELECT s.target AS relation, s.source::text AS hudi_table, s.created_at,
       CASE WHEN s.last_error IS NULL THEN 'streaming' ELSE 'failing' END AS state,
       s.position, lag.commits AS lag_commits, lag.seconds AS lag_seconds, s.applied_at, s.applied_commits,
       s.copies, s.last_copy_reason, s.last_error
  FROM hudi.subscription_targets s
  LEFT JOIN LATERAL (SELECT l.commits, l.seconds FROM hudi_internal.lookup_cache_lag(s.source::oid, s.position) l
                      WHERE pg_catalog.has_table_privilege(s.source, 'SELECT')) lag ON true
 WHERE pg_catalog.has_table_privilege(s.target, 'SELECT');
GRANT SELECT ON hudi.subscriptions TO PUBLIC;
CREATE FUNCTION hudi.subscribe("hudi_table" regclass, "heap_table" regclass) RETURNS bigint
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'subscribe_wrapper';
CREATE FUNCTION hudi.unsubscribe("heap_table" regclass) RETURNS void
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'unsubscribe_wrapper';
COMMENT ON FUNCTION hudi.subscribe IS
  'Keeps a heap table (primary key: the record key) equal to a Hudi table: copies its snapshot now, then the worker applies every later commit; returns the rows copied';
COMMENT ON FUNCTION hudi.unsubscribe IS
  'Stops applying a Hudi table''s commits to a subscribed heap table (hudi.subscribe), which keeps its rows';
COMMENT ON VIEW hudi.subscriptions IS
  'Heap tables kept equal to Hudi tables (hudi.subscribe): position, lag in commits and seconds, copies, last error';
