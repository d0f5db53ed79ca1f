-- prof.reports.samples — the CPU sample tree (for the flame graph) and the
-- functions with the most samples of their own.
--
-- A sample's frames come from its "stack" argument (outermost first,
-- separated by ';'), as the sampler records them; see docs/reports.md.
-- The tree and the table count each sample's weight (profhost's sampler:
-- the timer periods it stands for), so a table is in one unit: samples when
-- every weight is 1, else weight, and says which (M.unit).

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
		unit = M.unit(tree), truncated = tree.truncated, top = top, tree = compact(tree) }
end

-- What a sample tree's values count: "samples" when each sample weighs 1,
-- else "weight" (timer periods, for profhost's sampler).
function M.unit(tree)
	return tree.value == tree.samples and "samples" or "weight"
end

function M.text(d)
	if not d.present then
		return "  No CPU samples in this window (prof.capture{ cpu_samples = { hz = 99 } })."
	end
	local rows = {}
	for i, r in ipairs(d.top) do
		rows[i] = { name = fmt.cut(r.name, 70), n = fmt.thousands(r.self), pct = fmt.pct(r.share) }
	end
	local head = string.format("  %d samples\n", d.samples)
	if d.unit == "weight" then
		head = string.format("  %d samples of weight %s in all (a sample weighs the timer periods "
			.. "it stands for); the table is in weight\n", d.samples, fmt.thousands(d.total))
	end
	return head .. fmt.table(rows,
		{ { "Function", "name" }, { "Self " .. d.unit, "n", right = true },
		  { "Share of " .. d.unit, "pct", right = true } })
end

return M
