-- prof.reports.findings — what the other analyses mean, in plain words.
--
-- Each rule looks at the analyses' data and may produce one finding:
-- { id = "...", score = 0..1, text = "..." }. Findings are sorted by score
-- (the share of step time the cause takes), highest first. Rules:
--
--   data_loader  the "data" phase takes >= 30 % of step time
--   gpu_bound    the GPU is busy >= 80 % of step time
--   sync         (GPU not saturated) the main thread waits in
--                synchronization calls >= 20 % of step time
--   gpu_idle     the GPU is idle >= 30 % of step time (with what the main
--                thread was doing meanwhile), unless data_loader or sync
--                already explain it
--   copies       copies take >= 30 % of GPU busy time
--   phase        (no other step finding) the largest phase, for reference
--   slow_step    the slowest step takes >= 1.5x the median (3+ steps)
--   cpu_top      (no GPU, no phases) the range with the most self time
--   drops        events were dropped: the numbers undercount

local fmt = require("prof.reports.fmt")
local steps_report = require("prof.reports.steps")

local M = { name = "findings", title = "Findings" }

-- The main thread's activity during GPU idle time, as "data
-- (DataLoader.__next__)" or "cudaStreamSynchronize", with its share.
local function idle_activity(gpu)
	local top
	for _, r in ipairs(gpu.idle_ranges or {}) do
		if r.name ~= "(no range)" then
			top = r
			break
		end
	end
	local phase, phase_t = nil, 0
	for _, p in ipairs(steps_report.PHASES) do
		local t = gpu.idle_phases and gpu.idle_phases[p] or 0
		if t > phase_t then
			phase, phase_t = p, t
		end
	end
	if top and phase and phase ~= top.name and phase_t >= top.time then
		return string.format("%s (%s)", phase, top.name), phase_t / math.max(1, gpu.idle)
	elseif top then
		return top.name, top.share
	elseif phase then
		return phase, phase_t / math.max(1, gpu.idle)
	end
	return nil
end

