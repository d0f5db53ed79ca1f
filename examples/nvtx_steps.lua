-- nvtx_steps.lua — profile examples/nvtx_app.c, with its NVTX range
-- "train_step" (domain "nvtx_app") as the step: no prof_step() call needed.
--
--   prof run -s examples/nvtx_steps.lua -- build/examples/nvtx_app --steps 20
--
-- Skips 5 steps, warms up for 1, records steps 6-8 as one window.
prof.steps    { nvtx = "train_step", domain = "nvtx_app" }
prof.schedule { skip_first = 5, warmup = 1, active = 3, cycles = 1 }
prof.output   { dir = "prof_out" }
