-- prof.reports.ranks — the run report over several windows and ranks: a
-- per-rank table of step times and phases, the slowest rank of each step,
-- the spread (slowest minus fastest), and the straggler: the rank that is
-- slowest most often, with the phase where its extra time goes.
--
-- Input: the window data of prof.reports.analyze (meta, steps, gpu, ...).
-- Steps are matched across ranks by step number; partial steps are left
-- out.

local fmt = require("prof.reports.fmt")

local M = { name = "ranks", title = "Ranks" }

local PHASES = { "data", "forward", "backward", "optimizer", "other" }

function M.analyze(windows)
	local out = { kind = "run", windows = {}, ranks = {}, per_rank = {}, steps = {} }
	local by_rank, step_map = {}, {}
	for _, w in ipairs(windows) do
		local m = w.meta
		out.run = out.run or (m.run ~= "" and m.run or nil)
		out.program = out.program or m.program
		out.windows[#out.windows + 1] = { rank = m.rank, window = m.window,
			first_step = m.first_step, last_step = m.last_step, dir = m.dir,
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
		for _, s in ipairs(w.steps and w.steps.steps or {}) do
			if not s.partial then
				r.durs[#r.durs + 1] = s.dur
				if s.has_phases then
					r.phased = r.phased + 1
					for _, p in ipairs(PHASES) do
						r.phase_sum[p] = r.phase_sum[p] + s.phases[p]
					end
				end
				local e = step_map[s.step]
				if not e then
					e = { step = s.step, by_rank = {}, phases = {} }
					step_map[s.step] = e
				end
				e.by_rank[m.rank] = s.dur
				e.phases[m.rank] = s.has_phases and s.phases or nil
			end
		end
	end
	table.sort(out.ranks)
	for i, rank in ipairs(out.ranks) do
		local r = by_rank[rank]
		local total = 0
		for _, d in ipairs(r.durs) do
			total = total + d
		end
		local row = { rank = rank, windows = r.windows, steps = #r.durs,
			mean = #r.durs > 0 and total / #r.durs or 0, median = fmt.median(r.durs),
			max = #r.durs > 0 and math.max(table.unpack(r.durs)) or 0,
			gpu_utilization = r.span > 0 and r.busy / r.span or nil,
			finding = r.findings[1] }
		if r.phased > 0 then
			row.phases = {}
			for _, p in ipairs(PHASES) do
				row.phases[p] = r.phase_sum[p] / r.phased
			end
		end
		out.per_rank[i] = row
	end
	-- steps seen on several ranks: slowest, fastest, spread
	local slow_count, excess_sum = {}, {}
	local numbers = {}
	for n in pairs(step_map) do
		numbers[#numbers + 1] = n
	end
	table.sort(numbers)
	for _, n in ipairs(numbers) do
		local e = step_map[n]
		local durs, slow, fast = {}, nil, nil
		for _, rank in ipairs(out.ranks) do
			local d = e.by_rank[rank]
			if d then
				durs[#durs + 1] = d
				if not slow or d > e.by_rank[slow] then
					slow = rank
				end
				if not fast or d < e.by_rank[fast] then
					fast = rank
				end
			end
		end
		local row = { step = n, by_rank = {}, ranks = #durs }
		for _, rank in ipairs(out.ranks) do
			row.by_rank[#row.by_rank + 1] = e.by_rank[rank] or false
		end
		if #durs >= 2 then
			local med = fmt.median(durs)
			row.slowest, row.fastest = slow, fast
			row.spread = e.by_rank[slow] - e.by_rank[fast]
			row.median = med
			row.spread_share = med > 0 and row.spread / med or 0
			slow_count[slow] = (slow_count[slow] or 0) + 1
			excess_sum[slow] = (excess_sum[slow] or 0) + (e.by_rank[slow] - med)
		end
		out.steps[#out.steps + 1] = row
	end
	-- the straggler
	local best
	for rank, c in pairs(slow_count) do
		if not best or c > slow_count[best] or (c == slow_count[best] and rank < best) then
			best = rank
		end
	end
	if best then
		local compared = 0
		for _, s in ipairs(out.steps) do
			if s.slowest then
				compared = compared + 1
			end
		end
		local st = { rank = best, slowest = slow_count[best], of = compared,
			excess = excess_sum[best] / slow_count[best] }
		local me, others, nothers = nil, {}, 0
		for _, row in ipairs(out.per_rank) do
			if row.rank == best then
				me = row
			elseif row.phases then
				nothers = nothers + 1
				for _, p in ipairs(PHASES) do
					others[p] = (others[p] or 0) + row.phases[p]
				end
			end
		end
		if me and me.phases and nothers > 0 then
			local top, top_d
			for _, p in ipairs(PHASES) do
				local d = me.phases[p] - others[p] / nothers
				if not top or d > top_d then
					top, top_d = p, d
				end
			end
			if top_d > 0 then
				st.phase, st.phase_excess = top, top_d
			end
		end
		local med_mean = fmt.median((function()
			local xs = {}
			for _, row in ipairs(out.per_rank) do
				xs[#xs + 1] = row.mean
			end
			return xs
		end)())
		st.share = med_mean > 0 and st.excess / med_mean or 0
		out.straggler = st
	end
	return out
end

function M.text(d)
	local lines = {}
	lines[1] = string.format("profhost run report: %s, %d rank%s, %d window%s",
		d.run or d.program or "?", #d.ranks, #d.ranks == 1 and "" or "s",
		#d.windows, #d.windows == 1 and "" or "s")
	lines[#lines + 1] = ""
	lines[#lines + 1] = "Per rank (complete steps; times in ms)"
	local rows = {}
	for i, r in ipairs(d.per_rank) do
		rows[i] = { rank = r.rank, steps = r.steps, mean = fmt.ms(r.mean),
			median = fmt.ms(r.median), max = fmt.ms(r.max),
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
	cols[#cols + 1] = { "GPU busy", "gpu", right = true }
	lines[#lines + 1] = fmt.table(rows, cols)
	if #d.steps > 0 then
		lines[#lines + 1] = ""
		lines[#lines + 1] = "Step time by rank (ms; * the slowest)"
		local srows, scols = {}, { { "Step", "step", right = true } }
		for i, rank in ipairs(d.ranks) do
			scols[#scols + 1] = { "rank " .. rank, "r" .. i, right = true }
		end
		scols[#scols + 1] = { "Slowest", "slow", right = true }
		scols[#scols + 1] = { "Spread", "spread", right = true }
		for i, s in ipairs(d.steps) do
			local row = { step = s.step, slow = s.slowest and "rank " .. s.slowest or "",
				spread = s.spread and string.format("%s (%s)", fmt.ms(s.spread), fmt.pct(s.spread_share)) or "" }
			for k, rank in ipairs(d.ranks) do
				local v = s.by_rank[k]
				row["r" .. k] = v and (fmt.ms(v) .. (s.slowest == rank and "*" or " ")) or "-"
			end
			srows[i] = row
		end
		lines[#lines + 1] = fmt.table(srows, scols)
	end
	lines[#lines + 1] = ""
	lines[#lines + 1] = "Stragglers"
	local st = d.straggler
	if st then
		local text = string.format("  rank %d was the slowest in %d of %d steps, on average %s (%s) slower than the median rank",
			st.rank, st.slowest, st.of, fmt.time(st.excess), fmt.pct(st.share))
		if st.phase then
			text = text .. string.format("; most of its extra time is in %s (+%s per step)",
				st.phase, fmt.time(st.phase_excess))
		end
		lines[#lines + 1] = text
	else
		lines[#lines + 1] = "  (one rank, or no step seen on two ranks: nothing to compare)"
	end
	lines[#lines + 1] = ""
	lines[#lines + 1] = "Windows"
	for _, w in ipairs(d.windows) do
		lines[#lines + 1] = string.format("  rank %d window %d (steps %d-%d)%s", w.rank, w.window,
			w.first_step, w.last_step, w.findings and ": " .. w.findings or "")
	end
	return table.concat(lines, "\n") .. "\n"
end

return M
