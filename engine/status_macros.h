// The project's status macros. Abseil 20220623 ships none, so they are defined
// once here (STYLE.md).
#ifndef CONVSERVE_ENGINE_STATUS_MACROS_H_
#define CONVSERVE_ENGINE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CONVSERVE_CONCAT_INNER_(a, b) a##b
#define CONVSERVE_CONCAT_(a, b) CONVSERVE_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` yields a non-OK status.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status convserve_status_ = (expr);       \
    if (!convserve_status_.ok()) return convserve_status_; \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or
// returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  CONVSERVE_ASSIGN_OR_RETURN_IMPL_(CONVSERVE_CONCAT_(convserve_or_, __LINE__), lhs, expr)

#define CONVSERVE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return std::move(tmp).status();         \
  lhs = std::move(tmp).value()

#endif  // CONVSERVE_ENGINE_STATUS_MACROS_H_
