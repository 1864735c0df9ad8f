// Writes a small gradient-statistics file with known values through lib/io, so
// that the end-to-end tests can read it back with h5py and h5dump.
//   write_sample_grads OUT.h5
#include "io/grads.hpp"

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: write_sample_grads OUT.h5\n");
        return 2;
    }
    try {
        using namespace acc::io;
        std::vector<Parameter> parameters = {{"fc1.weight", {3, 2}}, {"fc1.bias", {3}}};
        GradsWriter writer(argv[1], {"write_sample_grads 1", "write_sample_grads OUT.h5"},
                           {"tiny", "synthetic", 8, 1, 5}, parameters, true);
        for (int e = 0; e < 4; ++e) {
            writer.add_step_norms(2 * e, {0.5 * e, 0.25});
            writer.add_step_norms(2 * e + 1, {0.5 * e + 1, 0.75});
            if (e == 2) {
                writer.add_snapshot(0, {1, 2, 3, 4, 5, 6});
                writer.add_snapshot(1, {-1, -2, -3});
            }
            EpochStats s;
            s.lr = e < 2 ? 0.1 : 0.01;
            s.loss = 1.0 / (e + 1);
            s.accuracy = 0.25 * e;
            s.steps = 2;
            s.samples = 16;
            s.seconds = 0.5;
            s.norm = {1.0 + e, 10.0 * (e + 1)};
            writer.append_epoch(s);
        }
        writer.finish();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "write_sample_grads: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
