#include "server/http_server.h"

#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include <httplib.h>

#include "server/generation_request.h"
#include "server/reply.h"
#include "server/sse.h"

namespace weft::server {

using ojson = nlohmann::ordered_json;

namespace {

void send_error(httplib::Response& res, const RequestError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

RequestError error(int status, std::string message, std::string type, std::string param = "") {
  RequestError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.param = std::move(param);
  return e;
}

// Counts the requests being answered, so stop() can wait for them.
struct InFlight {
  std::atomic<int64_t>& n;
  explicit InFlight(std::atomic<int64_t>& c) : n(c) { ++n; }
  ~InFlight() { --n; }
};

}  // namespace

HttpServer::HttpServer(Scheduler& scheduler, const Tokenizer& tokenizer, const ChatTemplate* chat_template,
                       GenerationDefaults defaults, ServerOptions options)
    : scheduler_(scheduler),
      tokenizer_(tokenizer),
      template_(chat_template),
      defaults_(std::move(defaults)),
      options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()),
      seed_state_(std::random_device{}()) {
  int threads = options_.http_threads;
  if (threads <= 0) threads = scheduler_.options().parallel + scheduler_.options().max_queue + 4;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http_->set_payload_max_length(options_.max_body);
  http_->set_read_timeout(60, 0);
  http_->set_write_timeout(60, 0);
  routes();
}

HttpServer::~HttpServer() = default;

std::string HttpServer::next_id(const char* prefix) { return std::string(prefix) + "-" + std::to_string(++ids_); }

uint64_t HttpServer::next_seed() {
  std::lock_guard<std::mutex> lock(seed_mu_);
  seed_state_ = seed_state_ * 6364136223846793005ull + 1442695040888963407ull;
  return seed_state_;
}

void HttpServer::routes() {
  httplib::Server& s = *http_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!options_.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
      const std::string want = "Bearer " + options_.api_key;
      if (req.get_header_value("Authorization") != want) {
        RequestError e = error(401, "Incorrect or missing API key (send 'Authorization: Bearer KEY')",
                               "invalid_request_error");
        send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors httplib answers itself (404, 413, 400 on a malformed request line) get a JSON body too.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = "error " + std::to_string(res.status);
    if (res.status == 404) msg = "no such endpoint: " + req.method + " " + req.path;
    if (res.status == 413) msg = "the request body is too large (--max-body)";
    send_error(res, error(res.status, msg, res.status >= 500 ? "server_error" : "invalid_request_error"));
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = std::string("internal error: ") + ex.what();
    } catch (...) {
    }
    send_error(res, error(500, what, "server_error"));
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) { counters_.count(req.path, res.status); });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {
      res.status = 503;
      res.set_content(R"({"status":"draining"})", "application/json");
      return;
    }
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(scheduler_.stats(), counters_), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    ojson m;
    m["id"] = options_.model_name;
    m["object"] = "model";
    m["created"] = 0;
    m["owned_by"] = "weft";
    ojson body = {{"object", "list"}, {"data", ojson::array({m})}};
    res.set_content(body.dump(), "application/json");
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    InFlight f(in_flight_);
    handle_chat(req, res);
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    InFlight f(in_flight_);
    handle_completion(req, res);
  });
}

void HttpServer::handle_chat(const httplib::Request& req, httplib::Response& res) {
  ChatRequest cr;
  if (auto e = parse_chat_request(req.body, options_.limits, &cr)) return send_error(res, *e);
  if (!template_)
    return send_error(res, error(400, "this model has no chat template: start weft serve with --chat-template FILE, "
                                      "or use /v1/completions",
                                 "invalid_request_error"));
  const bool tools = !cr.tools.is_null() && cr.tool_choice != ToolChoice::kNone;
  ChatTemplateInput in;
  in.messages = cr.messages;
  if (tools) in.tools = cr.tools;
  in.extra = cr.template_kwargs;
  auto rendered = template_->render(in);
  if (!rendered.ok())
    return send_error(res, error(400, "the chat template rejected these messages: " + rendered.status().message(),
                                 "invalid_request_error", "messages"));
  std::vector<int32_t> ids = tokenizer_.encode(rendered.value());
  GenerationRequest g = make_generation_request(std::move(ids), cr.sampling, defaults_, scheduler_.options().ctx,
                                                options_.limits.max_tokens, next_seed());
  if (!options_.test_replies.empty()) {
    const uint64_t k = replies_used_++;
    g.forced = tokenizer_.encode(options_.test_replies[k % options_.test_replies.size()]);
  }
  ReplyOptions ro = reply_options(true, cr.sampling);
  ro.parser.reasoning = true;
  ro.parser.starts_in_reasoning = prompt_opens_reasoning(rendered.value());
  ro.parser.tools = tools;
  ro.parser.tools_schema = cr.tools;
  run(std::move(g), std::move(ro), cr.sampling.stream, res);
}

