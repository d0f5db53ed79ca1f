-- prof.reports.nvtx — the annotation ranges (NVTX ranges, profhost.range,
-- prof_range_push), like `nsys stats --report nvtx_sum`: Time (%), Total
-- Time (ns), Instances, Avg (ns), Med (ns), Min (ns), Max (ns), StdDev (ns),
-- Style, Range. ProfilerStep#N spans are not NVTX ranges and are left out;
-- a range's time is its duration (nested ranges count in both).

local fmt = require("prof.reports.fmt")

local M = { name = "nvtx", title = "Annotation ranges (nvtx_sum)" }

M.LIMIT = 50

M.STEP = "^ProfilerStep#%d+$"

function M.analyze(trace)
	-- Only the rows shown come to Lua (a window may hold millions of
	-- names): the steps' groups are counted apart, and the top rows
	-- fetched are enough to hold LIMIT ranges besides them.
	local steps = trace:aggregate{ cat = "user_annotation", name = M.STEP, limit = 1 }
	local rows = trace:aggregate{ cat = "user_annotation", by = "name", sort = "total",
		limit = M.LIMIT + steps.groups }
	local out = { rows = {}, total = rows.total - steps.total,
		ranges = rows.groups - steps.groups }
	for _, r in ipairs(rows) do
		if not r.name:match(M.STEP) and #out.rows < M.LIMIT then
			out.rows[#out.rows + 1] = fmt.stats_row(r, 0)
		end
	end
	-- Time (%) is of the ranges' time, steps left out
	for _, r in ipairs(out.rows) do
		r.share = out.total > 0 and r.total / out.total or 0
	end
	return out
end

function M.text(d, limit)
	if d.ranges == 0 then
		return "  No annotation ranges in this window."
	end
	return fmt.stats_table(d.rows, limit, { { "Style", "style" }, { "Range", "name" } },
		{ style = "PushPop" }, d.ranges, "ranges")
end

return M
