-- Specs for lua/prof/repl.lua and the REPL side of lua/prof/init.lua: what
-- someone typing at `prof attach` sees.

local repl = require("prof.repl")
local prof = require("prof")

-- Runs a compiled chunk the way the host does (identity as argument).
local function run(src)
	local fn, err, incomplete = repl.compile(src)
	if not fn then
		return nil, err, incomplete
	end
	return table.pack(fn(function(...) return ... end))
end

describe("prof.repl", function()
	describe("compile", function()
		it("returns the values of a bare expression and of =expr", function()
			assert.are.same({ n = 1, 2 }, run("1 + 1"))
			assert.are.same({ n = 1, 3 }, run("=1 + 2"))
			assert.are.same({ n = 3, 1, "a", nil }, run("1, 'a', nil"))
		end)

		it("runs statements, which return nothing unless they say so", function()
			assert.are.same({ n = 0 }, run("local x = 1"))
			assert.are.same({ n = 1, 5 }, run("local x = 5 return x"))
			assert.are.same({ n = 1, 7 }, run("return 7"))
		end)

		it("says a chunk that needs more lines is incomplete", function()
			for _, src in ipairs({ "for i = 1, 2 do", "f(", "x = {", "if x then", "=(1 +" }) do
				local _, err, incomplete = run(src)
				assert.is_true(incomplete, src .. ": " .. tostring(err))
			end
		end)

		it("reports a syntax error with stdin:line, not as incomplete", function()
			local _, err, incomplete = run("x = = 1")
			assert.is_false(incomplete)
			assert.matches("^stdin:1: ", err)
			_, err = run("a = 1\nb = )")
			assert.matches("^stdin:2: ", err)
		end)
	end)

	describe("format", function()
		it("prints scalars as Lua would write them", function()
			assert.are.equal('"a\\nb"', repl.format("a\nb"))
			assert.are.equal("1", repl.format(1))
			assert.are.equal("1.0", repl.format(1.0))
			assert.are.equal("nil", repl.format(nil))
			assert.are.equal("true", repl.format(true))
		end)

		it("prints tables with the sequence first and sorted keys", function()
			assert.are.equal('{ 5, 6, [10] = true, a = "x", b = { 1 }, ["end"] = 2, ["not id"] = 1 }',
				repl.format({ 5, 6, b = { 1 }, a = "x", [10] = true, ["not id"] = 1, ["end"] = 2 }))
			assert.are.equal("{}", repl.format({}))
		end)

		it("wraps a table that does not fit one line, nested lines indented", function()
			local s = repl.format({ long = string.rep("x", 80), short = { a = 1 } })
			assert.are.equal('{\n  long = "' .. string.rep("x", 80) .. '",\n  short = { a = 1 }\n}', s)
		end)

		it("marks cycles and stops at depth 8", function()
			local t = {}
			t.me = t
			assert.matches("^{ me = <cycle: table: ", repl.format(t))
			local deep = {}
			local cur = deep
			for _ = 1, 10 do
				cur.next = {}
				cur = cur.next
			end
			assert.matches("{%.%.%.}", repl.format(deep))
		end)

		it("limits a huge table to 200 entries", function()
			local big = {}
			for i = 1, 1000 do
				big[i] = i
			end
			assert.matches("%.%.%. %(800 more%)", repl.format(big))
		end)

		it("uses __tostring where a value has one", function()
			local v = setmetatable({}, { __tostring = function() return "custom" end })
			assert.are.equal("custom", repl.format(v))
			assert.are.equal("{ custom }", repl.format({ v }))
		end)

		it("shows results tab-separated on one line, nothing for none", function()
			assert.are.equal('1\t"a"\tnil\n', repl.show(3, 1, "a", nil))
			assert.is_nil(repl.show(0))
		end)
	end)

	describe("top", function()
		it("lists the last steps newest first, with statistics over all", function()
			local steps = {}
			for i = 1, 10 do
				steps[i] = { step = 100 + i, ms = i * 1.0 }
			end
			local r = repl.top({ steps = steps, current = { step = 111, running_ms = 0.5 } }, 3)
			assert.are.same({ { step = 110, ms = 10.0 }, { step = 109, ms = 9.0 }, { step = 108, ms = 8.0 } },
				r.steps)
			assert.are.equal(10, r.count)
			assert.are.equal(5.5, r.median_ms)
			assert.are.equal(5.5, r.mean_ms)
			assert.are.equal(9.0, r.p90_ms)
			assert.are.equal(1.0, r.min_ms)
			assert.are.equal(10.0, r.max_ms)
			assert.are.equal(110, r.slowest_step)
			local text = tostring(r)
			assert.matches("111%s+0%.500  %(running%)", text)
			assert.matches("110%s+10%.000", text)
			assert.matches("last 10 steps: median 5%.500 ms", text)
		end)

		it("says when no step has ended", function()
			assert.matches("no step has ended yet", tostring(repl.top({ steps = {} }, 20)))
		end)
	end)

	describe("stacks", function()
		it("prints each thread's frames, or why there are none", function()
			local s = repl.stacks({
				{ tid = 10, name = "python3", state = "ok", note = "main thread",
					frames = { "0x1 nanosleep+0x1 (libc.so.6)", "0x2 main+0x5 (app)" } },
				{ tid = 11, name = "profhost", state = "blocked", reason = "blocks signals" },
			})
			assert.are.equal(10, s[1].tid)
			assert.are.equal('thread 10 "python3" (main thread):\n'
				.. "  #0   0x1 nanosleep+0x1 (libc.so.6)\n"
				.. "  #1   0x2 main+0x5 (app)\n"
				.. 'thread 11 "profhost": blocks signals', tostring(s))
		end)
	end)
end)

