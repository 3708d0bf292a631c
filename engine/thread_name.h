// Names the calling thread, so `top -H`, `ps -L`, /proc/PID/task/*/comm,
// perf and gdb tell convserve's threads apart (GPU workers, completion
// threads, batchers, ...). Linux keeps 15 bytes of a name: longer names are
// cut there.
#ifndef CONVSERVE_ENGINE_THREAD_NAME_H_
#define CONVSERVE_ENGINE_THREAD_NAME_H_

#include <string>

#include "absl/strings/string_view.h"

namespace convserve {

// Longest name the kernel keeps.
inline constexpr size_t kMaxThreadNameBytes = 15;

// Sets the calling thread's name to `name`, cut to kMaxThreadNameBytes.
void NameThisThread(absl::string_view name);

// The calling thread's name ("" if it cannot be read).
std::string ThisThreadName();

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_THREAD_NAME_H_
