// One progress line on stderr for long work (prefill of a long prompt, a bench's repeats, a
// fidelity run). On a terminal the line is rewritten in place ("\r") at most every 0.2 s; where
// stderr is a file or a pipe (a CI log, `2>log`), every update that is printed is a line of its
// own, at most one per second, so the log reads as lines rather than one line of carriage returns.
#pragma once

#include <chrono>

namespace weft {

class ProgressLine {
 public:
  ProgressLine();
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // printf-style text, printed when due; final updates are always printed and end the line.
  void update(bool final, const char* format, ...) __attribute__((format(printf, 3, 4)));
  // Ends a line left open on a terminal (a no-op otherwise); the destructor calls it.
  void finish();
  // Seconds since the line was made (its rate limit and the callers' tok/s use the one clock).
  double seconds() const;

 private:
  bool tty_ = false;
  bool open_ = false;  // a rewritten line without its newline yet
  double last_ = -1e9;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace weft
