-- busted helper: puts lua/ on the module path (run from the repo root),
-- and the specs' own support modules (tests/spec/policy_file.lua)
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/spec/?.lua;" .. package.path
