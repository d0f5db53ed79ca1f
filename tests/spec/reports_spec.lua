-- Specs for lua/prof/reports and lua/prof/json: the analyses' Lua logic on
-- a stub trace whose methods return canned rows (the C side, which computes
-- those rows, has its own tests: tests/unit/test_query.c and
-- test_trace_lua.c), the findings rules on hand-written data, the run
-- report, the text and HTML renderers.

local json = require("prof.json")
local fmt = require("prof.reports.fmt")
local findings = require("prof.reports.findings")
local ranks = require("prof.reports.ranks")
local reports = require("prof.reports")

local MS = 1000000

-- A stub trace: fields as given; aggregate{...} answers from `agg`, keyed
-- by the option table's cat/sum/name/by (first match), busy/samples from
-- the fields of the same name, events from `events`.
local function stub(t)
	t.counts = t.counts or {}
	t.drops = t.drops or { total = 0 }
	t.steps = t.steps or {}
	t.main_thread = t.main_thread or 1
	t.rank, t.world_size, t.window = t.rank or 0, t.world_size or 1, t.window or 0
	t.first_step, t.last_step = t.first_step or 0, t.last_step or 0
	t.reason, t.program, t.hostname, t.run = "schedule", "train", "host", "run"
	t.pid, t.duration, t.event_count = 1, 100 * MS, 10
	local agg = t.agg or {}
	function t.aggregate(_, o)
		local cat = type(o.cat) == "table" and table.concat(o.cat, "+") or o.cat
		for _, a in ipairs(agg) do
			if a.cat == cat and (a.sum == o.sum) and (a.name == o.name) and
			    (a.by == nil or a.by == o.by) and (a.self == nil or a.self == o.self) then
				return a.rows
			end
		end
		return { total = 0, count = 0, groups = 0 }
	end
	function t.phases()
		return t.phase_rows or { steps = 0, total = 0, partial = false }
	end
	function t.busy()
		return t.busy_result or { events = 0 }
	end
	function t.samples()
		return t.samples_result
	end
	function t.events(_, o)
		local i, list = 0, t.event_list or {}
		return function()
			i = i + 1
			return list[i]
		end
	end
	return t
end

local function rows(list, extra)
	local total, count = 0, 0
	for _, r in ipairs(list) do
		total = total + (r.total or 0)
		count = count + (r.count or 0)
	end
	list.total, list.count, list.groups = total, count, #list
	for k, v in pairs(extra or {}) do
		list[k] = v
	end
	return list
end

-- trace:phases()'s answer for `steps` steps of `total` ns in all, with
-- each phase's time in them (the C side computes it: query_phase_summary).
local function phase_rows(steps, total, times)
	local out = { steps = steps, total = total, partial = false }
	for i, p in ipairs({ "data", "forward", "backward", "optimizer", "other" }) do
		out[i] = { phase = p, name = p, total = times[p], avg = times[p] / steps,
			share = times[p] / total }
	end
	return out
end

local function step(n, dur, phases)
	return { step = n, ts = n * dur, dur = dur, partial = false, has_phases = phases ~= nil,
		phases = phases or { data = 0, forward = 0, backward = 0, optimizer = 0, other = dur } }
end

describe("prof.json", function()
	it("encodes values, sorting object keys", function()
		assert.are.equal('{"a":[1,2,3],"b":true,"d":"x"}',
			json.encode({ d = "x", b = true, a = { 1, 2, 3 }, c = nil }))
		assert.are.equal("[]", json.encode({}))
		assert.are.equal("0.5", json.encode(0.5))
		assert.are.equal("null", json.encode(0 / 0))
		assert.are.equal('{"1":"a","x":1}', json.encode({ [1] = "a", x = 1 }))
	end)
	it("escapes strings into valid JSON that can sit in a script tag", function()
		assert.are.equal('"a\\"b\\\\c\\n\\u0001<\\/script>"', json.encode('a"b\\c\n\1</script>'))
		assert.are.equal('"x\u{FFFD}y"', json.encode("x\255y"))
	end)
	it("refuses what JSON cannot hold", function()
		local t = {}
		t.self = t
		assert.has_error(function() json.encode(t) end)
		assert.has_error(function() json.encode({ f = print }) end)
		assert.has_error(function() json.encode({ [true] = 1 }) end)
	end)
end)

