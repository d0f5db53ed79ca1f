-- prof.repl — the Lua side of the REPL (prof attach): compiling what the
-- user typed, printing results, and dressing up what the host answers to
-- prof.status(), prof.top(), prof.stacks() and prof.capture_now.
--
-- compile() and show() are called by the C side (policy_repl_eval); the
-- rest by lua/prof/init.lua. Pure functions apart from print() in
-- wait_capture() and help(), and the native calls they are given.

local M = {}

local MAX_DEPTH = 8      -- nested tables shown; deeper ones print as {...}
local MAX_ITEMS = 200    -- entries shown per table
local WIDTH = 78         -- a table fits on one line up to this column

-- ------------------------------------------------------------ compiling

-- Compiles a chunk as the `lua` prompt does: "=expr" and a bare expression
-- return their values, anything else runs as statements. Returns the
-- function, or nil, the message and true when the chunk only needs more
-- lines (its error is at <eof>). The caller passes an identity function as
-- the chunk's first argument: an expression is returned through it, so a
-- call typed at the prompt is not a tail call and errors it raises keep
-- their stdin:line.
function M.compile(src)
	local body = src
	if body:sub(1, 1) == "=" then
		body = body:sub(2)
	elseif body:match("^%s*return[%s;]") or body:match("^%s*return$") then
		body = nil
	end
	local fn
	if body then
		fn = load("local __repl_id = ... return __repl_id(" .. body .. "\n)", "=stdin", "t")
		if fn then
			return fn
		end
	end
	local err
	fn, err = load(src:sub(1, 1) == "=" and "return " .. src:sub(2) or src, "=stdin", "t")
	if fn then
		return fn
	end
	err = tostring(err)
	return nil, err, err:sub(-5) == "<eof>"
end

-- ------------------------------------------------------------ printing

local KEYWORDS = {}
for word in ([[and break do else elseif end false for function goto if in
	local nil not or repeat return then true until while]]):gmatch("%a+") do
	KEYWORDS[word] = true
end

local function quote(s)
	return (string.format("%q", s):gsub("\\\n", "\\n"))
end

local function has_tostring(v)
	local mt = getmetatable(v)
	return type(mt) == "table" and mt.__tostring ~= nil
end

-- Numbers first (by value), then strings (sorted), then the rest.
local TYPE_RANK = { number = 1, string = 2 }
local function key_less(a, b)
	local ra, rb = TYPE_RANK[type(a)] or 3, TYPE_RANK[type(b)] or 3
	if ra ~= rb then
		return ra < rb
	end
	if ra < 3 then
		return a < b
	end
	return tostring(a) < tostring(b)
end

local format

local function key_text(k)
	if type(k) == "string" and k:match("^[%a_][%w_]*$") and not KEYWORDS[k] then
		return k
	end
	return "[" .. format(k, 0, 0, {}, MAX_DEPTH) .. "]"
end

