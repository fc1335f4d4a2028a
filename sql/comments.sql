-- What each function and view of the hudi schema is for, as \df+ and \dv+ show it. (Created
-- last: every object it names exists by then.) The helpers that views and hudi.consume call
-- live in hudi_internal.
COMMENT ON SCHEMA hudi IS 'pg_hudi: Apache Hudi tables as foreign tables, their table services and lookup caches';
COMMENT ON FUNCTION hudi.version IS
  'The pg_hudi version and the Hudi table versions it reads and writes';
COMMENT ON FUNCTION hudi.create_table IS
  'Creates the merge-on-read Hudi table a hudi_fdw foreign table declares (primary_key, ordering_field, partition_by, buckets, merge_mode); returns its location';
COMMENT ON FUNCTION hudi.table_properties IS
  'The hoodie.properties of the Hudi table at a location';
COMMENT ON FUNCTION hudi.timeline IS
  'The instants of a Hudi table''s timeline: action, state, instant and completion times';
COMMENT ON FUNCTION hudi.file_slices IS
  'The latest file slices of a Hudi table: partition, file group, base file and log files';
COMMENT ON FUNCTION hudi.latest_commit IS
  'The latest completed write of a Hudi table: its instant and its completion time (the instant again on table version 6), or no row';
COMMENT ON FUNCTION hudi.rollback_failed_writes IS
  'Rolls back the table''s writes whose writer died (heartbeat expired), completing those whose PostgreSQL transaction committed';
COMMENT ON FUNCTION hudi.finish_pending_commits IS
  'Completes the writes of the caller''s tables whose transaction committed but whose completed instant is missing (see hudi.pending_commits)';
COMMENT ON FUNCTION hudi.schedule_compaction IS
  'Schedules a compaction of the table''s file slices with log files; returns its instant, or NULL when there is nothing to compact';
COMMENT ON FUNCTION hudi.run_compaction IS
  'Runs the scheduled compaction with this instant; returns the base files written';
COMMENT ON FUNCTION hudi.compact IS
  'Schedules and runs a compaction of the table (and any compaction still pending)';
COMMENT ON FUNCTION hudi.clean IS
  'Deletes the file slices the table''s retention (clean_retain, clean_retain_commits, consumers) no longer needs';
COMMENT ON FUNCTION hudi.archive IS
  'Moves the table''s old completed instants from the active timeline to its history';
COMMENT ON FUNCTION hudi.reset_consumer IS
  'Sets the caller''s position of a hudi.consume consumer (''''; a completion time), or removes the consumer (NULL)';
COMMENT ON FUNCTION hudi.subscribe IS
  'Keeps a heap table (primary key: the record key) equal to a Hudi table: copies its snapshot now, then the worker applies every later commit; returns the rows copied';
COMMENT ON FUNCTION hudi.unsubscribe IS
  'Stops applying a Hudi table''s commits to a subscribed heap table (hudi.subscribe), which keeps its rows';
COMMENT ON VIEW hudi.subscriptions IS
  'Heap tables kept equal to Hudi tables (hudi.subscribe): position, lag in commits and seconds, copies, last error';
COMMENT ON FUNCTION hudi.stream_watches IS
  'The tables sessions of this server wait on for their next commit (hudi.consume with wait): sessions waiting, timeline listings made, last check';
-- Server-wide, so it names tables of every database: for monitoring roles only.
REVOKE EXECUTE ON FUNCTION hudi.stream_watches() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hudi.stream_watches() TO pg_monitor;
COMMENT ON FUNCTION hudi.create_lookup_cache IS
  'Creates a lookup cache index on the table''s columns (the record key: unique; others: secondary), loaded and kept fresh by the background worker';
COMMENT ON FUNCTION hudi.drop_lookup_cache IS
  'Drops one lookup cache index of the table (NULL keys: all of them)';
COMMENT ON FUNCTION hudi.refresh_lookup_cache IS
  'Brings the table''s lookup cache up to its latest commit now; returns the cached commit';
COMMENT ON FUNCTION hudi.hudi_fdw_handler IS 'The handler of the hudi_fdw foreign-data wrapper';
COMMENT ON FUNCTION hudi.hudi_fdw_validator IS 'Checks the options of hudi_fdw servers, user mappings and foreign tables';
COMMENT ON VIEW hudi.table_services IS
  'Each table with services ''auto'' and each of its services (rollback, compaction, clean, archive): state, progress, last outcome, next run';
COMMENT ON VIEW hudi.service_history IS
  'Recent runs of table services that did something or failed (the newest 1000 of each table)';
COMMENT ON VIEW hudi.lookup_caches IS
  'Each lookup cache index: its state, cached commit, lag behind the table, rows and bytes';
COMMENT ON TABLE hudi.consumer_positions IS
  'The caller''s hudi.consume consumers and their positions (completion times; '''' is the start)';
GRANT USAGE ON SCHEMA hudi_internal TO PUBLIC;
COMMENT ON SCHEMA hudi_internal IS 'pg_hudi''s helpers for its views and hudi.consume; not an interface';
COMMENT ON FUNCTION hudi.mirror IS
  'Mirrors a heap table into a Hudi foreign table with write_mode ''buffered'': copies its rows, then captures every committed change (capture ''wal'', from the WAL, the default with wal_level logical, or ''trigger''); returns the rows copied';
COMMENT ON FUNCTION hudi.unmirror IS
  'Stops mirroring a heap table (hudi.mirror); what was captured stays in the Hudi table';
