-- The specs' way to run a policy: `src` as a file named myprof.lua with
-- the prof module as its global `prof` (lua/prof, as profhost loads it).

local prof = require("prof")

local M = {}

-- Runs `src`; returns true, or false and the error message.
function M.run(src)
	local env = setmetatable({ prof = prof }, { __index = _G })
	local chunk = assert(load(src, "=myprof.lua", "t", env))
	return pcall(chunk)
end

-- Runs `src` and returns its error message; raises (failing the spec)
-- when it loads.
function M.error_of(src)
	local ok, err = M.run(src)
	if ok then
		error("policy loaded but an error was expected: " .. src, 2)
	end
	return err
end

-- Runs `src` and returns the resolved configuration; raises (failing the
-- spec) when it fails.
function M.config_of(src)
	local ok, err = M.run(src)
	if not ok then
		error(err, 2)
	end
	return prof._config()
end

return M
