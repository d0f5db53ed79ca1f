-- prof — the module a policy file sees as the global `prof` (policy API v1).
--
-- Configuration calls (prof.output, prof.schedule, prof.steps, prof.capture,
-- prof.export, prof.limits) validate their table against prof.schema and
-- raise one-line errors at the caller's file:line. Hook calls (prof.on_*)
-- register functions the host runs later. prof.capture_now asks the host for
-- an extra capture window through prof._native, a table the C side installs
-- (tests install their own).
--
-- Private entry points for the host and the tests start with "_":
--   prof._reset()           forget everything (a fresh policy)
--   prof._apply_set(s)      apply one --set "section.key=value" override
--   prof._config()          the resolved configuration (see schema.resolve)
--   prof._load_done()       end of loading: config calls are refused from
--                           now on; returns _config(), _hooks()
--   prof._hooks()           { on_step = {fn...}, on_window_start = ..., ... }
--   prof._syntax_hint(m, s) the file's syntax error m, with the hint for a
--                           keyword written as a key (repeat = 2)
--   prof._native            { capture_now = fn(steps, reason) -> true | nil, err,
--                             capture_job = fn(steps, reason) -> true | nil, err,
--                             set_limits = fn(memory_mb, load_ms),
--                             repl_active = fn() -> boolean,
--                             query = fn(what, arg) -> table | nil,
--                             reconfigure = fn(section),
--                             recorder = fn(on),
--                             sleep = fn(ms) -> true | nil, err,
--                             hooks_changed = fn() } or nil
--
-- Live control (prof attach): at the REPL, prof.schedule{} and
-- prof.capture{} change the running configuration (the keys given replace
-- those keys), prof.capture_now waits for the window's files, and
-- prof.status/top/stacks/sleep/help ask the host (lua/prof/repl.lua formats).
-- prof.recorder{ enabled = ... } pauses and resumes the flight recorder at
-- the REPL and from hooks alike.

local schema = require("prof.schema")
local require = require

-- prof.repl, loaded when first needed (policies that never meet a REPL do
-- not pay for it).
local function repl()
	return require("prof.repl")
end

local prof = { api_version = 1 }

local HOOK_KINDS = { "on_step", "on_window_start", "on_window_end", "on_trace_ready", "on_hang" }

local state

local function new_state()
	local hooks = {}
	for _, kind in ipairs(HOOK_KINDS) do
		hooks[kind] = {}
	end
	return {
		raw = {},      -- section name -> validated table
		calls = {},    -- section name -> "file:line" of its prof.<section> call
		done = false,  -- the policy file has finished loading
		hooks = hooks,
	}
end

state = new_state()

-- Tells the host about new limits (memory cap and load budget take effect
-- at once, so the rest of the file runs under them).
local function notify_limits()
	local native = prof._native
	if type(native) == "table" and type(native.set_limits) == "function" then
		local l = schema.resolve(state.raw).limits
		native.set_limits(l.memory_mb, l.load_ms)
	end
end

-- True while a REPL command runs (prof attach).
local function at_repl()
	local native = prof._native
	return type(native) == "table" and type(native.repl_active) == "function"
		and native.repl_active() == true
end

-- Sections that can change while the process runs, from the REPL.
local LIVE = { schedule = true, capture = true }

local function shallow_copy(t)
	local out = {}
	for k, v in pairs(t or {}) do
		out[k] = v
	end
	return out
end

-- A prof.<section> call at the REPL: the keys given replace those keys of
-- the running configuration (prof.schedule(false) turns the schedule off),
-- the host applies it, and the resolved section is returned. Errors are
-- raised at `level`.
local function live_change(section, fname, spec, args, level)
	if not LIVE[section] then
		error(string.format("%s: cannot change while the process runs (only prof.schedule, "
			.. "prof.capture and prof.recorder{ enabled } can)", fname), level)
	end
	local new
	if section == "schedule" and args == false then
		new = nil
	elseif type(args) ~= "table" then
		error(string.format("%s: expected a table, got %s (e.g. %s)",
			fname, schema.describe(args), spec.example), level)
	else
		local merged = shallow_copy(state.raw[section])
		if section == "schedule" and args.whole == true then
			merged = {} -- the whole process from now on: windows of steps give way
		end
		for k, v in pairs(args) do
			merged[k] = v
		end
		local t, msg = schema.check(spec, merged)
		if not t then
			error(fname .. ": " .. msg, level)
		end
		new = t
	end
	local old = state.raw[section]
	state.raw[section] = new
	local ok, err = pcall(prof._native.reconfigure, section)
	if not ok then
		state.raw[section] = old
		error(fname .. ": " .. tostring(err), level)
	end
	return prof._config()[section]
