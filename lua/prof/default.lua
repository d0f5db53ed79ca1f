-- The built-in policy, used when PROF_SCRIPT is not set: skip 10 steps, warm
-- up for 1, record 5, once. Everything else keeps its documented default.
prof.schedule{ skip_first = 10, wait = 0, warmup = 1, active = 5, cycles = 1 }
