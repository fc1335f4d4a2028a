-- pg_hudi 0.1.0 → 0.2.0. Install the 0.2.0 library first (it serves both versions' SQL), then
-- run ALTER EXTENSION pg_hudi UPDATE in each database that has the extension.

-- Lookup-cache declarations name their table by regclass and are dumped with the database
-- (pg_dump restores them by name; the worker loads the caches again). The view over them is
-- made again around the change of type.
DROP VIEW hudi.lookup_caches;
ALTER TABLE hudi.lookup_cache_keys ALTER COLUMN relation TYPE regclass;
SELECT pg_catalog.pg_extension_config_dump('hudi.lookup_cache_keys', '');
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
COMMENT ON VIEW hudi.lookup_caches IS
  'Each lookup cache index: its state, cached commit, lag behind the table, rows and bytes';

-- Cleaning retains by time too (the table option clean_retain).
COMMENT ON FUNCTION hudi.clean IS
  'Deletes the file slices the table''s retention (clean_retain, clean_retain_commits, consumers) no longer needs';
