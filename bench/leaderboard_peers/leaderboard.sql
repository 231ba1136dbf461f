-- Leaderboard Maintenance as three PostgreSQL stored procedures (plpgsql functions), for the
-- peers of txstream that pair a client or a stream processor with an external database.
-- Streams are tables of tuples tagged with their batch id, as S-Store keeps them; each
-- procedure consumes its input stream's tuples of the batch and deletes them.

CREATE TABLE contestants (
    contestant_number integer PRIMARY KEY,
    contestant_name text NOT NULL,
    num_votes integer NOT NULL DEFAULT 0
);
CREATE TABLE area_code_state (area_code bigint PRIMARY KEY, state text NOT NULL);
CREATE TABLE votes (
    vote_id bigint PRIMARY KEY,
    phone_number bigint NOT NULL,
    state text NOT NULL,
    contestant_number integer NOT NULL,
    batch_id bigint NOT NULL
);
CREATE INDEX votes_by_contestant ON votes (contestant_number);
CREATE TABLE seen_vote_ids (vote_id bigint PRIMARY KEY);
CREATE TABLE phone_votes (phone_number bigint PRIMARY KEY, num_votes integer NOT NULL);
CREATE TABLE counters (name text PRIMARY KEY, value bigint NOT NULL);
INSERT INTO counters VALUES
    ('accepted', 0), ('duplicate_vote_id', 0), ('invalid_contestant', 0), ('over_vote_limit', 0);
CREATE TABLE accepted_votes (
    batch_id bigint NOT NULL,
    seq integer NOT NULL,
    vote_id bigint NOT NULL,
    contestant_number integer NOT NULL,
    PRIMARY KEY (batch_id, seq)
);
CREATE TABLE removals_due (
    batch_id bigint NOT NULL,
    at_accepted bigint NOT NULL,
    PRIMARY KEY (batch_id, at_accepted)
);
-- ROWS W SLIDE S: position = the accepted-vote counter A; rows at or before the last slide
-- are visible, later ones are staged.
CREATE TABLE trending_window (position bigint PRIMARY KEY, contestant_number integer NOT NULL);
CREATE TABLE trending (contestant_number integer PRIMARY KEY, num_votes integer NOT NULL);
CREATE TABLE removed (
    seq bigserial PRIMARY KEY,
    contestant_number integer NOT NULL,
    num_votes integer NOT NULL,
    at_accepted bigint NOT NULL
);
-- The stream processor's input position, written in the same transaction as the effects.
CREATE TABLE consumed (source text PRIMARY KEY, next_offset bigint NOT NULL);

CREATE FUNCTION validate(
    p_batch bigint, p_vote_ids bigint[], p_phones bigint[], p_contestants integer[],
    p_max_votes integer
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    cast_votes integer;
    vote_state text;
    accepted integer := 0;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_vote_ids, 1), 0) LOOP
        INSERT INTO seen_vote_ids VALUES (p_vote_ids[i]) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            UPDATE counters SET value = value + 1 WHERE name = 'duplicate_vote_id';
            CONTINUE;
        END IF;
        PERFORM 1 FROM contestants WHERE contestant_number = p_contestants[i];
        IF NOT FOUND THEN
            UPDATE counters SET value = value + 1 WHERE name = 'invalid_contestant';
            CONTINUE;
        END IF;
        SELECT num_votes INTO cast_votes FROM phone_votes WHERE phone_number = p_phones[i];
        IF coalesce(cast_votes, 0) >= p_max_votes THEN
            UPDATE counters SET value = value + 1 WHERE name = 'over_vote_limit';
            CONTINUE;
        END IF;
        SELECT state INTO vote_state FROM area_code_state
            WHERE area_code = p_phones[i] / 10000000;
        INSERT INTO votes VALUES
            (p_vote_ids[i], p_phones[i], coalesce(vote_state, 'XX'), p_contestants[i], p_batch);
        INSERT INTO phone_votes VALUES (p_phones[i], 1) ON CONFLICT (phone_number)
            DO UPDATE SET num_votes = phone_votes.num_votes + 1;
        UPDATE contestants SET num_votes = num_votes + 1
            WHERE contestant_number = p_contestants[i];
        accepted := accepted + 1;
        INSERT INTO accepted_votes VALUES (p_batch, accepted, p_vote_ids[i], p_contestants[i]);
    END LOOP;
    RETURN accepted;
END $$;

CREATE FUNCTION maintain_leaderboard(
    p_batch bigint, p_window integer, p_slide integer, p_threshold integer
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    vote record;
    a bigint;
    due integer := 0;
BEGIN
    FOR vote IN SELECT contestant_number FROM accepted_votes
                WHERE batch_id = p_batch ORDER BY seq LOOP
        UPDATE counters SET value = value + 1 WHERE name = 'accepted' RETURNING value INTO a;
        INSERT INTO trending_window VALUES (a, vote.contestant_number);
        IF a % p_slide = 0 THEN
            -- the slide, and its trigger: recount the trending board from the visible rows
            DELETE FROM trending_window WHERE position <= a - p_window;
            DELETE FROM trending;
            INSERT INTO trending
                SELECT contestant_number, count(*) FROM trending_window GROUP BY 1;
        END IF;
        IF a % p_threshold = 0 THEN
            INSERT INTO removals_due VALUES (p_batch, a);
            due := due + 1;
        END IF;
    END LOOP;
    DELETE FROM accepted_votes WHERE batch_id = p_batch;
    RETURN due;
END $$;

CREATE FUNCTION remove_lowest(p_batch bigint) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    due record;
    lowest record;
    a bigint;
    removals integer := 0;
BEGIN
    SELECT value INTO a FROM counters WHERE name = 'accepted';
    FOR due IN SELECT at_accepted FROM removals_due
               WHERE batch_id = p_batch ORDER BY at_accepted LOOP
        IF (SELECT count(*) FROM contestants) <= 1 THEN
            CONTINUE;
        END IF;
        SELECT contestant_number, num_votes INTO lowest FROM contestants
            ORDER BY num_votes ASC, contestant_number DESC LIMIT 1;
        -- return the removed contestant's votes to their voters, who may vote again
        UPDATE phone_votes p SET num_votes = p.num_votes - d.n
            FROM (SELECT phone_number, count(*) AS n FROM votes
                  WHERE contestant_number = lowest.contestant_number GROUP BY 1) d
            WHERE p.phone_number = d.phone_number;
        DELETE FROM phone_votes WHERE num_votes <= 0;
        DELETE FROM votes WHERE contestant_number = lowest.contestant_number;
        DELETE FROM contestants WHERE contestant_number = lowest.contestant_number;
        INSERT INTO removed (contestant_number, num_votes, at_accepted)
            VALUES (lowest.contestant_number, lowest.num_votes, a);
        removals := removals + 1;
    END LOOP;
    DELETE FROM removals_due WHERE batch_id = p_batch;
    RETURN removals;
END $$;
