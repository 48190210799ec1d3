#include "server/metrics.h"

#include <cstdio>

namespace weft::server {

void HttpCounters::count(const std::string& path, int status) {
  // Only the known endpoints get their own label: a client probing random paths must not grow
  // the metrics without bound.
  static const char* kKnown[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"};
  std::string label = "other";
  for (const char* k : kKnown)
    if (path == k) label = k;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[{label, status}];
}

std::map<std::pair<std::string, int>, int64_t> HttpCounters::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

namespace {

void metric(std::string* out, const char* name, const char* type, const char* help, double value,
            const std::string& labels = "") {
  char buf[512];
  std::snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s %s\n%s%s %.17g\n", name, help, name, type, name,
                labels.c_str(), value);
  *out += buf;
}

}  // namespace

std::string render_metrics(const SchedulerStats& s, const HttpCounters& http) {
  std::string o;
  metric(&o, "weft_requests_total", "counter", "Generation requests accepted", double(s.requests_total));
  metric(&o, "weft_requests_rejected_total", "counter", "Requests refused because the queue was full",
         double(s.requests_rejected));
  metric(&o, "weft_requests_cancelled_total", "counter", "Requests dropped because the client went away",
         double(s.requests_cancelled));
  metric(&o, "weft_prompt_tokens_total", "counter", "Prompt tokens of admitted requests", double(s.prompt_tokens));
  metric(&o, "weft_prompt_tokens_cached_total", "counter",
         "Prompt tokens reused from a slot's prefix cache (not prefilled again)", double(s.cached_tokens));
  metric(&o, "weft_completion_tokens_total", "counter", "Tokens generated", double(s.completion_tokens));
  metric(&o, "weft_prefill_rows_total", "counter", "Prompt rows prefilled", double(s.prefilled_rows));
  metric(&o, "weft_decode_rows_total", "counter", "Rows decoded (one per sequence per step)", double(s.decoded_rows));
  metric(&o, "weft_prefill_seconds_total", "counter", "Seconds spent in prefill calls", s.prefill_seconds);
  metric(&o, "weft_decode_seconds_total", "counter", "Seconds spent in decode calls", s.decode_seconds);
  metric(&o, "weft_decode_tokens_per_second", "gauge", "Decoded rows per second of decode time, since start",
         s.decode_seconds > 0 ? double(s.decoded_rows) / s.decode_seconds : 0.0);
  metric(&o, "weft_prefill_tokens_per_second", "gauge", "Prefilled rows per second of prefill time, since start",
         s.prefill_seconds > 0 ? double(s.prefilled_rows) / s.prefill_seconds : 0.0);
  metric(&o, "weft_queue_depth", "gauge", "Requests waiting for a slot", double(s.queue_depth));
  metric(&o, "weft_active_sequences", "gauge", "Slots running a request", double(s.active));
  metric(&o, "weft_slots", "gauge", "Slots (--parallel)", double(s.slots));
  o += "# HELP weft_kv_cache_bytes KV cache pages held, by tensor and type (idle slots keep theirs for reuse)\n"
       "# TYPE weft_kv_cache_bytes gauge\n";
  o += "weft_kv_cache_bytes{tensor=\"k\",type=\"" + s.k_type + "\"} " + std::to_string(s.k_bytes) + "\n";
  o += "weft_kv_cache_bytes{tensor=\"v\",type=\"" + s.v_type + "\"} " + std::to_string(s.v_bytes) + "\n";
  metric(&o, "weft_gdn_checkpoint_bytes", "gauge", "GDN state checkpoints held for prefix reuse", double(s.checkpoint_bytes));
  o += "# HELP weft_http_responses_total HTTP responses by endpoint and status\n# TYPE weft_http_responses_total counter\n";
  for (const auto& [key, n] : http.snapshot())
    o += "weft_http_responses_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
         std::to_string(n) + "\n";
  return o;
}

}  // namespace weft::server
