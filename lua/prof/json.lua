-- prof.json — a small JSON encoder for reports (trace:write_json, the
-- report's --format json and the data embedded in report.html).
--
-- encode(value) -> string. Tables with keys 1..n (and nothing else) are
-- arrays, other tables are objects with their keys sorted (numbers become
-- strings), an empty table is []. NaN and infinities become null. Strings
-- are escaped; bytes that are not valid UTF-8 become U+FFFD, so the output
-- is always valid JSON. Errors (raised at the caller's line): functions,
-- userdata, threads, keys that are not strings or numbers, and nesting
-- deeper than 200 (which is also how a cycle shows).

local M = {}

local MAX_DEPTH = 200

local escapes = {
	['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
	["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}

-- Escapes one string: control characters, quotes, backslashes; "</" as
-- "<\/" so the text can sit inside an HTML <script>.
local function quote(s)
	if not utf8.len(s) then
		-- replace each invalid byte (Lua's utf8 accepts up to 0x7FFFFFFF;
		-- keep what decodes, U+FFFD for the rest)
		local out, i, n = {}, 1, #s
		while i <= n do
			local ok, cp = pcall(utf8.codepoint, s, i)
			if ok and cp <= 0x10FFFF and not (cp >= 0xD800 and cp <= 0xDFFF) then
				local ch = utf8.char(cp)
				out[#out + 1] = ch
				i = i + #ch
			else
				out[#out + 1] = "\u{FFFD}"
				i = i + 1
			end
		end
		s = table.concat(out)
	end
	s = s:gsub('[%c"\\]', function(c)
		return escapes[c] or string.format("\\u%04x", c:byte())
	end)
	s = s:gsub("</", "<\\/")
	return '"' .. s .. '"'
end

local function number(v)
	if v ~= v or v == math.huge or v == -math.huge then
		return "null"
	end
	if math.type(v) == "integer" then
		return string.format("%d", v)
	end
	if v == math.floor(v) and math.abs(v) < 2^53 then
		return string.format("%d", math.tointeger(v))
	end
	local s = string.format("%.15g", v)
	if tonumber(s) ~= v then
		s = string.format("%.17g", v)
	end
	return s
end

local encode_value

local function is_array(t)
	local n = #t
	local count = 0
	for k in pairs(t) do
		if math.type(k) ~= "integer" or k < 1 or k > n then
			return false
		end
		count = count + 1
	end
	return count == n
end

local function encode_table(t, depth, out)
	if depth > MAX_DEPTH then
		error("prof.json: nesting deeper than " .. MAX_DEPTH .. " (a table that contains itself?)", 0)
	end
	if is_array(t) then
		out[#out + 1] = "["
		for i = 1, #t do
			if i > 1 then
				out[#out + 1] = ","
			end
			encode_value(t[i], depth + 1, out)
		end
		out[#out + 1] = "]"
		return
	end
	local keys = {}
	for k in pairs(t) do
		local tk = type(k)
		if tk ~= "string" and tk ~= "number" then
			error("prof.json: cannot encode a table key of type " .. tk, 0)
		end
		keys[#keys + 1] = k
	end
	table.sort(keys, function(a, b)
		return tostring(a) < tostring(b)
	end)
	out[#out + 1] = "{"
	for i, k in ipairs(keys) do
		if i > 1 then
			out[#out + 1] = ","
		end
		out[#out + 1] = quote(type(k) == "number" and number(k) or k)
		out[#out + 1] = ":"
		encode_value(t[k], depth + 1, out)
	end
	out[#out + 1] = "}"
end

encode_value = function(v, depth, out)
	local tv = type(v)
	if tv == "nil" then
		out[#out + 1] = "null"
	elseif tv == "boolean" then
		out[#out + 1] = v and "true" or "false"
	elseif tv == "number" then
		out[#out + 1] = number(v)
	elseif tv == "string" then
		out[#out + 1] = quote(v)
	elseif tv == "table" then
		encode_table(v, depth, out)
	else
		error("prof.json: cannot encode a " .. tv, 0)
	end
end

-- The JSON text of `value`.
function M.encode(value)
	local out = {}
	local ok, err = pcall(encode_value, value, 0, out)
	if not ok then
		error(err, 2)
	end
	return table.concat(out)
end

return M
