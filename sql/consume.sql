-- hudi.consume(table, consumer [, start_from]): exactly-once pulls of changes for pipelines.
--
--   SELECT * FROM hudi.consume(NULL::customer_changes, 'etl');
--   SELECT * FROM hudi.consume(NULL::customer_changes, 'alerts', start_from => 'latest');
--   SELECT * FROM hudi.consume(NULL::customer_changes, 'etl', wait => '10 s');
--
-- `customer_changes` is a hudi_fdw foreign table with query_type 'incremental' (declare
-- _hoodie_operation to see 'I', 'U' and 'D'). Each call returns the rows changed since the
-- consumer's position and moves the position to the latest commit, in the caller's
-- transaction: ROLLBACK replays the same changes, COMMIT acknowledges them. Concurrent calls
-- of one consumer on one table queue on the position row. The caller needs SELECT on the
-- table; the function runs with the caller's privileges. A new consumer starts from
-- `start_from`: 'earliest' (the default: the whole history the timeline still holds),
-- 'latest' (changes committed after its first call), or an instant or timestamp (changes
-- completed after it). The range read is the consumer's, whatever hudi.start_instant and
-- hudi.end_instant say. With `wait`, a call that finds no changes waits up to that long for
-- them: commits made on this server end the wait at once, those of other servers and engines
-- within hudi.stream_check_interval (one listing of the table's timeline per interval for all
-- waiting sessions of the server, see hudi.stream_watches()). A wait is cancellable
-- (statement_timeout, pg_cancel_backend) and takes no transaction id and no row lock (only
-- a wait after commits without changes, such as a compaction, holds the position's row
-- lock); the calling statement's snapshot stays, as during pg_sleep.

-- Positions are per role: a role sees only its own (row-level security below), and changes
-- them only through hudi.consume (hudi_internal.claim_consumer_position and
-- hudi_internal.advance_consumer_position)
-- and hudi.reset_consumer, which check that the role may read the table and that a position is
-- the start ('') or a commit of the table. Every role with SELECT on a table can consume it, and
-- no role can read, move or forge another's position, nor one that holds cleaning back.
CREATE TABLE hudi.consumer_positions (
    relation regclass NOT NULL,
    role regrole NOT NULL,
    consumer text NOT NULL,
    position text NOT NULL,   -- completion time (table version 8+) or instant (version 6)
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (relation, role, consumer)
);
SELECT pg_catalog.pg_extension_config_dump('hudi.consumer_positions', '');
ALTER TABLE hudi.consumer_positions ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_positions ON hudi.consumer_positions FOR SELECT
    USING (role = current_user::regrole);
REVOKE ALL ON hudi.consumer_positions FROM PUBLIC;
GRANT SELECT ON hudi.consumer_positions TO PUBLIC;

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
