-- Pass-through routes: the path patterns a client may reach on a channel's own base URL through
-- the proxies' `/passthrough/{channel}/...` routes, with the channel's credential. Empty (the
-- default): the channel allows no pass-through. The admin API checks each pattern; the bound
-- on their number is held here too.
ALTER TABLE channels ADD COLUMN passthrough text[] NOT NULL DEFAULT '{}';
ALTER TABLE channels ADD CONSTRAINT channels_passthrough_count_check
    CHECK (cardinality(passthrough) <= 64);