-- One value as text. `indent` is the indentation of the line the value is
-- on (nested lines get 2 more), `col` the column it starts at (a table fits
-- on one line when it ends by WIDTH), `seen` the tables being printed
-- (cycles), `depth` the nesting.
format = function(v, indent, col, seen, depth)
	local t = type(v)
	if t == "string" then
		return quote(v)
	elseif t ~= "table" or has_tostring(v) then
		return tostring(v)
	end
	if seen[v] then
		return "<cycle: " .. tostring(v) .. ">"
	end
	if depth >= MAX_DEPTH then
		return "{...}"
	end
	seen[v] = true
	local items, n = {}, rawlen(v)
	local shown = 0
	local inner = indent + 2
	local function add(text)
		shown = shown + 1
		if shown <= MAX_ITEMS then
			items[#items + 1] = text
		end
	end
	for i = 1, n do
		add(format(rawget(v, i), inner, inner, seen, depth + 1))
	end
	local keys = {}
	for k in next, v do
		if not (math.type(k) == "integer" and k >= 1 and k <= n) then
			keys[#keys + 1] = k
		end
	end
	table.sort(keys, key_less)
	for _, k in ipairs(keys) do
		local kt = key_text(k)
		add(kt .. " = " .. format(rawget(v, k), inner, inner + #kt + 3, seen, depth + 1))
	end
	seen[v] = nil
	if shown > MAX_ITEMS then
		items[#items + 1] = string.format("... (%d more)", shown - MAX_ITEMS)
	end
	if #items == 0 then
		return "{}"
	end
	local one = "{ " .. table.concat(items, ", ") .. " }"
	if col + #one <= WIDTH and not one:find("\n", 1, true) then
		return one
	end
	local pad = string.rep(" ", inner)
	return "{\n" .. pad .. table.concat(items, ",\n" .. pad) .. "\n"
		.. string.rep(" ", indent) .. "}"
end

-- A value as the REPL prints it: strings quoted, tables pretty-printed with
-- sorted keys, values with a __tostring as it says.
function M.format(v)
	return format(v, 0, 0, {}, 0)
end

-- The results of a command as one text (tab-separated, ending in a
-- newline), or nil when there are none.
function M.show(n, ...)
	if n == 0 then
		return nil
	end
	local parts = {}
	for i = 1, n do
		parts[i] = M.format((select(i, ...)))
	end
	return table.concat(parts, "\t") .. "\n"
end

-- ------------------------------------------------------------ live answers

-- prof.status(): the host's table as it is (the pretty-printer shows it).
function M.status(t)
	return t
end

local function percentile(sorted, p)
	if #sorted == 0 then
		return nil
	end
	local i = math.max(1, math.ceil(p * #sorted))
	return sorted[i]
end

local function ms(v)
	if v == nil then
		return "-"
	end
	return string.format("%.3f", v)
end

local function render_top(r)
	local lines = { string.format("%10s  %12s", "step", "time (ms)") }
	if r.current_step then
		lines[#lines + 1] = string.format("%10d  %12s  (running)", r.current_step, ms(r.current_ms))
	end
	for _, s in ipairs(r.steps) do
		lines[#lines + 1] = string.format("%10d  %12s", s.step, ms(s.ms))
	end
	if r.count > 0 then
		lines[#lines + 1] = string.format(
			"last %d steps: median %s ms, mean %s ms, p90 %s ms, min %s ms, max %s ms (step %d)",
			r.count, ms(r.median_ms), ms(r.mean_ms), ms(r.p90_ms), ms(r.min_ms), ms(r.max_ms),
			r.slowest_step)
	else
		lines[#lines + 1] = "no step has ended yet"
	end
	return table.concat(lines, "\n")
end

-- prof.top(n): t = { steps = { {step, ms}, ... oldest first }, current =
-- { step, running_ms } } from the host. Returns the last n steps, newest
-- first, with statistics over all recent steps; prints as a table.
function M.top(t, n)
	local steps = t and t.steps or {}
	local r = { steps = {}, count = #steps }
	local sorted, sum = {}, 0
	for i = #steps, 1, -1 do
		local s = steps[i]
		if #r.steps < n then
			r.steps[#r.steps + 1] = { step = s.step, ms = s.ms }
		end
		sorted[#sorted + 1] = s.ms
		sum = sum + s.ms
		if not r.max_ms or s.ms > r.max_ms then
			r.max_ms, r.slowest_step = s.ms, s.step
		end
	end
	table.sort(sorted)
	if #sorted > 0 then
		r.min_ms = sorted[1]
		r.mean_ms = sum / #sorted
		local mid = #sorted // 2
		r.median_ms = #sorted % 2 == 1 and sorted[mid + 1] or (sorted[mid] + sorted[mid + 1]) / 2
		r.p90_ms = percentile(sorted, 0.9)
	end
	if t and t.current then
		r.current_step, r.current_ms = t.current.step, t.current.running_ms
	end
	return setmetatable(r, { __tostring = render_top })
end

local function render_stacks(r)
	local lines = {}
	for _, th in ipairs(r) do
		local head = string.format("thread %d %s", th.tid, quote(th.name or "?"))
		if th.note then
			head = head .. " (" .. th.note .. ")"
		end
		if th.state ~= "ok" then
			lines[#lines + 1] = head .. ": " .. (th.reason or th.state)
		else
			lines[#lines + 1] = head .. ":"
			for i, f in ipairs(th.frames or {}) do
				lines[#lines + 1] = string.format("  #%-3d %s", i - 1, f)
			end
			if th.truncated then
				lines[#lines + 1] = "  ... (deeper frames not taken)"
			end
		end
	end
	if #lines == 0 then
		return "no threads"
	end
	return table.concat(lines, "\n")
end

-- prof.stacks(): t = { {tid, name, state, reason?, note?, frames = {...}},
-- ... } from the host; prints like a debugger's backtrace of every thread.
function M.stacks(t)
	return setmetatable(t or {}, { __tostring = render_stacks })
end

-- prof.capture_now at the REPL: waits (sleeping without the VM lock) until
-- the requested window is written, then returns what the host says of it
-- ({ state = "written", dir = ..., files = {...}, first_step, last_step,
-- ... }, or state = "lost").
function M.wait_capture(native)
	local c = native.query("capture", 0)
	if not c then
		return true
	end
	local said = false
	while c.state ~= "written" and c.state ~= "lost" do
		if c.state == "recording" and not said then
			print(string.format("recording steps %d-%d ...", c.first_step,
				c.first_step + c.steps - 1))
			said = true
		end
		native.sleep(20)
		c = native.query("capture", c.ticket) or { state = "lost" }
	end
	return c
end

local HELP = [[
profhost REPL: Lua in the running process (the policy's VM; its globals are yours).
  prof.status()                   step, window, next window, drops, settings, outputs
  prof.capture_now{steps = N}     record the next N steps now; waits and returns the
                                  window's files (wait = false: return at once)
  prof.top([n])                   the last n step times (default 20) and statistics
  prof.stacks()                   every thread's native stack, taken now
  prof.schedule{...}              change the schedule live (given keys replace;
                                  prof.schedule(false) turns it off)
  prof.capture{...}               change capture settings from the next window on
  prof.recorder{enabled = false}  pause the flight recorder (true: resume)
  prof.sleep(ms)                  wait without holding the VM
  print(...)                      prints here; =expr or a bare expression prints its value
Each command may run prof.limits{repl_ms} (default 10 s); Ctrl-C interrupts it.
Ctrl-D leaves; the process goes on.]]

-- prof.help(): prints what the REPL offers.
function M.help()
	print(HELP)
end

return M
