#include "core/progress_line.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace weft {

ProgressLine::ProgressLine() : tty_(isatty(fileno(stderr)) != 0), start_(std::chrono::steady_clock::now()) {}

ProgressLine::~ProgressLine() { finish(); }

double ProgressLine::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressLine::update(bool final, const char* format, ...) {
  const double now = seconds();
  if (!final && now - last_ < (tty_ ? 0.2 : 1.0)) return;
  last_ = now;
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  if (tty_) {
    // Trailing spaces clear what a longer previous text left on the line.
    std::fprintf(stderr, "\r%s   %s", text, final ? "\n" : "");
    open_ = !final;
  } else {
    std::fprintf(stderr, "%s\n", text);
  }
  std::fflush(stderr);
}

void ProgressLine::finish() {
  if (!open_) return;
  std::fprintf(stderr, "\n");
  open_ = false;
}

}  // namespace weft
