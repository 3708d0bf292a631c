#ifndef CONVSERVE_SERVER_VERSION_H_
#define CONVSERVE_SERVER_VERSION_H_

namespace convserve {

// Reported by ServerMetadata and the start-up log.
inline constexpr char kConvServeVersion[] = "0.1.0";

}  // namespace convserve

#endif  // CONVSERVE_SERVER_VERSION_H_
