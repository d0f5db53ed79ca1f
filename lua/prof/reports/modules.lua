-- prof.reports.modules — nn.Module calls (prof.capture{ modules = true }:
-- python_function events named as torch's with_modules names them,
-- "nn.Module: Linear_0", each with its path in the model in the "module
-- path" arg) ranked by self time: a call's duration minus the module calls
-- nested in it on the same thread, so the module whose own code is slow
-- comes first, not the model that holds it. A row is one module, shown by
-- its path and class ("encoder.layers.3.attn (MultiheadAttention)"; a
-- root module by its class). Self % is of all module self time (the root
-- modules' total); per step divides by the window's recorded steps.

local fmt = require("prof.reports.fmt")

local M = { name = "modules", title = "Modules (self time)" }

M.CAT = "python_function"
M.LIMIT = 30
M.PATH = "module path"

-- How a module is shown: "<path> (<class>)" for an event named as torch
-- names a module call ("nn.Module: <class>_<n>") with a path, its class
-- without one (a root module); any other name (a trace of an older
-- profhost, or torch's Python functions) as it is.
function M.label(name, path)
	local class = name:match("^nn%.Module: (.+)_%d+$")
	if not class then
		return name
	end
	if path and path ~= "" then
		return string.format("%s (%s)", path, class)
	end
	return class
end

-- The path of each module call named in `want` ({name = true}), from the
-- first of its events that has one; stops once every name was seen.
local function paths(trace, want, n)
	local out, seen = {}, {}
	if n == 0 then
		return out
	end
	for ev in trace:events{ cat = M.CAT } do
		local name = ev.name
		if want[name] and not seen[name] then
			seen[name] = true
			out[name] = ev.args and ev.args[M.PATH]
			n = n - 1
			if n == 0 then
				break
			end
		end
	end
	return out
end

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
	local want, nwant = {}, 0
	for _, r in ipairs(rows) do
		out.calls = out.calls + r.count
		if #out.rows < M.LIMIT then
			out.rows[#out.rows + 1] = { event = r.name, self = r.total, count = r.count,
				total = totals[r.name], share = r.share, avg_self = r.avg }
			want[r.name] = true
			nwant = nwant + 1
		end
	end
	local path = paths(trace, want, nwant)
	for _, r in ipairs(out.rows) do
		r.name = M.label(r.event, path[r.event])
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
