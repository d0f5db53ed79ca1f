-- prof.reports.ranks — the run report over several windows and ranks: a
-- per-rank table of step times and phases, each step's time on each rank,
-- and the straggler: the rank the others wait for.
--
-- Input: the window data of prof.reports.analyze (meta, steps, gpu, ...).
-- Steps are matched across ranks by step number; partial steps are left
-- out.
--
-- The straggler. In a job whose ranks meet in collectives (all-reduce in
-- backward, ...), every rank's step takes about the same time: the ranks
-- that are ahead wait in the collective for the last one, so their step
-- time, and the phase holding the collective, grow by the wait. Step times
-- cannot tell the straggler from the ranks waiting for it. What can is
-- *when* each rank gets to the points every rank passes in a step — its
-- start, the start and end of each phase (data, forward, backward,
-- optimizer), the start of each collective when the trace shows
-- collectives as ranges, its end: at each point a rank's *lateness* is how
-- long after the first rank it got there. Between two points a rank that works longer than the
-- others falls further behind (its lateness grows); a rank that waits
-- catches up (its lateness shrinks). A rank's *extra work* in a step is the
-- sum of its lateness growths: the time it took beyond the quickest rank,
-- waiting never counted. The rank with the most extra work is the last to
-- arrive; the others wait for it by the difference. The straggler is the
-- rank whose *steady* extra work (below) exceeds the others' by more than
-- the noise (50 us, or 5 % of the median step); where its lateness grows
-- is where its extra time goes, named as the per-rank table counts it: the
-- time between two points inside a phase is that phase's, any other time
-- (before the first phase, between one phase's end and the next one's
-- start, after the last) is `other`.
--
-- This compares timestamps across ranks at the same step, so it needs the
-- ranks' clocks to agree (ranks on one host share CLOCK_MONOTONIC; across
-- hosts, what the trace's time base gives); when the ranks' compared steps
-- do not overlap in time at all, the report says the clocks do not line up
-- instead of naming anyone.

local fmt = require("prof.reports.fmt")
local steps_report = require("prof.reports.steps")

local M = { name = "ranks", title = "Ranks" }

local PHASES = steps_report.PHASES
-- Phases whose start is a point every rank passes, in step order: all but
-- the last, "other" (the rest of the step).
local POINT_PHASES = {}
for i = 1, #PHASES - 1 do
	POINT_PHASES[i] = PHASES[i]
end

M.MIN_LEAD_NS = 50000      -- a step decides when the lead is above this ...
M.MIN_LEAD_SHARE = 0.05    -- ... and above this share of the median step
M.SURE_STEPS = 5           -- fewer steps compared: a first reading only
M.SURE_SHARE = 0.8         -- last in at least this share of the steps: sure

