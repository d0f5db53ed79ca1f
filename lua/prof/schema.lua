-- prof.schema — what each prof.* configuration call accepts.
--
-- One spec per section (output, schedule, steps, capture, export, recorder,
-- watchdog, job, limits).
-- check() validates a user's table against a section's spec and returns a
-- normalized copy, or nil and a one-line message that names the key, the
-- value and what is expected (without the "prof.<section>: " prefix, which
-- the caller adds). resolve() turns the validated sections into the flat
-- configuration the C side reads (struct policy_config), defaults filled in.
--
-- Pure functions: no global state, no I/O.

local M = {}

local U32 = 4294967295
M.U32 = U32

-- ------------------------------------------------------------ spec builders

local function boolean(default)
	return { kind = "boolean", default = default }
end

-- `special` maps accepted out-of-range values to what they mean
-- ({ [-1] = 0 }), `note` says so in messages.
local function integer(min, max, default, special, note)
	return { kind = "integer", min = min, max = max, default = default,
		special = special, note = note }
end

-- A number (integer or not) from min to max.
local function number(min, max, default)
	return { kind = "number", min = min, max = max, default = default }
end

-- A non-empty string; `check(v)` may return a problem ("is not ...").
local function string_(default, check)
	return { kind = "string", default = default, check = check }
end

-- One of `values` (sorted list); `aliases` maps other accepted names to them.
local function enum(values, default, aliases)
	return { kind = "enum", values = values, default = default, aliases = aliases }
end

-- true/false, or a table of sub-keys (a table means "on, with these").
local function flag_or(default, keys, example)
	return { kind = "flag_or", default = default, keys = keys, example = example }
end

-- false, or a table of sub-keys (a table means "on, with these").
local function off_or(keys, example)
	return { kind = "off_or", default = false, keys = keys, example = example }
end

-- ------------------------------------------------------------ custom checks

local function check_lua_pattern(v)
	local ok, err = pcall(string.find, "", v)
	if not ok then
		err = tostring(err):gsub("^[^:]*:%d+: ", "")
		return "is not a valid Lua pattern (" .. err .. ")"
	end
	return nil
end

-- "optimizer", or "package.module:Class.method".
local function check_python(v)
	if v == "optimizer" then
		return nil
	end
	if v:match("^[%a_][%w_.]*:[%a_][%w_.]*$") then
		return nil
	end
	return "must be \"optimizer\" or \"package.module:Class.method\""
end

local function check_run_name(v)
	if v:find("/", 1, true) or v == "." or v == ".." then
		return "must be a single folder name (no '/', not '.' or '..')"
	end
	return nil
end

-- "auto", "SIGPROF" or "SIGRTMIN+N" (the C side checks N against SIGRTMAX).
local function check_signal(v)
	if v == "auto" or v == "SIGPROF" then
		return nil
	end
	local n = v:match("^SIGRTMIN%+(%d+)$")
	if n and tonumber(n) <= 30 then
		return nil
	end
	return 'must be "auto", "SIGPROF" or "SIGRTMIN+N" (N from 0 to 30)'
end

local function check_reason(v)
	if #v > 127 then
		return "must be at most 127 bytes long"
	end
	return nil
end

-- ------------------------------------------------------------ the sections

-- torch's key_averages().table(sort_by=...) names for the columns profhost
-- writes; the device_* names (torch >= 2.4) are aliases of the cuda_* ones.
M.sort_by_values = {
	"count", "cpu_time", "cpu_time_total", "cuda_time", "cuda_time_total",
	"self_cpu_time_total", "self_cuda_time_total",
	"cpu_memory_usage", "self_cpu_memory_usage", "cuda_memory_usage",
	"self_cuda_memory_usage",
}
local sort_by_aliases = {
	device_time = "cuda_time",
	device_time_total = "cuda_time_total",
	self_device_time_total = "self_cuda_time_total",
	device_memory_usage = "cuda_memory_usage",
	self_device_memory_usage = "self_cuda_memory_usage",
}

-- The prof.schedule keys that shape windows of steps (not `whole`).
M.WINDOW_KEYS = { "skip_first", "wait", "warmup", "active", "cycles" }

