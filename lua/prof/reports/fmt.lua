-- prof.reports.fmt — number formats and plain-text tables for the reports.
--
-- Times in the reports' data are integer nanoseconds; these functions turn
-- them into what people read. Pure functions.

local M = {}

-- 1234567 ns -> "1.235 ms"; below 1 µs in ns, below 1 ms in µs, below 1 s
-- in ms, else s.
function M.time(ns)
	if ns == nil then
		return ""
	end
	local a = math.abs(ns)
	if a < 1000 then
		return string.format("%d ns", math.floor(ns + 0.5))
	elseif a < 1e6 then
		return string.format("%.3f us", ns / 1e3)
	elseif a < 1e9 then
		return string.format("%.3f ms", ns / 1e6)
	end
	return string.format("%.3f s", ns / 1e9)
end

-- ns -> milliseconds with three decimals ("10.512").
function M.ms(ns)
	return string.format("%.3f", (ns or 0) / 1e6)
end

-- 0.4123 -> "41.2 %".
function M.pct(share)
	return string.format("%.1f %%", (share or 0) * 100)
end

-- 1234567 -> "1,234,567" (integers), 1234.5 -> "1,234.5" (one decimal).
function M.thousands(v, decimals)
	local s
	if decimals and decimals > 0 then
		s = string.format("%." .. decimals .. "f", v)
	else
		s = string.format("%d", math.floor(v + 0.5))
	end
	local sign, int, frac = s:match("^(-?)(%d+)(.*)$")
	int = int:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "")
	return sign .. int .. frac
end

-- Bytes -> "1.50 MB" (decimal units, as nsys prints them).
function M.bytes(b)
	local units = { "B", "kB", "MB", "GB", "TB" }
	local i = 1
	while b >= 1000 and i < #units do
		b = b / 1000
		i = i + 1
	end
	if i == 1 then
		return string.format("%d B", math.floor(b + 0.5))
	end
	return string.format("%.2f %s", b, units[i])
end

-- A name cut to `max` columns ("..." at the end), control characters as '?'.
function M.cut(s, max)
	s = tostring(s):gsub("%c", "?")
	if max and utf8.len(s) and utf8.len(s) > max then
		return s:sub(1, utf8.offset(s, max - 2) - 1) .. "..."
	end
	return s
end

-- Renders rows as an aligned text table. `cols` is a list of
-- { title, key or function(row) -> text, right = bool }. Lines are
-- indented by `indent` (default 2 spaces).
function M.table(rows, cols, indent)
	indent = indent or "  "
	local cells, width = {}, {}
	for c, col in ipairs(cols) do
		width[c] = utf8.len(col[1]) or #col[1]
	end
	for r, row in ipairs(rows) do
		cells[r] = {}
		for c, col in ipairs(cols) do
			local v = col[2]
			local text
			if type(v) == "function" then
				text = v(row)
			else
				text = row[v]
			end
			text = text == nil and "" or tostring(text)
			cells[r][c] = text
			local w = utf8.len(text) or #text
			if w > width[c] then
				width[c] = w
			end
		end
	end
	local function line(texts)
		local parts = {}
		for c, col in ipairs(cols) do
			local text = texts[c]
			local pad = string.rep(" ", width[c] - (utf8.len(text) or #text))
			if col.right then
				parts[c] = pad .. text
			elseif c < #cols then
				parts[c] = text .. pad
			else
				parts[c] = text
			end
		end
		return indent .. table.concat(parts, "  ")
	end
	local out = {}
	local titles = {}
	for c, col in ipairs(cols) do
		titles[c] = col[1]
	end
	out[1] = line(titles)
	local dashes = {}
	for c in ipairs(cols) do
		dashes[c] = string.rep("-", width[c])
	end
	out[2] = indent .. table.concat(dashes, "  ")
	for r in ipairs(rows) do
		out[#out + 1] = line(cells[r])
	end
	return table.concat(out, "\n")
end

-- The cells of the `nsys stats` summary columns (Time (%), Total Time,
-- Instances, Avg, Med, Min, Max, StdDev) for a row of trace:aggregate's
-- statistics; the caller adds its own cells to the table returned.
function M.stats_cells(r)
	return {
		pct = string.format("%.1f", r.share * 100),
		total = M.thousands(r.total), n = M.thousands(r.count),
		avg = M.thousands(r.avg, 1), med = M.thousands(r.med, 1),
		min = M.thousands(r.min), max = M.thousands(r.max),
		std = M.thousands(r.std, 1),
	}
end

-- The columns for M.stats_cells' cells, then the caller's `more` columns,
-- for M.table.
function M.stats_columns(more)
	local cols = {
		{ "Time (%)", "pct", right = true }, { "Total Time (ns)", "total", right = true },
		{ "Instances", "n", right = true }, { "Avg (ns)", "avg", right = true },
		{ "Med (ns)", "med", right = true }, { "Min (ns)", "min", right = true },
		{ "Max (ns)", "max", right = true }, { "StdDev (ns)", "std", right = true },
	}
	for _, col in ipairs(more) do
		cols[#cols + 1] = col
	end
	return cols
end

-- The statistics of a trace:aggregate row as plain data (the rows of the
-- kernels and nvtx analyses); `share` replaces the row's own when given.
function M.stats_row(r, share)
	return { name = r.name, total = r.total, count = r.count, avg = r.avg, med = r.med,
		min = r.min, max = r.max, std = r.std, share = share or r.share }
end

-- The `nsys stats` table of rows from M.stats_row, at most `limit` of them
-- (nil: all): the summary columns, then the `more` columns, whose cells are
-- the row's name (cut to 80) and the constant `cells`; then "(N more
-- <noun> not shown)" when `all` rows exist.
function M.stats_table(rows, limit, more, cells, all, noun)
	local out = {}
	for i, r in ipairs(rows) do
		if limit and i > limit then
			break
		end
		out[i] = M.stats_cells(r)
		out[i].name = M.cut(r.name, 80)
		for k, v in pairs(cells or {}) do
			out[i][k] = v
		end
	end
	local text = M.table(out, M.stats_columns(more), " ")
	if all > #out then
		text = text .. string.format("\n  (%d more %s not shown)", all - #out, noun)
	end
	return text
end

-- A sorted copy of a list of numbers.
local function sorted(xs)
	local s = {}
	for i, x in ipairs(xs) do
		s[i] = x
	end
	table.sort(s)
	return s
end

-- Median of a list of numbers (mean of the middle two for an even count).
function M.median(xs)
	local s = sorted(xs)
	local n = #s
	if n == 0 then
		return 0
	end
	if n % 2 == 1 then
		return s[(n + 1) // 2]
	end
	return (s[n // 2] + s[n // 2 + 1]) / 2
end

-- Quantile q of xs, interpolating linearly between closest ranks.
function M.quantile(xs, q)
	local s = sorted(xs)
	local n = #s
	if n == 0 then
		return 0
	end
	local rank = q * (n - 1)
	local lo = math.floor(rank)
	if lo + 1 >= n then
		return s[n]
	end
	return s[lo + 1] + (s[lo + 2] - s[lo + 1]) * (rank - lo)
end

return M
