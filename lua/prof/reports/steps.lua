-- prof.reports.steps — where the step time goes: each captured step split
-- into data / forward / backward / optimizer / other, and the average.
--
-- Phases are user_annotation ranges named exactly "data", "forward",
-- "backward", "optimizer" (or "other") inside a step, on the step's thread
-- (the Python bridge emits them; profhost.range("data") does too); "other"
-- is whatever the named phases leave of the step. Partial steps (cut short
-- by the process ending) are listed but left out of the statistics; the
-- phases' average and share are trace:phases()'s (query_phase_summary in
-- src/events/query.c), as in summary.txt.

local fmt = require("prof.reports.fmt")

local M = { name = "steps", title = "Step time breakdown" }

M.PHASES = { "data", "forward", "backward", "optimizer", "other" }

-- Names of collective operations (lower-cased, Lua patterns): all-reduce,
-- all-gather, reduce-scatter, broadcast, barrier, all-to-all, as torch,
-- NCCL and gloo name them ("nccl:all_reduce", "c10d::allreduce_",
-- "gloo:all_gather", "ncclKernel_AllReduce...").
M.COLLECTIVES = { "all_?reduce", "all_?gather", "reduce_?scatter", "broadcast", "barrier",
	"all_?to_?all" }

-- A Lua pattern that matches what `p` matches, in any letter case (an
-- escaped letter, such as %d, stays a class).
local function any_case(p)
	return (p:gsub("(%%?)(%a)", function(esc, c)
		if esc ~= "" then
			return esc .. c
		end
		return "[" .. c:lower() .. c:upper() .. "]"
	end))
end

-- The collectives the steps' thread ran, as CPU ranges: { ts, name } in
-- time order (the run report's points every rank passes). Each pattern
-- asks for its own names only: a window of many distinct names never
-- turns them all into Lua rows.
local function collectives(trace)
	local cats = { "cpu_op", "user_annotation" }
	local list, seen = {}, {}
	for _, p in ipairs(M.COLLECTIVES) do
		for _, r in ipairs(trace:aggregate{ cat = cats, thread = "main", by = "name",
				name = any_case(p) }) do
			if not seen[r.name] and not r.name:match("^ProfilerStep#") then
				seen[r.name] = true
				local exact = "^" .. r.name:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0") .. "$"
				for ev in trace:events{ cat = cats, thread = "main", name = exact } do
					list[#list + 1] = { ts = ev.ts, name = r.name }
				end
			end
		end
	end
	table.sort(list, function(a, b)
		if a.ts ~= b.ts then
			return a.ts < b.ts
		end
		return a.name < b.name
	end)
	return list
end

function M.analyze(trace)
	local out = { steps = {}, has_phases = false }
	local complete = {}
	local colls, c = collectives(trace), 1
	for _, s in ipairs(trace.steps) do
		local syncs = {}
		while colls[c] and colls[c].ts < s.ts do
			c = c + 1
		end
		while colls[c] and colls[c].ts < s.ts + s.dur do
			syncs[#syncs + 1] = colls[c]
			c = c + 1
		end
		out.steps[#out.steps + 1] = {
			step = s.step, ts = s.ts, dur = s.dur, partial = s.partial,
			has_phases = s.has_phases, phases = s.phases, starts = s.starts, ends = s.ends,
			syncs = syncs,
		}
		if s.has_phases then
			out.has_phases = true
		end
		if not s.partial then
			complete[#complete + 1] = s.dur
		end
	end
	out.count = #out.steps
	out.complete = #complete
	if #complete > 0 then
		local total = 0
		for _, d in ipairs(complete) do
			total = total + d
		end
		out.stats = {
			min = math.min(table.unpack(complete)),
			max = math.max(table.unpack(complete)),
			mean = total / #complete,
			median = fmt.median(complete),
			p90 = fmt.quantile(complete, 0.9),
		}
		local slow
		for _, s in ipairs(out.steps) do
			if not s.partial and (not slow or s.dur > slow.dur) then
				slow = s
			end
		end
		out.slowest = { step = slow.step, dur = slow.dur,
			ratio = out.stats.median > 0 and slow.dur / out.stats.median or 0 }
	end
	-- The phases' averages and shares are trace:phases()'s, the one
	-- computation summary.txt's table uses too.
	local ph = trace:phases()
	if ph.steps > 0 then
		out.avg, out.share = {}, {}
		for _, r in ipairs(ph) do
			out.avg[r.phase] = r.avg
			out.share[r.phase] = r.share
		end
		out.phased = ph.steps
		out.phased_mean = ph.total / ph.steps
		out.phased_partial = ph.partial
		local top
		for _, p in ipairs(M.PHASES) do
			if not top or out.share[p] > out.share[top] then
				top = p
			end
		end
		out.top_phase = top
	end
	return out
end

function M.text(d)
	if d.count == 0 then
		return "  No steps were captured in this window."
	end
	local lines = {}
	local cols = { { "Step", function(r) return r.label end } }
	cols[2] = { "Total ms", "total", right = true }
	if d.has_phases then
		for _, p in ipairs(M.PHASES) do
			cols[#cols + 1] = { p, p, right = true }
		end
	end
	local rows = {}
	for _, s in ipairs(d.steps) do
		local r = { label = tostring(s.step) .. (s.partial and " (partial)" or ""),
			total = fmt.ms(s.dur) }
		for _, p in ipairs(M.PHASES) do
			r[p] = s.has_phases and fmt.ms(s.phases[p]) or ""
		end
		rows[#rows + 1] = r
	end
	if d.avg then
		local r = { label = "average", total = fmt.ms(d.phased_mean) }
		local s = { label = "share", total = "" }
		for _, p in ipairs(M.PHASES) do
			r[p] = fmt.ms(d.avg[p])
			s[p] = fmt.pct(d.share[p])
		end
		rows[#rows + 1] = r
		rows[#rows + 1] = s
	end
	lines[1] = fmt.table(rows, cols)
	if d.stats then
		lines[#lines + 1] = string.format("  Step time: min %s  median %s  p90 %s  max %s  (%d complete steps)",
			fmt.time(d.stats.min), fmt.time(d.stats.median), fmt.time(d.stats.p90),
			fmt.time(d.stats.max), d.complete)
	end
	if not d.has_phases then
		lines[#lines + 1] = "  No phase ranges (data, forward, backward, optimizer) in these steps."
	end
	return table.concat(lines, "\n")
end

return M
