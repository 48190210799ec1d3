// HostWeightCopy (host_weight_copy.h): huge-page copies of weight matrices for the CPU backend.
#include "backend/host_weight_copy.h"

#include "core/cpu_features.h"
#include "kernels/cpu/quant_matmul.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>

namespace weft {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;
// Ranges closer than this are copied as one (the gap with them): GGUF tensors lie back to back,
// so a model becomes one or a few ranges and translate() stays a short search.
constexpr uintptr_t kMergeGap = uintptr_t(1) << 20;
// The copy reads the source this much at a time before releasing its pages (see build()).
constexpr uintptr_t kCopyChunk = uintptr_t(16) << 20;
#ifdef MADV_PAGEOUT
constexpr int kMadvPageout = MADV_PAGEOUT;
#else
constexpr int kMadvPageout = 21;  // Linux's value, for older headers
#endif
#ifdef MADV_COLLAPSE
constexpr int kMadvCollapse = MADV_COLLAPSE;
#else
constexpr int kMadvCollapse = 25;  // Linux >= 6.1; older kernels answer EINVAL, which is harmless
#endif

// Bytes of [begin, end) the kernel backs with transparent huge pages: the AnonHugePages of every
// mapping in /proc/self/smaps that overlaps the range (the copy's mapping holds nothing else);
// SIZE_MAX when the kernel does not say.
size_t huge_bytes_in(uintptr_t begin, uintptr_t end) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false, seen = false;
  size_t sum = 0;
  while (std::getline(in, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    if (std::sscanf(line.c_str(), "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-') {  // a mapping's header
      inside = lo < end && hi > begin;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      sum += size_t(std::strtoull(line.c_str() + 14, nullptr, 10)) * 1024;
      seen = true;
    }
  }
  return seen ? sum : SIZE_MAX;
}

// MemAvailable in bytes, or 0 when /proc/meminfo cannot tell.
size_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// False when transparent huge pages are switched off ("[never]"): the copy would buy nothing.
bool thp_possible() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(in, s);
  return s.find("[never]") == std::string::npos;
}

std::vector<uintptr_t> fingerprint_of(const WeightSet& set) {
  std::vector<uintptr_t> f;
  f.reserve(set.matrices.size());
  for (const Matrix& m : set.matrices) f.push_back(reinterpret_cast<uintptr_t>(m.data));
  return f;
}

}  // namespace

namespace {

enum class WeightsMode { kCopy, kCopyPlain, kMmap };

WeightsMode weights_mode() {
  const char* v = std::getenv("WEFT_CPU_WEIGHTS");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "copy") == 0) return WeightsMode::kCopy;
  if (std::strcmp(v, "copy-plain") == 0) return WeightsMode::kCopyPlain;
  if (std::strcmp(v, "mmap") == 0) return WeightsMode::kMmap;
  static std::once_flag warned;
  std::call_once(warned, [&] {
    std::fprintf(stderr, "weft: WEFT_CPU_WEIGHTS='%s' is not 'copy', 'copy-plain' or 'mmap'; using 'copy'\n", v);
  });
  return WeightsMode::kCopy;
}

}  // namespace

bool host_weight_copy_enabled() { return weights_mode() != WeightsMode::kMmap; }

bool host_weight_repack_enabled() {
  return weights_mode() == WeightsMode::kCopy && quant_dot_groups_avx512(GgmlType::kQ4_K) != nullptr &&
         use_avx512_vnni();
}

