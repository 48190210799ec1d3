// Helpers shared by the libFuzzer targets in fuzz/: splitting one input into several files, and a
// private scratch directory for loaders that only take paths.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace weft::fuzz {

// Targets that need several files (two JSONL arms, an index and its shards) read them from one
// input cut at this line. It is short and printable so seed files stay readable and libFuzzer's
// mutations (which copy byte runs between inputs) find it easily.
constexpr std::string_view kPartSeparator = "\n--8<--\n";

// Cuts `data` at every kPartSeparator; missing parts come back empty, extra ones are dropped.
inline std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t n_parts) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  while (parts.size() + 1 < n_parts) {
    size_t cut = rest.find(kPartSeparator);
    if (cut == std::string_view::npos) break;
    parts.emplace_back(rest.substr(0, cut));
    rest.remove_prefix(cut + kPartSeparator.size());
  }
  parts.emplace_back(rest);
  parts.resize(n_parts);
  return parts;
}

// A directory of this process's own, made on first use, reused by every input (libFuzzer runs
// inputs one after another in one process, so there is no race) and removed at exit. /dev/shm
// keeps the writes off the disk.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp && *tmp ? tmp : "/tmp");
    std::string tmpl = std::string(base) + "/weft-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("weft fuzz: mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

// Writes (or, for an empty `bytes` with remove_if_empty, deletes) `name` in the scratch directory.
inline void write_scratch_file(const std::string& name, const std::string& bytes, bool remove_if_empty) {
  const std::string path = scratch_dir() + "/" + name;
  if (remove_if_empty && bytes.empty()) {
    std::remove(path.c_str());
    return;
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror("weft fuzz: writing a scratch file");
    std::abort();
  }
}

}  // namespace weft::fuzz
