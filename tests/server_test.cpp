// End-to-end tests of `weft serve` with the official openai npm client (tests/server/*.test.mjs,
// version pinned in tests/server/package-lock.json; test.sh runs `npm ci` there). Each case
// starts a server on a free loopback port (--port 0) with the shipped model, runs one node test
// file against it, then stops the server with SIGTERM and checks that it drained and exited 0.
// Skips, saying why, without node or the installed npm packages.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "test_util.h"

namespace weft {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class Server {
 public:
  // Starts weft serve with `args`; returns "" or why it did not come up.
  std::string start(const std::vector<std::string>& args) {
    log_ = test::temp_dir("server_test") + "/serve.log";
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<std::string> argv_s = {test::weft_binary(), "serve", "-m", test::source_dir() + "/models/weft-tiny-hybrid",
                                         "--port", "0", "--threads", "2"};
      argv_s.insert(argv_s.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      FILE* f = freopen(log_.c_str(), "w", stderr);
      (void)f;
      execv(argv[0], argv.data());
      _exit(127);
    }
    const std::regex serving("serving .* on (http://127\\.0\\.0\\.1:[0-9]+)");
    for (int i = 0; i < 600; ++i) {
      std::smatch m;
      const std::string log = read_file(log_);
      if (std::regex_search(log, m, serving)) {
        url_ = m[1];
        return "";
      }
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return "weft serve exited: " + log;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "weft serve did not start in 30 s: " + read_file(log_);
  }
  // SIGTERM, then the exit status (-1 on a timeout).
  int stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 600; ++i) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1;
  }
  ~Server() { stop(); }
  const std::string& url() const { return url_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return read_file(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_, url_;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string out;
    if (test::run_command("node --version", &out) != 0) GTEST_SKIP() << "node is not installed: the openai-client tests skip";
    dir_ = test::source_dir() + "/tests/server";
    if (test::run_command("test -f " + shell_quote(dir_ + "/node_modules/openai/package.json"), &out) != 0)
      GTEST_SKIP() << "the openai npm package is not installed: run `npm ci` in tests/server (test.sh does)";
  }
  // Runs tests/server/<name>.test.mjs against a fresh server started with args.
  void run_node(const std::string& name, const std::vector<std::string>& args, const std::string& api_key = "") {
    Server server;
    const std::string why = server.start(args);
    ASSERT_EQ(why, "");
    std::string out;
    const std::string cmd = "cd " + shell_quote(dir_) + " && WEFT_PID=" + std::to_string(server.pid()) + " WEFT_URL=" + server.url() +
                            (api_key.empty() ? "" : " WEFT_API_KEY=" + shell_quote(api_key)) + " node --test " + name +
                            ".test.mjs";
    const int rc = test::run_command(cmd, &out);
    EXPECT_EQ(rc, 0) << out << "\n--- server log:\n" << server.log();
    EXPECT_EQ(server.stop(), 0) << server.log();
    EXPECT_NE(server.log().find("weft: stopped after"), std::string::npos) << server.log();
  }
  std::string dir_;
};

const std::vector<std::string> kMain = {"--parallel", "4", "--ctx", "2048", "--max-body", "2000000"};

TEST_F(ServerTest, ChatStreamingCompletionsAndErrors) { run_node("basic", kMain); }
TEST_F(ServerTest, EightConcurrentClients) { run_node("concurrency", kMain); }
TEST_F(ServerTest, DisconnectFreesTheSlot) { run_node("disconnect", kMain); }
TEST_F(ServerTest, MultiTurnReuseEqualsColdRun) { run_node("multiturn", kMain); }
TEST_F(ServerTest, SigtermDrainsTheStreamInFlight) { run_node("drain", kMain); }
TEST_F(ServerTest, FullQueueIs503) { run_node("queue", {"--parallel", "1", "--queue", "1"}); }
TEST_F(ServerTest, ToolCallRoundTripAndApiKey) {
  run_node("tools",
           {"--api-key", "sekret", "--test-reply",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            "--test-reply", "It is sunny in Paris.", "--test-reply",
            "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
            "Berlin\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"},
           "sekret");
}

// The server refuses bad flags and a port it cannot bind, with a message and a non-zero exit.
TEST(ServerCli, BadFlagsFailClearly) {
  std::string out;
  EXPECT_NE(test::run_command(test::weft_binary() + " serve --parallel 0", &out), 0);
  EXPECT_NE(test::run_command(test::weft_binary() + " serve --host 203.0.113.1 --port 1", &out), 0);
  EXPECT_NE(out.find("cannot listen"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::weft_binary() + " serve --kv-rotate", &out), 0);
  EXPECT_EQ(test::run_command(test::weft_binary() + " serve --help", &out), 0);
  EXPECT_NE(out.find("--parallel"), std::string::npos);
}

// `weft chat` reads turns from stdin, streams replies, and reuses the conversation's prefix: the
// second turn reports reused prompt tokens (at least the first turn's prompt up to its last
// multiple of 64), /reset starts over. That reuse gives a cold run's tokens is checked by
// server_scheduler_test and multiturn.test.mjs (the same Scheduler).
TEST(ServerCli, ChatKeepsTheConversationPrefix) {
  std::string system;
  for (int i = 0; i < 20; ++i) system += "Rule " + std::to_string(i) + ": be brief and kind. ";
  std::string out;
  const std::string cmd = "printf 'Hello there\\nTell me more\\n/reset\\nHi\\n' | " + test::weft_binary() +
                          " chat --threads 2 -n 6 --system '" + system + "'";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  const std::regex turn("([0-9]+) prompt tokens \\(([0-9]+) reused\\)");
  std::vector<std::pair<int, int>> turns;
  for (std::sregex_iterator it(out.begin(), out.end(), turn), end; it != end; ++it)
    turns.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
  ASSERT_EQ(turns.size(), 3u) << out;
  EXPECT_EQ(turns[0].second, 0);
  EXPECT_GE(turns[1].second, turns[0].first / 64 * 64) << out;  // the first turn's prompt, to its last 64
  EXPECT_GT(turns[1].second, 0);
  EXPECT_LT(turns[2].first, turns[1].first);  // after /reset the conversation starts again
  EXPECT_NE(out.find("conversation reset"), std::string::npos);
  EXPECT_NE(test::run_command(test::weft_binary() + " chat --chat-template /nonexistent.jinja < /dev/null", &out), 0);
}

}  // namespace
}  // namespace weft
