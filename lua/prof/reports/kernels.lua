-- prof.reports.kernels — the kernels that take the GPU's time, like
-- `nsys stats --report cuda_gpu_kern_sum`: Time (%), Total Time (ns),
-- Instances, Avg (ns), Med (ns), Min (ns), Max (ns), StdDev (ns), Name,
-- sorted by total time. StdDev is the sample standard deviation (n - 1).

local fmt = require("prof.reports.fmt")

local M = { name = "kernels", title = "Top kernels (cuda_gpu_kern_sum)" }

M.LIMIT = 50

function M.analyze(trace)
	local rows = trace:aggregate{ cat = "kernel", by = "name", sort = "total", limit = M.LIMIT }
	local out = { total = rows.total, count = rows.count, kernels = rows.groups, rows = {} }
	for i, r in ipairs(rows) do
		out.rows[i] = fmt.stats_row(r)
	end
	local streams = trace:aggregate{ cat = "kernel", by = "stream" }
	out.streams = {}
	for i, r in ipairs(streams) do
		out.streams[i] = { name = r.name, total = r.total, count = r.count, share = r.share }
	end
	return out
end

function M.text(d, limit)
	if d.count == 0 then
		return "  No kernels in this window."
	end
	return fmt.stats_table(d.rows, limit, { { "Name", "name" } }, nil, d.kernels, "kernels")
end

return M