struct HostWeightCopyBuilder {
  static std::shared_ptr<HostWeightCopy> build(const WeightSet& set, std::string* why) {
    struct Span {
      uintptr_t begin, end;
    };
    std::vector<Span> spans;
    for (const Matrix& m : set.matrices) {
      if (m.data == nullptr || m.bytes() == 0) continue;
      const auto b = reinterpret_cast<uintptr_t>(m.data);
      spans.push_back({b, b + m.bytes()});
    }
    if (spans.empty()) return nullptr;
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    // `pieces`: the union of the matrices (what is copied); `merged`: the ranges laid out in the
    // copy, pieces closer than kMergeGap joined. Gap bytes are not copied (they may be unmapped,
    // between two files' mappings) and nothing reads them.
    std::vector<Span> pieces{spans[0]}, merged{spans[0]};
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].begin <= pieces.back().end) {
        pieces.back().end = std::max(pieces.back().end, spans[i].end);
      } else {
        pieces.push_back(spans[i]);
      }
      if (spans[i].begin <= merged.back().end + kMergeGap) {
        merged.back().end = std::max(merged.back().end, spans[i].end);
      } else {
        merged.push_back(spans[i]);
      }
    }
    // Each range starts at its source's offset within a 4 KiB page (so rows keep their
    // alignment), after the previous one.
    std::vector<size_t> offset(merged.size());
    size_t total = 0, copied = 0;
    for (size_t i = 0; i < merged.size(); ++i) {
      const size_t page_off = merged[i].begin & 4095;
      total = (total + 4095) / 4096 * 4096 + page_off;
      offset[i] = total;
      total += merged[i].end - merged[i].begin;
    }
    for (const Span& piece : pieces) copied += piece.end - piece.begin;
    const size_t avail = mem_available();
    if (avail != 0 && copied > avail / 2) {
      if (why) {
        std::ostringstream s;
        s << "the weights (" << (copied >> 20) << " MiB) exceed half of MemAvailable (" << (avail >> 20)
          << " MiB): read in place from the mapped file";
        *why = s.str();
      }
      return nullptr;
    }
    const size_t map_bytes = total + kHugePage;
    void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      if (why) *why = std::string("cannot allocate the weight copy: ") + std::strerror(errno) + "; read in place";
      return nullptr;
    }
    auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1));
    madvise(base, total, MADV_HUGEPAGE);  // a hint: without it the copy still reads correctly
    std::shared_ptr<HostWeightCopy> copy(new HostWeightCopy());
    copy->mapping_ = p;
    copy->mapping_bytes_ = map_bytes;
    copy->bytes_ = copied;
    for (size_t i = 0; i < merged.size(); ++i) copy->ranges_.push_back({merged[i].begin, merged[i].end, base + offset[i]});
    // Copied in chunks, each chunk's source pages then handed back (MADV_PAGEOUT: reclaim, never
    // lose — a file page is dropped and refaults from the file if read again, an anonymous one
    // stays or goes to swap; MADV_DONTNEED would zero weights held in anonymous memory).
    // Otherwise reading the file for the copy would leave it resident in the process too, and
    // the peak would be twice the weights. A kernel without MADV_PAGEOUT (< 5.4) ignores it.
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    for (const Span& piece : pieces) {
      auto* dst = const_cast<uint8_t*>(static_cast<const uint8_t*>(copy->translate(reinterpret_cast<const void*>(piece.begin))));
      for (uintptr_t at = piece.begin; at < piece.end; at += kCopyChunk) {
        const uintptr_t end = std::min(piece.end, at + kCopyChunk);
        std::memcpy(dst + (at - piece.begin), reinterpret_cast<const void*>(at), end - at);
        const uintptr_t lo = (at + page - 1) & ~(page - 1), hi = end & ~(page - 1);  // whole pages only
        if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, kMadvPageout);
      }
    }
    if (host_weight_repack_enabled()) copy->repack(set);
    // MADV_HUGEPAGE is a hint: where memory is fragmented and the kernel does not compact at fault
    // time (THP "defrag" off or "defer"), the copy lands on 4 KiB pages and reads slower than the
    // file it replaced. Then ask once for a synchronous collapse (Linux >= 6.1; about a copy's
    // time) and record what the pages are, so bench reports say it.
    const size_t whole = total & ~(kHugePage - 1);
    const uintptr_t b = reinterpret_cast<uintptr_t>(base);
    copy->huge_bytes_ = huge_bytes_in(b, b + total);
    if (copy->huge_bytes_ != SIZE_MAX && copy->huge_bytes_ + kHugePage < whole) {
      madvise(base, whole, kMadvCollapse);
      copy->huge_bytes_ = huge_bytes_in(b, b + total);
    }
    mprotect(p, map_bytes, PROT_READ);  // weights are never written; a stray write faults
    copy->fingerprint_ = fingerprint_of(set);
    return copy;
  }
};

HostWeightCopy::~HostWeightCopy() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

std::shared_ptr<const HostWeightCopy> HostWeightCopy::shared(const void* key, const WeightSet& set, std::string* why) {
  if (!host_weight_copy_enabled()) return nullptr;
  if (!thp_possible()) {
    if (why) *why = "transparent huge pages are off: weights read in place";
    return nullptr;
  }
  static std::mutex mu;
  static std::map<const void*, std::weak_ptr<const HostWeightCopy>> live;
  std::lock_guard<std::mutex> lock(mu);
  for (auto e = live.begin(); e != live.end();) e = e->second.expired() ? live.erase(e) : std::next(e);
  auto it = live.find(key);
  if (it != live.end()) {
    std::shared_ptr<const HostWeightCopy> held = it->second.lock();
    if (held && held->fingerprint_ == fingerprint_of(set)) return held;
    live.erase(it);
  }
  std::shared_ptr<const HostWeightCopy> made = HostWeightCopyBuilder::build(set, why);
  if (made) live[key] = made;
  return made;
}