void HttpServer::handle_completion(const httplib::Request& req, httplib::Response& res) {
  CompletionRequest cr;
  if (auto e = parse_completion_request(req.body, options_.limits, &cr)) return send_error(res, *e);
  std::vector<int32_t> ids;
  if (cr.prompt_ids) {
    ids = *cr.prompt_ids;
    for (int32_t id : ids)
      if (id >= tokenizer_.vocab_size())
        return send_error(res, error(400, "token id " + std::to_string(id) + " is outside the vocabulary",
                                     "invalid_request_error", "prompt"));
  } else {
    if (tokenizer_.add_bos() && tokenizer_.bos_id()) ids.push_back(*tokenizer_.bos_id());
    std::vector<int32_t> enc = tokenizer_.encode(*cr.prompt);
    ids.insert(ids.end(), enc.begin(), enc.end());
  }
  GenerationRequest g = make_generation_request(std::move(ids), cr.sampling, defaults_, scheduler_.options().ctx,
                                                options_.limits.max_tokens, next_seed());
  run(std::move(g), reply_options(false, cr.sampling), cr.sampling.stream, res);
}

ReplyOptions HttpServer::reply_options(bool chat, const SamplingFields& sampling) {
  ReplyOptions ro;
  ro.chat = chat;
  ro.id = next_id(chat ? "chatcmpl" : "cmpl");
  ro.model = options_.model_name;
  ro.created = int64_t(std::time(nullptr));
  ro.include_usage = sampling.include_usage;
  ro.top_logprobs = sampling.top_logprobs;
  return ro;
}

void HttpServer::run(GenerationRequest g, ReplyOptions reply, bool stream, httplib::Response& res) {
  if (draining_) return send_error(res, error(503, "the server is shutting down", "server_error"));
  Submitted sub = scheduler_.submit(std::move(g));
  switch (sub.code) {
    case SubmitCode::kOk:
      break;
    case SubmitCode::kQueueFull:
      res.set_header("Retry-After", "1");
      return send_error(res, error(503, sub.message, "server_error"));
    case SubmitCode::kShuttingDown:
      return send_error(res, error(503, sub.message, "server_error"));
    case SubmitCode::kInvalid:
      return send_error(res, error(400, sub.message, "invalid_request_error", "messages"));
  }
  auto handle = sub.handle;
  auto builder = std::make_shared<ReplyBuilder>(&tokenizer_, std::move(reply));
  if (!stream) {
    std::vector<GenerationEvent> events;
    while (!builder->done()) {
      events.clear();
      handle->next(&events, std::chrono::milliseconds(200));
      for (const GenerationEvent& e : events) builder->add(e);
    }
    if (!builder->error().empty()) return send_error(res, error(500, builder->error(), "server_error"));
    res.set_content(builder->body().dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
    return;
  }
  ++in_flight_;  // until the stream ends (the handler returns before it does)
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [handle, builder](size_t, httplib::DataSink& sink) {
        std::vector<GenerationEvent> events;
        auto last_write = std::chrono::steady_clock::now();
        for (;;) {
          events.clear();
          if (!handle->next(&events, std::chrono::milliseconds(100))) {
            // Nothing to send (queued, or a long prefill): an SSE comment every second finds out
            // whether the client is still there, so a vanished one frees its place promptly.
            if (std::chrono::steady_clock::now() - last_write > std::chrono::seconds(1)) {
              static const char kPing[] = ": ping\n\n";
              if (!sink.is_writable() || !sink.write(kPing, sizeof kPing - 1)) {
                handle->cancel();
                return false;
              }
              last_write = std::chrono::steady_clock::now();
            }
            continue;
          }
          for (const GenerationEvent& e : events) {
            const std::string text = builder->stream(e);
            if (!text.empty() && !sink.write(text.data(), text.size())) {
              handle->cancel();
              return false;
            }
            last_write = std::chrono::steady_clock::now();
            if (e.done) {
              sink.done();
              return true;
            }
          }
        }
      },
      [handle, this](bool success) {
        if (!success) handle->cancel();
        --in_flight_;
      });
}

bool HttpServer::bind(std::string* err) {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ > 0) return true;
  } else if (http_->bind_to_port(options_.host, options_.port)) {
    port_ = options_.port;
    return true;
  }
  *err = "cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
         " (address in use, or not an address of this machine)";
  return false;
}

void HttpServer::serve() { http_->listen_after_bind(); }

void HttpServer::stop(double timeout_s) {
  draining_ = true;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (in_flight_ > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http_->stop();
}

}  // namespace weft::server
