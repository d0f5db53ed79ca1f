-- prof.reports.gpu — GPU utilization over the steps, the idle gaps, and
-- what the main (stepping) thread was doing while the GPU sat idle.
--
-- Busy time is the union of kernel, memcpy and memset intervals on every
-- device and stream; the reference is the union of the captured steps (the
-- window when there are none). Idle time is charged to the innermost CPU
-- range open on the main thread at each instant (trace:busy does it in C).

local fmt = require("prof.reports.fmt")

local M = { name = "gpu", title = "GPU utilization and idle gaps" }

M.BUCKETS = 100

function M.analyze(trace)
	local b = trace:busy{ buckets = M.BUCKETS, gaps = 5 }
	if b.events == 0 then
		return { present = false }
	end
	local out = {
		present = true, start = b.start, ["end"] = b["end"], span = b.span,
		busy = b.busy, idle = b.idle, utilization = b.utilization,
		buckets = b.buckets, bucket_ns = b.bucket_ns, nidle = b.nidle,
		gaps = {}, idle_ranges = {}, idle_phases = {}, tid = b.tid,
	}
	for i, g in ipairs(b.gaps) do
		local top = g.cpu and g.cpu.ranges[1]
		out.gaps[i] = { ts = g.ts, dur = g.dur, step = g.step,
			cpu = top and top.name or nil, cpu_share = top and top.share or nil }
	end
	if b.cpu then
		for i, r in ipairs(b.cpu.ranges) do
			out.idle_ranges[i] = { name = r.name, time = r.time, share = r.share }
		end
		out.idle_phases = b.cpu.phases
	end
	-- CPU samples taken on the main thread during the largest gaps
	if (trace.counts.cpu_sample or 0) > 0 and #b.gaps > 0 then
		local within = {}
		for i, g in ipairs(b.gaps) do
			within[i] = { ts = g.ts, dur = g.dur }
		end
		local tree = trace:samples{ thread = b.tid, within = within, max_nodes = 500 }
		if tree.samples > 0 then
			-- the deepest frame that more than half of those samples share
			local node, depth = tree, 0
			while true do
				local best
				for _, c in ipairs(node.children) do
					if c.value > tree.value / 2 and (not best or c.value > best.value) then
						best = c
					end
				end
				if not best then
					break
				end
				node, depth = best, depth + 1
			end
			out.idle_samples = { samples = tree.samples,
				unit = require("prof.reports.samples").unit(tree),
				frame = depth > 0 and node.name or nil,
				share = depth > 0 and node.value / tree.value or nil }
		end
	end
	return out
end

function M.text(d)
	if not d.present then
		return "  No GPU activity (kernels, copies) in this window."
	end
	local lines = {}
	lines[1] = string.format("  GPU busy %s of step time (%s of %s); idle %s in %d gaps",
		fmt.pct(d.utilization), fmt.time(d.busy), fmt.time(d.span),
		fmt.time(d.idle), d.nidle)
	if #d.idle_ranges > 0 then
		local parts = {}
		for i = 1, math.min(3, #d.idle_ranges) do
			local r = d.idle_ranges[i]
			parts[i] = string.format("%s %s", fmt.cut(r.name, 40), fmt.pct(r.share))
		end
		lines[#lines + 1] = "  While the GPU was idle the main thread was in: " .. table.concat(parts, ", ")
	end
	if #d.gaps > 0 then
		local rows = {}
		for i, g in ipairs(d.gaps) do
			rows[i] = { n = i, len = fmt.time(g.dur), step = g.step or "",
				at = fmt.time(g.ts - d.start),
				cpu = g.cpu and string.format("%s (%s)", fmt.cut(g.cpu, 50), fmt.pct(g.cpu_share)) or "" }
		end
		lines[#lines + 1] = "  Largest idle gaps:"
		lines[#lines + 1] = fmt.table(rows, {
			{ "#", "n", right = true }, { "Length", "len", right = true },
			{ "Step", "step", right = true }, { "At", "at", right = true },
			{ "Main thread in", "cpu" } }, "    ")
	end
	if d.idle_samples and d.idle_samples.frame then
		local u = d.idle_samples
		if u.unit == "weight" then
			lines[#lines + 1] = string.format("  CPU samples in those gaps: %d, %s of their weight in %s",
				u.samples, fmt.pct(u.share), u.frame)
		else
			lines[#lines + 1] = string.format("  CPU samples in those gaps: %s of %d samples in %s",
				fmt.pct(u.share), u.samples, u.frame)
		end
	end
	return table.concat(lines, "\n")
end

return M
