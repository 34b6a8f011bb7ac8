-- A budget's own notification thresholds, and the events of a trial that has finished.

-- `notify_at`: the percentages of a spend limit's value at which a `budget_threshold` event is
-- recorded (each once per window). NULL: the subscribed webhooks' thresholds (by default 50,
-- 80 and 100); an empty array: no threshold events for this budget.
ALTER TABLE limits
    ADD COLUMN notify_at integer[] CHECK (
        notify_at IS NULL OR (
            cardinality(notify_at) <= 10
            AND 1 <= ALL (notify_at) AND 1000 >= ALL (notify_at)
            AND metric = 'spend'
        )
    );

-- A shadow rule that stopped by itself (expired, spend cap, error rate) or a semantic cache
-- rule in trial whose report reached a decision-ready sample.
ALTER TABLE notification_events DROP CONSTRAINT notification_events_event_check;
ALTER TABLE notification_events ADD CONSTRAINT notification_events_event_check CHECK (
    event IN ('budget_threshold', 'limit_refusing', 'channel_auto_disabled', 'channel_recovered',
              'trial_finished')
);

-- A webhook's signing secret may be named by an environment variable of the control plane
-- (`secret_env`), read when a delivery is signed, instead of stored: configuration as code
-- names it so, and the file never holds the secret. Exactly one of the two.
ALTER TABLE webhooks
    ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN secret_env text CHECK (secret_env ~ '^[A-Za-z0-9_]{1,128}$'),
    ADD CONSTRAINT webhooks_one_secret CHECK ((secret IS NULL) <> (secret_env IS NULL));
