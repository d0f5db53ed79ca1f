-- comm_vs_compute.lua — communication versus compute on the GPU, per step:
-- how much NCCL time is hidden behind compute kernels and how much is
-- exposed (the GPU doing nothing but communicate).
--
--   prof run -s comm_vs_compute.lua -- torchrun --nproc-per-node 8 train.py
--   prof report --script comm_vs_compute.lua prof_out/<run>      (every rank)
--
-- Communication kernels are those whose name matches COMM (NCCL's
-- ncclKernel_* / ncclDevKernel_*); every other kernel is compute. Writes:
--   comm_vs_compute.txt    per step: compute, comm, overlapped and exposed
--                          comm time (ms) and the exposed share of the step
--   comm_vs_compute.json   the same rows

prof.schedule { skip_first = 10, warmup = 1, active = 5, cycles = 1 }

local COMM = "^nccl"

-- Sorts and merges {a, b} intervals into a disjoint union.
local function union(iv)
	table.sort(iv, function(x, y) return x[1] < y[1] end)
	local out = {}
	for _, i in ipairs(iv) do
		local last = out[#out]
		if last and i[1] <= last[2] then
			if i[2] > last[2] then last[2] = i[2] end
		else
			out[#out + 1] = { i[1], i[2] }
		end
	end
	return out
end

local function length(iv)
	local n = 0
	for _, i in ipairs(iv) do n = n + i[2] - i[1] end
	return n
end

-- Time of `a` covered by `b` (both unions).
local function overlap(a, b)
	local n, j = 0, 1
	for _, x in ipairs(a) do
		while b[j] and b[j][2] <= x[1] do j = j + 1 end
		local k = j
		while b[k] and b[k][1] < x[2] do
			n = n + math.min(x[2], b[k][2]) - math.max(x[1], b[k][1])
			k = k + 1
		end
	end
	return n
end

prof.on_trace_ready(function(trace)
	local rows = {}
	for _, s in ipairs(trace.steps) do
		local comm, compute = {}, {}
		for ev in trace:events { cat = "kernel", step = s.step } do
			local list = ev.name:match(COMM) and comm or compute
			list[#list + 1] = { ev.ts, ev.ts + ev.dur }
		end
		comm, compute = union(comm), union(compute)
		local c, k = length(comm), length(compute)
		local hidden = overlap(comm, compute)
		rows[#rows + 1] = {
			step = s.step, compute_ms = k / 1e6, comm_ms = c / 1e6,
			overlapped_ms = hidden / 1e6, exposed_ms = (c - hidden) / 1e6,
			exposed_share = s.dur > 0 and (c - hidden) / s.dur or 0,
		}
	end
	trace:write_table("comm_vs_compute.txt", rows, { "step", "compute_ms", "comm_ms",
		"overlapped_ms", "exposed_ms", "exposed_share" })
	trace:write_json("comm_vs_compute.json", { rank = trace.rank, steps = rows })
end)