describe("prof.reports.fmt", function()
	it("formats times, shares, sizes and thousands", function()
		assert.are.equal("999 ns", fmt.time(999))
		assert.are.equal("1.500 us", fmt.time(1500))
		assert.are.equal("2.000 ms", fmt.time(2 * MS))
		assert.are.equal("3.000 s", fmt.time(3e9))
		assert.are.equal("41.2 %", fmt.pct(0.4123))
		assert.are.equal("1.50 MB", fmt.bytes(1500000))
		assert.are.equal("1,234,567", fmt.thousands(1234567))
		assert.are.equal("1,234.5", fmt.thousands(1234.5, 1))
	end)
	it("computes medians and quantiles like numpy", function()
		assert.are.equal(2.5, fmt.median({ 4, 1, 3, 2 }))
		assert.are.equal(3, fmt.median({ 5, 1, 3 }))
		assert.are.equal(3.7, fmt.quantile({ 1, 2, 3, 4 }, 0.9))
	end)
	it("aligns table columns", function()
		local text = fmt.table({ { a = "x", b = 10 }, { a = "long", b = 2 } },
			{ { "A", "a" }, { "B", "b", right = true } }, "")
		assert.are.equal("A      B\n----  --\nx     10\nlong   2", text)
	end)
end)

describe("prof.reports.steps", function()
	local steps = require("prof.reports.steps")
	it("averages the phases over complete steps", function()
		local t = stub({ steps = {
			step(1, 10 * MS, { data = 6 * MS, forward = 2 * MS, backward = 1 * MS,
				optimizer = 0, other = 1 * MS }),
			step(2, 20 * MS, { data = 16 * MS, forward = 2 * MS, backward = 1 * MS,
				optimizer = 0, other = 1 * MS }),
		} })
		t.steps[3] = step(3, 1 * MS)
		t.steps[3].partial = true
		t.phase_rows = phase_rows(2, 30 * MS, { data = 22 * MS, forward = 4 * MS,
			backward = 2 * MS, optimizer = 0, other = 2 * MS })
		local d = steps.analyze(t)
		assert.are.equal(3, d.count)
		assert.are.equal(2, d.complete)
		-- the phases are trace:phases()'s, as given
		assert.are.equal(11 * MS, d.avg.data)
		assert.are.equal(22 / 30, d.share.data)
		assert.are.equal(15 * MS, d.phased_mean)
		assert.are.equal("data", d.top_phase)
		assert.are.equal(15 * MS, d.stats.median)
		assert.are.equal(2, d.slowest.step)
		local text = steps.text(d)
		assert.truthy(text:find("3 (partial)", 1, true))
		assert.truthy(text:find("73.3 %", 1, true))
	end)
	it("says when there are no steps", function()
		assert.truthy(steps.text(steps.analyze(stub({}))):find("No steps"))
	end)
	it("finds each step's collectives, asking only for their names", function()
		-- main-thread CPU ranges; aggregate and events filter them by the
		-- name pattern given, as the C side does
		local evs = {
			{ ts = 1 * MS, name = "forward" }, { ts = 2 * MS, name = "NCCL:AllReduce" },
			{ ts = 3 * MS, name = "c10d::broadcast_" }, { ts = 12 * MS, name = "gloo:all_reduce" },
			{ ts = 13 * MS, name = "nccl:all_reduce" }, { ts = 14 * MS, name = "backward" },
		}
		local t = stub({ steps = { step(1, 10 * MS), step(2, 10 * MS) } })
		t.steps[1].ts, t.steps[2].ts = 0, 10 * MS
		local asked = {}
		local function matching(o)
			local list = {}
			for _, e in ipairs(evs) do
				if o.name == nil or e.name:find(o.name) then
					list[#list + 1] = e
				end
			end
			return list
		end
		function t.aggregate(_, o)
			asked[#asked + 1] = o.name or "(every name)"
			local rows, seen = {}, {}
			for _, e in ipairs(matching(o)) do
				if not seen[e.name] then
					seen[e.name] = true
					rows[#rows + 1] = { name = e.name, total = 1, count = 1 }
				end
			end
			return rows
		end
		function t.events(_, o)
			local i, list = 0, matching(o)
			return function()
				i = i + 1
				return list[i]
			end
		end
		local d = steps.analyze(t)
		local function names(s)
			local out = {}
			for _, c in ipairs(s.syncs) do
				out[#out + 1] = c.name
			end
			return out
		end
		assert.are.same({ "NCCL:AllReduce", "c10d::broadcast_" }, names(d.steps[1]))
		assert.are.same({ "gloo:all_reduce", "nccl:all_reduce" }, names(d.steps[2]))
		for _, n in ipairs(asked) do
			assert.are_not.equal("(every name)", n)
		end
	end)
end)

describe("prof.reports.nvtx and kernels", function()
	it("leave ProfilerStep spans out of the range summary", function()
		local nvtx = require("prof.reports.nvtx")
		-- the steps' groups, which the analysis counts apart
		local t = stub({ agg = { { cat = "user_annotation", name = "^ProfilerStep#%d+$",
			rows = rows({ { name = "ProfilerStep#3", total = 50, count = 1 } }) },
			{ cat = "user_annotation", by = "name", rows = rows({
			{ name = "ProfilerStep#3", total = 50, count = 1 },
			{ name = "forward", total = 30, count = 3, avg = 10, med = 10, min = 9, max = 11, std = 1 },
			{ name = "loss", total = 10, count = 1, avg = 10, med = 10, min = 10, max = 10, std = 0 },
		}) } } })
		local d = nvtx.analyze(t)
		assert.are.equal(2, d.ranges)
		assert.are.equal(0.75, d.rows[1].share)
		local text = nvtx.text(d)
		assert.truthy(text:find("Time (%)  Total Time (ns)  Instances", 1, true))
		assert.truthy(text:find("PushPop  forward", 1, true))
		assert.falsy(text:find("ProfilerStep", 1, true))
	end)
	it("print cuda_gpu_kern_sum's columns", function()
		local kernels = require("prof.reports.kernels")
		local t = stub({ agg = {
			{ cat = "kernel", by = "name", rows = rows({
				{ name = "gemm", total = 3000000, count = 3, avg = 1000000, med = 1000000,
				  min = 900000, max = 1100000, std = 100000, share = 0.75 },
				{ name = "relu", total = 1000000, count = 1, avg = 1000000, med = 1000000,
				  min = 1000000, max = 1000000, std = 0, share = 0.25 } }) },
			{ cat = "kernel", by = "stream", rows = rows({}) } } })
		local d = kernels.analyze(t)
		local text = kernels.text(d)
		assert.truthy(text:find("Time (%)  Total Time (ns)  Instances", 1, true))
		assert.truthy(text:find("Max (ns)  StdDev (ns)  Name", 1, true))
		assert.truthy(text:find("75.0        3,000,000          3", 1, true))
		assert.truthy(text:find("100,000.0  gemm", 1, true))
	end)
end)

describe("prof.reports.modules", function()
	local modules = require("prof.reports.modules")
	it("ranks modules by self time, with totals and calls per step", function()
		local function call(name, path)
			return { name = name, cat = "python_function",
				args = { ["Python id"] = 1, ["module path"] = path } }
		end
		local t = stub({ first_step = 5, last_step = 7, counts = { python_function = 12 },
			agg = {
				{ cat = "python_function", by = "name", self = true, rows = rows({
					{ name = "nn.Module: Slow_0", total = 90 * MS, count = 3, avg = 30 * MS, share = 0.9 },
					{ name = "nn.Module: LayerNorm_0", total = 6 * MS, count = 6, avg = 1 * MS, share = 0.06 },
					{ name = "nn.Module: Model_0", total = 4 * MS, count = 3, avg = 4 * MS / 3, share = 0.04 },
				}) },
				{ cat = "python_function", by = "name", rows = rows({
					{ name = "nn.Module: Model_0", total = 100 * MS, count = 3 },
					{ name = "nn.Module: Slow_0", total = 90 * MS, count = 3 },
					{ name = "nn.Module: LayerNorm_0", total = 6 * MS, count = 6 },
				}) } },
			-- the root has no path; each module's path is on its events
			event_list = { call("nn.Module: Model_0", nil), call("nn.Module: Slow_0", "encoder.slow"),
				call("nn.Module: LayerNorm_0", "norm"), call("nn.Module: LayerNorm_0", "norm") } })
		local d = modules.analyze(t)
		assert.are.equal(3, d.modules)
		assert.are.equal(12, d.calls)
		assert.are.equal(3, d.steps)
		assert.are.same({ "encoder.slow (Slow)", "norm (LayerNorm)", "Model" },
			{ d.rows[1].name, d.rows[2].name, d.rows[3].name })
		assert.are.equal(100 * MS, d.rows[3].total)
		local text = modules.text(d)
		assert.truthy(text:find("#  Module               Calls  Per step", 1, true))
		assert.truthy(text:find("1  encoder.slow (Slow)      3         1  90.000 ms  90.0 %", 1, true))
		assert.truthy(text:find("2  norm (LayerNorm)         6         2", 1, true))
		local file = modules.file(d, { window = 0, first_step = 5, last_step = 7 })
		assert.truthy(file:find("^Modules by self time: window 0, steps 5%-7, 12 calls of 3 modules\n"))
	end)
	it("shows a module by path and class, a root by its class, other names as they are", function()
		assert.are.equal("encoder.layers.3.attn (MultiheadAttention)",
			modules.label("nn.Module: MultiheadAttention_3", "encoder.layers.3.attn"))
		assert.are.equal("TransformerModel", modules.label("nn.Module: TransformerModel_0", nil))
		assert.are.equal("blocks.1 (Res_Block_2)", modules.label("nn.Module: Res_Block_2_7", "blocks.1"))
		assert.are.equal("my_module", modules.label("my_module", "a.b"))
		assert.are.equal("train.py(12): step", modules.label("train.py(12): step", nil))
	end)
	it("says how to get module calls when the window has none, and writes no file", function()
		local d = modules.analyze(stub({}))
		assert.are.equal(0, d.modules)
		assert.truthy(modules.text(d):find("prof.capture{ modules = true }", 1, true))
		assert.is_nil(modules.file(d, {}))
		assert.is_nil(reports.window(stub({}), { text = true }).modules)
	end)
end)

describe("prof.reports.copies", function()
	it("joins time and bytes into bandwidth", function()
		local copies = require("prof.reports.copies")
		local t = stub({ agg = {
			{ cat = "gpu_memcpy", rows = rows({ { name = "HtoD", total = 1000, count = 2 } }) },
			{ cat = "gpu_memcpy", sum = "bytes", rows = rows({ { name = "HtoD", total = 25000, count = 2 } }) },
			{ cat = "gpu_memset", rows = rows({}) } } })
		local d = copies.analyze(t)
		assert.are.equal(25, d.rows[1].gbps)
		assert.are.equal(25000, d.bytes)
		assert.truthy(copies.text(d):find("25.00 GB/s", 1, true))
	end)
end)

describe("prof.reports.memory", function()
	it("builds a series per device and finds the peak", function()
		local memory = require("prof.reports.memory")
		local t = stub({ event_list = {
			{ ts = 1, args = { ["Device Id"] = 0, Bytes = 100 } },
			{ ts = 2, args = { ["Device Id"] = 0, Bytes = 50 } },
			{ ts = 3, args = { ["Device Id"] = 0, Bytes = -120 } },
			{ ts = 2, args = { ["Device Id"] = 1, ["Total Allocated"] = 7 } },
		} })
		local d = memory.analyze(t)
		assert.is_true(d.present)
		assert.are.equal(150, d.devices[1].peak)
		assert.are.equal(2, d.devices[1].peak_ts)
		assert.are.same({ 3, 30 }, d.devices[1].points[3])
		assert.are.equal(7, d.devices[2].peak)
	end)

	it("keeps torch's tensors (profile_memory) apart from CUDA's, the CPU's named", function()
		local memory = require("prof.reports.memory")
		local t = stub({ event_list = {
			{ ts = 1, cat = "gpu_memory", args = { ["Device Id"] = 0, ["Total Allocated"] = 4096 } },
			{ ts = 2, cat = "cpu_instant_event",
			  args = { ["Device Id"] = 0, ["Device Type"] = 1, ["Total Allocated"] = 512 } },
			{ ts = 3, cat = "cpu_instant_event",
			  args = { ["Device Id"] = -1, ["Device Type"] = 0, ["Total Allocated"] = 64 } },
		} })
		local d = memory.analyze(t)
		assert.are.same({ 0, "CPU", "GPU 0 (tensors)" },
			{ d.devices[1].device, d.devices[2].device, d.devices[3].device })
		assert.are.same({ 4096, 64, 512 }, { d.devices[1].peak, d.devices[2].peak, d.devices[3].peak })
		assert.truthy(memory.text(d):find("GPU 0 (tensors)", 1, true))
	end)
end)

describe("prof.reports.findings", function()
	local function ids(list)
		local out = {}
		for i, f in ipairs(list) do
			out[i] = f.id
		end
		return out
	end
	local base_steps = { complete = 5, has_phases = true, stats = { mean = 10 * MS, median = 10 * MS },
		slowest = { step = 3, dur = 10 * MS, ratio = 1 } }

	it("blames the data loader when data dominates, with the idle GPU", function()
		local steps = setmetatable({ share = { data = 0.8, forward = 0.1, backward = 0.05,
			optimizer = 0.05, other = 0 }, avg = { data = 8 * MS }, top_phase = "data" },
			{ __index = base_steps })
		local f = findings.analyze({ steps = steps, gpu = { present = true, utilization = 0.2,
			span = 50 * MS, busy = 10 * MS, idle = 40 * MS,
			idle_ranges = { { name = "DataLoader.__next__", time = 30 * MS, share = 0.75 } },
			idle_phases = { data = 32 * MS } }, cpu = { sync = { main = 0, calls = 0 } } })
		assert.are.same({ "data_loader" }, ids(f))
		assert.truthy(f[1].text:find("80.0 % of that idle time the main thread was in data (DataLoader.__next__)", 1, true))
	end)
	it("calls a saturated GPU GPU-bound, not sync-bound", function()
		local f = findings.analyze({ steps = base_steps, gpu = { present = true, utilization = 0.95,
			span = 50 * MS, busy = 47 * MS, idle = 3 * MS },
			kernels = { rows = { { name = "gemm", share = 0.7, count = 10, avg = 3 * MS } } },
			cpu = { sync = { main = 40 * MS, calls = 5, top = "cudaDeviceSynchronize" } } })
		assert.are.equal("gpu_bound", f[1].id)
		assert.falsy(f[1].id == "sync")
		assert.truthy(f[1].text:find("gemm", 1, true))
	end)
	it("calls CPU and GPU taking turns sync-bound", function()
		local f = findings.analyze({ steps = base_steps, gpu = { present = true, utilization = 0.45,
			span = 50 * MS, busy = 22 * MS, idle = 28 * MS, idle_ranges = {} },
			cpu = { sync = { main = 21 * MS, calls = 60, top = "cudaStreamSynchronize", top_count = 60 } } })
		assert.are.equal("sync", f[1].id)
		assert.falsy(({ gpu_idle = true })[f[2] and f[2].id])
	end)
	it("reports an idle GPU with what the main thread did", function()
		local f = findings.analyze({ steps = base_steps, gpu = { present = true, utilization = 0.5,
			span = 50 * MS, busy = 25 * MS, idle = 25 * MS,
			idle_ranges = { { name = "(no range)", time = 5 * MS, share = 0.2 },
				{ name = "tokenize", time = 20 * MS, share = 0.8 } } },
			cpu = { sync = { main = 0, calls = 0 } } })
		assert.are.equal("gpu_idle", f[1].id)
		assert.truthy(f[1].text:find("80.0 % of that idle time the main thread was in tokenize", 1, true))
	end)
	it("puts dropped events first and flags slow steps", function()
		local steps = setmetatable({ slowest = { step = 7, dur = 30 * MS, ratio = 3 } },
			{ __index = base_steps })
		local f = findings.analyze({ steps = steps, gpu = {}, cpu = { sync = { main = 0, calls = 0 }, rows = {} },
			meta = { drops = { total = 12 } } })
		assert.are.same({ "drops", "slow_step" }, ids(f))
		assert.truthy(f[2].text:find("step 7 took 30.000 ms, 3.0x the median", 1, true))
	end)
	it("says when nothing stands out", function()
		assert.truthy(findings.text({}):find("Nothing stands out"))
	end)
end)

describe("prof.reports.samples", function()
	local samples = require("prof.reports.samples")
	local function tree(samples_n, weights)
		local children = {}
		local total = 0
		for name, w in pairs(weights) do
			children[#children + 1] = { name = name, value = w, self = w, children = {} }
			total = total + w
		end
		table.sort(children, function(a, b) return a.name < b.name end)
		return { name = "all", value = total, self = 0, samples = samples_n, truncated = false,
			children = children }
	end

	it("keeps one unit per table: samples, or weight when samples weigh more than 1", function()
		local d = samples.analyze(stub({ counts = { cpu_sample = 3 },
			samples_result = tree(3, { spin = 2, wait = 1 }) }))
		assert.are.equal("samples", d.unit)
		local text = samples.text(d)
		assert.truthy(text:find("  3 samples\n", 1, true), text)
		assert.truthy(text:find("Self samples  Share of samples", 1, true), text)
		-- 4 samples standing for 10 timer periods: the table is in weight,
		-- and says so; the shares are of the weight
		d = samples.analyze(stub({ counts = { cpu_sample = 4 },
			samples_result = tree(4, { spin = 8, wait = 2 }) }))
		assert.are.equal("weight", d.unit)
		text = samples.text(d)
		assert.truthy(text:find("4 samples of weight 10 in all", 1, true), text)
		assert.truthy(text:find("Self weight  Share of weight", 1, true), text)
		assert.truthy(text:find("spin                8           80.0 %", 1, true), text)
	end)
end)

describe("prof.reports.ranks", function()
	-- A rank's window from steps { ts, dur, starts = { phase = ts },
	-- ends = { phase = ts }, phases, syncs }.
	local function window(rank, steps)
		local s = {}
		for i, x in ipairs(steps) do
			s[i] = { step = 10 + i, ts = x.ts, dur = x.dur, partial = false, has_phases = true,
				phases = x.phases or
					{ data = 0, forward = 0, backward = 0, optimizer = 0, other = x.dur },
				starts = x.starts or {}, ends = x.ends, syncs = x.syncs or {} }
		end
		return { meta = { rank = rank, window = 0, first_step = 11, last_step = 10 + #steps,
			run = "r", program = "p" }, steps = { steps = s }, findings = {} }
	end

	-- Ranks that meet in an all-reduce at the end of backward: rank `slow`
	-- works `extra` ns more ("before" forward, in "forward", or in
	-- "optimizer", after the all-reduce); the others wait for it in the
	-- all-reduce. Each step starts where the rank's previous one ended.
	-- `disturb[k] = { rank, ns }`: in step k that rank is held up in
	-- forward (descheduled by the machine).
	local function synced(nranks, nsteps, slow, extra, where, disturb)
		local steps, start = {}, {}
		for r = 0, nranks - 1 do
			steps[r], start[r] = {}, 0
		end
		for k = 1, nsteps do
			local fwd, bwd, sync = {}, {}, 0
			local held = disturb and disturb[k]
			for r = 0, nranks - 1 do
				local d = r == slow and extra or 0
				fwd[r] = start[r] + 0.1 * MS + (where == "before" and d or 0)
				bwd[r] = fwd[r] + 3 * MS + (where == "forward" and d or 0)
					+ ((held and held[1] == r) and held[2] or 0)
				sync = math.max(sync, bwd[r] + 4 * MS) -- arrives at the all-reduce
			end
			for r = 0, nranks - 1 do
				local stop = sync + 1 * MS + ((where == "optimizer" and r == slow) and extra or 0)
				steps[r][#steps[r] + 1] = { ts = start[r], dur = stop - start[r],
					starts = { forward = fwd[r], backward = bwd[r], optimizer = sync } }
				start[r] = stop
			end
		end
		local out = {}
		for r = 0, nranks - 1 do
			out[#out + 1] = window(r, steps[r])
		end
		return out
	end

	it("names the rank the others wait for, not the one waiting in the collective", function()
		local d = ranks.analyze(synced(2, 3, 1, 2 * MS, "before"))
		assert.are.same({ 0, 1 }, d.ranks)
		for _, s in ipairs(d.steps) do
			assert.are.equal(1, s.last)
			assert.are.equal(2 * MS, s.lead)
		end
		local st = d.straggler
		assert.are.equal(1, st.rank)
		assert.are.equal(3, st.last)
		assert.are.equal("no phase, before forward", st.where)
		assert.are.equal(2 * MS, st.where_ns)
		assert.is_true(st.short)
		local text = ranks.text(d)
		assert.are.equal("other", st.where_phase)
		assert.truthy(text:find("rank 1 is the straggler: it arrived last in 3 of 3 steps, the others "
			.. "waiting for it about 2.000 ms per step; its extra time is in other: no phase, "
			.. "before forward (+2.000 ms per step). Only 3 steps compared: a first reading", 1,
			true), text)
		assert.truthy(text:find("10.100*", 1, true))
		-- a longer window: the same verdict, no caveat
		d = ranks.analyze(synced(2, 10, 1, 2 * MS, "before"))
		assert.are.equal(1, d.straggler.rank)
		assert.is_true(d.straggler.sure)
		assert.falsy(ranks.text(d):find("first reading", 1, true))
	end)

	it("is not swayed by a step the machine disturbed", function()
		-- rank 0 held up 5 ms in step 2 of 3 (descheduled): rank 1's sleep
		-- every step still decides
		local d = ranks.analyze(synced(2, 3, 1, 2 * MS, "before", { [2] = { 0, 5 * MS } }))
		assert.are.same({ 1, 0, 1 }, { d.steps[1].last, d.steps[2].last, d.steps[3].last })
		assert.are.equal(1, d.straggler.rank)
		assert.are.equal(2, d.straggler.last)
		assert.are.equal(2 * MS, d.straggler.lead)
		assert.are.equal("no phase, before forward", d.straggler.where)
	end)

	it("finds extra work in a phase, and after the collective", function()
		local d = ranks.analyze(synced(3, 6, 2, 1.5 * MS, "forward"))
		assert.are.equal(2, d.straggler.rank)
		assert.are.equal("forward", d.straggler.where)
		-- slow in the optimizer, after the all-reduce: the others wait in
		-- the next step's collective
		d = ranks.analyze(synced(2, 6, 0, 1 * MS, "optimizer"))
		assert.are.equal(0, d.straggler.rank)
		assert.are.equal("optimizer", d.straggler.where)
	end)

	it("sees a collective that is a range, and what comes before it", function()
		-- phases start together; rank 1 reaches the all-reduce 1 ms later
		local ws = {}
		for r = 0, 1 do
			local steps = {}
			for i = 0, 5 do
				local t = i * 10 * MS
				steps[#steps + 1] = { ts = t, dur = 10 * MS, starts = { forward = t, backward = t + MS },
					syncs = { { ts = t + 5 * MS + r * MS, name = "gloo:all_reduce" } } }
			end
			ws[#ws + 1] = window(r, steps)
		end
		local d = ranks.analyze(ws)
		assert.are.equal(1, d.straggler.rank)
		assert.are.equal("backward", d.straggler.where)
		assert.are.equal(MS, d.straggler.lead)
	end)

	-- Two ranks, 6 steps, every phase a range with its start and end, as
	-- the Python bridge writes them: data 1 ms, then 0.1 ms in no phase,
	-- forward (DDP's buffer broadcast at its start, where the ranks meet,
	-- then 3 ms), backward (the all-reduce 1 ms in, where they meet again,
	-- 0.5 ms), optimizer 1 ms. Rank 1 takes `extra` ns more, either
	-- between its data and its forward ("gap") or inside its forward,
	-- after the broadcast ("forward"). Each window's phase averages are
	-- its steps' (the per-rank table's columns).
	local function phased(lag, extra)
		local steps, start, sum = { [0] = {}, [1] = {} }, { [0] = 0, [1] = 0 }, {}
		for k = 1, 6 do
			local x = { [0] = {}, [1] = {} }
			local bcast, reduce = 0, 0
			for r = 0, 1 do
				local d = r == 1 and extra or 0
				x[r].data = { start[r], start[r] + MS }
				x[r].fwd0 = start[r] + 1.1 * MS + (lag == "gap" and d or 0)
				bcast = math.max(bcast, x[r].fwd0 + 0.05 * MS)
			end
			for r = 0, 1 do
				local d = r == 1 and extra or 0
				x[r].fwd1 = bcast + 0.1 * MS + 3 * MS + (lag == "forward" and d or 0)
				x[r].bwd0 = x[r].fwd1 + 0.1 * MS
				reduce = math.max(reduce, x[r].bwd0 + MS)
			end
			for r = 0, 1 do
				local s = x[r]
				s.bwd1 = reduce + 0.5 * MS
				s.opt0, s.opt1 = s.bwd1 + 0.1 * MS, s.bwd1 + 1.1 * MS
				local stop = s.opt1 + 0.1 * MS
				local ph = { data = MS, forward = s.fwd1 - s.fwd0, backward = s.bwd1 - s.bwd0,
					optimizer = MS }
				ph.other = stop - start[r] - ph.data - ph.forward - ph.backward - ph.optimizer
				steps[r][k] = { ts = start[r], dur = stop - start[r], phases = ph,
					starts = { data = s.data[1], forward = s.fwd0, backward = s.bwd0,
						optimizer = s.opt0 },
					ends = { data = s.data[2], forward = s.fwd1, backward = s.bwd1,
						optimizer = s.opt1 },
					syncs = { { ts = s.fwd0 + 0.05 * MS, name = "c10d::broadcast_" },
						{ ts = s.bwd0 + MS, name = "c10d::allreduce_" } } }
				sum[r] = sum[r] or { data = 0, forward = 0, backward = 0, optimizer = 0, other = 0 }
				for p, v in pairs(ph) do
					sum[r][p] = sum[r][p] + v / 6
				end
				start[r] = stop
			end
		end
		local out = {}
		for r = 0, 1 do
			out[r + 1] = window(r, steps[r])
			out[r + 1].steps.avg, out[r + 1].steps.phased = sum[r], 6
		end
		return out
	end

	-- The table's column where rank 1 spends the most beyond rank 0.
	local function worst_column(d)
		local best, lead
		for _, p in ipairs({ "data", "forward", "backward", "optimizer", "other" }) do
			local x = d.per_rank[2].phases[p] - d.per_rank[1].phases[p]
			if not lead or x > lead then
				best, lead = p, x
			end
		end
		return best
	end

	it("puts time between one phase's end and the next one's start in other, as the table", function()
		-- #25: rank 1 slept between receiving its batch and its forward
		local d = ranks.analyze(phased("gap", 2 * MS))
		local st = d.straggler
		assert.are.equal(1, st.rank)
		assert.are.equal("no phase, between data and forward", st.where)
		assert.are.equal("other", st.where_phase)
		assert.are.equal(2 * MS, st.where_ns)
		assert.are.equal("other", worst_column(d))
		assert.truthy(ranks.text(d):find("its extra time is in other: no phase, between data "
			.. "and forward (+2.000 ms per step)", 1, true), ranks.text(d))
	end)

	it("puts time inside a phase in that phase, a collective inside it or not", function()
		-- rank 1 works longer in forward, after the broadcast every rank
		-- passes at its start
		local d = ranks.analyze(phased("forward", 2 * MS))
		local st = d.straggler
		assert.are.equal(1, st.rank)
		assert.are.equal("forward", st.where)
		assert.are.equal("forward", st.where_phase)
		assert.are.equal(2 * MS, st.where_ns)
		assert.are.equal("forward", worst_column(d))
		assert.truthy(ranks.text(d):find("its extra time is in forward (+2.000 ms per step)", 1,
			true), ranks.text(d))
	end)

	it("names no one when no rank is measurably late, or the last one changes", function()
		local d = ranks.analyze(synced(2, 6, 1, 10000, "before")) -- 10 us: noise
		assert.are.equal("none", d.straggler.verdict)
		assert.truthy(ranks.text(d):find("no straggler", 1, true))
		local a, b = synced(2, 4, 1, 2 * MS, "before"), synced(2, 4, 0, 2 * MS, "before")
		for r = 1, 2 do
			for i = 3, 4 do
				a[r].steps.steps[i] = b[r].steps.steps[i]
			end
		end
		d = ranks.analyze(a)
		assert.are.equal("split", d.straggler.verdict)
		assert.truthy(ranks.text(d):find("no single straggler", 1, true))
	end)

	it("says so when the ranks' clocks do not line up", function()
		local ws = synced(2, 6, 1, 2 * MS, "before")
		for _, s in ipairs(ws[2].steps.steps) do
			s.ts = s.ts + 3600 * 1000 * MS
			for p, v in pairs(s.starts) do
				s.starts[p] = v + 3600 * 1000 * MS
			end
		end
		local d = ranks.analyze(ws)
		assert.are.equal("clocks", d.straggler.verdict)
		assert.is_nil(d.straggler.rank)
		assert.truthy(ranks.text(d):find("their clocks do not line up", 1, true))
	end)

	it("takes each rank's phase averages from its windows", function()
		local w = synced(2, 2, 1, 2 * MS, "before")
		w[1].steps.avg = { data = 1, forward = 2, backward = 3, optimizer = 4, other = 5 }
		w[1].steps.phased = 2
		local d = ranks.analyze(w)
		assert.are.same({ data = 1, forward = 2, backward = 3, optimizer = 4, other = 5 },
			d.per_rank[1].phases)
		assert.is_nil(d.per_rank[2].phases)
	end)

	it("has nothing to compare with one rank", function()
		local d = ranks.analyze({ window(0, { { ts = 0, dur = 10 * MS } }) })
		assert.is_nil(d.straggler)
		assert.truthy(ranks.text(d):find("nothing to compare", 1, true))
	end)
end)

describe("prof.reports", function()
	local function full_stub()
		return stub({ steps = { step(1, 10 * MS, { data = 1 * MS, forward = 4 * MS,
			backward = 4 * MS, optimizer = 1 * MS, other = 0 }) } })
	end
	it("renders text, json and html, and keeps windows for the run report", function()
		local out = reports.window(full_stub(), { text = true, json = true, html = true }, true)
		assert.truthy(out.text:find("profhost report: window 0", 1, true))
		assert.truthy(out.text:find("Step time breakdown", 1, true))
		local data = out.data
		assert.are.same({}, data.errors)
		assert.truthy(out.json:find('"findings":', 1, true))
		assert.truthy(out.html:find('<script type="application/json" id="data">', 1, true))
		assert.falsy(out.html:find("https?://[^w]"))
		assert.truthy(out.findings:find("findings (window 0, rank 0):", 1, true))
		local run = reports.run({ text = true, html = true })
		assert.truthy(run.text:find("1 rank, 1 window", 1, true))
		assert.truthy(run.html:find('"kind":"run"', 1, true))
	end)
	it("names a flight recorder dump as one, and its drops by prof.recorder's setting", function()
		local t = full_stub()
		t.recorder, t.window, t.drops = true, 2, { total = 7 }
		local out = reports.window(t, { text = true })
		assert.truthy(out.text:find("profhost report: recorder dump 2, steps", 1, true))
		assert.truthy(out.text:find("\nDump: ", 1, true))
		assert.truthy(out.findings:find("findings (recorder dump 2, rank 0):", 1, true))
		assert.truthy(out.findings:find("raise prof.recorder{ mb = ... } or lower its steps", 1, true))
		assert.falsy(out.findings:find("buffer_mb", 1, true))
		reports.run({}) -- nothing kept
	end)
	it("links the hang reports a window overlaps, escaped, and none without", function()
		local t = full_stub()
		local out = reports.window(t, { text = true, html = true, json = true }, false,
			{ { hang = 0, step = 5, stalled_s = 1.25, dir = "hang0_step5" },
			  { hang = 1, step = 9, stalled_s = 3, dir = "hang1_step9.pid<7>" } })
		assert.truthy(out.text:find("\nHang 0: step 5 had not ended after 1.2 s (the "
			.. "watchdog's report: ../hang0_step5/hang_report.txt)\n", 1, true))
		assert.truthy(out.html:find('<nav class="hangs"><b>Hang 0</b>: step 5 had not ended '
			.. 'after 1.2 s: <a href="../hang0_step5/report.html">the hang report</a> '
			.. '(<a href="../hang0_step5/hang_report.txt">hang_report.txt</a>)', 1, true))
		assert.truthy(out.html:find('href="../hang1_step9.pid&lt;7&gt;/report.html"', 1, true))
		assert.falsy(out.html:find("pid<7>/report.html", 1, true))
		assert.truthy(out.json:find('"hangs":[{', 1, true))
		out = reports.window(full_stub(), { text = true, html = true })
		assert.falsy(out.text:find("Hang ", 1, true))
		assert.falsy(out.html:find('<nav class="hangs">', 1, true))
	end)
	it("reports an analysis that fails and runs the others", function()
		local t = full_stub()
		t.busy = function() error("busy broke") end
		local out = reports.window(t, { text = true })
		assert.truthy(out.data.errors.gpu:find("busy broke", 1, true))
		assert.truthy(out.text:find("(failed: ", 1, true))
		assert.truthy(out.text:find("Step time breakdown", 1, true))
	end)
end)
