-- prof.reports.samples — the CPU sample tree (for the flame graph) and the
-- functions with the most samples of their own.
--
-- A sample's frames come from its "stack" argument (outermost first,
-- separated by ';'), as the sampler records them; see docs/reports.md.

local fmt = require("prof.reports.fmt")

local M = { name = "samples", title = "CPU samples" }

M.MAX_NODES = 3000

-- Strips a tree to { n = name, v = value, s = self, c = children }: short
-- keys keep the dashboard's embedded data small.
local function compact(node)
	local out = { n = node.name, v = node.value, s = node.self }
	if #node.children > 0 then
		out.c = {}
		for i, ch in ipairs(node.children) do
			out.c[i] = compact(ch)
		end
	end
	return out
end

function M.analyze(trace)
	if (trace.counts.cpu_sample or 0) == 0 then
		return { present = false }
	end
	local tree = trace:samples{ max_nodes = M.MAX_NODES }
	local self = {}
	local function walk(node)
		if node.self > 0 and node ~= tree then
			self[node.name] = (self[node.name] or 0) + node.self
		end
		for _, c in ipairs(node.children) do
			walk(c)
		end
	end
	walk(tree)
	local top = {}
	for name, n in pairs(self) do
		top[#top + 1] = { name = name, self = n }
	end
	table.sort(top, function(a, b)
		if a.self ~= b.self then
			return a.self > b.self
		end
		return a.name < b.name
	end)
	while #top > 20 do
		top[#top] = nil
	end
	for _, r in ipairs(top) do
		r.share = tree.value > 0 and r.self / tree.value or 0
	end
	return { present = true, samples = tree.samples, total = tree.value,
		truncated = tree.truncated, top = top, tree = compact(tree) }
end

function M.text(d)
	if not d.present then
		return "  No CPU samples in this window (prof.capture{ cpu_samples = { hz = 99 } })."
	end
	local rows = {}
	for i, r in ipairs(d.top) do
		rows[i] = { name = fmt.cut(r.name, 70), n = fmt.thousands(r.self), pct = fmt.pct(r.share) }
	end
	return string.format("  %d samples\n", d.samples) .. fmt.table(rows,
		{ { "Function", "name" }, { "Self samples", "n", right = true },
		  { "Share", "pct", right = true } })
end

return M