M.sections = {
	output = {
		example = 'prof.output{ dir = "prof_out", run = "baseline" }',
		keys = {
			dir = string_("prof_out"),
			run = string_(nil, check_run_name),
		},
	},
	schedule = {
		example = "prof.schedule{ skip_first = 10, wait = 5, warmup = 1, active = 3, cycles = 2 }",
		keys = {
			skip_first = integer(0, U32, 0),
			wait = integer(0, U32, 0),
			warmup = integer(0, U32, 0),
			active = integer(1, U32, 1),
			cycles = integer(0, U32, 0),
			-- one window for the whole process, steps or none
			whole = boolean(false),
		},
		hints = {
			["repeat"] = "torch's repeat is called 'cycles' here because repeat is a Lua keyword",
		},
		after = function(t)
			if not t.whole then
				return nil
			end
			for _, k in ipairs(M.WINDOW_KEYS) do
				if t[k] ~= nil then
					return string.format("'whole = true' records the whole process in one "
						.. "window, so '%s' has no meaning with it (leave out %s, or set "
						.. "whole = false)", k, table.concat(M.WINDOW_KEYS, ", "))
				end
			end
			return nil
		end,
	},
	steps = {
		example = 'prof.steps{ nvtx = "train_step" }',
		keys = {
			nvtx = string_(),
			domain = string_(),
			nvtx_mark = string_(),
			python = string_(nil, check_python),
			cuda = string_(),
			kernel = string_(nil, check_lua_pattern),
			every_ms = integer(0, U32, 0),
		},
		after = function(t)
			if t.domain and not (t.nvtx or t.nvtx_mark) then
				return "'domain' needs 'nvtx' or 'nvtx_mark' (the domain of which range or mark?)"
			end
			return nil
		end,
	},
	capture_range = {
		example = 'prof.capture_range{ nvtx = "eval", domain = "app", count = 2 }',
		keys = {
			nvtx = string_(),
			domain = string_(),
			count = integer(0, U32, 1, nil, "0: every time"),
		},
		required = { nvtx = true },
		hints = {
			["repeat"] = "nsys's repeat is called 'count' here (0 = every time)",
		},
	},
	capture = {
		example = "prof.capture{ cuda = true, nvtx = true, cpu_samples = { hz = 99 } }",
		keys = {
			nvtx = boolean(true),
			cuda = flag_or(true, {
				kernels = boolean(true),
				memcpy = boolean(true),
				memset = boolean(true),
				runtime = boolean(true),
				driver = boolean(true),
				sync = boolean(true),
				memory = boolean(true),
			}, "cuda = { driver = false }"),
			cpu_samples = off_or({
				hz = integer(1, 10000, 99),
				clock = enum({ "cpu", "wall" }, "cpu"),
				depth = integer(1, 512, 128),
				signal = string_("auto", check_signal),
			}, "cpu_samples = { hz = 99 }"),
			range_stacks = boolean(false),
			modules = boolean(false),
			cuda_backtrace = off_or({
				threshold_us = integer(1, U32, 10),
			}, "cuda_backtrace = { threshold_us = 10 }"),
			record_shapes = boolean(false),
			with_flops = boolean(false),
			profile_memory = boolean(false),
			with_stack = boolean(false),
			peak_tflops = number(0, 1e6, 0),
			buffer_mb = integer(1, 65536, 128),
		},
	},
	export = {
		example = "prof.export{ chrome = { gzip = true }, tensorboard = true }",
		keys = {
			chrome = flag_or(true, {
				gzip = boolean(false),
			}, "chrome = { gzip = true }"),
			tensorboard = boolean(false),
			key_averages = flag_or(true, {
				sort_by = enum(M.sort_by_values, "self_cpu_time_total", sort_by_aliases),
				row_limit = integer(0, U32, 50, { [-1] = 0 }, "0 or -1: all rows"),
				group_by = enum({ "domain", "name" }, "name"),
				group_by_input_shape = boolean(false),
				group_by_stack_n = integer(0, 128, 0),
			}, 'key_averages = { sort_by = "self_cuda_time_total" }'),
			stacks = flag_or(true, {
				metric = enum({ "self_cpu_time_total", "self_cuda_time_total" },
					"self_cpu_time_total", { self_device_time_total = "self_cuda_time_total" }),
			}, 'stacks = { metric = "self_cuda_time_total" }'),
			memory_timeline = boolean(true),
			summary = boolean(true),
			raw = boolean(true),
			report = flag_or(true, {
				text = boolean(true),
				html = boolean(true),
			}, "report = { html = false }"),
		},
	},
	recorder = {
		example = "prof.recorder{ steps = 20, mb = 256, max_dumps = 10 }",
		keys = {
			-- false: set up but paused; a hook or the REPL switches it
			-- with prof.recorder{ enabled = ... } (docs/recorder.md)
			enabled = boolean(true),
			steps = integer(1, 10000, 20),
			mb = integer(1, 65536, 256),
			max_dumps = integer(0, U32, 10),
			dump_on_crash = boolean(true),
			dump_on_signal = boolean(true),
			dump_on_exception = boolean(true),
			-- CPU samples between windows, as prof.capture{cpu_samples} asks
			cpu_samples = boolean(true),
			-- Python step phases between windows (PyTorch)
			phases = boolean(true),
			-- GPU work between windows, as prof.capture{cuda} asks for it
			-- (CUPTI stays on: a window's cost on every step)
			cuda = boolean(true),
			-- a dump on any rank is published in the run directory and
			-- every other rank dumps the same steps (docs/jobs.md)
			job = boolean(false),
		},
	},
	-- How the process watches the run directory for job-wide requests
	-- (prof capture RUN, job dumps: docs/jobs.md); 0: it does not.
	job = {
		example = "prof.job{ poll_ms = 1000 }",
		keys = {
			poll_ms = integer(0, 3600000, 1000),
		},
	},
	watchdog = {
		example = "prof.watchdog{ after_s = 300, factor = 10, dump = true }",
		keys = {
			after_s = number(0.01, 1e7, 300),
			factor = number(0, 1e6, 10),
			dump = boolean(true),
		},
	},
	limits = {
		example = "prof.limits{ hook_ms = 100, report_ms = 10000, load_ms = 2000, memory_mb = 64 }",
		keys = {
			hook_ms = integer(1, 60000, 100),
			report_ms = integer(1, 3600000, 10000),
			load_ms = integer(1, 600000, 2000),
			memory_mb = integer(4, 65536, 64),
			repl_ms = integer(1, 3600000, 10000),
			exit_ms = integer(100, 600000, 20000),
		},
	},
}

-- prof.capture_now's argument (not a section: it is an action).
M.capture_now = {
	example = 'prof.capture_now{ steps = 3, reason = "slow step" }',
	keys = {
		steps = integer(1, U32, nil),
		reason = string_("capture_now", check_reason),
		-- At the REPL: wait for the window's files (false: return at once).
		wait = boolean(true),
		-- Every rank of the run records the same steps (docs/jobs.md).
		job = boolean(false),
	},
	required = { steps = true },
}

-- prof.dump's argument (an action): the recorder's last `steps` steps.
M.dump = {
	example = 'prof.dump{ steps = 3, reason = "slow step" }',
	keys = {
		steps = integer(1, 10000, nil),
		reason = string_("dump", check_reason),
	},
}

-- ------------------------------------------------------------ messages

-- How a value is shown in a message: 0, 1.5, string "yes", boolean true,
-- table, function.
function M.describe(v)
	local t = type(v)
	if t == "number" then
		return tostring(v)
	elseif t == "string" then
		local s = v
		if #s > 60 then
			s = s:sub(1, 57) .. "..."
		end
		s = string.format("%q", s):gsub("\\\n", "\\n")
		return "string " .. s
	elseif t == "boolean" then
		return "boolean " .. tostring(v)
	elseif t == "nil" then
		return "nothing"
	end
	return t
end

-- The keys of table `keys`, sorted (a new list).
local function sorted_keys(keys)
	local list = {}
	for k in pairs(keys) do
		list[#list + 1] = k
	end
	table.sort(list)
	return list
end
M.sorted_keys = sorted_keys

-- What a spec expects, as a phrase: "an integer >= 1", "a boolean", ...
local function expected(spec, v)
	local kind = spec.kind
	if kind == "boolean" then
		return "a boolean"
	elseif kind == "integer" then
		local note = spec.note and " (" .. spec.note .. ")" or ""
		if spec.max == U32 then
			if type(v) == "number" and v > U32 then
				return "an integer <= " .. U32 .. note
			end
			return "an integer >= " .. spec.min .. note
		end
		return "an integer from " .. spec.min .. " to " .. spec.max .. note
	elseif kind == "number" then
		return "a number from " .. spec.min .. " to " .. spec.max
	elseif kind == "string" then
		return "a non-empty string"
	elseif kind == "enum" then
		local names = {}
		for i, name in ipairs(spec.values) do
			names[i] = '"' .. name .. '"'
		end
		return "one of " .. table.concat(names, ", ")
	elseif kind == "flag_or" then
		return "a boolean or a table (e.g. " .. spec.example .. ")"
	elseif kind == "off_or" then
		return "false or a table (e.g. " .. spec.example .. ")"
	end
	return kind
end

local function bad_value(spec, path, v)
	return string.format("'%s' must be %s, got %s", path, expected(spec, v), M.describe(v))
end

-- ------------------------------------------------------------ validation

local check_table

-- Validates one value. Returns the normalized value, or nil and a message.
local function check_value(spec, v, path)
	local kind = spec.kind
	if kind == "boolean" then
		if type(v) ~= "boolean" then
			return nil, bad_value(spec, path, v)
		end
		return v
	elseif kind == "integer" then
		local n = type(v) == "number" and math.tointeger(v) or nil
		if n and spec.special and spec.special[n] then
			return spec.special[n]
		end
		if not n or n < spec.min or n > spec.max then
			return nil, bad_value(spec, path, v)
		end
		return n
	elseif kind == "number" then
		if type(v) ~= "number" or v ~= v or v < spec.min or v > spec.max then
			return nil, bad_value(spec, path, v)
		end
		return v
	elseif kind == "string" then
		if type(v) ~= "string" or v == "" then
			return nil, bad_value(spec, path, v)
		end
		if spec.check then
			local problem = spec.check(v)
			if problem then
				return nil, string.format("'%s' %s, got %s", path, problem, M.describe(v))
			end
		end
		return v
	elseif kind == "enum" then
		if type(v) == "string" then
			if spec.aliases and spec.aliases[v] then
				return spec.aliases[v]
			end
			for _, name in ipairs(spec.values) do
				if name == v then
					return v
				end
			end
		end
		return nil, bad_value(spec, path, v)
	elseif kind == "flag_or" or kind == "off_or" then
		if v == false or (v == true and kind == "flag_or") then
			return v
		end
		if type(v) ~= "table" then
			return nil, bad_value(spec, path, v)
		end
		return check_table(spec.keys, v, path .. ".")
	end
	error("prof.schema: unknown spec kind " .. tostring(kind))
end

-- Validates a table of named keys. `prefix` is prepended to key names in
-- messages ("cuda."). Returns a normalized copy, or nil and a message.
check_table = function(keys, t, prefix, hints)
	local out = {}
	for k, v in pairs(t) do
		if type(k) ~= "string" then
			local what = type(k) == "number" and "positional value " .. M.describe(v)
				or "key " .. M.describe(k)
			local inside = prefix == "" and "" or " in '" .. prefix:sub(1, -2) .. "'"
			return nil, string.format("unexpected %s%s (write key = value)", what, inside)
		end
		local spec = keys[k]
		if not spec then
			local valid = "valid keys: " .. table.concat(sorted_keys(keys), ", ")
			local hint = hints and hints[k]
			return nil, string.format("unknown key '%s%s' (%s)", prefix, k,
				hint and hint .. "; " .. valid or valid)
		end
		local nv, msg = check_value(spec, v, prefix .. k)
		if nv == nil then
			return nil, msg
		end
		out[k] = nv
	end
	return out
end

-- The spec of a section, or nil.
function M.section(name)
	return M.sections[name]
end

-- Sorted section names.
function M.section_names()
	return sorted_keys(M.sections)
end

-- Validates `t` for a section (or for a spec table such as M.capture_now).
-- Returns a normalized copy, or nil and a message such as
-- "unknown key 'activ' (valid keys: active, cycles, ...)".
function M.check(spec, t)
	local out, msg = check_table(spec.keys, t, "", spec.hints)
	if not out then
		return nil, msg
	end
	for k in pairs(spec.required or {}) do
		if out[k] == nil then
			return nil, string.format("'%s' is required (e.g. %s)", k, spec.example)
		end
	end
	if spec.after then
		msg = spec.after(out)
		if msg then
			return nil, msg
		end
	end
	return out
end

-- A Lua syntax error at a keyword written as a key, as torch spells
-- `repeat = 2` (Lua refuses it before any prof.* call runs: "p.lua:3:
-- unexpected symbol near 'repeat'"): `msg` with the hint the section's
-- ["repeat"] key gets added, "p.lua:3: unexpected symbol near 'repeat'
-- (torch's repeat is called 'cycles' here ...)". `section` is the
-- prof.<section> call the file opened last before the error's line
-- ("" or nil: none); without a hint there, prof.schedule's. Returns `msg`
-- unchanged when no hint applies.
function M.keyword_hint(msg, section)
	if type(msg) ~= "string" then
		return msg
	end
	local word = msg:match("near '([%a_][%w_]*)'$")
	if not word then
		return msg
	end
	local spec = M.sections[section or ""]
	local hint = spec and spec.hints and spec.hints[word]
	if not hint then
		hint = M.sections.schedule.hints[word]
	end
	if not hint then
		return msg
	end
	return msg .. " (" .. hint .. ")"
end

-- The spec at a dotted path inside a section ("chrome.gzip" in export), or
-- nil when there is none.
function M.spec_at(section, path)
	local spec = M.sections[section]
	local keys = spec and spec.keys
	local leaf
	for part in path:gmatch("[^.]+") do
		if not keys then
			return nil
		end
		leaf = keys[part]
		if not leaf then
			return nil
		end
		keys = leaf.keys
	end
	return leaf
end

-- ------------------------------------------------------------ resolution

-- The value of `key` in a validated section table, or its default.
local function get(section, t, key)
	local v = t and t[key]
	if v == nil then
		v = M.sections[section].keys[key].default
	end
	return v
end

-- A flag_or/off_or key resolved to false or a table with its defaults.
local function get_sub(section, t, key)
	local spec = M.sections[section].keys[key]
	local v = t and t[key]
	if v == nil then
		v = spec.default
	end
	if v == false then
		return false
	end
	local out = {}
	for k, s in pairs(spec.keys) do
		local sv
		if type(v) == "table" then
			sv = v[k]
		end
		if sv == nil then
			sv = s.default
		end
		out[k] = sv
	end
	return out
end

-- The configuration the C side reads, from the validated sections in `raw`
-- (section name -> normalized table; an absent section means "defaults";
-- an absent schedule means "schedule disabled"). Field names follow
-- struct policy_config.
function M.resolve(raw)
	local o, s, st, c, e, l = raw.output, raw.schedule, raw.steps, raw.capture,
		raw.export, raw.limits
	local cr = raw.capture_range
	local rec = raw.recorder
	local wd = raw.watchdog
	local jb = raw.job

	local cuda = get_sub("capture", c, "cuda")
	local samples = get_sub("capture", c, "cpu_samples")
	local bt = get_sub("capture", c, "cuda_backtrace")
	local chrome = get_sub("export", e, "chrome")
	local ka = get_sub("export", e, "key_averages")
	local report = get_sub("export", e, "report")
	local stacks = get_sub("export", e, "stacks")

	return {
		output = {
			dir = get("output", o, "dir"),
			run = get("output", o, "run"),
		},
		schedule = {
			enabled = s ~= nil,
			skip_first = get("schedule", s, "skip_first"),
			wait = get("schedule", s, "wait"),
			warmup = get("schedule", s, "warmup"),
			active = get("schedule", s, "active"),
			cycles = get("schedule", s, "cycles"),
			whole = get("schedule", s, "whole"),
		},
		steps = {
			nvtx = st and st.nvtx,
			nvtx_domain = st and st.domain,
			nvtx_mark = st and st.nvtx_mark,
			python = st and st.python,
			cuda = st and st.cuda,
			kernel = st and st.kernel,
			every_ms = get("steps", st, "every_ms"),
		},
		capture_range = {
			nvtx = cr and cr.nvtx,
			nvtx_domain = cr and cr.domain,
			count = get("capture_range", cr, "count"),
		},
		capture = {
			nvtx = get("capture", c, "nvtx"),
			cuda_kernels = cuda and cuda.kernels or false,
			cuda_memcpy = cuda and cuda.memcpy or false,
			cuda_memset = cuda and cuda.memset or false,
			cuda_runtime = cuda and cuda.runtime or false,
			cuda_driver = cuda and cuda.driver or false,
			cuda_sync = cuda and cuda.sync or false,
			cuda_memory = cuda and cuda.memory or false,
			cpu_hz = samples and samples.hz or 0,
			cpu_wall_clock = samples and samples.clock == "wall" or false,
			cpu_depth = samples and samples.depth
				or M.sections.capture.keys.cpu_samples.keys.depth.default,
			cpu_signal = samples and samples.signal
				or M.sections.capture.keys.cpu_samples.keys.signal.default,
			range_stacks = get("capture", c, "range_stacks"),
			modules = get("capture", c, "modules"),
			cuda_backtrace_us = bt and bt.threshold_us or 0,
			record_shapes = get("capture", c, "record_shapes"),
			with_flops = get("capture", c, "with_flops"),
			profile_memory = get("capture", c, "profile_memory"),
			with_stack = get("capture", c, "with_stack"),
			peak_tflops = get("capture", c, "peak_tflops"),
			buffer_mb = get("capture", c, "buffer_mb"),
		},
		export = {
			chrome = chrome ~= false,
			chrome_gzip = chrome and chrome.gzip or false,
			tensorboard = get("export", e, "tensorboard"),
			key_averages = ka ~= false,
			sort_by = ka and ka.sort_by or M.sections.export.keys.key_averages.keys.sort_by.default,
			row_limit = ka and ka.row_limit or M.sections.export.keys.key_averages.keys.row_limit.default,
			group_by = ka and ka.group_by or M.sections.export.keys.key_averages.keys.group_by.default,
			group_by_input_shape = ka and ka.group_by_input_shape or false,
			group_by_stack_n = ka and ka.group_by_stack_n or 0,
			stacks = stacks ~= false,
			stacks_metric = stacks and stacks.metric
				or M.sections.export.keys.stacks.keys.metric.default,
			memory_timeline = get("export", e, "memory_timeline"),
			summary = get("export", e, "summary"),
			raw = get("export", e, "raw"),
			report_text = report and report.text or false,
			report_html = report and report.html or false,
		},
		recorder = {
			enabled = rec ~= nil,
			on = get("recorder", rec, "enabled"),
			steps = get("recorder", rec, "steps"),
			mb = get("recorder", rec, "mb"),
			max_dumps = get("recorder", rec, "max_dumps"),
			dump_on_crash = get("recorder", rec, "dump_on_crash"),
			dump_on_signal = get("recorder", rec, "dump_on_signal"),
			dump_on_exception = get("recorder", rec, "dump_on_exception"),
			cpu_samples = get("recorder", rec, "cpu_samples"),
			phases = get("recorder", rec, "phases"),
			cuda = get("recorder", rec, "cuda"),
			job = get("recorder", rec, "job"),
		},
		job = {
			poll_ms = get("job", jb, "poll_ms"),
		},
		watchdog = {
			enabled = wd ~= nil,
			after_s = get("watchdog", wd, "after_s"),
			factor = get("watchdog", wd, "factor"),
			dump = get("watchdog", wd, "dump"),
		},
		limits = {
			hook_ms = get("limits", l, "hook_ms"),
			report_ms = get("limits", l, "report_ms"),
			load_ms = get("limits", l, "load_ms"),
			memory_mb = get("limits", l, "memory_mb"),
			repl_ms = get("limits", l, "repl_ms"),
			exit_ms = get("limits", l, "exit_ms"),
		},
	}
end

return M