function M.analyze(data)
	local out = {}
	local steps, gpu, cpu = data.steps or {}, data.gpu or {}, data.cpu or {}
	local kernels, copies = data.kernels or {}, data.copies or {}
	local step_time = steps.stats and steps.stats.mean or 0
	local span = gpu.span or 0
	local function add(id, score, text)
		out[#out + 1] = { id = id, score = score, text = text }
	end

	local data_share = steps.share and steps.share.data or 0
	local is_data = data_share >= 0.3
	local gpu_bound = gpu.present and gpu.utilization >= 0.8
	local sync_share = 0
	if cpu.sync and span > 0 then
		sync_share = cpu.sync.main / span
	elseif cpu.sync and steps.stats and steps.complete > 0 then
		sync_share = cpu.sync.main / (step_time * steps.complete)
	end
	local is_sync = not gpu_bound and sync_share >= 0.2 and (cpu.sync.calls or 0) > 0

	if is_data then
		local text = string.format("data loading took %s of step time (%s of %s per step): "
			.. "the loop waits for its input; more DataLoader workers (num_workers), "
			.. "pin_memory=True or prefetching would help",
			fmt.pct(data_share), fmt.time(steps.avg.data), fmt.time(step_time))
		if gpu.present and gpu.utilization < 0.7 then
			local what, share = idle_activity(gpu)
			text = text .. string.format("; the GPU was idle %s of step time",
				fmt.pct(1 - gpu.utilization))
			if what then
				text = text .. string.format(" and %s of that idle time the main thread was in %s",
					fmt.pct(share), what)
			end
		end
		add("data_loader", data_share, text)
	end
	if gpu_bound then
		local text = string.format("the GPU was busy %s of step time: the step is GPU-bound",
			fmt.pct(gpu.utilization))
		local k = kernels.rows and kernels.rows[1]
		if k then
			text = text .. string.format("; the top kernel %s takes %s of kernel time (%d launches, %s each)",
				fmt.cut(k.name, 60), fmt.pct(k.share), k.count, fmt.time(k.avg))
		end
		if sync_share >= 0.2 then
			text = text .. string.format("; the CPU waits for it in %s (%s of step time)",
				cpu.sync.top, fmt.pct(sync_share))
		end
		add("gpu_bound", gpu.utilization, text .. "; faster kernels are where time can be won")
	end
	if is_sync then
		add("sync", sync_share, string.format("the main thread spent %s of step time waiting in "
			.. "%s (%d calls): each synchronization stalls the CPU until the GPU is done, "
			.. "so CPU and GPU take turns; drop .item()/.cpu()/synchronize() calls from the "
			.. "loop or move them out of the step",
			fmt.pct(sync_share), cpu.sync.top, cpu.sync.top_count or cpu.sync.calls))
	end
	if gpu.present and not gpu_bound and not is_data and not is_sync and
	    1 - gpu.utilization >= 0.3 then
		local what, share = idle_activity(gpu)
		local text = string.format("the GPU was idle %s of step time", fmt.pct(1 - gpu.utilization))
		if what then
			text = text .. string.format("; %s of that idle time the main thread was in %s",
				fmt.pct(share), what)
		end
		if gpu.idle_samples and gpu.idle_samples.frame then
			text = text .. string.format(" (CPU samples in the largest gaps: %s%s in %s)",
				fmt.pct(gpu.idle_samples.share),
				gpu.idle_samples.unit == "weight" and " of their weight" or "",
				gpu.idle_samples.frame)
		end
		add("gpu_idle", 1 - gpu.utilization, text)
	end
	if gpu.present and copies.time and gpu.busy > 0 and copies.time / gpu.busy >= 0.3 then
		add("copies", copies.time / span, string.format("memory copies take %s of GPU busy time "
			.. "(%s at %.2f GB/s): pinned memory, fewer and larger copies, or keeping data "
			.. "on the GPU would help", fmt.pct(copies.time / gpu.busy), fmt.bytes(copies.bytes),
			copies.gbps))
	end
	if steps.top_phase and not is_data and #out == 0 then
		add("phase", steps.share[steps.top_phase], string.format(
			"%s is the largest phase: %s of step time (%s per step)", steps.top_phase,
			fmt.pct(steps.share[steps.top_phase]), fmt.time(steps.avg[steps.top_phase])))
	end
	if steps.slowest and steps.complete >= 3 and steps.slowest.ratio >= 1.5 then
		add("slow_step", math.min(0.25, (steps.slowest.ratio - 1) / 10), string.format(
			"step %d took %s, %.1fx the median (%s)", steps.slowest.step,
			fmt.time(steps.slowest.dur), steps.slowest.ratio, fmt.time(steps.stats.median)))
	end
	if not gpu.present and not steps.has_phases and cpu.rows and cpu.rows[1] and
	    cpu.self_total > 0 then
		local r = cpu.rows[1]
		add("cpu_top", r.share * 0.5, string.format(
			"most CPU self time goes to %s: %s (%d calls)",
			fmt.cut(r.name, 60), fmt.pct(r.share), r.count))
	end
	local drops = data.meta and data.meta.drops or {}
	if (drops.total or 0) > 0 then
		add("drops", 1.01, string.format("%d events were dropped (buffers full): the numbers "
			.. "above undercount; %s", drops.total, data.meta.recorder
				and "raise prof.recorder{ mb = ... } or lower its steps"
				or "raise prof.capture{ buffer_mb = ... }"))
	end
	table.sort(out, function(a, b)
		if a.score ~= b.score then
			return a.score > b.score
		end
		return a.id < b.id
	end)
	return out
end

function M.text(findings)
	if #findings == 0 then
		return "  Nothing stands out in this window."
	end
	local lines = {}
	for i, f in ipairs(findings) do
		lines[i] = string.format("  %d. %s", i, f.text)
	end
	return table.concat(lines, "\n")
end

return M
