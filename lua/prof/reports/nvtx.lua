-- prof.reports.nvtx — the annotation ranges (NVTX ranges, profhost.range,
-- prof_range_push), like `nsys stats --report nvtx_sum`: Time (%), Total
-- Time (ns), Instances, Avg (ns), Med (ns), Min (ns), Max (ns), StdDev (ns),
-- Style, Range. ProfilerStep#N spans are not NVTX ranges and are left out;
-- a range's time is its duration (nested ranges count in both).

local fmt = require("prof.reports.fmt")

local M = { name = "nvtx", title = "Annotation ranges (nvtx_sum)" }

M.LIMIT = 50

function M.analyze(trace)
	local rows = trace:aggregate{ cat = "user_annotation", by = "name", sort = "total" }
	local out = { rows = {}, total = 0, ranges = 0 }
	for _, r in ipairs(rows) do
		if not r.name:match("^ProfilerStep#%d+$") then
			out.ranges = out.ranges + 1
			out.total = out.total + r.total
			if #out.rows < M.LIMIT then
				out.rows[#out.rows + 1] = fmt.stats_row(r, 0)
			end
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
