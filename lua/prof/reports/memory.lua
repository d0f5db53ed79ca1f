-- prof.reports.memory — allocated device memory over time, from the
-- allocation events of the trace: instant events named "[memory]" (Kineto's
-- form) whose "Total Allocated" argument (or "total_allocated") is the
-- allocated total after the event, per "Device Id" (or "device"). When an
-- event has only "Bytes" (signed), the total is accumulated. torch's own
-- (category cpu_instant_event, prof.capture{ profile_memory = true }) are
-- series of their own, named by "Device Type": "CPU" (0), "GPU <id>
-- (tensors)" (1), apart from CUDA's (CUPTI's, category gpu_memory) on the
-- same GPU. The series are thinned to at most MAX_POINTS points per
-- device, keeping each bucket's peak.

local fmt = require("prof.reports.fmt")

local M = { name = "memory", title = "Memory over time" }

M.MAX_POINTS = 600

local function arg(a, ...)
	for _, k in ipairs({ ... }) do
		if a[k] ~= nil then
			return a[k]
		end
	end
	return nil
end

function M.analyze(trace)
	local series, order = {}, {}
	for ev in trace:events{ name = "^%[memory%]$" } do
		local a = ev.args
		local dev = arg(a, "Device Id", "device") or 0
		if ev.cat == "cpu_instant_event" then -- torch's tensors
			local kind = arg(a, "Device Type")
			dev = kind == 0 and "CPU" or kind == 1 and ("GPU " .. tostring(dev) .. " (tensors)")
				or ("device type " .. tostring(kind) .. ", " .. tostring(dev))
		end
		local s = series[dev]
		if not s then
			s = { device = dev, points = {}, running = 0, peak = 0, peak_ts = ev.ts }
			series[dev] = s
			order[#order + 1] = dev
		end
		local total = arg(a, "Total Allocated", "total_allocated")
		if type(total) ~= "number" then
			local b = arg(a, "Bytes", "bytes")
			if type(b) ~= "number" then
				goto continue
			end
			s.running = s.running + b
			total = s.running
		end
		s.points[#s.points + 1] = { ev.ts, total }
		if total > s.peak then
			s.peak, s.peak_ts = total, ev.ts
		end
		::continue::
	end
	if #order == 0 then
		return { present = false }
	end
	table.sort(order, function(a, b)
		return tostring(a) < tostring(b)
	end)
	local out = { present = true, devices = {} }
	for i, dev in ipairs(order) do
		local s = series[dev]
		table.sort(s.points, function(x, y)
			return x[1] < y[1]
		end)
		local pts = s.points
		if #pts > M.MAX_POINTS then
			local thin, per = {}, #pts / M.MAX_POINTS
			for k = 1, M.MAX_POINTS do
				local lo, hi = math.floor((k - 1) * per) + 1, math.floor(k * per)
				local best = pts[lo]
				for j = lo, hi do
					if pts[j][2] > best[2] then
						best = pts[j]
					end
				end
				thin[k] = best
			end
			pts = thin
		end
		out.devices[i] = { device = dev, points = pts, peak = s.peak, peak_ts = s.peak_ts,
			events = #s.points }
	end
	return out
end

function M.text(d)
	if not d.present then
		return "  No memory events in this window."
	end
	local rows = {}
	for i, s in ipairs(d.devices) do
		rows[i] = { dev = tostring(s.device), peak = fmt.bytes(s.peak), n = s.events }
	end
	return fmt.table(rows, { { "Device", "dev" }, { "Peak allocated", "peak", right = true },
		{ "Events", "n", right = true } })
end

return M
