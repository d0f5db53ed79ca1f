-- prof.reports.modules — nn.Module calls (prof.capture{ modules = true }:
-- python_function events named by the module's path in its model, the root
-- module by its class) ranked by self time: a call's duration minus the
-- module calls nested in it on the same thread, so the module whose own
-- code is slow comes first, not the model that holds it. Self % is of all
-- module self time (the root modules' total); per step divides by the
-- window's recorded steps.

local fmt = require("prof.reports.fmt")

local M = { name = "modules", title = "Modules (self time)" }

M.CAT = "python_function"
M.LIMIT = 30

function M.analyze(trace)
	local out = { rows = {}, modules = 0, calls = 0, self_total = 0,
		steps = math.max(1, trace.last_step - trace.first_step + 1) }
	if (trace.counts[M.CAT] or 0) == 0 then
		return out
	end
	local rows = trace:aggregate{ cat = M.CAT, by = "name", self = true, sort = "total" }
	local totals = {}
	for _, r in ipairs(trace:aggregate{ cat = M.CAT, by = "name" }) do
		totals[r.name] = r.total
	end
	out.modules = #rows
	out.self_total = rows.total
	for _, r in ipairs(rows) do
		out.calls = out.calls + r.count
		if #out.rows < M.LIMIT then
			out.rows[#out.rows + 1] = { name = r.name, self = r.total, count = r.count,
				total = totals[r.name], share = r.share, avg_self = r.avg }
		end
	end
	return out
end

function M.text(d, limit)
	if d.modules == 0 then
		return "  No module calls in this window (prof.capture{ modules = true } records them)."
	end
	local rows = {}
	for i, r in ipairs(d.rows) do
		if limit and i > limit then
			break
		end
		rows[i] = { rank = i, name = fmt.cut(r.name, 60), n = r.count,
			per_step = fmt.thousands(r.count / d.steps, r.count % d.steps == 0 and 0 or 1),
			self = fmt.time(r.self), pct = fmt.pct(r.share), avg = fmt.time(r.avg_self),
			total = fmt.time(r.total) }
	end
	local lines = { fmt.table(rows, { { "#", "rank", right = true }, { "Module", "name" },
		{ "Calls", "n", right = true }, { "Per step", "per_step", right = true },
		{ "Self", "self", right = true }, { "Self %", "pct", right = true },
		{ "Avg self", "avg", right = true }, { "Total", "total", right = true } }) }
	if d.modules > #rows then
		lines[#lines + 1] = string.format("  (%d more modules)", d.modules - #rows)
	end
	return table.concat(lines, "\n")
end

-- modules.txt: the table with a heading, or nil when the window recorded no
-- module calls.
function M.file(d, meta)
	if not d or d.modules == 0 then
		return nil
	end
	return string.format("Modules by self time: %s %d, steps %d-%d, %d calls of %d modules\n\n%s\n",
		meta.recorder and "recorder dump" or "window", meta.window, meta.first_step,
		meta.last_step, d.calls, d.modules, M.text(d))
end

return M
