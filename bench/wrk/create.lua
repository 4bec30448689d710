-- wrk script for REST CreateEvaluation: every request needs its own evaluation ID and display
-- name, so each is built here from a JSON template.
--
--   wrk ... -s create.lua http://HOST:PORT -- PATH TEMPLATE OUTDIR PREFIX
--
-- PATH: /v1beta/<app>/evaluations; TEMPLATE: a file holding the Evaluation JSON with the
-- placeholder __DISPLAY_NAME__; requests go to PATH?evaluationId=<PREFIX><thread>-<n>. The name
-- of every created evaluation (2xx answers) is appended to OUTDIR/acked-<PREFIX><thread>.txt,
-- so the harness can check that each acknowledged write was stored. done() prints the same
-- BENCH-JSON line as report.lua.

local counter = 1

setup = function(thread)
  thread:set("tid", counter)
  counter = counter + 1
end

local path, before, after, prefix, acked
local n = 0

init = function(args)
  path = args[1]
  local file = assert(io.open(args[2], "rb"))
  local template = file:read("*a")
  file:close()
  local at = assert(string.find(template, "__DISPLAY_NAME__", 1, true))
  before = string.sub(template, 1, at - 1)
  after = string.sub(template, at + string.len("__DISPLAY_NAME__"))
  prefix = args[4] .. tid
  acked = assert(io.open(args[3] .. "/acked-" .. prefix .. ".txt", "w"))
  acked:setvbuf("line")
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

request = function()
  n = n + 1
  local id = prefix .. "-" .. n
  return wrk.format(nil, path .. "?evaluationId=" .. id, nil,
    before .. "Bench create " .. id .. after)
end

response = function(status, headers, body)
  if status >= 200 and status < 300 then
    local name = string.match(body, '"name"%s*:%s*"([^"]+)"')
    acked:write((name or "?"), "\n")
  end
end

done = function(summary, latency, requests)
  io.write(string.format(
    'BENCH-JSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"mean_us": %f, "max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.status, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean,
    latency.max))
end
