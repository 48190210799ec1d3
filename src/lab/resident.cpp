// Resident-set readers of lab/resident.h.
#include "lab/resident.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace weft::lab {

size_t process_resident_bytes() {
  {
    std::ifstream f("/proc/self/smaps_rollup");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("Rss:", 0) != 0) continue;
      std::istringstream in(line.substr(4));
      size_t kib = 0;
      std::string unit;
      if (in >> kib >> unit && unit == "kB") return kib << 10;
    }
  }
  std::ifstream f("/proc/self/statm");
  size_t size_pages = 0, resident_pages = 0;
  if (f >> size_pages >> resident_pages) return resident_pages * size_t(sysconf(_SC_PAGESIZE));
  return 0;
}

void release_free_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace weft::lab
