-- prof.reports.copies — memory copy volume and bandwidth by kind
-- (gpu_memcpy events grouped by name, e.g. "Memcpy HtoD (Pageable ->
-- Device)"), and memsets. Bandwidth is bytes over copy time (GB/s =
-- bytes/ns). Copies without a "bytes" argument count in time only.

local fmt = require("prof.reports.fmt")

local M = { name = "copies", title = "Memory copies" }

function M.analyze(trace)
	local out = { rows = {}, bytes = 0, time = 0, count = 0 }
	local by_time = trace:aggregate{ cat = "gpu_memcpy", by = "name" }
	local by_bytes = trace:aggregate{ cat = "gpu_memcpy", by = "name", sum = "bytes" }
	local bytes = {}
	for _, r in ipairs(by_bytes) do
		bytes[r.name] = r.total
	end
	for i, r in ipairs(by_time) do
		local b = bytes[r.name] or 0
		out.rows[i] = { name = r.name, count = r.count, time = r.total, bytes = b,
			gbps = r.total > 0 and b / r.total or 0 }
		out.bytes = out.bytes + b
		out.time = out.time + r.total
		out.count = out.count + r.count
	end
	local sets = trace:aggregate{ cat = "gpu_memset", by = "name" }
	out.memset_time, out.memset_count = sets.total, sets.count
	out.gbps = out.time > 0 and out.bytes / out.time or 0
	return out
end

function M.text(d)
	if d.count == 0 and d.memset_count == 0 then
		return "  No memory copies in this window."
	end
	local rows = {}
	for i, r in ipairs(d.rows) do
		rows[i] = { name = fmt.cut(r.name, 60), n = r.count, time = fmt.time(r.time),
			bytes = fmt.bytes(r.bytes), bw = string.format("%.2f GB/s", r.gbps) }
	end
	local text = fmt.table(rows, { { "Kind", "name" }, { "Count", "n", right = true },
		{ "Time", "time", right = true }, { "Bytes", "bytes", right = true },
		{ "Bandwidth", "bw", right = true } })
	text = text .. string.format("\n  Total: %s in %d copies, %s (%.2f GB/s)",
		fmt.bytes(d.bytes), d.count, fmt.time(d.time), d.gbps)
	if d.memset_count > 0 then
		text = text .. string.format("; memset: %d calls, %s", d.memset_count, fmt.time(d.memset_time))
	end
	return text
end

return M
