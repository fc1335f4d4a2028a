-- Commit intents: how a Hudi write commits with its PostgreSQL transaction (DESIGN.md,
-- "Commit protocol"). At PRE_COMMIT a transaction that wrote Hudi tables inserts one row per
-- table here, with the commit metadata to write; after PostgreSQL has committed, the backend
-- creates the completed instants and the rows are forgotten. A row that outlives its write
-- (the backend was killed, storage was down) says that PostgreSQL committed it: readers on
-- this server see the write at once, and the background worker, hudi.finish_pending_commits()
-- and hudi.rollback_failed_writes complete it. Only pg_hudi itself writes here (as the
-- bootstrap superuser); roles read hudi.pending_commits.
CREATE TABLE hudi.commit_intents (
    location text NOT NULL,          -- the Hudi table's URI
    instant text NOT NULL,           -- the deltacommit's requested time
    relation oid NOT NULL,           -- the foreign table written (an oid: it may be dropped)
    writer oid NOT NULL,             -- the role whose user mapping opens the storage
    transaction bigint NOT NULL,     -- the writing PostgreSQL transaction (full id)
    timeline_dir text NOT NULL,
    metadata bytea NOT NULL,         -- the completed instant's content (HoodieCommitMetadata)
    committed_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0,   -- completions tried after the writer's own
    last_error text,
    PRIMARY KEY (location, instant)
);
REVOKE ALL ON hudi.commit_intents FROM PUBLIC;

-- A role sees the pending writes of the tables it may read (locations and storage errors are
-- not for everyone).
CREATE VIEW hudi.pending_commits AS
SELECT i.relation::regclass AS relation, i.location, i.instant, i.committed_at, i.attempts, i.last_error
  FROM hudi.commit_intents i
 WHERE pg_catalog.has_table_privilege(i.relation, 'SELECT');
COMMENT ON VIEW hudi.pending_commits IS
  'Hudi writes whose PostgreSQL transaction committed and whose completed instant is not yet known to be written';
GRANT SELECT ON hudi.pending_commits TO PUBLIC;
