-- wrk report: one JSON line (prefixed "BENCH-JSON ") with the counts and latency percentiles
-- (microseconds) that bench/run.py reads. Defines no request(), so wrk keeps its fast static
-- request path.
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
