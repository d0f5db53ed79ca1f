-- busted helper: puts lua/ on the module path (run from the repo root)
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
