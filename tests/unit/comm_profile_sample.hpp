// A collective as comm-profile records one, for the unit tests that write a
// comm-profile file: three sizes, each timed and checked, and a fit of alpha and B.
#pragma once

#include "io/comm_profile.hpp"

#include <string>

namespace acc::test {

inline io::CollectiveProfile sample_collective(const std::string& name = "allreduce", double alpha = 8e-6,
                                               double bandwidth = 1.25e9) {
    io::CollectiveProfile c;
    c.name = name;
    c.op = name == "allreduce" ? "sum" : "none";
    c.bus_factor = 1.5;
    c.size = {1024, 4096, 16384};
    c.count = {256, 1024, 4096};
    c.time_min = {9e-6, 10e-6, 14e-6};
    c.time_median = {10e-6, 12e-6, 20e-6};
    c.time_max = {11e-6, 15e-6, 30e-6};
    c.time_mean = {10.5e-6, 12.5e-6, 22e-6};
    for (size_t i = 0; i < c.size.size(); ++i) {
        c.algbw.push_back(static_cast<double>(c.size[i]) / c.time_median[i]);
        c.busbw.push_back(c.algbw.back() * c.bus_factor);
    }
    c.wrong = {0, 0, 0};
    c.alpha = alpha;
    c.bandwidth = bandwidth;
    c.bus_bandwidth = bandwidth * c.bus_factor;
    c.r2 = 0.99;
    c.rms_relative_residual = 0.02;
    c.max_relative_residual = 0.05;
    c.fit_points = 3;
    return c;
}

}  // namespace acc::test
