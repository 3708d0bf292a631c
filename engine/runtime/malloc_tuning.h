// glibc's malloc, set for processes that move tensors of megabytes per
// request (the server and convserve-load). By default glibc gives a freed
// block of more than 128 KiB (up to a threshold it raises as it goes) back
// to the kernel and trims free memory at the top of each heap, so the next
// request's buffers (gRPC's receive slices, protobuf's strings) fault in
// fresh zeroed pages: thousands of page faults per 12.8 MB request. Keeping
// freed blocks below 32 MiB for reuse removes most of them (docs/runtime.md,
// "Memory"); blocks above still go back at once. A process started with
// malloc settings in GLIBC_TUNABLES keeps those.
#ifndef CONVSERVE_ENGINE_RUNTIME_MALLOC_TUNING_H_
#define CONVSERVE_ENGINE_RUNTIME_MALLOC_TUNING_H_

#include <string>

namespace convserve {

// Applies the settings once, at start-up before threads; returns what
// applies, for the start-up log line.
std::string KeepFreedBlocksForReuse();

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_MALLOC_TUNING_H_
