// Resident memory of this process, read from the kernel: how the bench measures what a KV cache
// really occupies, independently of the byte model's formula.
#pragma once

#include <cstddef>

namespace weft::lab {

// Resident set size in bytes: the "Rss:" line of /proc/self/smaps_rollup (exact: the kernel
// walks the page tables when it is read), else field 2 of /proc/self/statm times the page size
// (a counter that can lag by a few per-CPU batches). 0 when neither can be read.
size_t process_resident_bytes();

// Returns freed heap memory to the kernel (glibc's malloc_trim; a no-op elsewhere), so that the
// resident growth measured next counts pages newly touched rather than freed pages reused.
void release_free_heap();

}  // namespace weft::lab
