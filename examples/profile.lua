-- A starting policy: skip the first steps (compilation, caches, warm-up of
-- the data pipeline), then capture two windows of three steps.
prof.schedule { skip_first = 5, wait = 2, warmup = 1, active = 3, cycles = 2 }
prof.export { chrome = { gzip = true } }

-- Capture three extra steps when a step is twice as slow as usual.
prof.on_step(function(s)
  if not s.recording and s.step > 10 and s.duration_ms > 2 * s.median_ms then
    prof.capture_now { steps = 3, reason = ("step %d took %.1f ms"):format(s.step, s.duration_ms) }
  end
end)
