// HttpServer: the OpenAI-compatible endpoints on cpp-httplib, over a Scheduler.
//   POST /v1/chat/completions   chat template -> tokens -> scheduler; SSE or one JSON body;
//                               tools / tool_choice, reasoning_content, logprobs, usage
//   POST /v1/completions        raw prompt (text or token ids)
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text)
// Defensive: binds where told (the CLI defaults to 127.0.0.1); with an API key every /v1 route
// needs "Authorization: Bearer KEY" (401 otherwise); bodies over max_body are refused (413);
// every error is an OpenAI-style JSON body; a full queue is 503 with Retry-After; a streaming
// client that goes away cancels its request, which frees its slot at the scheduler's next step.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/generation_defaults.h"
#include "engine/scheduler.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"
#include "server/metrics.h"
#include "server/reply.h"
#include "server/request.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace weft::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port (see port())
  std::string api_key;             // "" : no authentication
  size_t max_body = 8u << 20;      // bytes
  RequestLimits limits;
  std::string model_name = "weft";
  int http_threads = 0;            // 0: parallel + max_queue + 4 (waiting requests hold a thread)
  // Test scripting: replies emitted (as token ids, the model still running) instead of sampled
  // ones, in turn per chat request. Makes tool-call round trips testable with any model.
  std::vector<std::string> test_replies;
};

class HttpServer {
 public:
  // chat_template may be null: /v1/chat/completions then answers 400 naming --chat-template.
  HttpServer(Scheduler& scheduler, const Tokenizer& tokenizer, const ChatTemplate* chat_template,
             GenerationDefaults defaults, ServerOptions options);
  ~HttpServer();
  // Binds the socket; false with *error when it cannot.
  bool bind(std::string* error);
  int port() const { return port_; }
  void serve();  // blocks until stop()
  // Stops accepting, waits (up to timeout_s) for responses in flight to finish, then stops.
  void stop(double timeout_s = 30);
  void set_draining() { draining_ = true; }

 private:
  void routes();
  void handle_chat(const httplib::Request& req, httplib::Response& res);
  void handle_completion(const httplib::Request& req, httplib::Response& res);
  // Submits and answers: one body, or the SSE stream.
  void run(GenerationRequest g, ReplyOptions reply, bool stream, httplib::Response& res);
  std::string next_id(const char* prefix);
  uint64_t next_seed();
  // The reply fields both endpoints share (id, model, created, usage and logprob options).
  ReplyOptions reply_options(bool chat, const SamplingFields& sampling);

  Scheduler& scheduler_;
  const Tokenizer& tokenizer_;
  const ChatTemplate* template_;
  GenerationDefaults defaults_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  HttpCounters counters_;
  std::atomic<int64_t> ids_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> replies_used_{0};
  std::mutex seed_mu_;
  uint64_t seed_state_;
  int port_ = 0;
};

}  // namespace weft::server
