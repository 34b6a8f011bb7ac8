-- Shadow comparisons add up like usage rows: every sum saturates at bigint's largest value
-- instead of failing the usage batch that carries it (and with it the batch's live usage).

CREATE OR REPLACE FUNCTION shadow_hist_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(
        array_agg(least(coalesce(x, 0)::numeric + coalesce(y, 0), 9223372036854775807)::bigint
                  ORDER BY n),
        '{}')
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, n)
$$;
