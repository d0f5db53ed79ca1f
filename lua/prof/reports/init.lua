-- prof.reports — the built-in reports.
--
-- Each analysis is a module of this folder with
--   M.name, M.title
--   M.analyze(trace) -> plain data (numbers in ns, JSON-able)
--   M.text(data) -> a text section
-- (findings.analyze takes the other analyses' data instead of the trace).
-- Every analysis runs in its own pcall: one that fails is reported in the
-- output and the others still run.
--
-- The host calls window() after each window (report.txt, report.html,
-- modules.txt when the window recorded nn.Module calls);
-- `prof report` calls window() for each saved window and run() for the run
-- report over several windows and ranks (prof.reports.ranks).

local fmt = require("prof.reports.fmt")
local json = require("prof.json")

local M = {}

-- The analyses, in the order the text report shows them.
M.ANALYSES = { "steps", "gpu", "kernels", "copies", "memory", "nvtx", "cpu", "modules",
	"samples" }

-- Windows kept for run() (window data, in arrival order).
local kept = {}

local function meta_of(trace)
	return {
		rank = trace.rank, world_size = trace.world_size, window = trace.window,
		first_step = trace.first_step, last_step = trace.last_step,
		reason = trace.reason, recorder = trace.recorder or false,
		program = trace.program, hostname = trace.hostname,
		run = trace.run, pid = trace.pid, duration = trace.duration,
		events = trace.event_count, drops = trace.drops, counts = trace.counts,
		dir = trace.dir,
	}
end

-- Runs every analysis on `trace`. Returns the data: meta, one entry per
-- analysis, findings, and errors (name -> message) for those that failed.
function M.analyze(trace)
	local data = { meta = meta_of(trace), errors = {} }
	for _, name in ipairs(M.ANALYSES) do
		local mod = require("prof.reports." .. name)
		local ok, res = pcall(mod.analyze, trace)
		if ok then
			data[name] = res
		else
			data.errors[name] = tostring(res)
		end
	end
	local ok, res = pcall(require("prof.reports.findings").analyze, data)
	if ok then
		data.findings = res
	else
		data.errors.findings = tostring(res)
		data.findings = {}
	end
	return data
end

-- What the trace is called in reports: "window 3", or "recorder dump 0"
-- for a flight recorder dump (meta: the data's meta).
function M.label(m)
	return string.format("%s %d", m.recorder and "recorder dump" or "window", m.window)
end

-- The window's heading lines.
local function heading(m)
	local lines = {}
	lines[1] = string.format("profhost report: %s, steps %d-%d (%s), rank %d of %d",
		M.label(m), m.first_step, m.last_step, m.reason ~= "" and m.reason or "schedule",
		m.rank, math.max(1, m.world_size))
	lines[2] = string.format("%s (pid %d) on %s%s", m.program ~= "" and m.program or "?",
		m.pid, m.hostname ~= "" and m.hostname or "?",
		m.run ~= "" and ", run " .. m.run or "")
	lines[3] = string.format("%s: %s, %d events", m.recorder and "Dump" or "Window",
		fmt.time(m.duration), m.events)
	for _, h in ipairs(m.hangs or {}) do
		lines[#lines + 1] = string.format("Hang %d: step %d had not ended after %.1f s "
			.. "(the watchdog's report: ../%s/hang_report.txt)", h.hang, h.step,
			h.stalled_s, h.dir)
	end
	return table.concat(lines, "\n")
end

-- The findings as the host prints them at window end.
function M.findings_text(data)
	local f = require("prof.reports.findings")
	return string.format("findings (%s, rank %d):\n%s\n", M.label(data.meta),
		data.meta.rank, f.text(data.findings))
end

-- The whole text report of one window.
function M.text(data)
	local parts = { heading(data.meta), "", "Findings",
		require("prof.reports.findings").text(data.findings) }
	for _, name in ipairs(M.ANALYSES) do
		local mod = require("prof.reports." .. name)
		parts[#parts + 1] = ""
		parts[#parts + 1] = mod.title
		if data[name] then
			local ok, text = pcall(mod.text, data[name])
			parts[#parts + 1] = ok and text or "  (could not render: " .. tostring(text) .. ")"
		else
			parts[#parts + 1] = "  (failed: " .. tostring(data.errors[name]) .. ")"
		end
	end
	return table.concat(parts, "\n") .. "\n"
end

-- Renders `data` in the asked formats ({text = bool, json = bool, html =
-- bool}); `kind` is "window" or "run".
local function render(data, formats, kind)
	local out = {}
	if formats.text then
		out.text = kind == "window" and M.text(data) or require("prof.reports.ranks").text(data)
	end
	if formats.json then
		out.json = json.encode(data) .. "\n"
	end
	if formats.html then
		out.html = require("prof.reports.html")[kind](data)
	end
	return out
end

-- One window: analyses, findings, the asked formats. With `keep`, the data
-- is kept for run(). `hangs` (may be nil): the hang reports the window
-- overlaps, { { hang =, step =, stalled_s =, dir = "hang0_step5" }, ... }
-- (src/export/hanglinks.h), linked from its heading.
function M.window(trace, formats, keep, hangs)
	local data = M.analyze(trace)
	data.meta.hangs = hangs or {}
	if keep then
		kept[#kept + 1] = data
	end
	local out = render(data, formats or {}, "window")
	out.findings = M.findings_text(data)
	-- modules.txt, when the window recorded nn.Module calls
	local ok, modules = pcall(require("prof.reports.modules").file, data.modules, data.meta)
	out.modules = ok and modules or nil
	out.data = data
	return out
end

-- The run report over the windows kept since the last call.
function M.run(formats)
	local windows = kept
	kept = {}
	local data = require("prof.reports.ranks").analyze(windows)
	return render(data, formats or {}, "run")
end

return M
