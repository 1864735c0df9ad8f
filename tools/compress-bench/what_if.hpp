// compress-bench --what-if: a plan priced on other links, world sizes and compute
// speeds by the performance model, without running a compressor. The plan is a
// train-dist run's (--metrics: each epoch's level per parameter, the run's compute
// and codec seconds per step) or a model's shapes at each level (--shapes).
// Formulas: docs/metrics.md, "What-if".
#pragma once

#include "compress-bench/driver.hpp"
#include "compress/shapes.hpp"
#include "compress/spec.hpp"
#include "perf/what_if.hpp"

#include <vector>

namespace acc::app {

/// The collectives one step of the gradient exchange runs with these levels (a level
/// per tensor), as GradientExchange::planned_collectives() lists them: one allreduce per
/// non-empty channel of summed values (float32, float16, shared-index sparse values),
/// PowerSGD's P and Q, and one allgather of every allgather compressor's payloads. Every
/// level `none`: an uncompressed step of the tensors' bytes (DDP's). `wire_bytes` gets
/// the bytes one worker sends (docs/metrics.md, "Data sent"). Codec seconds are left 0.
perf::PlanStep plan_step(const std::vector<compress::TensorInfo>& tensors, const std::vector<compress::Spec>& levels,
                         double& wire_bytes);

/// Checks the what-if's options (UsageError), prices the plans and prints them: a table
/// on stdout, or --csv or --json. Returns the exit code.
int run_what_if(BenchConfig config);

}  // namespace acc::app
