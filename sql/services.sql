-- What the background worker did for the tables of this database (services 'auto'), and
-- what it is doing now.
--
--   SELECT * FROM hudi.table_services;      -- one row per table and service
--   SELECT * FROM hudi.service_history;     -- recent runs that did something or failed
--
-- The worker records the outcome of each service it runs: a run that did something or failed
-- goes into the history (the newest 1000 runs of each table are kept), and the state of each
-- table and service into hudi.service_state. A service running now — in the worker, or in a
-- SQL call of hudi.compact, hudi.run_compaction, hudi.clean or hudi.archive — shows as
-- 'running' with its phase and progress and the pid of the backend running it, taken from
-- that backend's row of pg_stat_activity. Each role sees the tables it owns or may read.
CREATE TABLE hudi.service_state (
    relation oid NOT NULL,
    service text NOT NULL,
    failures integer NOT NULL DEFAULT 0,     -- failed runs in a row
    last_run timestamptz,                    -- the last run that did something or failed
    last_checked timestamptz,                -- the last time the worker ran it (also when nothing was due)
    last_success timestamptz,                -- the last run that did something
    last_detail text,                        -- what it did
    last_error text,
    next_attempt timestamptz,                -- after a failure: when the worker tries again
    note text,                               -- what holds it back (a consumer; archival's bound)
    PRIMARY KEY (relation, service)
);
REVOKE ALL ON hudi.service_state FROM PUBLIC;

CREATE TABLE hudi.service_runs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    relation oid NOT NULL,
    service text NOT NULL,
    started timestamptz NOT NULL,
    finished timestamptz NOT NULL,
    outcome text NOT NULL CHECK (outcome IN ('succeeded', 'failed')),
    detail text NOT NULL
);
CREATE INDEX ON hudi.service_runs (relation, id);
REVOKE ALL ON hudi.service_runs FROM PUBLIC;

-- Tables a role may see the services of.
CREATE FUNCTION hudi_internal.may_see_services(relation oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = relation
                   AND (pg_has_role(c.relowner, 'USAGE') OR has_table_privilege(c.oid, 'SELECT')))
$$;

CREATE VIEW hudi.table_services AS
WITH served AS (
    SELECT c.oid AS relation, s.n, s.service
    FROM pg_catalog.pg_foreign_table t
    JOIN pg_catalog.pg_class c ON c.oid = t.ftrelid
    JOIN pg_catalog.pg_foreign_server fs ON fs.oid = t.ftserver
    JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = fs.srvfdw
    CROSS JOIN (VALUES (1, 'rollback'), (2, 'compaction'), (3, 'clean'), (4, 'archive')) AS s (n, service)
    WHERE w.fdwname = 'hudi_fdw' AND 'services=auto' = ANY (t.ftoptions)
), running AS (
    SELECT a.pid, a.query, a.query_start FROM pg_catalog.pg_stat_activity a
    WHERE a.datname = pg_catalog.current_database() AND a.state = 'active' AND a.query LIKE 'pg_hudi: %'
)
SELECT served.relation::regclass AS relation, served.service,
       CASE WHEN r.pid IS NOT NULL THEN 'running'
            WHEN st.failures > 0 THEN 'failed'
            ELSE 'idle' END AS state,
       CASE WHEN r.pid IS NOT NULL THEN pg_catalog.split_part(r.query, ' — ', 2) END AS progress,
       r.query_start AS started,
       st.last_success, st.last_detail, st.last_error, st.failures, st.note,
       CASE WHEN st.failures > 0 THEN st.next_attempt END AS next_attempt,
       -- When the worker runs it next: after a failure the back-off, else a nap after it last
       -- ran it (a commit to the table brings that forward).
       CASE WHEN st.failures > 0 THEN st.next_attempt
            ELSE st.last_checked + pg_catalog.current_setting('hudi.worker_naptime')::pg_catalog.interval END AS next_due,
       r.pid
FROM served
LEFT JOIN hudi.service_state st ON st.relation = served.relation AND st.service = served.service
LEFT JOIN running r ON pg_catalog.starts_with(r.query, pg_catalog.format('pg_hudi: %s of %s ', served.service, served.relation))
WHERE hudi_internal.may_see_services(served.relation)
ORDER BY served.relation::regclass::text, served.n;
GRANT SELECT ON hudi.table_services TO PUBLIC;

CREATE VIEW hudi.service_history AS
SELECT r.relation::regclass AS relation, r.service, r.started, r.finished, r.finished - r.started AS duration,
       r.outcome, r.detail
FROM hudi.service_runs r
WHERE hudi_internal.may_see_services(r.relation);
GRANT SELECT ON hudi.service_history TO PUBLIC;
