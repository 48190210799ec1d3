// Prometheus text exposition (GET /metrics): the scheduler's counters and gauges (requests,
// tokens in/out, prefix reuse, queue depth, active sequences, KV bytes per type, tok/s) and the
// HTTP responses by endpoint and status.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/scheduler.h"

namespace weft::server {

class HttpCounters {
 public:
  void count(const std::string& path, int status);
  std::map<std::pair<std::string, int>, int64_t> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
};

std::string render_metrics(const SchedulerStats& s, const HttpCounters& http);

}  // namespace weft::server