describe("prof at the REPL", function()
	local applied, native

	before_each(function()
		prof._reset()
		applied = {}
		local active = false
		native = {
			repl_active = function() return active end,
			reconfigure = function(section)
				applied[#applied + 1] = { section, prof._config()[section] }
			end,
			capture_now = function() return true end,
			query = function(what) return { asked = what } end,
			sleep = function() end,
		}
		prof._native = native
		prof._load_done()
		function native.enter() active = true end
	end)

	it("changes the schedule live, keeping the keys not given", function()
		native.enter()
		local s = prof.schedule { wait = 5, active = 2 }
		assert.are.equal(5, s.wait)
		s = prof.schedule { active = 4 }
		assert.are.same({ enabled = true, skip_first = 0, wait = 5, warmup = 0, active = 4, cycles = 0, whole = false }, s)
		assert.are.equal(2, #applied)
		assert.are.equal("schedule", applied[2][1])
		s = prof.schedule(false)
		assert.is_false(s.enabled)
	end)

	it("switches the schedule to the whole process live, and back", function()
		native.enter()
		prof.schedule { wait = 5, active = 2 }
		local s = prof.schedule { whole = true }
		assert.are.same({ enabled = true, skip_first = 0, wait = 0, warmup = 0, active = 1,
			cycles = 0, whole = true }, s)
		assert.has_error(function() prof.schedule { active = 3 } end)
		s = prof.schedule { whole = false, active = 3 }
		assert.is_false(s.whole)
		assert.are.equal(3, s.active)
		assert.are.equal(3, #applied)
	end)

	it("changes capture settings live", function()
		native.enter()
		local c = prof.capture { cpu_samples = { hz = 250 } }
		assert.are.equal(250, c.cpu_hz)
		assert.are.equal("capture", applied[1][1])
	end)

	it("keeps the old configuration when the host refuses", function()
		native.enter()
		native.reconfigure = function() error("not in a forked child", 0) end
		local ok, err = pcall(prof.schedule, { active = 3 })
		assert.is_false(ok)
		assert.matches("prof.schedule: not in a forked child", err)
		assert.is_false(prof._config().schedule.enabled)
	end)

	it("refuses sections that cannot change while running", function()
		native.enter()
		local ok, err = pcall(prof.output, { dir = "x" })
		assert.is_false(ok)
		assert.matches("prof.output: cannot change while the process runs", err)
	end)

	it("still refuses configuration calls outside the REPL after loading", function()
		local ok, err = pcall(prof.schedule, { active = 3 })
		assert.is_false(ok)
		assert.matches("can only be called while the policy file loads", err)
	end)

	it("asks the host for status and top", function()
		assert.are.same({ asked = "status" }, prof.status())
		assert.are.equal(0, prof.top(5).count)
	end)

	it("keeps prof.stacks to the REPL", function()
		local ok, err = pcall(prof.stacks)
		assert.is_false(ok)
		assert.matches("only at the REPL", err)
		native.enter()
		assert.are.equal("stacks", prof.stacks().asked)
	end)

	it("says the live functions need a host", function()
		prof._native = nil
		local ok, err = pcall(prof.status)
		assert.is_false(ok)
		assert.matches("prof.status: not available here", err)
	end)
end)