end

-- prof.recorder{ enabled = ... } once the file has loaded (a hook, the
-- REPL): pauses (false) or resumes (true, the default: prof.recorder{}
-- resumes) the flight recorder at the next step boundary. Only `enabled`
-- changes; other keys may be given with the values the recorder runs
-- with. Returns the resolved section. Errors are raised at `level`.
local function recorder_switch(fname, spec, args, level)
	if type(args) ~= "table" then
		error(string.format("%s: expected a table, got %s (e.g. prof.recorder{ enabled = false })",
			fname, schema.describe(args)), level)
	end
	local t, msg = schema.check(spec, args)
	if not t then
		error(fname .. ": " .. msg, level)
	end
	local cur = state.raw.recorder
	if cur == nil then
		error(fname .. ": no recorder was set up when the policy file loaded; put "
			.. "prof.recorder{ ... } in the policy file (with enabled = false it starts "
			.. "paused)", level)
	end
	for _, k in ipairs(schema.sorted_keys(t)) do
		local now = cur[k]
		if now == nil then
			now = spec.keys[k].default
		end
		if k ~= "enabled" and t[k] ~= now then
			error(string.format("%s: '%s' cannot change while the process runs (it is %s; only "
				.. "'enabled' can: prof.recorder{ enabled = false }); set it in the policy file",
				fname, k, tostring(now)), level)
		end
	end
	local on = t.enabled ~= false
	local native = prof._native
	if type(native) ~= "table" or type(native.recorder) ~= "function" then
		error(fname .. ": not available here (no profhost host is running)", level)
	end
	local ok, err = pcall(native.recorder, on)
	if not ok then
		error(fname .. ": " .. tostring(err), level)
	end
	local new = shallow_copy(cur)
	new.enabled = on
	state.raw.recorder = new
	return prof._config().recorder
end

-- Builds prof.<section>.
local function config_function(section)
	local fname = "prof." .. section
	local spec = schema.section(section)
	return function(args)
		if state.done then
			if section == "recorder" then
				-- not a tail call: level 3 must be the caller's line
				local resolved = recorder_switch(fname, spec, args, 3)
				return resolved
			end
			if at_repl() then
				-- not a tail call: level 3 must be the caller's line
				local resolved = live_change(section, fname, spec, args, 3)
				return resolved
			end
			error(string.format("%s: can only be called while the policy file loads, not from a hook",
				fname), 2)
		end
		-- Level 3: pcall is 1, this function 2, its caller 3.
		local _, at = pcall(error, "", 3)
		at = tostring(at):gsub(":%s*$", "")
		if state.calls[section] then
			error(string.format("%s: called twice (first call at %s); put all %s settings in one call",
				fname, state.calls[section], section), 2)
		end
		if type(args) ~= "table" then
			error(string.format("%s: expected a table, got %s (e.g. %s)",
				fname, schema.describe(args), spec.example), 2)
		end
		local t, msg = schema.check(spec, args)
		if not t then
			error(fname .. ": " .. msg, 2)
		end
		state.raw[section] = t
		state.calls[section] = at ~= "" and at or "an earlier line"
		if section == "limits" then
			notify_limits()
		end
	end
end

for _, section in ipairs(schema.section_names()) do
	prof[section] = config_function(section)
end

