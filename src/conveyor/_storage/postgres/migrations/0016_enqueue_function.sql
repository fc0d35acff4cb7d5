-- conveyor_enqueue(): enqueue a job from SQL, in any transaction and from triggers
-- (docs/sql-enqueue.md). It checks what the Python API checks (names, priority,
-- attempts, delay, run time, tags, meta, payload sizes) and raises invalid_parameter_value
-- (22023) with the same wording, writes the same row a JobSpec without task options
-- writes, and sends the same wake-up, so a worker cannot tell the two apart. With
-- unique_key, a live job of the task holding that key is returned instead of a new one.
CREATE OR REPLACE FUNCTION conveyor_enqueue(
    task text,
    args jsonb DEFAULT '[]',
    kwargs jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT 20,
    delay double precision DEFAULT NULL,
    run_at timestamptz DEFAULT NULL,
    tags jsonb DEFAULT '[]',
    meta jsonb DEFAULT '{}',
    unique_key text DEFAULT NULL,
    max_payload_bytes integer DEFAULT 1048576
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    due timestamptz;
    full_key text;
    key_states text;
    size bigint;
    tag jsonb;
    new_id bigint;
BEGIN
    IF task IS NULL OR task !~ '^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$' THEN
        RAISE EXCEPTION 'invalid task name %: use letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter or ''_'', at most 200 characters',
            coalesce(quote_literal(task), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF queue IS NULL OR queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$' THEN
        RAISE EXCEPTION 'invalid queue name %: use letters, digits, ''_'', ''.'' or ''-'', at most 100 characters',
            coalesce(quote_literal(queue), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF priority IS NULL OR priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'priority must be an int between -32768 and 32767, got %', priority
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_attempts IS NULL OR max_attempts NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'max_attempts must be an int from 1 to 10000, got %', max_attempts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF delay IS NOT NULL AND (delay = 'NaN' OR delay NOT BETWEEN 0 AND 3155760000) THEN
        RAISE EXCEPTION 'delay must be a finite number of seconds from 0 to 3155760000 (100 years), got %', delay
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF run_at IS NOT NULL AND (run_at > now() + interval '36525 days'
                               OR run_at < timestamptz '1970-01-01 00:00:00+00') THEN
        RAISE EXCEPTION 'run_at must be within 100 years from now (and after 1970), got %', run_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF args IS NULL OR jsonb_typeof(args) <> 'array' THEN
        RAISE EXCEPTION 'args of task % must be a JSON array, got %', quote_literal(task),
            coalesce(jsonb_typeof(args), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF kwargs IS NULL OR jsonb_typeof(kwargs) <> 'object' THEN
        RAISE EXCEPTION 'kwargs of task % must be a JSON object, got %', quote_literal(task),
            coalesce(jsonb_typeof(kwargs), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    size := octet_length(args::text) + octet_length(kwargs::text);
    IF size > max_payload_bytes THEN
        RAISE EXCEPTION 'arguments of task % are % bytes of JSON, over the cap of % bytes (max_payload_bytes)',
            quote_literal(task), size, max_payload_bytes USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF tags IS NULL OR jsonb_typeof(tags) <> 'array' THEN
        RAISE EXCEPTION 'tags must be a JSON array of strings, got %', coalesce(jsonb_typeof(tags), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_array_length(tags) > 50 THEN
        RAISE EXCEPTION '% tags, over the limit of 50 tags a job (MAX_TAGS)', jsonb_array_length(tags)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR tag IN SELECT value FROM jsonb_array_elements(tags) LOOP
        IF jsonb_typeof(tag) <> 'string' OR (tag #>> '{}') !~ '^[^\x01-\x1f]{1,100}$' THEN
            RAISE EXCEPTION 'invalid tag %: 1 to 100 printable characters', tag
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF meta IS NULL OR jsonb_typeof(meta) <> 'object' THEN
        RAISE EXCEPTION 'meta must be a JSON object, got %', coalesce(jsonb_typeof(meta), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    size := octet_length(tags::text) + octet_length(meta::text);
    IF size > max_payload_bytes THEN
        RAISE EXCEPTION 'tags and meta of task % are % bytes of JSON, over the cap of % bytes (max_payload_bytes)',
            quote_literal(task), size, max_payload_bytes USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF unique_key IS NOT NULL THEN
        full_key := task || ':' || unique_key;
        IF length(full_key) > 500 THEN
            RAISE EXCEPTION 'unique key of task % is over 500 characters', quote_literal(task)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        key_states := ',pending,scheduled,available,running,retryable,';
    END IF;

    due := coalesce(run_at, now() + coalesce(delay, 0) * interval '1 second');
    INSERT INTO conveyor_jobs AS j
        (task, queue, args, kwargs, priority, max_attempts, tags, meta, state,
         scheduled_at, created_at, unique_key, unique_states)
    VALUES (conveyor_enqueue.task, conveyor_enqueue.queue, conveyor_enqueue.args,
            conveyor_enqueue.kwargs, conveyor_enqueue.priority, conveyor_enqueue.max_attempts,
            conveyor_enqueue.tags, conveyor_enqueue.meta,
            CASE WHEN due > now() THEN 'scheduled' ELSE 'available' END, due, now(),
            full_key, key_states)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO new_id;
    IF new_id IS NULL THEN
        -- a live job already holds the key: that job is the answer
        SELECT j.id INTO new_id FROM conveyor_jobs AS j
        WHERE j.unique_key = full_key AND strpos(j.unique_states, ',' || j.state || ',') > 0;
        RETURN new_id;
    END IF;
    PERFORM pg_notify(conveyor_channel(), conveyor_enqueue.queue);
    RETURN new_id;
END
$$;
