-- Specs for lua/prof: what a policy author sees from each prof.* call.

local prof = require("prof")
local policy_file = require("policy_file")
local run, error_of, config_of = policy_file.run, policy_file.error_of, policy_file.config_of

describe("prof", function()
	before_each(function()
		prof._reset()
	end)

	it("is the module require('prof') returns, API version 1", function()
		assert.are.equal(prof, require("prof"))
		assert.are.equal(1, prof.api_version)
	end)

	describe("defaults", function()
		it("apply when the policy sets nothing", function()
			local c = config_of("")
			assert.are.same({ dir = "prof_out" }, c.output)
			assert.is_false(c.schedule.enabled)
			assert.is_nil(c.steps.nvtx)
			assert.are.equal(0, c.steps.every_ms)
			assert.are.same({
				nvtx = true, cuda_kernels = true, cuda_memcpy = true, cuda_memset = true,
				cuda_runtime = true, cuda_driver = true, cuda_sync = true, cuda_memory = true,
				cpu_hz = 0, cpu_wall_clock = false, cpu_depth = 128, cpu_signal = "auto",
				range_stacks = false, modules = false, cuda_backtrace_us = 0,
				record_shapes = false, with_flops = false, profile_memory = false,
				with_stack = false, peak_tflops = 0, buffer_mb = 128,
			}, c.capture)
			assert.are.same({
				chrome = true, chrome_gzip = false, tensorboard = false, key_averages = true,
				sort_by = "self_cpu_time_total", row_limit = 50, group_by = "name",
				group_by_input_shape = false, group_by_stack_n = 0,
				stacks = true, stacks_metric = "self_cpu_time_total",
				memory_timeline = true, summary = true,
				raw = true, report_text = true, report_html = true,
			}, c.export)
			assert.are.same({ hook_ms = 100, report_ms = 10000, load_ms = 2000, memory_mb = 64,
				repl_ms = 10000, exit_ms = 20000 }, c.limits)
		end)

		it("fill the keys a call leaves out", function()
			local c = config_of("prof.schedule{ active = 3 }")
			assert.are.same({ enabled = true, skip_first = 0, wait = 0, warmup = 0, active = 3,
				cycles = 0, whole = false }, c.schedule)
		end)

		it("are what the built-in default policy changes", function()
			local f = assert(io.open("lua/prof/default.lua"))
			local src = f:read("a")
			f:close()
			local c = config_of(src)
			assert.are.same({ enabled = true, skip_first = 10, wait = 0, warmup = 1, active = 5,
				cycles = 1, whole = false }, c.schedule)
		end)
	end)

	describe("prof.output", function()
		it("sets dir and run", function()
			local c = config_of('prof.output{ dir = "/tmp/out", run = "baseline" }')
			assert.are.same({ dir = "/tmp/out", run = "baseline" }, c.output)
		end)

		it("rejects an empty dir and a run name with a slash", function()
			assert.are.equal(
				"myprof.lua:1: prof.output: 'dir' must be a non-empty string, got string \"\"",
				error_of('prof.output{ dir = "" }'))
			assert.are.equal(
				"myprof.lua:1: prof.output: 'run' must be a single folder name (no '/', not '.' or '..'), got string \"a/b\"",
				error_of('prof.output{ run = "a/b" }'))
		end)

		it("names the wrong type", function()
			assert.are.equal("myprof.lua:1: prof.output: 'dir' must be a non-empty string, got 5",
				error_of("prof.output{ dir = 5 }"))
		end)
	end)

	describe("prof.schedule", function()
		it("takes torch's fields", function()
			local c = config_of("prof.schedule{ skip_first = 10, wait = 5, warmup = 1, active = 3, cycles = 2 }")
			assert.are.same({ enabled = true, skip_first = 10, wait = 5, warmup = 1, active = 3,
				cycles = 2, whole = false }, c.schedule)
		end)

		it("reports an unknown key at the caller's line with the valid keys", function()
			assert.are.equal(
				"myprof.lua:3: prof.schedule: unknown key 'activ' (valid keys: active, cycles, skip_first, wait, warmup, whole)",
				error_of("-- my policy\n\nprof.schedule{ activ = 3 }"))
		end)

		it("explains that torch's repeat is cycles", function()
			local err = error_of('prof.schedule{ active = 1, ["repeat"] = 2 }')
			assert.matches("^myprof%.lua:1: prof%.schedule: unknown key 'repeat' %(torch's repeat is called 'cycles' here", err)
			assert.matches("valid keys: active, cycles, skip_first, wait, warmup, whole%)$", err)
		end)

		it("explains repeat = 2, torch's spelling, which Lua refuses as a syntax error", function()
			-- The file does not compile: the host hands Lua's message
			-- and the call it is in to prof._syntax_hint.
			local _, msg = load("prof.schedule{ active = 1, repeat = 2 }", "=myprof.lua", "t")
			assert.are.equal("myprof.lua:1: unexpected symbol near 'repeat'", msg)
			assert.are.equal("myprof.lua:1: unexpected symbol near 'repeat' (torch's repeat is "
				.. "called 'cycles' here because repeat is a Lua keyword)",
				prof._syntax_hint(msg, "schedule"))
			assert.are.equal("myprof.lua:1: unexpected symbol near 'repeat' (nsys's repeat is "
				.. "called 'count' here (0 = every time))",
				prof._syntax_hint(msg, "capture_range"))
			-- outside any prof.* call: torch's spelling is the likely one
			assert.matches("%(torch's repeat is called 'cycles' here",
				prof._syntax_hint(msg, ""))
			assert.matches("%(torch's repeat is called 'cycles' here",
				prof._syntax_hint(msg, "output"))
			-- other syntax errors are left as Lua wrote them
			assert.are.equal("myprof.lua:2: unexpected symbol near '='",
				prof._syntax_hint("myprof.lua:2: unexpected symbol near '='", "schedule"))
			assert.are.equal("myprof.lua:1: unexpected symbol near 'until'",
				prof._syntax_hint("myprof.lua:1: unexpected symbol near 'until'", "schedule"))
		end)

		it("rejects active = 0, negative counts, fractions and strings", function()
			assert.are.equal("myprof.lua:1: prof.schedule: 'active' must be an integer >= 1, got 0",
				error_of("prof.schedule{ active = 0 }"))
			assert.are.equal("myprof.lua:1: prof.schedule: 'wait' must be an integer >= 0, got -1",
				error_of("prof.schedule{ wait = -1 }"))
			assert.are.equal("myprof.lua:1: prof.schedule: 'warmup' must be an integer >= 0, got 1.5",
				error_of("prof.schedule{ warmup = 1.5 }"))
			assert.are.equal(
				"myprof.lua:1: prof.schedule: 'cycles' must be an integer >= 0, got string \"2\"",
				error_of('prof.schedule{ cycles = "2" }'))
			assert.are.equal(
				"myprof.lua:1: prof.schedule: 'active' must be an integer <= 4294967295, got 4294967296",
				error_of("prof.schedule{ active = 4294967296 }"))
		end)

		it("turns the schedule on with an empty table", function()
			local c = config_of("prof.schedule{}")
			assert.are.same({ enabled = true, skip_first = 0, wait = 0, warmup = 0, active = 1,
				cycles = 0, whole = false }, c.schedule)
		end)

		it("records the whole process in one window with whole = true", function()
			local c = config_of("prof.schedule{ whole = true }")
			assert.are.same({ enabled = true, skip_first = 0, wait = 0, warmup = 0, active = 1,
				cycles = 0, whole = true }, c.schedule)
			prof._reset()
			c = config_of("prof.schedule{ whole = false, active = 3 }")
			assert.is_false(c.schedule.whole)
			assert.are.equal(3, c.schedule.active)
		end)

		it("refuses whole = true beside the keys of windows of steps", function()
			assert.are.equal("myprof.lua:1: prof.schedule: 'whole = true' records the whole "
				.. "process in one window, so 'active' has no meaning with it (leave out "
				.. "skip_first, wait, warmup, active, cycles, or set whole = false)",
				error_of("prof.schedule{ whole = true, active = 3 }"))
			assert.matches("so 'skip_first' has no meaning",
				error_of("prof.schedule{ skip_first = 0, whole = true }"))
			assert.are.equal("myprof.lua:1: prof.schedule: 'whole' must be a boolean, got 1",
				error_of("prof.schedule{ whole = 1 }"))
		end)

		it("accepts a float with an integral value as an integer", function()
			local c = config_of("prof.schedule{ active = 3.0 }")
			assert.are.equal("integer", math.type(c.schedule.active))
		end)

		it("refuses a second call, naming the first one's line", function()
			assert.are.equal(
				"myprof.lua:4: prof.schedule: called twice (first call at myprof.lua:2); put all schedule settings in one call",
				error_of("\nprof.schedule{ active = 1 }\n\nprof.schedule{ active = 2 }"))
		end)

		it("wants a table", function()
			assert.matches("^myprof%.lua:1: prof%.schedule: expected a table, got string \"x\" %(e%.g%. prof%.schedule{",
				error_of('prof.schedule("x")'))
			assert.matches("^myprof%.lua:1: prof%.schedule: expected a table, got nothing",
				error_of("prof.schedule()"))
		end)

		it("refuses positional values", function()
			assert.are.equal(
				"myprof.lua:1: prof.schedule: unexpected positional value 1 (write key = value)",
				error_of("prof.schedule{ 1, 2 }"))
		end)
	end)

	describe("prof.steps", function()
		it("sets every step source", function()
			local c = config_of([[prof.steps{ nvtx = "train_step", domain = "app",
				nvtx_mark = "tick", python = "optimizer", cuda = "cudaGraphLaunch",
				kernel = "^ncclKernel_AllReduce", every_ms = 500 }]])
			assert.are.same({ nvtx = "train_step", nvtx_domain = "app", nvtx_mark = "tick",
				python = "optimizer", cuda = "cudaGraphLaunch", kernel = "^ncclKernel_AllReduce",
				every_ms = 500 }, c.steps)
		end)

		it("accepts a python module:qualname", function()
			local c = config_of('prof.steps{ python = "my.trainer:Trainer.training_step" }')
			assert.are.equal("my.trainer:Trainer.training_step", c.steps.python)
		end)

		it("rejects a malformed python target", function()
			assert.are.equal(
				"myprof.lua:1: prof.steps: 'python' must be \"optimizer\" or \"package.module:Class.method\", got string \"train step\"",
				error_of('prof.steps{ python = "train step" }'))
		end)

		it("rejects a kernel pattern Lua cannot compile", function()
			assert.matches("^myprof%.lua:1: prof%.steps: 'kernel' is not a valid Lua pattern %(.*%), got string \"%[abc\"$",
				error_of('prof.steps{ kernel = "[abc" }'))
		end)

		it("wants nvtx or nvtx_mark with domain", function()
			assert.matches("^myprof%.lua:1: prof%.steps: 'domain' needs 'nvtx' or 'nvtx_mark'",
				error_of('prof.steps{ domain = "app" }'))
		end)

		it("rejects a negative every_ms", function()
			assert.are.equal("myprof.lua:1: prof.steps: 'every_ms' must be an integer >= 0, got -5",
				error_of("prof.steps{ every_ms = -5 }"))
		end)
	end)

	describe("prof.capture", function()
		it("cuda = false turns every CUDA kind off", function()
			local c = config_of("prof.capture{ cuda = false, nvtx = false }").capture
			assert.is_false(c.nvtx)
			for _, kind in ipairs({ "kernels", "memcpy", "memset", "runtime", "driver", "sync", "memory" }) do
				assert.is_false(c["cuda_" .. kind], kind)
			end
		end)

		it("a cuda table turns off only the kinds set to false", function()
			local c = config_of("prof.capture{ cuda = { driver = false, memory = false } }").capture
			assert.is_false(c.cuda_driver)
			assert.is_false(c.cuda_memory)
			assert.is_true(c.cuda_kernels)
			assert.is_true(c.cuda_runtime)
		end)

		it("cpu_samples and cuda_backtrace take tables with defaults", function()
			local c = config_of([[prof.capture{ cpu_samples = { hz = 250, clock = "wall" },
				cuda_backtrace = {}, record_shapes = true, buffer_mb = 512 }]]).capture
			assert.are.equal(250, c.cpu_hz)
			assert.is_true(c.cpu_wall_clock)
			assert.are.equal(10, c.cuda_backtrace_us)
			assert.is_true(c.record_shapes)
			assert.are.equal(512, c.buffer_mb)
			prof._reset()
			c = config_of("prof.capture{ profile_memory = true }").capture
			assert.is_true(c.profile_memory)
			assert.is_false(c.record_shapes)
			prof._reset()
			c = config_of("prof.capture{ cpu_samples = {} }").capture
			assert.are.equal(99, c.cpu_hz)
			assert.is_false(c.cpu_wall_clock)
		end)

		it("cpu_samples takes a stack depth and a signal; range_stacks a boolean", function()
			local c = config_of([[prof.capture{ cpu_samples = { depth = 32, signal = "SIGRTMIN+3" },
				range_stacks = true }]]).capture
			assert.are.equal(32, c.cpu_depth)
			assert.are.equal("SIGRTMIN+3", c.cpu_signal)
			assert.is_true(c.range_stacks)
			prof._reset()
			assert.is_true(config_of("prof.capture{ modules = true }").capture.modules)
			prof._reset()
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'modules' must be a boolean, got 1",
				error_of("prof.capture{ modules = 1 }"))
			prof._reset()
			c = config_of('prof.capture{ cpu_samples = { signal = "SIGPROF" } }').capture
			assert.are.equal("SIGPROF", c.cpu_signal)
			assert.are.equal(128, c.cpu_depth)
			assert.is_false(c.range_stacks)
			prof._reset()
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'cpu_samples.depth' must be an integer from 1 to 512, got 600",
				error_of("prof.capture{ cpu_samples = { depth = 600 } }"))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'cpu_samples.signal' must be \"auto\", \"SIGPROF\" or \"SIGRTMIN+N\" (N from 0 to 30), got string \"SIGUSR1\"",
				error_of('prof.capture{ cpu_samples = { signal = "SIGUSR1" } }'))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'cpu_samples.signal' must be \"auto\", \"SIGPROF\" or \"SIGRTMIN+N\" (N from 0 to 30), got string \"SIGRTMIN+31\"",
				error_of('prof.capture{ cpu_samples = { signal = "SIGRTMIN+31" } }'))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'range_stacks' must be a boolean, got string \"yes\"",
				error_of('prof.capture{ range_stacks = "yes" }'))
		end)

		it("rejects wrong values with the key path", function()
			assert.are.equal(
				"myprof.lua:1: prof.capture: unknown key 'cuda.kernel' (valid keys: driver, kernels, memcpy, memory, memset, runtime, sync)",
				error_of("prof.capture{ cuda = { kernel = true } }"))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'cuda' must be a boolean or a table (e.g. cuda = { driver = false }), got string \"all\"",
				error_of('prof.capture{ cuda = "all" }'))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'cpu_samples' must be false or a table (e.g. cpu_samples = { hz = 99 }), got boolean true",
				error_of("prof.capture{ cpu_samples = true }"))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'cpu_samples.hz' must be an integer from 1 to 10000, got 20000",
				error_of("prof.capture{ cpu_samples = { hz = 20000 } }"))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'cpu_samples.clock' must be one of \"cpu\", \"wall\", got string \"real\"",
				error_of('prof.capture{ cpu_samples = { clock = "real" } }'))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'buffer_mb' must be an integer from 1 to 65536, got 0",
				error_of("prof.capture{ buffer_mb = 0 }"))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'cuda_backtrace.threshold_us' must be an integer >= 1, got 0",
				error_of("prof.capture{ cuda_backtrace = { threshold_us = 0 } }"))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'record_shapes' must be a boolean, got 1",
				error_of("prof.capture{ record_shapes = 1 }"))
			assert.are.equal(
				"myprof.lua:1: prof.capture: 'profile_memory' must be a boolean, got string \"yes\"",
				error_of('prof.capture{ profile_memory = "yes" }'))
		end)
	end)

	describe("prof.export", function()
		it("sets every output", function()
			local c = config_of([[prof.export{ chrome = { gzip = true }, tensorboard = true,
				key_averages = { sort_by = "self_cuda_time_total", row_limit = 20, group_by = "domain" },
				stacks = false, memory_timeline = false, summary = false }]]).export
			assert.are.same({ chrome = true, chrome_gzip = true, tensorboard = true,
				key_averages = true, sort_by = "self_cuda_time_total", row_limit = 20,
				group_by = "domain", group_by_input_shape = false, group_by_stack_n = 0,
				stacks = false, stacks_metric = "self_cpu_time_total",
				memory_timeline = false, summary = false,
				raw = true, report_text = true, report_html = true }, c)
		end)

		it("takes torch's group_by_input_shape and group_by_stack_n", function()
			local c = config_of([[prof.export{ key_averages = { group_by_input_shape = true,
				group_by_stack_n = 5 } }]]).export
			assert.is_true(c.group_by_input_shape)
			assert.are.equal(5, c.group_by_stack_n)
			assert.are.equal("name", c.group_by)
		end)

		it("takes torch's export_stacks metric for operator_stacks.txt", function()
			local c = config_of('prof.export{ stacks = { metric = "self_cuda_time_total" } }').export
			assert.is_true(c.stacks)
			assert.are.equal("self_cuda_time_total", c.stacks_metric)
		end)

		it("rejects an export_stacks metric torch has not", function()
			assert.are.equal(
				"myprof.lua:1: prof.export: 'stacks.metric' must be one of \"self_cpu_time_total\", \"self_cuda_time_total\", got string \"cpu_time_total\"",
				error_of('prof.export{ stacks = { metric = "cpu_time_total" } }'))
		end)

		it("rejects a group_by_stack_n beyond 128 and a group_by_input_shape not boolean", function()
			assert.are.equal(
				"myprof.lua:1: prof.export: 'key_averages.group_by_stack_n' must be an integer from 0 to 128, got 129",
				error_of("prof.export{ key_averages = { group_by_stack_n = 129 } }"))
			assert.are.equal(
				"myprof.lua:1: prof.export: 'key_averages.group_by_input_shape' must be a boolean, got 1",
				error_of("prof.export{ key_averages = { group_by_input_shape = 1 } }"))
		end)

		it("chrome = false and key_averages = false turn them off", function()
			local c = config_of("prof.export{ chrome = false, key_averages = false }").export
			assert.is_false(c.chrome)
			assert.is_false(c.chrome_gzip)
			assert.is_false(c.key_averages)
		end)

		it("takes torch's device_* sort names as the cuda_* ones, and -1 as no row limit", function()
			local c = config_of([[prof.export{ key_averages = { sort_by = "self_device_time_total",
				row_limit = -1 } }]]).export
			assert.are.equal("self_cuda_time_total", c.sort_by)
			assert.are.equal(0, c.row_limit)
		end)

		it("takes torch's memory sort names (profile_memory), device_* as cuda_*", function()
			local c = config_of([[prof.export{ key_averages = {
				sort_by = "self_cpu_memory_usage" } }]]).export
			assert.are.equal("self_cpu_memory_usage", c.sort_by)
			prof._reset()
			c = config_of([[prof.export{ key_averages = {
				sort_by = "self_device_memory_usage" } }]]).export
			assert.are.equal("self_cuda_memory_usage", c.sort_by)
			prof._reset()
			c = config_of([[prof.export{ key_averages = { sort_by = "device_memory_usage" } }]]).export
			assert.are.equal("cuda_memory_usage", c.sort_by)
		end)

		it("rejects wrong values naming the valid ones", function()
			assert.are.equal(
				"myprof.lua:1: prof.export: 'chrome' must be a boolean or a table (e.g. chrome = { gzip = true }), got string \"yes\"",
				error_of('prof.export{ chrome = "yes" }'))
			assert.are.equal(
				"myprof.lua:1: prof.export: 'key_averages.sort_by' must be one of \"count\", \"cpu_time\", \"cpu_time_total\", \"cuda_time\", \"cuda_time_total\", \"self_cpu_time_total\", \"self_cuda_time_total\", \"cpu_memory_usage\", \"self_cpu_memory_usage\", \"cuda_memory_usage\", \"self_cuda_memory_usage\", got string \"cpu\"",
				error_of('prof.export{ key_averages = { sort_by = "cpu" } }'))
			assert.are.equal(
				"myprof.lua:1: prof.export: 'key_averages.group_by' must be one of \"domain\", \"name\", got string \"kernel\"",
				error_of('prof.export{ key_averages = { group_by = "kernel" } }'))
			assert.are.equal(
				"myprof.lua:1: prof.export: 'key_averages.row_limit' must be an integer >= 0 (0 or -1: all rows), got -2",
				error_of("prof.export{ key_averages = { row_limit = -2 } }"))
			assert.are.equal(
				"myprof.lua:1: prof.export: unknown key 'chrome.zip' (valid keys: gzip)",
				error_of("prof.export{ chrome = { zip = true } }"))
			assert.are.equal(
				"myprof.lua:1: prof.export: 'tensorboard' must be a boolean, got string \"true\"",
				error_of('prof.export{ tensorboard = "true" }'))
		end)
	end)

	describe("every option error", function()
		local schema = require("prof.schema")
		local BAD = { boolean = "x", integer = "x", number = "x", string = 5, enum = "nope",
			flag_or = 5, off_or = 5 }

		-- Every key of `keys` (nested keys as "a.b"), with its spec.
		local function each_key(keys, prefix, out)
			for k, spec in pairs(keys) do
				out[#out + 1] = { path = prefix .. k, spec = spec }
				if spec.keys then
					each_key(spec.keys, prefix .. k .. ".", out)
				end
			end
			return out
		end

		-- A table setting `path` ("a.b") to v.
		local function nested(path, v)
			local head, rest = path:match("^([^.]+)%.(.+)$")
			if head then
				return { [head] = nested(rest, v) }
			end
			return { [path] = v }
		end

		local function check(fname, call, path, spec, extra)
			local v = BAD[spec.kind]
			local args = nested(path, v)
			for k, x in pairs(extra or {}) do
				args[k] = x
			end
			local ok, err = pcall(call, args)
			assert.is_false(ok, fname .. " accepted " .. path)
			err = tostring(err)
			local head = fname .. ": '" .. path .. "' must be "
			local tail = ", got " .. schema.describe(v)
			assert.are.equal(head, err:sub(1, #head), err)
			assert.are.equal(tail, err:sub(-#tail), err)
			-- ... and names the valid values
			if spec.kind == "enum" then
				for _, name in ipairs(spec.values) do
					assert.truthy(err:find('"' .. name .. '"', 1, true), err)
				end
			elseif spec.kind == "integer" then
				assert.truthy(err:find(tostring(spec.min), 1, true), err)
				if spec.max ~= schema.U32 then
					assert.truthy(err:find(tostring(spec.max), 1, true), err)
				end
			elseif spec.kind == "number" then
				assert.truthy(err:find("a number from " .. spec.min, 1, true), err)
			elseif spec.kind == "boolean" then
				assert.truthy(err:find("a boolean", 1, true), err)
			elseif spec.kind == "flag_or" or spec.kind == "off_or" then
				assert.truthy(err:find("a table (e.g. " .. spec.example, 1, true), err)
			end
		end

		it("in a configuration call names the key, the value and the valid values", function()
			local n = 0
			for _, section in ipairs(schema.section_names()) do
				for _, item in ipairs(each_key(schema.section(section).keys, "", {})) do
					prof._reset()
					check("prof." .. section, prof[section], item.path, item.spec)
					n = n + 1
				end
			end
			assert.is_true(n > 40)
		end)

		it("in prof.capture_now names the key, the value and the valid values", function()
			for _, item in ipairs(each_key(schema.capture_now.keys, "", {})) do
				check("prof.capture_now", prof.capture_now, item.path, item.spec,
					item.path ~= "steps" and { steps = 1 } or nil)
			end
		end)

		it("for an unknown key lists the valid keys", function()
			for _, section in ipairs(schema.section_names()) do
				prof._reset()
				local ok, err = pcall(prof[section], { no_such_key = 1 })
				assert.is_false(ok)
				local names = {}
				for k in pairs(schema.section(section).keys) do
					names[#names + 1] = k
				end
				table.sort(names)
				assert.truthy(tostring(err):find("unknown key 'no_such_key' (valid keys: "
					.. table.concat(names, ", ") .. ")", 1, true), err)
			end
		end)
	end)

	describe("prof.limits", function()
		it("sets every limit", function()
			local c = config_of("prof.limits{ hook_ms = 5, report_ms = 60000, load_ms = 100, memory_mb = 256, repl_ms = 500, exit_ms = 5000 }")
			assert.are.same({ hook_ms = 5, report_ms = 60000, load_ms = 100, memory_mb = 256,
				repl_ms = 500, exit_ms = 5000 }, c.limits)
		end)

		it("rejects zero and out-of-range values", function()
			assert.are.equal("myprof.lua:1: prof.limits: 'hook_ms' must be an integer from 1 to 60000, got 0",
				error_of("prof.limits{ hook_ms = 0 }"))
			assert.are.equal("myprof.lua:1: prof.limits: 'memory_mb' must be an integer from 4 to 65536, got 1",
				error_of("prof.limits{ memory_mb = 1 }"))
		end)

		it("tells the host the new limits at once", function()
			local seen
			prof._native = { set_limits = function(mb, ms) seen = { mb, ms } end }
			assert.is_true(run("prof.limits{ memory_mb = 512 }"))
			assert.are.same({ 512, 2000 }, seen)
		end)
	end)

	describe("hooks", function()
		it("register several per kind, in order", function()
			assert.is_true(run([[
				prof.on_step(function() return 1 end)
				prof.on_step(function() return 2 end)
				prof.on_window_start(function() end)
				prof.on_window_end(function() end)
				prof.on_trace_ready(function() end)
			]]))
			local hooks = prof._hooks()
			assert.are.equal(2, #hooks.on_step)
			assert.are.equal(1, hooks.on_step[1]())
			assert.are.equal(2, hooks.on_step[2]())
			assert.are.equal(1, #hooks.on_window_start)
			assert.are.equal(1, #hooks.on_window_end)
			assert.are.equal(1, #hooks.on_trace_ready)
		end)

		it("want a function", function()
			assert.are.equal(
				"myprof.lua:1: prof.on_trace_ready: expected a function, got string \"report\" (e.g. prof.on_trace_ready(function(trace) ... end))",
				error_of('prof.on_trace_ready("report")'))
		end)

		it("may not change the configuration once the file has loaded", function()
			assert.is_true(run("prof.on_step(function() prof.schedule{ active = 2 } end)"))
			local _, hooks = prof._load_done()
			local ok, err = pcall(hooks.on_step[1], {})
			assert.is_false(ok)
			assert.matches("prof%.schedule: can only be called while the policy file loads", err)
		end)
	end)

	describe("prof.job", function()
		it("watches every second unless told otherwise", function()
			assert.are.same({ poll_ms = 1000 }, config_of("").job)
			prof._reset()
			assert.are.same({ poll_ms = 0 }, config_of("prof.job{ poll_ms = 0 }").job)
			prof._reset()
			assert.are.equal("myprof.lua:1: prof.job: 'poll_ms' must be an integer from 0 to 3600000, got -1",
				error_of("prof.job{ poll_ms = -1 }"))
		end)
	end)

	describe("prof.recorder", function()
		it("is off unless called, and fills its defaults", function()
			assert.is_false(config_of("").recorder.enabled)
			assert.are.same({ enabled = true, on = true, steps = 20, mb = 256, max_dumps = 10,
				dump_on_crash = true, dump_on_signal = true, dump_on_exception = true,
				cpu_samples = true, phases = true, cuda = true, job = false },
				config_of("prof.recorder{}").recorder)
			prof._reset()
			assert.are.same({ enabled = true, on = true, steps = 5, mb = 16, max_dumps = 0,
				dump_on_crash = false, dump_on_signal = true, dump_on_exception = false,
				cpu_samples = false, phases = true, cuda = false, job = true },
				config_of("prof.recorder{ steps = 5, mb = 16, max_dumps = 0, "
					.. "dump_on_crash = false, dump_on_exception = false, "
					.. "cpu_samples = false, cuda = false, job = true }").recorder)
		end)

		it("rejects bad values in one line", function()
			assert.are.equal("myprof.lua:1: prof.recorder: 'steps' must be an integer from 1 to 10000, got 0",
				error_of("prof.recorder{ steps = 0 }"))
			assert.are.equal("myprof.lua:1: prof.recorder: 'mb' must be an integer from 1 to 65536, got 0",
				error_of("prof.recorder{ mb = 0 }"))
			assert.matches("^myprof%.lua:1: prof%.recorder: unknown key 'step' %(valid keys: "
				.. "cpu_samples, cuda, dump_on_crash, dump_on_exception, dump_on_signal, enabled, job, max_dumps, mb, phases, steps%)",
				error_of("prof.recorder{ step = 3 }"))
			assert.matches("^myprof%.lua:1: prof%.recorder: 'dump_on_signal' must be a boolean",
				error_of("prof.recorder{ dump_on_signal = 'no' }"))
		end)

		it("may start paused", function()
			local r = config_of("prof.recorder{ enabled = false }").recorder
			assert.is_true(r.enabled)
			assert.is_false(r.on)
		end)

		it("is switched from a hook once loaded, and only `enabled` changes", function()
			local calls = {}
			prof._native = { recorder = function(on) calls[#calls + 1] = on end }
			assert.is_true(run([[
				prof.recorder{ steps = 4 }
				prof.on_step(function(s)
					if s.step == 1 then return prof.recorder{ enabled = false } end
					if s.step == 2 then return prof.recorder{ steps = 4 } end
					if s.step == 3 then return prof.recorder{ steps = 5 } end
				end)
			]]))
			local _, hooks = prof._load_done()
			local r = hooks.on_step[1]({ step = 1 })
			assert.is_false(r.on)
			assert.is_false(prof._config().recorder.on)
			assert.is_true(hooks.on_step[1]({ step = 2 }).on)
			assert.are.same({ false, true }, calls)
			local ok, err = pcall(hooks.on_step[1], { step = 3 })
			assert.is_false(ok)
			assert.matches("prof%.recorder: 'steps' cannot change while the process runs %(it is 4; "
				.. "only 'enabled' can: prof%.recorder{ enabled = false }%); set it in the policy file$", err)
			assert.are.same({ false, true }, calls)
		end)
	end)

	describe("prof.watchdog", function()
		it("is off unless called, and fills its defaults", function()
			assert.is_false(config_of("").watchdog.enabled)
			assert.are.same({ enabled = true, after_s = 300, factor = 10, dump = true },
				config_of("prof.watchdog{}").watchdog)
			prof._reset()
			assert.are.same({ enabled = true, after_s = 0.5, factor = 0, dump = false },
				config_of("prof.watchdog{ after_s = 0.5, factor = 0, dump = false }").watchdog)
		end)

		it("rejects bad values in one line", function()
			assert.matches("^myprof%.lua:1: prof%.watchdog: 'after_s' must be a number from 0%.01 to .*, got 0$",
				error_of("prof.watchdog{ after_s = 0 }"))
			assert.matches("^myprof%.lua:1: prof%.watchdog: 'factor' must be a number from 0 to .*, got %-1$",
				error_of("prof.watchdog{ factor = -1 }"))
			assert.matches("^myprof%.lua:1: prof%.watchdog: unknown key 'after' %(valid keys: after_s, dump, factor%)",
				error_of("prof.watchdog{ after = 3 }"))
		end)

		it("takes prof.on_hang hooks", function()
			assert.matches("prof%.on_hang: expected a function, got 3 %(e%.g%. prof%.on_hang%(function%(h%) %.%.%. end%)%)",
				error_of("prof.on_hang(3)"))
		end)
	end)

	describe("prof.dump", function()
		it("reaches the native function; steps default to the recorder's", function()
			local calls = {}
			prof._native = { dump = function(steps, reason)
				calls[#calls + 1] = { steps, reason }
				return true
			end }
			assert.is_true(run([[
				prof.recorder{ steps = 7 }
				assert(prof.dump{ steps = 3, reason = "slow" } == true)
				prof.dump{}
				prof.dump()
			]]))
			assert.are.same({ { 3, "slow" }, { 7, "dump" }, { 7, "dump" } }, calls)
		end)

		it("returns the host's refusal instead of raising", function()
			prof._native = { dump = function() return false, "the recorder is off" end }
			assert.is_true(run([[
				local ok, why = prof.dump{ steps = 2 }
				assert(ok == false and why == "the recorder is off")
			]]))
		end)

		it("validates its table in one line", function()
			prof._native = { dump = function() return true end }
			assert.are.equal("myprof.lua:1: prof.dump: 'steps' must be an integer from 1 to 10000, got 0",
				error_of("prof.dump{ steps = 0 }"))
			assert.matches("^myprof%.lua:1: prof%.dump: unknown key 'step' %(valid keys: reason, steps%)",
				error_of("prof.dump{ step = 1 }"))
			assert.matches("^myprof%.lua:1: prof%.dump: expected a table, got 3 %(e%.g%. prof%.dump{",
				error_of("prof.dump(3)"))
		end)
	end)

	describe("prof.capture_now", function()
		it("reaches the native function with steps and reason", function()
			local calls = {}
			prof._native = { capture_now = function(steps, reason)
				calls[#calls + 1] = { steps, reason }
				return true
			end }
			assert.is_true(run([[
				prof.capture_now{ steps = 3, reason = "slow step" }
				prof.capture_now{ steps = 1 }
			]]))
			assert.are.same({ { 3, "slow step" }, { 1, "capture_now" } }, calls)
		end)

		it("with job = true asks every rank through capture_job, never waiting", function()
			local calls = {}
			prof._native = {
				capture_now = function() error("not this one") end,
				capture_job = function(steps, reason)
					calls[#calls + 1] = { steps, reason }
					return true
				end,
				repl_active = function() return true end,
			}
			assert.is_true(run([[
				assert(prof.capture_now{ steps = 3, job = true } == true)
			]]))
			assert.are.same({ { 3, "capture_now" } }, calls)
			prof._native = { capture_job = function() return nil, "the watcher is off" end }
			assert.are.equal("myprof.lua:1: prof.capture_now: the watcher is off",
				error_of("prof.capture_now{ steps = 2, job = true }"))
		end)

		it("raises the host's refusal at the caller's line", function()
			prof._native = { capture_now = function() return nil, "a request is already queued" end }
			assert.are.equal("myprof.lua:2: prof.capture_now: a request is already queued",
				error_of("\nprof.capture_now{ steps = 2 }"))
		end)

		it("validates its table", function()
			prof._native = { capture_now = function() return true end }
			assert.are.equal("myprof.lua:1: prof.capture_now: 'steps' must be an integer >= 1, got 0",
				error_of("prof.capture_now{ steps = 0 }"))
			assert.matches("^myprof%.lua:1: prof%.capture_now: 'steps' is required",
				error_of('prof.capture_now{ reason = "x" }'))
			assert.matches("^myprof%.lua:1: prof%.capture_now: 'reason' must be at most 127 bytes long",
				error_of("prof.capture_now{ steps = 1, reason = string.rep('x', 128) }"))
			assert.matches("^myprof%.lua:1: prof%.capture_now: unknown key 'step' %(valid keys: job, reason, steps, wait%)",
				error_of("prof.capture_now{ step = 1 }"))
		end)

		it("says so when no host is there", function()
			assert.are.equal("myprof.lua:1: prof.capture_now: not available here (no profhost host is running)",
				error_of("prof.capture_now{ steps = 1 }"))
		end)
	end)

	describe("--set", function()
		it("parses integers, booleans, numbers and strings", function()
			assert.is_true(run("prof.schedule{ active = 1 }"))
			prof._apply_set("schedule.active=5")
			prof._apply_set("export.chrome.gzip=true")
			prof._apply_set("output.dir=/tmp/x")
			prof._apply_set("capture.cpu_samples.hz=99")
			prof._apply_set("export.summary=false")
			local c = prof._config()
			assert.are.equal(5, c.schedule.active)
			assert.is_true(c.export.chrome)
			assert.is_true(c.export.chrome_gzip)
			assert.are.equal("/tmp/x", c.output.dir)
			assert.are.equal(99, c.capture.cpu_hz)
			assert.is_false(c.export.summary)
		end)

		it("keeps the text for string keys, even when it looks like a number", function()
			prof._apply_set("output.run=2024")
			assert.are.equal("2024", prof._config().output.run)
		end)

		it("keeps what the file set beside the overridden key", function()
			assert.is_true(run("prof.schedule{ skip_first = 10, wait = 2, active = 3, cycles = 2 }"))
			prof._apply_set("schedule.active=7")
			assert.are.same({ enabled = true, skip_first = 10, wait = 2, warmup = 0, active = 7,
				cycles = 2, whole = false }, prof._config().schedule)
		end)

		it("records the whole process with schedule.whole=true, whatever the file's windows", function()
			local f = assert(io.open("lua/prof/default.lua"))
			local src = f:read("a")
			f:close()
			assert.is_true(run(src))
			prof._apply_set("schedule.whole=true")
			assert.are.same({ enabled = true, skip_first = 0, wait = 0, warmup = 0, active = 1,
				cycles = 0, whole = true }, prof._config().schedule)
			-- a window key on top of it is a conflict, named
			assert.has_error(function() prof._apply_set("schedule.active=2") end,
				"--set schedule.active=2: 'whole = true' records the whole process in one "
				.. "window, so 'active' has no meaning with it (leave out skip_first, wait, "
				.. "warmup, active, cycles, or set whole = false)")
			prof._apply_set("schedule.whole=false")
			assert.is_false(prof._config().schedule.whole)
		end)

		it("enables the schedule with its defaults when the file has none", function()
			assert.is_true(run(""))
			prof._apply_set("schedule.active=5")
			assert.are.same({ enabled = true, skip_first = 0, wait = 0, warmup = 0, active = 5,
				cycles = 0, whole = false }, prof._config().schedule)
		end)

		it("turns a feature on when one of its sub-keys is set", function()
			assert.is_true(run("prof.export{ chrome = false }"))
			prof._apply_set("export.chrome.gzip=true")
			local c = prof._config().export
			assert.is_true(c.chrome)
			assert.is_true(c.chrome_gzip)
		end)

		it("sets a feature off with false", function()
			prof._apply_set("capture.cuda=false")
			assert.is_false(prof._config().capture.cuda_kernels)
		end)

		it("works after loading is done", function()
			assert.is_true(run("prof.schedule{ active = 1 }"))
			prof._load_done()
			prof._apply_set("schedule.active=2")
			assert.are.equal(2, prof._config().schedule.active)
		end)

		it("reports errors naming the override", function()
			local function set_error(s)
				local ok, err = pcall(prof._apply_set, s)
				assert.is_false(ok)
				return err
			end
			assert.are.equal("--set schedule.active=x: 'active' must be an integer >= 1, got string \"x\"",
				set_error("schedule.active=x"))
			assert.are.equal("--set schedule.active=0: 'active' must be an integer >= 1, got 0",
				set_error("schedule.active=0"))
			assert.are.equal(
				"--set schedule.activ=5: unknown key 'activ' (valid keys: active, cycles, skip_first, wait, warmup, whole)",
				set_error("schedule.activ=5"))
			assert.are.equal(
				"--set sched.active=5: unknown section 'sched' (valid sections: capture, capture_range, export, job, limits, output, recorder, schedule, steps, watchdog)",
				set_error("sched.active=5"))
			assert.are.equal("--set schedule.active: expected section.key=value (e.g. schedule.active=5)",
				set_error("schedule.active"))
			assert.are.equal("--set active=5: expected section.key=value (e.g. schedule.active=5)",
				set_error("active=5"))
			assert.are.equal("--set schedule.=5: expected section.key=value (e.g. schedule.active=5)",
				set_error("schedule.=5"))
			assert.are.equal(
				"--set export.chrome.gzip=yes: 'chrome.gzip' must be a boolean, got string \"yes\"",
				set_error("export.chrome.gzip=yes"))
			assert.are.equal(
				"--set capture.cpu_samples.clock=real: 'cpu_samples.clock' must be one of \"cpu\", \"wall\", got string \"real\"",
				set_error("capture.cpu_samples.clock=real"))
		end)

		it("leaves the configuration as it was when an override fails", function()
			assert.is_true(run("prof.schedule{ active = 3 }"))
			assert.is_false(pcall(prof._apply_set, "schedule.active=0"))
			assert.are.equal(3, prof._config().schedule.active)
		end)

		it("passes new limits to the host", function()
			local seen
			prof._native = { set_limits = function(mb, ms) seen = { mb, ms } end }
			prof._apply_set("limits.load_ms=50")
			assert.are.same({ 64, 50 }, seen)
		end)
	end)
end)