-- Builds prof.on_<kind>.
local function hook_function(kind)
	local fname = "prof." .. kind
	return function(fn)
		if type(fn) ~= "function" then
			error(string.format("%s: expected a function, got %s (e.g. %s(function(%s) ... end))",
				fname, schema.describe(fn), fname,
				kind == "on_step" and "s" or kind == "on_trace_ready" and "trace" or
				kind == "on_hang" and "h" or "w"), 2)
		end
		local list = state.hooks[kind]
		list[#list + 1] = fn
		-- Added after loading (at the REPL, or by a hook): the host
		-- learns that this kind of hook now exists.
		local native = prof._native
		if state.done and type(native) == "table" and type(native.hooks_changed) == "function" then
			native.hooks_changed()
		end
	end
end

for _, kind in ipairs(HOOK_KINDS) do
	prof[kind] = hook_function(kind)
end

-- prof.capture_now{steps = N, reason = "..."}: record the next N steps as an
-- extra window. Raises the host's refusal as an error at the caller's line.
-- At the REPL it then waits for the window's files and returns what was
-- written (wait = false: returns true at once).
function prof.capture_now(args)
	local spec = schema.capture_now
	if type(args) ~= "table" then
		error(string.format("prof.capture_now: expected a table, got %s (e.g. %s)",
			schema.describe(args), spec.example), 2)
	end
	local t, msg = schema.check(spec, args)
	if not t then
		error("prof.capture_now: " .. msg, 2)
	end
	local reason = t.reason or spec.keys.reason.default
	local native = prof._native
	if t.job then
		-- every rank of the run: the request goes into the run directory;
		-- each rank's window appears as its own folder (no waiting here)
		if type(native) ~= "table" or type(native.capture_job) ~= "function" then
			error("prof.capture_now: not available here (no profhost host is running)", 2)
		end
		local ok, err = native.capture_job(t.steps, reason)
		if not ok then
			error("prof.capture_now: " .. tostring(err), 2)
		end
		return true
	end
	if type(native) ~= "table" or type(native.capture_now) ~= "function" then
		error("prof.capture_now: not available here (no profhost host is running)", 2)
	end
	local ok, err = native.capture_now(t.steps, reason)
	if not ok then
		error("prof.capture_now: " .. tostring(err), 2)
	end
	if t.wait ~= false and at_repl() then
		return repl().wait_capture(native)
	end
	return true
end

-- prof.dump{steps = N, reason = "..."}: write the flight recorder's last N
-- complete steps (default: prof.recorder's steps), the step that just ended
-- included, as a recorder<K>_steps<a>-<b> folder. The host thread writes
-- it; this returns at once. Returns true, or false and why nothing will be
-- written (the recorder is off, a window is recording, max_dumps used up,
-- no complete step yet): a refusal is not an error, so a hook may call it
-- on every slow step. Bad arguments raise.
function prof.dump(args)
	local spec = schema.dump
	if args == nil then
		args = {}
	end
	if type(args) ~= "table" then
		error(string.format("prof.dump: expected a table, got %s (e.g. %s)",
			schema.describe(args), spec.example), 2)
	end
	local t, msg = schema.check(spec, args)
	if not t then
		error("prof.dump: " .. msg, 2)
	end
	local native = prof._native
	if type(native) ~= "table" or type(native.dump) ~= "function" then
		return false, "not available here (no profhost host is running)"
	end
	local steps = t.steps or schema.resolve(state.raw).recorder.steps
	return native.dump(steps, t.reason or spec.keys.reason.default)
end

-- ------------------------------------------------------------ live queries

-- The host's native table, or an error at the caller's caller.
local function live_native(fname)
	local native = prof._native
	if type(native) ~= "table" or type(native.query) ~= "function" then
		error(fname .. ": not available here (no profhost host is running)", 3)
	end
	return native
end

-- prof.status(): step, window, next window, drops, settings, outputs.
function prof.status()
	return repl().status(live_native("prof.status").query("status"))
end

-- prof.top([n]): the last n (default 20) step times and recent statistics.
function prof.top(n)
	if n ~= nil and (math.type(n) ~= "integer" or n < 1) then
		error("prof.top: expected a step count >= 1, got " .. schema.describe(n), 2)
	end
	return repl().top(live_native("prof.top").query("top"), n or 20)
end

-- prof.stacks(): every thread's native stack, taken now (REPL only).
function prof.stacks()
	local native = live_native("prof.stacks")
	if not at_repl() then
		error("prof.stacks: only at the REPL (prof attach)", 2)
	end
	return repl().stacks(native.query("stacks"))
end

-- prof.sleep(ms): waits at the REPL without holding the policy VM.
function prof.sleep(ms)
	if math.type(ms) ~= "integer" and math.type(ms) ~= "float" then
		error("prof.sleep: expected milliseconds, got " .. schema.describe(ms), 2)
	end
	local ok, err = live_native("prof.sleep").sleep(math.floor(ms))
	if not ok then
		error("prof.sleep: " .. tostring(err), 2)
	end
end

-- prof.help(): what the REPL offers.
function prof.help()
	return repl().help()
end

-- ------------------------------------------------------------ --set

-- "5" -> 5, "0.5" -> 0.5, "true" -> true, anything else stays a string;
-- keys that take a string keep the text as it is.
local function parse_value(text, spec)
	if spec and (spec.kind == "string" or spec.kind == "enum") then
		return text
	end
	if text == "true" then
		return true
	elseif text == "false" then
		return false
	end
	return math.tointeger(tonumber(text)) or tonumber(text) or text
end

local function copy(t)
	local out = {}
	for k, v in pairs(t) do
		out[k] = type(v) == "table" and copy(v) or v
	end
	return out
end

-- Applies one override "section.key=value" (nested: "export.chrome.gzip=true")
-- on top of what the file set, through the same validation. A key under a
-- table-or-boolean key (chrome, cpu_samples, ...) turns that feature on.
-- Errors name the override: "--set schedule.active=x: 'active' must be ...".
function prof._apply_set(s)
	local label = "--set " .. tostring(s)
	if type(s) ~= "string" then
		error(label .. ": expected a string section.key=value", 0)
	end
	local path, text = s:match("^%s*([^=]-)%s*=(.*)$")
	if not path or not path:find(".", 1, true) then
		error(label .. ": expected section.key=value (e.g. schedule.active=5)", 0)
	end
	local parts = {}
	for part in path:gmatch("[^.]*") do
		parts[#parts + 1] = part
	end
	local section = parts[1]
	local spec = schema.section(section)
	if not spec then
		error(string.format("%s: unknown section '%s' (valid sections: %s)", label, section,
			table.concat(schema.section_names(), ", ")), 0)
	end
	for i = 2, #parts do
		if parts[i] == "" then
			error(label .. ": expected section.key=value (e.g. schedule.active=5)", 0)
		end
	end
	local value = parse_value(text, schema.spec_at(section, table.concat(parts, ".", 2)))

	local t = copy(state.raw[section] or {})
	if section == "schedule" and parts[2] == "whole" and value == true then
		-- one window for the whole process: the file's windows of steps
		-- (the built-in default's skip_first, active, ...) give way
		t = {}
	end
	local node = t
	for i = 2, #parts - 1 do
		if type(node[parts[i]]) ~= "table" then
			node[parts[i]] = {}
		end
		node = node[parts[i]]
	end
	node[parts[#parts]] = value

	local checked, msg = schema.check(spec, t)
	if not checked then
		error(label .. ": " .. msg, 0)
	end
	state.raw[section] = checked
	if section == "limits" then
		notify_limits()
	end
end

-- ------------------------------------------------------------ host side

function prof._reset()
	state = new_state()
	prof._native = nil
end

function prof._config()
	return schema.resolve(state.raw)
end

function prof._hooks()
	return state.hooks
end

function prof._load_done()
	state.done = true
	return prof._config(), state.hooks
end

-- The policy file's syntax error `msg` with a hint for a keyword written
-- as a key (`repeat = 2`, torch's spelling; see schema.keyword_hint):
-- `section` is the prof.<section> call the file opened last before it.
function prof._syntax_hint(msg, section)
	return schema.keyword_hint(msg, section)
end

return prof