-- The points every rank passes in step `e` (e.by_step[rank] = step data):
-- { label, kind, t = { [rank] = ns } } in time order; kind is "step" (the
-- step's start or end), "start" or "end" (a phase's), or "sync" (a
-- collective's start). A phase's start and end count when every rank has
-- them; collectives when every rank has as many.
local KIND_ORDER = { step = 1, ["end"] = 2, sync = 3, start = 4 }

local function points(e, ranks)
	local pts = {}
	local function add(label, kind, get)
		local t = {}
		for _, r in ipairs(ranks) do
			local v = get(e.by_step[r])
			if not v then
				return
			end
			t[r] = v
		end
		pts[#pts + 1] = { label = label, kind = kind, t = t }
	end
	add("start", "step", function(s) return s.ts end)
	for _, p in ipairs(POINT_PHASES) do
		add(p, "start", function(s) return s.starts and s.starts[p] end)
		add(p, "end", function(s) return s.ends and s.ends[p] end)
	end
	local n
	for _, r in ipairs(ranks) do
		local m = #(e.by_step[r].syncs or {})
		if n and m ~= n then
			n = 0
		end
		n = n or m
	end
	for j = 1, n or 0 do
		add(e.by_step[ranks[1]].syncs[j].name, "sync", function(s) return s.syncs[j].ts end)
	end
	add("end", "step", function(s) return s.ts + s.dur end)
	for _, pt in ipairs(pts) do
		local sum = 0
		for _, r in ipairs(ranks) do
			sum = sum + pt.t[r]
		end
		pt.mean = sum / #ranks
	end
	table.sort(pts, function(a, b)
		if a.mean ~= b.mean then
			return a.mean < b.mean
		end
		if (a.kind == "step") ~= (b.kind == "step") then
			-- the step's start before anything at its instant, its end after
			local st = a.kind == "step" and a or b
			return (st == a) == (st.label == "start")
		end
		if a.kind ~= b.kind then
			return KIND_ORDER[a.kind] < KIND_ORDER[b.kind]
		end
		return a.label < b.label
	end)
	return pts
end

-- What the time between points i and i + 1 is called: the table's column
-- it counts in (a phase, or "other") and the label the verdict names. A
-- segment inside a phase (from its start to its end, collectives inside
-- it included) is that phase's. Elsewhere it is `other`, labelled by
-- where it lies: "no phase, before forward", "no phase, between data and
-- forward", "no phase, after optimizer". A phase whose end the step data
-- lacks lasts to the next phase's start. nil when the points are only the
-- step's start and end.
local function segments(pts)
	local spans = {}
	for i, pt in ipairs(pts) do
		if pt.kind == "start" then
			local stop
			for j = i + 1, #pts do
				local q = pts[j]
				if q.kind == "end" and q.label == pt.label then
					stop = j
					break
				end
			end
			if not stop then
				for j = i + 1, #pts do
					if pts[j].kind == "start" or pts[j].kind == "step" then
						stop = j
						break
					end
				end
			end
			spans[#spans + 1] = { phase = pt.label, from = i, to = stop or #pts }
		end
	end
	local out = {}
	for i = 1, #pts - 1 do
		local phase
		for _, sp in ipairs(spans) do
			-- the innermost: the latest start that holds the segment
			if sp.from <= i and i + 1 <= sp.to and (not phase or sp.from > phase.from) then
				phase = sp
			end
		end
		if phase then
			out[i] = { column = phase.phase, label = phase.phase }
		elseif #pts > 2 then
			local a, b = pts[i], pts[i + 1]
			local where
			if a.kind == "step" then
				where = "before " .. b.label
			elseif b.kind == "step" then
				where = "after " .. a.label
			else
				where = "between " .. a.label .. " and " .. b.label
			end
			out[i] = { column = "other", label = "no phase, " .. where }
		end
	end
	return out
end

-- Each rank's extra work in one step (ns) and, per segment label, its
-- lateness growth; `columns` maps each label seen to its table column.
local function extra_work(e, ranks, columns)
	local pts = points(e, ranks)
	local segs = segments(pts)
	local late = {}
	for i, pt in ipairs(pts) do
		local first
		for _, r in ipairs(ranks) do
			first = first and math.min(first, pt.t[r]) or pt.t[r]
		end
		late[i] = {}
		for _, r in ipairs(ranks) do
			late[i][r] = pt.t[r] - first
		end
	end
	local extra, growth = {}, {}
	for _, r in ipairs(ranks) do
		extra[r], growth[r] = 0, {}
		for i = 1, #pts - 1 do
			local g = late[i + 1][r] - late[i][r]
			if g > 0 then
				local seg = segs[i]

				extra[r] = extra[r] + g
				if seg then
					growth[r][seg.label] = (growth[r][seg.label] or 0) + g
					columns[seg.label] = seg.column
				end
			end
		end
	end
	return extra, growth
end

-- Whether the ranks' clocks line up: the time spans of their compared
-- steps (first start to last end) overlap on every rank. Ranks that run
-- the same steps at the same time do, even when one drifts behind; clocks
-- with different origins do not.
local function clocks_agree(rows, step_map)
	local first, last = {}, {}
	for _, row in ipairs(rows) do
		if row.ranks >= 2 then
			for r, s in pairs(step_map[row.step].by_step) do
				first[r] = math.min(first[r] or s.ts, s.ts)
				last[r] = math.max(last[r] or s.ts + s.dur, s.ts + s.dur)
			end
		end
	end
	local start, stop
	for r, f in pairs(first) do
		start = math.max(start or f, f)
		stop = math.min(stop or last[r], last[r])
	end
	return not start or start < stop
end

-- The verdict over the compared steps (rows with extra_by / growth_by):
-- the straggler, how sure, where its extra time goes; nil when no two ranks
-- share a step. A rank's steady extra work is, summed over the segments of
-- a step (before forward, forward, ...), the median over the steps of its
-- lateness growth there: work it does every step counts in full, while a
-- step the machine disturbed (a rank descheduled for a few ms) does not
-- decide. The straggler is the rank whose steady extra work exceeds every
-- other rank's by more than the noise. Where its extra time goes is the
-- table's column (`columns`: segment label -> phase or "other") holding
-- most of it, named by its largest segment when it is `other`.
local function straggler(rows, threshold, clocks_ok, columns)
	local compared, decided = 0, 0
	local last_count, labels, nsteps = {}, {}, {}
	for _, row in ipairs(rows) do
		if row.extra_by then
			compared = compared + 1
			for r, growth in pairs(row.growth_by) do
				labels[r] = labels[r] or {}
				nsteps[r] = (nsteps[r] or 0) + 1
				for label in pairs(growth) do
					labels[r][label] = true
				end
			end
			if row.last then
				decided = decided + 1
				last_count[row.last] = (last_count[row.last] or 0) + 1
			end
		end
	end
	if compared == 0 then
		return nil
	end
	local st = { of = compared, decided = decided, threshold = threshold, counts = last_count }
	if not clocks_ok then
		st.verdict = "clocks"
		return st
	end
	local steady, where = {}, {}
	for r, set in pairs(labels) do
		steady[r] = 0
		local by_column, top = {}, {}
		for label in pairs(set) do
			local list = {}
			for _, row in ipairs(rows) do
				if row.growth_by and row.growth_by[r] then
					list[#list + 1] = row.growth_by[r][label] or 0
				end
			end
			local m = fmt.median(list)
			steady[r] = steady[r] + m
			if m > 0 then
				local c = columns[label]
				by_column[c] = (by_column[c] or 0) + m
				if not top[c] or m > top[c].ns or (m == top[c].ns and label < top[c].label) then
					top[c] = { label = label, ns = m }
				end
			end
		end
		for _, c in ipairs(PHASES) do
			local ns = by_column[c]
			if ns and (not where[r] or ns > where[r].ns) then
				where[r] = { column = c, label = top[c].label, ns = ns }
			end
		end
	end
	local best, lead
	for r, x in pairs(steady) do
		local others = 0
		for q, y in pairs(steady) do
			if q ~= r then
				others = math.max(others, y)
			end
		end
		if not best or x - others > lead or (x - others == lead and r < best) then
			best, lead = r, x - others
		end
	end
	if not best or lead < threshold then
		-- nobody is steadily late: either nobody is late at all, or the
		-- last one changes
		local first, second
		for r, c in pairs(last_count) do
			if not first or c > last_count[first] or (c == last_count[first] and r < first) then
				first, second = r, first
			elseif not second or c > last_count[second] then
				second = r
			end
		end
		if not first then
			st.verdict = "none"
		else
			st.verdict = "split"
			st.rank, st.last = first, last_count[first]
			st.other, st.other_last = second, second and last_count[second] or 0
		end
		return st
	end
	st.verdict = "rank"
	st.rank = best
	st.lead = lead
	st.last = last_count[best] or 0
	if where[best] then
		st.where, st.where_phase, st.where_ns = where[best].label, where[best].column,
			where[best].ns
	end
	st.short = compared < M.SURE_STEPS
	st.sure = not st.short and st.last >= M.SURE_SHARE * compared
	return st
end

function M.analyze(windows)
	local out = { kind = "run", windows = {}, ranks = {}, per_rank = {}, steps = {} }
	local by_rank, step_map = {}, {}
	for _, w in ipairs(windows) do
		local m = w.meta
		out.run = out.run or (m.run ~= "" and m.run or nil)
		out.program = out.program or m.program
		out.windows[#out.windows + 1] = { rank = m.rank, window = m.window,
			recorder = m.recorder or nil, first_step = m.first_step, last_step = m.last_step, dir = m.dir,
			findings = w.findings and w.findings[1] and w.findings[1].text or nil }
		local r = by_rank[m.rank]
		if not r then
			r = { rank = m.rank, windows = 0, durs = {}, phase_sum = {}, phased = 0,
				busy = 0, span = 0, findings = {} }
			for _, p in ipairs(PHASES) do
				r.phase_sum[p] = 0
			end
			by_rank[m.rank] = r
			out.ranks[#out.ranks + 1] = m.rank
		end
		r.windows = r.windows + 1
		if w.gpu and w.gpu.present then
			r.busy = r.busy + w.gpu.busy
			r.span = r.span + w.gpu.span
		end
		for _, f in ipairs(w.findings or {}) do
			r.findings[#r.findings + 1] = f.text
		end
		local st = w.steps or {}
		-- the phase averages are the window's own (trace:phases())
		if st.avg and st.phased then
			r.phased = r.phased + st.phased
			for _, p in ipairs(PHASES) do
				r.phase_sum[p] = r.phase_sum[p] + st.avg[p] * st.phased
			end
		end
		for _, s in ipairs(st.steps or {}) do
			if not s.partial then
				r.durs[#r.durs + 1] = s.dur
				local e = step_map[s.step]
				if not e then
					e = { step = s.step, by_step = {} }
					step_map[s.step] = e
				end
				e.by_step[m.rank] = s
			end
		end
	end
	table.sort(out.ranks)
	local all_durs = {}
	for i, rank in ipairs(out.ranks) do
		local r = by_rank[rank]
		local total = 0
		for _, d in ipairs(r.durs) do
			total = total + d
			all_durs[#all_durs + 1] = d
		end
		local row = { rank = rank, windows = r.windows, steps = #r.durs,
			mean = #r.durs > 0 and total / #r.durs or 0, median = fmt.median(r.durs),
			max = #r.durs > 0 and math.max(table.unpack(r.durs)) or 0,
			gpu_utilization = r.span > 0 and r.busy / r.span or nil,
			finding = r.findings[1], last = 0 }
		if r.phased > 0 then
			row.phases = {}
			for _, p in ipairs(PHASES) do
				row.phases[p] = r.phase_sum[p] / r.phased
			end
		end
		out.per_rank[i] = row
	end
	local threshold = math.max(M.MIN_LEAD_NS, M.MIN_LEAD_SHARE * fmt.median(all_durs))
	local columns = {} -- segment label -> its table column
	-- each step: its time on each rank, the last rank to arrive
	local numbers = {}
	for n in pairs(step_map) do
		numbers[#numbers + 1] = n
	end
	table.sort(numbers)
	for _, n in ipairs(numbers) do
		local e = step_map[n]
		local present = {}
		local row = { step = n, by_rank = {}, ranks = 0 }
		for _, rank in ipairs(out.ranks) do
			local s = e.by_step[rank]
			row.by_rank[#row.by_rank + 1] = s and s.dur or false
			if s then
				present[#present + 1] = rank
			end
		end
		row.ranks = #present
		if #present >= 2 then
			local extra, growth = extra_work(e, present, columns)
			local last, next_most
			for _, rank in ipairs(present) do
				if not last or extra[rank] > extra[last] then
					last = rank
				end
			end
			for _, rank in ipairs(present) do
				if rank ~= last and (not next_most or extra[rank] > next_most) then
					next_most = extra[rank]
				end
			end
			local lead = extra[last] - next_most
			row.extra = {}
			for k, rank in ipairs(out.ranks) do
				row.extra[k] = extra[rank] or false
			end
			row.extra_by, row.growth_by = extra, growth
			if lead >= threshold then
				row.last, row.lead = last, lead
			end
		end
		out.steps[#out.steps + 1] = row
	end
	out.straggler = straggler(out.steps, threshold, clocks_agree(out.steps, step_map), columns)
	out.verdict = M.verdict_text(out.straggler)
	for _, row in ipairs(out.per_rank) do
		row.last = out.straggler and out.straggler.counts and out.straggler.counts[row.rank] or 0
	end
	-- the JSON keeps the rows plain (extra: in rank order)
	for _, row in ipairs(out.steps) do
		row.extra_by, row.growth_by = nil, nil
	end
	return out
end

-- The verdict as one or two lines of text.
function M.verdict_text(st)
	if not st then
		return "(one rank, or no step seen on two ranks: nothing to compare)"
	end
	if st.verdict == "clocks" then
		return string.format("the ranks ran the same %d steps at times that do not overlap, so "
			.. "their clocks do not line up and who waits for whom cannot be read from this "
			.. "trace", st.of)
	end
	if st.verdict == "none" then
		return string.format("no straggler: in none of %d steps did one rank arrive more than %s "
			.. "after the others", st.of, fmt.time(st.threshold))
	end
	if st.verdict == "split" then
		return string.format("no single straggler: the last rank to arrive changes between steps "
			.. "(rank %d in %d, rank %s in %d of %d steps)", st.rank, st.last,
			st.other and tostring(st.other) or "-", st.other_last, st.of)
	end
	local text = string.format("rank %d is the straggler: it arrived last in %d of %d steps, "
		.. "the others waiting for it about %s per step", st.rank, st.last, st.of,
		fmt.time(st.lead))
	if st.where then
		-- the column of the per-rank table that holds it, first
		text = text .. string.format("; its extra time is in %s%s (+%s per step)",
			st.where_phase ~= st.where and st.where_phase .. ": " or "", st.where,
			fmt.time(st.where_ns))
	end
	if st.short then
		text = text .. string.format(". Only %d step%s compared: a first reading; capture more "
			.. "steps (prof.schedule{ active = ... }) to be sure", st.of, st.of == 1 and "" or "s")
	elseif not st.sure then
		text = text .. string.format(". Last in only %d of %d steps: not a sure verdict",
			st.last, st.of)
	end
	return text
end

function M.text(d)
	local lines = {}
	lines[1] = string.format("profhost run report: %s, %d rank%s, %d window%s",
		d.run or d.program or "?", #d.ranks, #d.ranks == 1 and "" or "s",
		#d.windows, #d.windows == 1 and "" or "s")
	lines[#lines + 1] = ""
	lines[#lines + 1] = "Per rank (complete steps; times in ms; Last: steps it arrived last in)"
	local rows = {}
	for i, r in ipairs(d.per_rank) do
		rows[i] = { rank = r.rank, steps = r.steps, mean = fmt.ms(r.mean),
			median = fmt.ms(r.median), max = fmt.ms(r.max), last = r.last,
			gpu = r.gpu_utilization and fmt.pct(r.gpu_utilization) or "" }
		for _, p in ipairs(PHASES) do
			rows[i][p] = r.phases and fmt.ms(r.phases[p]) or ""
		end
	end
	local cols = { { "Rank", "rank", right = true }, { "Steps", "steps", right = true },
		{ "Mean", "mean", right = true }, { "Median", "median", right = true },
		{ "Max", "max", right = true } }
	for _, p in ipairs(PHASES) do
		cols[#cols + 1] = { p, p, right = true }
	end
	cols[#cols + 1] = { "Last", "last", right = true }
	cols[#cols + 1] = { "GPU busy", "gpu", right = true }
	lines[#lines + 1] = fmt.table(rows, cols)
	if #d.steps > 0 then
		lines[#lines + 1] = ""
		lines[#lines + 1] = "Step time by rank (ms; * the last to arrive, whom the others waited for)"
		local srows, scols = {}, { { "Step", "step", right = true } }
		for i, rank in ipairs(d.ranks) do
			scols[#scols + 1] = { "rank " .. rank, "r" .. i, right = true }
		end
		scols[#scols + 1] = { "Last", "last", right = true }
		scols[#scols + 1] = { "Waited", "lead", right = true }
		for i, s in ipairs(d.steps) do
			local row = { step = s.step, last = s.last and "rank " .. s.last or "",
				lead = s.lead and fmt.ms(s.lead) or "" }
			for k, rank in ipairs(d.ranks) do
				local v = s.by_rank[k]
				row["r" .. k] = v and (fmt.ms(v) .. (s.last == rank and "*" or " ")) or "-"
			end
			srows[i] = row
		end
		lines[#lines + 1] = fmt.table(srows, scols)
	end
	lines[#lines + 1] = ""
	lines[#lines + 1] = "Stragglers"
	lines[#lines + 1] = "  " .. d.verdict
	lines[#lines + 1] = ""
	lines[#lines + 1] = "Windows"
	for _, w in ipairs(d.windows) do
		lines[#lines + 1] = string.format("  rank %d %s %d (steps %d-%d)%s", w.rank,
			w.recorder and "recorder dump" or "window", w.window, w.first_step, w.last_step, w.findings and ": " .. w.findings or "")
	end
	return table.concat(lines, "\n") .. "\n"
end

return M
