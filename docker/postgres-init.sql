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
