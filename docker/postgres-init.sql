-- The demo dimension table: the same profiles as the demo HTTP service.
CREATE TABLE IF NOT EXISTS public.users (
    user_id bigint PRIMARY KEY,
    name    text NOT NULL,
    tier    text NOT NULL,
    country text NOT NULL
);
INSERT INTO public.users
SELECT g,
       'user-' || g,
       (ARRAY['free', 'plus', 'pro', 'enterprise'])[g % 4 + 1],
       (ARRAY['FR', 'DE', 'US', 'JP', 'BR', 'IN', 'NG', 'CA'])[(g * 7) % 8 + 1]
FROM generate_series(0, 9999) AS g
ON CONFLICT DO NOTHING;

-- A versioned dimension: each user's tier over time (three versions each, a validity range
-- [valid_from, valid_to)), for the point-in-time JOIN of the README.
CREATE TABLE IF NOT EXISTS public.user_tiers (
    user_id    bigint NOT NULL,
    tier       text NOT NULL,
    valid_from timestamp NOT NULL,
    valid_to   timestamp NOT NULL,
    PRIMARY KEY (user_id, valid_from)
);
INSERT INTO public.user_tiers
SELECT u, (ARRAY['free', 'plus', 'pro'])[v + 1],
       timestamp '2026-01-01' + v * interval '30 days',
       timestamp '2026-01-01' + (v + 1) * interval '30 days'
FROM generate_series(0, 9999) AS u, generate_series(0, 2) AS v
ON CONFLICT DO NOTHING;
