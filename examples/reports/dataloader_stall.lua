-- dataloader_stall.lua — how long each step waits for its input, and what
-- the GPU does meanwhile.
--
--   prof run -s dataloader_stall.lua -- python train.py
--   prof report --script dataloader_stall.lua prof_out/<run>/rank0/window0_steps11-15
--
-- The "data" phase of a step is the time in the DataLoader (profhost's
-- Python bridge, or your own profhost.range("data"), marks it). Writes:
--   dataloader_stall.txt   per step: step time, data time, its share, and
--                          a STALL flag when data takes over THRESHOLD
--   dataloader_stall.json  the rows, the averages and the verdict

prof.schedule { skip_first = 10, warmup = 1, active = 5, cycles = 1 }

local THRESHOLD = 0.25 -- a step whose data phase is over 25 % is stalled

prof.on_trace_ready(function(trace)
	local rows, data_sum, step_sum, stalled = {}, 0, 0, 0
	for _, s in ipairs(trace.steps) do
		if not s.partial then
			local share = s.dur > 0 and s.phases.data / s.dur or 0
			rows[#rows + 1] = {
				step = s.step, step_ms = s.dur / 1e6, data_ms = s.phases.data / 1e6,
				data_share = share, stall = share > THRESHOLD and "STALL" or "",
			}
			data_sum = data_sum + s.phases.data
			step_sum = step_sum + s.dur
			if share > THRESHOLD then
				stalled = stalled + 1
			end
		end
	end
	-- the GPU's idle time over the same steps, if there is a GPU
	local gpu = trace:busy {}
	local summary = {
		steps = #rows, stalled = stalled,
		data_share = step_sum > 0 and data_sum / step_sum or 0,
		gpu_idle_share = gpu.events > 0 and 1 - gpu.utilization or nil,
		verdict = stalled * 2 > #rows and "input-bound" or "not input-bound",
	}
	trace:write_table("dataloader_stall.txt", rows,
		{ "step", "step_ms", "data_ms", "data_share", "stall" })
	trace:write_json("dataloader_stall.json", { summary = summary, steps = rows })
	print(string.format("window %d: %d of %d steps stalled on data (%.1f %% of step time)",
		trace.window, stalled, #rows, summary.data_share * 100))
end)
