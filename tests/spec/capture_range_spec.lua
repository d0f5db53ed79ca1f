-- Specs for prof.capture_range: what a policy author sees.

local prof = require("prof")
local policy_file = require("policy_file")
local error_of, config_of = policy_file.error_of, policy_file.config_of

describe("prof.capture_range", function()
	before_each(function()
		prof._reset()
	end)

	it("is off unless called", function()
		assert.are.same({ count = 1 }, config_of("").capture_range)
	end)

	it("takes the range, its domain and a count", function()
		local c = config_of('prof.capture_range{ nvtx = "eval", domain = "app", count = 3 }')
		assert.are.same({ nvtx = "eval", nvtx_domain = "app", count = 3 }, c.capture_range)
	end)

	it("records one range by default; 0 means every one", function()
		assert.are.equal(1, config_of('prof.capture_range{ nvtx = "eval" }').capture_range.count)
		prof._reset()
		assert.are.equal(0, config_of('prof.capture_range{ nvtx = "eval", count = 0 }').capture_range.count)
	end)

	it("needs the range's name", function()
		assert.matches("^myprof%.lua:1: prof%.capture_range: 'nvtx' is required %(e%.g%. prof%.capture_range",
			error_of('prof.capture_range{ domain = "app" }'))
	end)

	it("rejects a negative or fractional count and an empty name", function()
		assert.are.equal(
			"myprof.lua:1: prof.capture_range: 'count' must be an integer >= 0 (0: every time), got -1",
			error_of('prof.capture_range{ nvtx = "x", count = -1 }'))
		assert.are.equal(
			"myprof.lua:1: prof.capture_range: 'count' must be an integer >= 0 (0: every time), got 1.5",
			error_of('prof.capture_range{ nvtx = "x", count = 1.5 }'))
		assert.are.equal(
			"myprof.lua:1: prof.capture_range: 'nvtx' must be a non-empty string, got string \"\"",
			error_of('prof.capture_range{ nvtx = "" }'))
	end)

	it("explains that nsys's repeat is count", function()
		assert.matches("unknown key 'repeat' %(nsys's repeat is called 'count' here",
			error_of('prof.capture_range{ nvtx = "x", ["repeat"] = 2 }'))
	end)

	it("can be set from the command line", function()
		prof._apply_set("capture_range.nvtx=eval step")
		prof._apply_set("capture_range.count=0")
		assert.are.same({ nvtx = "eval step", count = 0 }, prof._config().capture_range)
	end)

	it("combines with a schedule and NVTX steps", function()
		local c = config_of([[
			prof.steps{ nvtx = "train_step" }
			prof.schedule{ skip_first = 3, active = 2 }
			prof.capture_range{ nvtx = "eval" }]])
		assert.are.equal("train_step", c.steps.nvtx)
		assert.is_true(c.schedule.enabled)
		assert.are.equal("eval", c.capture_range.nvtx)
	end)
end)
