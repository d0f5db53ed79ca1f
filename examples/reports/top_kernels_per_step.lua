-- top_kernels_per_step.lua — the kernels that take each step's GPU time.
--
--   prof run -s top_kernels_per_step.lua -- python train.py
--   prof report --script top_kernels_per_step.lua prof_out/<run>/rank0/window0_steps11-15
--
-- Writes, into each window's directory:
--   top_kernels_per_step.txt   per step, its 5 longest kernels (by total time)
--   top_kernels_per_step.json  the same rows, for scripts
-- A window without kernels (a CPU-only run) gets the top annotation ranges
-- instead, so the report says something on any machine.

prof.schedule { skip_first = 10, warmup = 1, active = 5, cycles = 1 }

local TOP = 5

prof.on_trace_ready(function(trace)
	local cat = (trace.counts.kernel or 0) > 0 and "kernel" or "user_annotation"
	local rows = {}
	for _, step in ipairs(trace.steps) do
		local top = trace:aggregate { cat = cat, step = step.step, by = "name",
			sort = "total", limit = TOP + 1 }
		local shown = 0
		for _, r in ipairs(top) do
			-- the step's own ProfilerStep#N span is not a kernel or a range
			if shown < TOP and not r.name:match("^ProfilerStep#") then
				shown = shown + 1
				rows[#rows + 1] = {
					step = step.step, rank = shown, name = r.name, calls = r.count,
					total_us = r.total / 1000, avg_us = r.avg / 1000,
					step_share = step.dur > 0 and r.total / step.dur or 0,
				}
			end
		end
	end
	trace:write_table("top_kernels_per_step.txt", rows,
		{ "step", "rank", "name", "calls", "total_us", "avg_us", "step_share" })
	trace:write_json("top_kernels_per_step.json", { category = cat, rows = rows })
end)
