-- prof.reports.cpu — CPU-side time: the ranges and API calls with the most
-- self time (all threads; Self % of all self time, as key_averages.txt's
-- Self CPU %), and the time threads spent waiting in CUDA
-- synchronization calls (cuda_runtime / cuda_driver calls whose name holds
-- "Synchronize", else cuda_sync events), on the main thread and overall.

local fmt = require("prof.reports.fmt")

local M = { name = "cpu", title = "CPU time" }

M.CPU_CATS = { "user_annotation", "cpu_op", "cuda_runtime", "cuda_driver" }

M.LIMIT = 15

function M.analyze(trace)
	local out = { rows = {}, sync = {} }
	-- Only the rows shown come to Lua: the first 15 besides the steps'
	-- (a row's dur is its events' whole duration, its total their self
	-- time).
	local steps = trace:aggregate{ cat = M.CPU_CATS, name = "^ProfilerStep#%d+$", limit = 1 }
	local rows = trace:aggregate{ cat = M.CPU_CATS, by = "name", self = true, sort = "total",
		limit = M.LIMIT + steps.groups }
	for _, r in ipairs(rows) do
		if not r.name:match("^ProfilerStep#%d+$") and #out.rows < M.LIMIT then
			out.rows[#out.rows + 1] = { name = r.name, self = r.total, count = r.count,
				total = r.dur, share = r.share }
		end
	end
	-- Self % is of all self time, the steps' own (time in no range)
	-- included: key_averages.txt's "Self CPU %" of the same rows.
	out.self_total = rows.total
	-- waiting for the GPU
	local api = { "cuda_runtime", "cuda_driver" }
	local main = trace.main_thread
	local sync_main = trace:aggregate{ cat = api, name = "Synchronize", thread = main,
		by = "name", sort = "total" }
	if sync_main.count == 0 and (trace.counts.cuda_sync or 0) > 0 then
		sync_main = trace:aggregate{ cat = "cuda_sync", by = "name", sort = "total" }
	end
	out.sync.main = sync_main.total
	out.sync.calls = sync_main.count
	out.sync.top = sync_main[1] and sync_main[1].name or nil
	out.sync.top_count = sync_main[1] and sync_main[1].count or nil
	local all = trace:aggregate{ cat = api, name = "Synchronize" }
	out.sync.all = all.total
	return out
end

function M.text(d)
	local lines = {}
	if #d.rows == 0 then
		lines[1] = "  No CPU ranges in this window."
	else
		local rows = {}
		for i, r in ipairs(d.rows) do
			rows[i] = { name = fmt.cut(r.name, 60), n = r.count, self = fmt.time(r.self),
				total = fmt.time(r.total),
				pct = fmt.pct(r.share) }
		end
		lines[1] = fmt.table(rows, { { "Name", "name" }, { "Calls", "n", right = true },
			{ "Self", "self", right = true }, { "Self %", "pct", right = true },
			{ "Total", "total", right = true } })
	end
	if d.sync.calls > 0 then
		lines[#lines + 1] = string.format("  Main thread waiting in synchronization: %s in %d calls (mostly %s)",
			fmt.time(d.sync.main), d.sync.calls, d.sync.top)
	end
	return table.concat(lines, "\n")
end

return M
