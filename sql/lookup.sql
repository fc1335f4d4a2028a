-- Lookup caches (DESIGN.md, "Lookup cache"): a table's merged rows in RocksDB on this server,
-- by record key and by secondary keys, loaded and kept current by the background worker.
--
--   SELECT hudi.create_lookup_cache('customers', '{id}');        -- the unique index
--   SELECT hudi.create_lookup_cache('customers', '{country}');   -- a secondary index
--   SELECT * FROM hudi.lookup_caches;
--
-- One cache per table holds every index created for it, under
-- $PGDATA/pg_hudi/lookup/<database oid>/<table oid>/ (generations: a new one is loaded when the
-- indexes change or the table was cleaned past the cached commit).
CREATE TABLE hudi.lookup_cache_keys (
    relation regclass NOT NULL,
    keys text[] NOT NULL,                  -- the indexed columns, as given
    columns text[],                        -- the cached columns (NULL: all of them)
    kind text NOT NULL CHECK (kind IN ('unique', 'secondary')),
    created timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (relation, keys)
);
REVOKE ALL ON hudi.lookup_cache_keys FROM PUBLIC;
-- Declarations are the user's: pg_dump keeps them (by table name), and a restored database's
-- worker loads the caches again. Their state is this server's and is not dumped.
SELECT pg_catalog.pg_extension_config_dump('hudi.lookup_cache_keys', '');

CREATE TABLE hudi.lookup_cache_state (
    relation oid PRIMARY KEY,
    generation bigint,                     -- the generation readers open
    position text,                         -- the completion time of the latest commit it holds
    rows bigint,                           -- rows written by the load and the refreshes since
    state text NOT NULL DEFAULT 'loading' CHECK (state IN ('loading', 'ready', 'failed')),
    error text,
    failures integer NOT NULL DEFAULT 0,   -- failed refreshes in a row
    next_attempt timestamptz,              -- after a failure: when the worker tries again
    loaded_at timestamptz,                 -- when the current generation was loaded
    refreshed_at timestamptz               -- when the worker or a refresh last brought it up to date
);
REVOKE ALL ON hudi.lookup_cache_state FROM PUBLIC;

-- state: 'loading' (no generation yet), 'ready', 'rebuilding' (a new generation loads while
-- readers use the current one: the indexes changed, or the table was cleaned past the cached
-- commit), 'failed' (error says why; the worker tries again). progress: how far a load got.
-- lag_commits, lag_seconds: the table's completed commits the cache does not hold, and the time
-- from the cached commit's completion to the latest one's.
CREATE VIEW hudi.lookup_caches AS
SELECT k.relation::regclass AS relation, k.keys, k.kind, k.columns,
       COALESCE(c.position, s.position) AS cached_instant, lag.commits AS lag_commits, lag.seconds AS lag_seconds,
       s.generation, COALESCE(c.rows, s.rows) AS rows,
       hudi_internal.lookup_cache_bytes(k.relation) AS bytes,
       CASE WHEN p.progress IS NULL THEN COALESCE(s.state, 'loading')
            WHEN s.generation IS NULL THEN 'loading'
            ELSE 'rebuilding' END AS state,
       p.progress, s.error, s.loaded_at, s.refreshed_at
FROM hudi.lookup_cache_keys k
LEFT JOIN hudi.lookup_cache_state s ON s.relation = k.relation
CROSS JOIN LATERAL (SELECT hudi_internal.lookup_cache_progress(k.relation) AS progress) p
CROSS JOIN LATERAL hudi_internal.lookup_cache_position(k.relation) c
CROSS JOIN LATERAL hudi_internal.lookup_cache_lag(k.relation, COALESCE(c.position, s.position)) lag
WHERE hudi_internal.may_see_services(k.relation)
ORDER BY k.relation::regclass::text, k.keys;
GRANT SELECT ON hudi.lookup_caches TO PUBLIC;
