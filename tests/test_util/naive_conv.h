// The test oracle: a graph evaluated straight from its definition in double
// precision, one output element at a time, indexing the graph's own layout
// (no reordering), so it shares no code path with the backends it checks.
// Each layer's output is rounded to the graph's dtype, because both backends
// store every layer's output in that dtype: without it a deep float16 graph
// would differ from any correct backend by the accumulated storage rounding.
#ifndef CONVSERVE_TESTS_TEST_UTIL_NAIVE_CONV_H_
#define CONVSERVE_TESTS_TEST_UTIL_NAIVE_CONV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/graph.h"

namespace convserve {

// Decodes `input` (bytes of the graph's dtype and layout, logical dims
// `input_shape`) and returns the final output's values in the graph's layout,
// with its logical shape in `output_shape`. Accumulation, bias and activation
// are in double; each layer's result is then rounded to the graph's dtype
// (double -> float -> dtype), so the values returned are representable in it.
// Output channels are computed on `threads` threads (0: one a hardware
// thread); the result does not depend on how many.
std::vector<double> NaiveForward(const Graph& graph, const Shape& input_shape,
                                 const std::string& input, Shape* output_shape,
                                 int threads = 0);

// Activation in double, written from the formulas in convserve.proto.
double NaiveActivation(const Activation& activation, double x);

// sqrt(sum (a-b)^2) / max(sqrt(sum b^2), tiny): the relative L2 error of
// `actual` against `expected`. Infinite when sizes differ or `actual` has
// a NaN, so an unwritten (NaN-filled) element fails.
double RelativeL2Error(const std::vector<double>& actual, const std::vector<double>& expected);

// Decodes bytes of `dtype` to doubles.
std::vector<double> DecodeToDouble(DType dtype, const std::string& bytes);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_NAIVE_CONV_H_