void HostWeightCopy::repack(const WeightSet& set) {
  // Candidates: matrices of a grouped type (quant_type_has_groups) of at least one group, each distinct matrix once (a tied head is
  // the embedding table twice).
  std::vector<Repacked> cand;
  struct Geometry {
    int64_t rows, cols;
  };
  std::vector<Geometry> geom;
  std::vector<std::pair<uintptr_t, uintptr_t>> all;  // every matrix's source range
  for (const Matrix& m : set.matrices) {
    if (m.data == nullptr || m.bytes() == 0) continue;
    const auto b = reinterpret_cast<uintptr_t>(m.data);
    all.push_back({b, b + m.bytes()});
    const std::optional<GgmlType> t = ggml_type_from_dtype(m.dtype);
    if (!t || !quant_type_has_groups(*t) || m.rows < kX8GroupRows) continue;
    cand.push_back({b, b + m.bytes(), m.row_bytes(), m.rows / kX8GroupRows * kX8GroupRows, *t});
    geom.push_back({m.rows, m.cols});
  }
  std::vector<size_t> order(cand.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cand[a].begin < cand[b].begin; });
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  std::vector<uintptr_t> reach(all.size());  // reach[i]: the largest end among all[0..i]
  for (size_t i = 0; i < all.size(); ++i) reach[i] = std::max(all[i].second, i > 0 ? reach[i - 1] : 0);
  std::vector<uint8_t> group;
  for (size_t k = 0; k < order.size(); ++k) {
    const Repacked& c = cand[order[k]];
    if (!repacked_.empty() && repacked_.back().begin == c.begin && repacked_.back().end == c.end) continue;  // same matrix
    // Any other matrix overlapping this one (other than itself) rules it out: one before it in
    // begin order reaching past its begin, or the next one beginning before its end.
    const size_t p = size_t(std::lower_bound(all.begin(), all.end(), std::make_pair(c.begin, c.end)) - all.begin());
    if ((p > 0 && reach[p - 1] > c.begin) || (p + 1 < all.size() && all[p + 1].first < c.end)) continue;
    auto* dst = const_cast<uint8_t*>(static_cast<const uint8_t*>(translate(reinterpret_cast<const void*>(c.begin))));
    const size_t group_bytes = kX8GroupRows * c.row_bytes;
    group.resize(group_bytes);
    for (int64_t r = 0; r < c.grouped_rows; r += kX8GroupRows) {
      uint8_t* at = dst + size_t(r) * c.row_bytes;
      repack_x8(c.type, at, c.row_bytes, geom[order[k]].cols, group.data());
      std::memcpy(at, group.data(), group_bytes);
    }
    repacked_.push_back(c);
  }
}

std::optional<QuantLayout> HostWeightCopy::layout(const Matrix& m) const {
  if (repacked_.empty() || m.data == nullptr) return QuantLayout{};
  const auto a = reinterpret_cast<uintptr_t>(m.data), end = a + m.bytes();
  auto it = std::upper_bound(repacked_.begin(), repacked_.end(), a,
                             [](uintptr_t v, const Repacked& r) { return v < r.begin; });
  // A repacked matrix starting inside m (after its first byte) means m straddles it.
  if (it != repacked_.end() && it->begin < end) return std::nullopt;
  if (it == repacked_.begin()) return QuantLayout{};
  --it;
  if (a >= it->end) return QuantLayout{};  // outside every repacked matrix
  if (end > it->end || m.row_bytes() != it->row_bytes || (a - it->begin) % it->row_bytes != 0) return std::nullopt;
  const int64_t first = int64_t((a - it->begin) / it->row_bytes);
  if (first >= it->grouped_rows) return QuantLayout{};  // the plain tail
  if (first % kX8GroupRows != 0) return std::nullopt;
  const int64_t grouped = std::min<int64_t>(m.rows, it->grouped_rows - first);
  if (grouped % kX8GroupRows != 0) return std::nullopt;  // ends inside a group
  return QuantLayout{grouped};
}

const void* HostWeightCopy::translate(const void* p) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), a, [](uintptr_t v, const Range& r) { return v < r.begin; });
  if (it == ranges_.begin()) return p;
  --it;
  if (a >= it->end) return p;
  return it->copy + (a - it->begin);
}

}  // namespace weft
