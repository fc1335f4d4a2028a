-- The write buffer of tables with write_mode 'buffered' (README "Buffered writes"). A
-- transaction's rows arrive here as chunks (each Avro records of rows upserted or deleted,
-- naming their schema in hudi.buffer_schemas), and its last chunk, written at commit, has
-- `commits`: the order of those rows is the order of commits, and a chunk without one belongs
-- to a transaction not committed (yet).
-- The background worker flushes committed rows into one Hudi deltacommit per flush, deleting
-- them in the transaction that records its commit intent, so a flush happens exactly once.
-- Readers on this server merge the rows still here. Only pg_hudi itself reads and writes here.
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
