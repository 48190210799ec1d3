#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <vector>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace weft::test {

std::string source_dir() { return WEFT_SOURCE_DIR; }
std::string weft_binary() { return WEFT_BINARY; }
std::string shared_dir() { return source_dir() + "/../shared"; }

namespace {
// The directories temp_dir made in this process, removed when it exits normally: synthetic models
// and converted GGUF files add up to gigabytes over a test run, and CI runs on a disk of no
// stated size (one run ran out of space). WEFT_KEEP_TEST_FILES=1 keeps them for a post-mortem;
// a test that crashes leaves its files too. Only the process that made a directory removes it
// (a forked child that exits must not delete its parent's files).
class TempDirs {
 public:
  ~TempDirs() {
    if (getpid() != owner_ || std::getenv("WEFT_KEEP_TEST_FILES") != nullptr) return;
    for (const std::string& dir : dirs_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
  void add(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(dir);
  }

 private:
  const pid_t owner_ = getpid();
  std::mutex mu_;
  std::vector<std::string> dirs_;
};

TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}
}  // namespace

std::string temp_dir(const std::string& tag) {
  std::random_device rd;
  std::string dir = "/tmp/weft-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(rd());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  temp_dirs().add(dir);
  return dir;
}

int run_command(const std::string& cmd, std::string* output) {
  // Grouped, so a redirect inside cmd (e.g. "2>/dev/null") still applies to cmd itself; only
  // what cmd leaves on stderr joins the captured output.
  std::string full = "{ " + cmd + "\n} 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf{};
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace weft::test
