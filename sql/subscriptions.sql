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
